//! The `Tokenizer`: vocabulary, special tokens, encode and decode.
//!
//! Built from [`VocabData`] (what GGUF metadata holds about the vocabulary),
//! it follows llama.cpp's vocabulary loader: default special ids per model
//! type, token attributes from `tokenizer.ggml.token_type` plus llama.cpp's
//! text-based fix-ups (end-of-turn tokens, `unused` tokens, the end-of-
//! generation set), and its tokenize path: special tokens are split out
//! first (longest first), the remaining text goes through BPE or SPM.
//!
//! Encoding streams: each text fragment between special tokens goes to the
//! pre-tokenizer and each word it finds straight to the merge, in buffers
//! reused from word to word, so memory stays a small multiple of the longest
//! word (see `bpe`, `spm`) plus the ids.

use crate::bpe::{self, Ranks};
use crate::error::TokenizerError;
use crate::fxhash::{map_with_capacity, FxMap};
use crate::pretokenize::{self, Pass, SUPPORTED_PRE};
use crate::spm;
use crate::symbols::Idx;
use crate::unicode::{byte_chars, char_byte};

/// Token attributes (llama.cpp's `llama_token_attr` bits).
pub(crate) mod attr {
    pub const UNKNOWN: u16 = 1 << 0;
    pub const UNUSED: u16 = 1 << 1;
    pub const NORMAL: u16 = 1 << 2;
    pub const CONTROL: u16 = 1 << 3;
    pub const USER_DEFINED: u16 = 1 << 4;
    pub const BYTE: u16 = 1 << 5;
}

/// `tokenizer.ggml.token_type` values.
pub mod token_type {
    pub const UNDEFINED: i32 = 0;
    pub const NORMAL: i32 = 1;
    pub const UNKNOWN: i32 = 2;
    pub const CONTROL: i32 = 3;
    pub const USER_DEFINED: i32 = 4;
    pub const UNUSED: i32 = 5;
    pub const BYTE: i32 = 6;
}

/// The vocabulary as GGUF metadata describes it; `None` = key absent.
/// [`Tokenizer::from_vocab`] applies llama.cpp's defaults to what is absent.
#[derive(Clone, Debug, Default)]
pub struct VocabData {
    /// `tokenizer.ggml.model`: "gpt2" (byte-level BPE) or "llama" (SentencePiece).
    pub model: String,
    /// `tokenizer.ggml.pre` (BPE pre-tokenizer name).
    pub pre: Option<String>,
    /// `tokenizer.ggml.tokens`.
    pub tokens: Vec<String>,
    /// `tokenizer.ggml.scores`.
    pub scores: Option<Vec<f32>>,
    /// `tokenizer.ggml.token_type`.
    pub token_types: Option<Vec<i32>>,
    /// `tokenizer.ggml.merges`.
    pub merges: Option<Vec<String>>,
    pub bos_id: Option<u32>,
    pub eos_id: Option<u32>,
    pub eot_id: Option<u32>,
    pub eom_id: Option<u32>,
    pub unk_id: Option<u32>,
    pub sep_id: Option<u32>,
    pub pad_id: Option<u32>,
    pub mask_id: Option<u32>,
    pub fim_pre_id: Option<u32>,
    pub fim_suf_id: Option<u32>,
    pub fim_mid_id: Option<u32>,
    pub fim_pad_id: Option<u32>,
    pub fim_rep_id: Option<u32>,
    pub fim_sep_id: Option<u32>,
    /// `tokenizer.ggml.add_bos_token`.
    pub add_bos: Option<bool>,
    /// `tokenizer.ggml.add_eos_token`.
    pub add_eos: Option<bool>,
    /// `tokenizer.ggml.add_space_prefix`.
    pub add_space_prefix: Option<bool>,
    /// `tokenizer.ggml.remove_extra_whitespaces` (kept; neither BPE nor SPM uses it).
    pub remove_extra_whitespaces: Option<bool>,
}

/// Which algorithm encodes plain text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenizerKind {
    /// Byte-level BPE (`tokenizer.ggml.model = "gpt2"`).
    Bpe,
    /// SentencePiece (`tokenizer.ggml.model = "llama"`).
    Spm,
}

#[derive(Debug)]
enum Model {
    Bpe {
        ranks: Ranks,
        passes: &'static [Pass],
        ignore_merges: bool,
        byte_chars: Box<[char; 256]>,
        /// The most characters a token has: longer words are no token.
        max_token_chars: usize,
    },
    Spm,
}

/// A piece of text to encode: raw text or an already-recognised special token.
enum Fragment {
    Text(usize, usize),
    Token(u32),
}

/// Tokenizer built from a GGUF vocabulary, matching llama.cpp token for token.
#[derive(Debug)]
pub struct Tokenizer {
    model: Model,
    tokens: Vec<String>,
    scores: Vec<f32>,
    attrs: Vec<u16>,
    token_to_id: FxMap<String, u32>,
    /// Control, user-defined and unknown tokens, longest text first.
    special_cache: Vec<u32>,
    /// SPM byte fallback token per byte.
    byte_tokens: Vec<Option<u32>>,
    bos: Option<u32>,
    eos: Option<u32>,
    eot: Option<u32>,
    eom: Option<u32>,
    unk: Option<u32>,
    pad: Option<u32>,
    add_bos: bool,
    add_eos: bool,
    add_space_prefix: bool,
    clean_spaces: bool,
    eog: Vec<u32>,
    fim: Fim,
    /// See [`Tokenizer::max_bytes_per_token`].
    max_bytes_per_token: Option<usize>,
    /// Bytes that may give no token at all (no token and no fallback):
    /// [`Tokenizer::min_tokens`] does not count them.
    silent_bytes: [bool; 256],
}

/// The fill-in-the-middle tokens a code model marks its infill prompt with
/// (from the GGUF keys, else found by their text, as llama.cpp finds them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fim {
    pub pre: Option<u32>,
    pub suf: Option<u32>,
    pub mid: Option<u32>,
    /// The repository name's marker (repo-level infill).
    pub rep: Option<u32>,
    /// The file separator (repo-level infill).
    pub sep: Option<u32>,
}

const EOT_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<｜end▁of▁sentence｜>",
    "<end_of_utterance>",
];
const EOM_TEXTS: &[&str] = &["<|eom_id|>"];
const FIM_PRE_TEXTS: &[&str] = &[
    "<|fim_prefix|>",
    "<fim-prefix>",
    "<fim_prefix>",
    "<｜fim▁begin｜>",
    "<PRE>",
    "▁<PRE>",
    "<|code_prefix|>",
    "<|prefix|>",
];
const FIM_SUF_TEXTS: &[&str] = &[
    "<|fim_suffix|>",
    "<fim-suffix>",
    "<fim_suffix>",
    "<｜fim▁hole｜>",
    "<SUF>",
    "▁<SUF>",
    "<|code_suffix|>",
    "<|suffix|>",
];
const FIM_MID_TEXTS: &[&str] = &[
    "<|fim_middle|>",
    "<fim-middle>",
    "<fim_middle>",
    "<｜fim▁end｜>",
    "<MID>",
    "▁<MID>",
    "<|code_middle|>",
    "<|middle|>",
];
const FIM_PAD_TEXTS: &[&str] = &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"];
const FIM_REP_TEXTS: &[&str] = &[
    "<|fim_repo|>",
    "<|repo_name|>",
    "<fim-repo>",
    "<REPO>",
    "<reponame>",
];
const FIM_SEP_TEXTS: &[&str] = &["<|file_sep|>"];
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
];
const ALWAYS_RENDERED: &[&str] = &["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"];

impl Tokenizer {
    /// Builds a tokenizer from vocabulary metadata.
    pub fn from_vocab(mut v: VocabData) -> Result<Tokenizer, TokenizerError> {
        let n = v.tokens.len();
        if n == 0 {
            return Err(TokenizerError::EmptyVocab);
        }
        if u32::try_from(n).is_err() {
            return Err(TokenizerError::TooManyTokens(n));
        }

        // --- model type and its defaults
        let kind;
        let mut add_bos;
        let mut add_eos = false;
        let mut add_space_prefix;
        let mut clean_spaces = false;
        let (mut bos, mut eos, mut unk): (Option<u32>, Option<u32>, Option<u32>);
        // (the BPE merges, the pre-tokenizer's passes and ignore_merges)
        let bpe: Option<(Vec<String>, &'static [Pass], bool)> = match v.model.as_str() {
            "gpt2" => {
                kind = TokenizerKind::Bpe;
                let merges = v
                    .merges
                    .take()
                    .ok_or(TokenizerError::MissingKey("tokenizer.ggml.merges"))?;
                let pre = v.pre.as_deref().unwrap_or("default");
                let spec =
                    pretokenize::spec_for(pre).ok_or_else(|| TokenizerError::UnknownPre {
                        name: pre.to_owned(),
                        supported: SUPPORTED_PRE.join(", "),
                    })?;
                add_bos = spec.add_bos;
                add_space_prefix = false;
                clean_spaces =
                    !matches!(pre, "qwen2" | "deepseek-r1-qwen" | "command-r" | "smollm");
                bos = Some(11);
                eos = Some(11);
                unk = None;
                Some((merges, spec.passes, spec.ignore_merges))
            }
            "llama" => {
                kind = TokenizerKind::Spm;
                add_bos = true;
                add_space_prefix = true;
                bos = Some(1);
                eos = Some(2);
                unk = Some(0);
                None
            }
            other => return Err(TokenizerError::UnsupportedModel(other.to_owned())),
        };
        if let Some(b) = v.add_space_prefix {
            add_space_prefix = b;
        }

        // --- tokens, scores, attributes
        let scores = match v.scores {
            Some(s) if s.len() < n => {
                return Err(TokenizerError::ShortArray {
                    key: "tokenizer.ggml.scores",
                    len: s.len(),
                    n_tokens: n,
                })
            }
            Some(mut s) => {
                s.truncate(n);
                s
            }
            None => vec![0.0; n],
        };
        let mut attrs = match &v.token_types {
            Some(t) if t.len() < n => {
                return Err(TokenizerError::ShortArray {
                    key: "tokenizer.ggml.token_type",
                    len: t.len(),
                    n_tokens: n,
                })
            }
            Some(t) => t[..n].iter().map(|&ty| attr_of_type(ty)).collect(),
            None => vec![attr::NORMAL; n],
        };
        let mut tokens = v.tokens;
        for (i, t) in tokens.iter_mut().enumerate() {
            if t.is_empty() {
                *t = format!("[EMPTY_{i}]");
            }
        }
        // A repeated text keeps its last id; `owner[i]`: id i is the one its text maps to.
        let mut token_to_id: FxMap<String, u32> = map_with_capacity(n);
        let mut owner = vec![true; n];
        for (i, t) in tokens.iter().enumerate() {
            if let Some(old) = token_to_id.insert(t.clone(), i as u32) {
                owner[old as usize] = false;
            }
        }

        // --- special ids: defaults out of range are dropped; a key in range wins
        let in_range = |id: Option<u32>| id.filter(|&i| (i as usize) < n);
        let pick = |default: Option<u32>, key: Option<u32>| {
            let d = in_range(default);
            match key {
                Some(k) if (k as usize) < n => Some(k),
                _ => d,
            }
        };
        bos = pick(bos, v.bos_id);
        eos = pick(eos, v.eos_id);
        unk = pick(unk, v.unk_id);
        let mut eot = pick(None, v.eot_id);
        let mut eom = pick(None, v.eom_id);
        let pad = pick(None, v.pad_id);
        let mut fim_pre = pick(None, v.fim_pre_id);
        let mut fim_suf = pick(None, v.fim_suf_id);
        let mut fim_mid = pick(None, v.fim_mid_id);
        let mut fim_pad = pick(None, v.fim_pad_id);
        let mut fim_rep = pick(None, v.fim_rep_id);
        let mut fim_sep = pick(None, v.fim_sep_id);
        if let Some(b) = v.add_bos {
            add_bos = b;
        }
        if let Some(b) = v.add_eos {
            add_eos = b;
        }

        let owners: Vec<u32> = (0..n as u32).filter(|&i| owner[i as usize]).collect();
        let find = |texts: &[&str]| -> Option<u32> {
            texts.iter().find_map(|t| token_to_id.get(*t).copied())
        };

        // --- text-detected end-of-turn / FIM tokens become control tokens
        let detect = |slot: &mut Option<u32>, texts: &[&str], attrs: &mut Vec<u16>| {
            if slot.is_none() {
                if let Some(id) = find(texts) {
                    *slot = Some(id);
                    attrs[id as usize] |= attr::CONTROL;
                }
            }
        };
        detect(&mut eot, EOT_TEXTS, &mut attrs);
        detect(&mut eom, EOM_TEXTS, &mut attrs);
        detect(&mut fim_pre, FIM_PRE_TEXTS, &mut attrs);
        detect(&mut fim_suf, FIM_SUF_TEXTS, &mut attrs);
        detect(&mut fim_mid, FIM_MID_TEXTS, &mut attrs);
        detect(&mut fim_pad, FIM_PAD_TEXTS, &mut attrs);
        detect(&mut fim_rep, FIM_REP_TEXTS, &mut attrs);
        detect(&mut fim_sep, FIM_SEP_TEXTS, &mut attrs);

        // --- control tokens named "unused..." are unused
        for &i in &owners {
            let a = &mut attrs[i as usize];
            if *a & attr::CONTROL != 0 && tokens[i as usize].contains("unused") {
                *a |= attr::UNUSED;
            }
        }

        // --- end-of-generation set
        let mut eog: Vec<u32> = [fim_pad, fim_rep, fim_sep].into_iter().flatten().collect();
        for &i in &owners {
            if EOG_TEXTS.contains(&tokens[i as usize].as_str()) {
                eog.push(i);
                attrs[i as usize] |= attr::CONTROL;
            }
        }
        for &i in &owners {
            if ALWAYS_RENDERED.contains(&tokens[i as usize].as_str()) {
                attrs[i as usize] = attr::USER_DEFINED;
            }
        }
        eog.extend([eos, eot, eom].into_iter().flatten());
        eog.sort_unstable();
        eog.dedup();
        let has = |eog: &[u32], t: &str| eog.iter().any(|&i| tokens[i as usize] == t);
        // gpt-oss / solar-open: "<|end|>" is not end-of-generation there
        if let Some(end_id) = eog
            .iter()
            .copied()
            .find(|&i| tokens[i as usize] == "<|end|>")
        {
            let call = has(&eog, "<|call|>") || has(&eog, "<|calls|>");
            if call && (has(&eog, "<|return|>") || has(&eog, "<|flush|>")) {
                eog.retain(|&i| i != end_id);
                attrs[end_id as usize] = attr::USER_DEFINED;
            }
        }
        // gemma4 / plamo: "</s>" is a normal token there
        if let Some(s_id) = eog.iter().copied().find(|&i| tokens[i as usize] == "</s>") {
            if has(&eog, "<|tool_response>") || has(&eog, "<|plamo:eos|>") {
                eog.retain(|&i| i != s_id);
                attrs[s_id as usize] = attr::NORMAL;
            }
        }

        // --- special tokens, longest text first
        let mut special_cache: Vec<u32> = (0..n as u32)
            .filter(|&i| {
                attrs[i as usize] & (attr::CONTROL | attr::USER_DEFINED | attr::UNKNOWN) != 0
            })
            .collect();
        special_cache.sort_by_key(|&i| std::cmp::Reverse(tokens[i as usize].len()));

        let byte_tokens = match kind {
            TokenizerKind::Spm => (0..=255u8)
                .map(|b| {
                    token_to_id
                        .get(&format!("<0x{b:02X}>"))
                        .or_else(|| {
                            b.is_ascii()
                                .then(|| token_to_id.get(&char::from(b).to_string()))
                                .flatten()
                        })
                        .copied()
                })
                .collect(),
            TokenizerKind::Bpe => Vec::new(),
        };

        let model = match bpe {
            Some((merges, passes, ignore_merges)) => Model::Bpe {
                ranks: Ranks::new(&merges, |t| token_to_id.get(t).copied()),
                passes,
                ignore_merges,
                byte_chars: Box::new(byte_chars()),
                max_token_chars: tokens.iter().map(|t| t.chars().count()).max().unwrap_or(0),
            },
            None => Model::Spm,
        };
        let (max_bytes_per_token, silent_bytes) =
            max_bytes_per_token(&model, &tokens, &attrs, &byte_tokens, unk);

        Ok(Tokenizer {
            model,
            tokens,
            scores,
            attrs,
            token_to_id,
            special_cache,
            byte_tokens,
            bos,
            eos,
            eot,
            eom,
            unk,
            pad,
            add_bos,
            add_eos,
            add_space_prefix,
            clean_spaces,
            eog,
            fim: Fim {
                pre: fim_pre,
                suf: fim_suf,
                mid: fim_mid,
                rep: fim_rep,
                sep: fim_sep,
            },
            max_bytes_per_token,
            silent_bytes,
        })
    }

    /// Reads the vocabulary from a GGUF file's metadata.
    pub fn from_gguf(f: &kestrel_gguf::GgufFile) -> Result<Tokenizer, TokenizerError> {
        Tokenizer::from_vocab(crate::gguf::vocab_from_gguf(f)?)
    }

    pub fn kind(&self) -> TokenizerKind {
        match self.model {
            Model::Bpe { .. } => TokenizerKind::Bpe,
            Model::Spm => TokenizerKind::Spm,
        }
    }

    /// Number of BPE merges (0 for SentencePiece).
    pub fn n_merges(&self) -> usize {
        match &self.model {
            Model::Bpe { ranks, .. } => ranks.len(),
            Model::Spm => 0,
        }
    }

    pub fn vocab_size(&self) -> usize {
        self.tokens.len()
    }
    pub fn token_text(&self, id: u32) -> Option<&str> {
        self.tokens.get(id as usize).map(String::as_str)
    }
    /// The id of a token with exactly this text.
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.token_to_id.get(text).copied()
    }
    pub fn token_score(&self, id: u32) -> Option<f32> {
        self.scores.get(id as usize).copied()
    }
    pub fn bos(&self) -> Option<u32> {
        self.bos
    }
    pub fn eos(&self) -> Option<u32> {
        self.eos
    }
    pub fn eot(&self) -> Option<u32> {
        self.eot
    }
    pub fn eom(&self) -> Option<u32> {
        self.eom
    }
    pub fn unk(&self) -> Option<u32> {
        self.unk
    }
    pub fn pad(&self) -> Option<u32> {
        self.pad
    }
    pub fn add_bos(&self) -> bool {
        self.add_bos
    }
    pub fn fim(&self) -> Fim {
        self.fim
    }
    pub fn add_eos(&self) -> bool {
        self.add_eos
    }
    pub fn add_space_prefix(&self) -> bool {
        self.add_space_prefix
    }
    /// Control or unknown token: rendered only when asked for special text.
    pub fn is_control(&self, id: u32) -> bool {
        self.attr(id) & (attr::CONTROL | attr::UNKNOWN) != 0
    }
    pub fn is_eog(&self, id: u32) -> bool {
        self.eog.binary_search(&id).is_ok()
    }
    /// End-of-generation ids, ascending.
    pub fn eog_ids(&self) -> &[u32] {
        &self.eog
    }

    fn attr(&self, id: u32) -> u16 {
        self.attrs.get(id as usize).copied().unwrap_or(0)
    }

    /// Tokenizes `text`. `add_special`: add BOS/EOS as the vocabulary asks;
    /// `parse_special`: recognise control tokens written in the text
    /// (user-defined tokens are recognised either way, as in llama.cpp).
    pub fn encode(&self, text: &str, add_special: bool, parse_special: bool) -> Vec<u32> {
        let mut out = Vec::with_capacity(text.len() / 3 + 2);
        if add_special && self.add_bos {
            out.extend(self.bos);
        }
        match &self.model {
            Model::Spm => {
                let mut prev_special = true;
                let mut sc = spm::Scratch::<u32>::default();
                self.partition(text, parse_special, &mut |f| match f {
                    Fragment::Text(a, b) => {
                        let prefix = self.add_space_prefix && prev_special;
                        self.spm_fragment(&text[a..b], prefix, &mut sc, &mut out);
                        prev_special = false;
                    }
                    Fragment::Token(id) => {
                        out.push(id);
                        prev_special = true;
                    }
                });
            }
            Model::Bpe { passes, .. } => {
                let mut sc = BpeScratch::default();
                self.partition(text, parse_special, &mut |f| match f {
                    Fragment::Text(a, b) => {
                        let frag = &text[a..b];
                        pretokenize::split(frag, passes, &mut |a, b| {
                            self.bpe_word(&frag[a..b], &mut sc, &mut out)
                        });
                    }
                    Fragment::Token(id) => out.push(id),
                });
            }
        }
        if add_special && self.add_eos {
            out.extend(self.eos);
        }
        out
    }

    /// The most input bytes one token of [`encode`](Self::encode) can stand
    /// for, so that `encode(text, ..)` gives at least
    /// [`min_tokens(text)`](Self::min_tokens) ids; BOS/EOS only add.
    /// None when whole pieces of text can vanish (a BPE merge whose result
    /// is no token), where no such bound holds.
    pub fn max_bytes_per_token(&self) -> Option<usize> {
        self.max_bytes_per_token
    }

    /// The fewest tokens `text` can encode to, from its length alone: one
    /// per [`max_bytes_per_token`](Self::max_bytes_per_token) bytes, not
    /// counting the bytes that have neither a token nor a fallback (they
    /// may give none; SmolLM2 has no token for 0x04, for one). 0 when
    /// there is no bound. Linear in the text and allocation-free, so a
    /// caller can refuse a text that cannot fit before tokenizing it.
    pub fn min_tokens(&self, text: &str) -> usize {
        let Some(max) = self.max_bytes_per_token else {
            return 0;
        };
        let silent = text
            .bytes()
            .filter(|&b| self.silent_bytes[b as usize])
            .count();
        (text.len() - silent).div_ceil(max.max(1))
    }

    fn spm_byte(&self, b: u8) -> Option<u32> {
        self.byte_tokens
            .get(b as usize)
            .copied()
            .flatten()
            .or(self.unk)
    }

    fn spm_fragment(
        &self,
        frag: &str,
        prefix: bool,
        sc: &mut spm::Scratch<u32>,
        out: &mut Vec<u32>,
    ) {
        let (map, scores, byte) = (&self.token_to_id, &self.scores[..], |b| self.spm_byte(b));
        if frag.len() < u32::MAX_UNITS - 1 {
            spm::tokenize(frag, prefix, map, scores, byte, sc, out);
        } else {
            let mut wide = spm::Scratch::<u64>::default();
            spm::tokenize(frag, prefix, map, scores, byte, &mut wide, out);
        }
    }

    fn bpe_word(&self, word: &str, sc: &mut BpeScratch, out: &mut Vec<u32>) {
        let Model::Bpe {
            ranks,
            ignore_merges,
            byte_chars,
            max_token_chars,
            ..
        } = &self.model
        else {
            return;
        };
        // (one character per byte)
        if *ignore_merges && word.len() <= *max_token_chars {
            sc.chars.clear();
            sc.chars
                .extend(word.bytes().map(|b| byte_chars[b as usize]));
            if let Some(&id) = self.token_to_id.get(&sc.chars) {
                out.push(id);
                return;
            }
        }
        if word.len() < u32::MAX_UNITS {
            bpe::encode_word(word.as_bytes(), ranks, &mut sc.merge, out);
        } else {
            let mut wide = bpe::Scratch::<u64>::default();
            bpe::encode_word(word.as_bytes(), ranks, &mut wide, out);
        }
    }

    /// Splits out special tokens, longest first (llama.cpp's
    /// `tokenizer_st_partition`), handing the fragments to `sink` in order.
    /// Control and unknown tokens only when `parse_special`; user-defined
    /// tokens always.
    ///
    /// llama.cpp splits every fragment by the first token, what is left by
    /// the second, and so on; the same fragments come out of splitting
    /// depth first, which needs no list of fragments: a stack holds, per
    /// token, at most the rest of the text it is splitting and the match.
    fn partition(&self, text: &str, parse_special: bool, sink: &mut dyn FnMut(Fragment)) {
        enum Todo {
            /// `text[s..e]`, still to be split by `present[k..]`.
            Split(usize, usize, usize),
            Token(u32),
        }
        if text.is_empty() {
            return;
        }
        // The tokens to split by that occur at all (token texts are never
        // empty). A token with a byte pair the text lacks cannot, which spares
        // searching the text for most of a large special vocabulary.
        let mut pairs = vec![0u64; 1 << 10];
        let mut bytes = [false; 256];
        let t = text.as_bytes();
        for (i, &b) in t.iter().enumerate() {
            bytes[b as usize] = true;
            if let Some(&c) = t.get(i + 1) {
                let pair = usize::from(b) << 8 | usize::from(c);
                pairs[pair >> 6] |= 1 << (pair & 63);
            }
        }
        let may_occur = |pat: &str| {
            let p = pat.as_bytes();
            p.iter().all(|&b| bytes[b as usize])
                && p.windows(2).all(|w| {
                    let pair = usize::from(w[0]) << 8 | usize::from(w[1]);
                    pairs[pair >> 6] & (1 << (pair & 63)) != 0
                })
        };
        let present: Vec<(u32, &str)> = self
            .special_cache
            .iter()
            .filter(|&&id| {
                parse_special || self.attrs[id as usize] & (attr::CONTROL | attr::UNKNOWN) == 0
            })
            .map(|&id| (id, self.tokens[id as usize].as_str()))
            .filter(|(_, pat)| !pat.is_empty() && may_occur(pat) && text.contains(pat))
            .collect();
        let mut todo = vec![Todo::Split(0, text.len(), 0)];
        while let Some(t) = todo.pop() {
            let (s, e, k) = match t {
                Todo::Token(id) => {
                    sink(Fragment::Token(id));
                    continue;
                }
                Todo::Split(s, e, k) => (s, e, k),
            };
            let hit = present
                .iter()
                .enumerate()
                .skip(k)
                .find_map(|(j, &(id, pat))| {
                    text[s..e].find(pat).map(|i| (j, id, s + i, pat.len()))
                });
            let Some((j, id, m, len)) = hit else {
                sink(Fragment::Text(s, e));
                continue;
            };
            if m + len < e {
                todo.push(Todo::Split(m + len, e, j));
            }
            todo.push(Todo::Token(id));
            if m > s {
                todo.push(Todo::Split(s, m, j + 1));
            }
        }
    }

    /// The bytes llama.cpp's `token_to_piece` gives for one token.
    /// `special`: render control/unknown tokens' text (else they are empty).
    pub fn token_to_piece(&self, id: u32, special: bool) -> Vec<u8> {
        let Some(text) = self.tokens.get(id as usize) else {
            return Vec::new();
        };
        let a = self.attr(id);
        if !special && a & (attr::UNKNOWN | attr::CONTROL) != 0 {
            return Vec::new();
        }
        if a & (attr::UNKNOWN | attr::CONTROL | attr::USER_DEFINED) != 0 {
            return text.as_bytes().to_vec();
        }
        if a & attr::NORMAL != 0 {
            return match &self.model {
                Model::Spm => text.replace('▁', " ").into_bytes(),
                Model::Bpe { .. } => decode_byte_level(text),
            };
        }
        if a & attr::BYTE != 0 {
            return vec![byte_of_byte_token(text)];
        }
        Vec::new()
    }

    /// Concatenated pieces of `ids`, as lossy UTF-8.
    pub fn decode(&self, ids: &[u32], special: bool) -> String {
        let mut bytes = Vec::new();
        for &id in ids {
            bytes.extend(self.token_to_piece(id, special));
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// llama.cpp's `llama_detokenize`: like [`decode`](Self::decode), but
    /// `remove_special` drops a leading BOS / trailing EOS the vocabulary
    /// adds, the first piece loses one leading space when the vocabulary
    /// adds a space prefix, and BPE vocabularies that ask for it get
    /// tokenization spaces cleaned up (" ," -> ",", " 's" -> "'s", ...).
    pub fn detokenize(&self, ids: &[u32], remove_special: bool, unparse_special: bool) -> String {
        let mut ids = ids;
        let mut remove_space = self.add_space_prefix;
        if remove_special && self.add_bos && !ids.is_empty() && Some(ids[0]) == self.bos {
            remove_space = false;
            ids = &ids[1..];
        }
        if remove_special && self.add_eos && !ids.is_empty() && Some(ids[ids.len() - 1]) == self.eos
        {
            ids = &ids[..ids.len() - 1];
        }
        let mut text = Vec::new();
        for &id in ids {
            let piece = self.token_to_piece(id, unparse_special);
            let skip = usize::from(remove_space && piece.first() == Some(&b' '));
            text.extend_from_slice(&piece[skip..]);
            remove_space = false;
        }
        if self.clean_spaces {
            text = clean_up_spaces(&text);
        }
        String::from_utf8_lossy(&text).into_owned()
    }
}

/// Buffers reused from BPE word to BPE word.
#[derive(Default)]
struct BpeScratch {
    merge: bpe::Scratch<u32>,
    /// A word in stand-in characters, for whole-word lookups.
    chars: String,
}

/// See [`Tokenizer::max_bytes_per_token`]; with it, the bytes that may give
/// no token. Each token stands for at most: its text's bytes when it is a
/// special token matched in the text; for BPE, its character count (one
/// character per byte); for SentencePiece, its text's bytes (▁ stands for
/// a space, 1 byte, or for a ▁ in the text, 3 bytes); one byte when it is a
/// byte fallback.
fn max_bytes_per_token(
    model: &Model,
    tokens: &[String],
    attrs: &[u16],
    byte_tokens: &[Option<u32>],
    unk: Option<u32>,
) -> (Option<usize>, [bool; 256]) {
    let special = |i: usize| attrs[i] & (attr::CONTROL | attr::USER_DEFINED | attr::UNKNOWN) != 0;
    let (max, silent) = match model {
        Model::Bpe { ranks, .. } => {
            let Some(silent) = ranks.silent_bytes() else {
                return (None, [false; 256]);
            };
            let max = tokens
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    // Merges only form tokens spelled in stand-in characters.
                    let merged = if t.chars().all(|c| char_byte(c).is_some()) {
                        t.chars().count()
                    } else {
                        0
                    };
                    merged.max(if special(i) { t.len() } else { 0 })
                })
                .max();
            (max, silent)
        }
        Model::Spm => {
            // A symbol without a token falls back to its bytes' tokens, or
            // to <unk>; a byte with neither gives nothing.
            let silent = std::array::from_fn(|b| {
                unk.is_none() && byte_tokens.get(b).is_none_or(Option::is_none)
            });
            (tokens.iter().map(String::len).max(), silent)
        }
    };
    (max.filter(|&m| m > 0), silent)
}

fn attr_of_type(ty: i32) -> u16 {
    match ty {
        token_type::NORMAL => attr::NORMAL,
        token_type::UNKNOWN => attr::UNKNOWN,
        token_type::CONTROL => attr::CONTROL,
        token_type::USER_DEFINED => attr::USER_DEFINED,
        token_type::UNUSED => attr::UNUSED,
        token_type::BYTE => attr::BYTE,
        _ => 0, // UNDEFINED and anything unknown
    }
}

/// The byte a `<0xXX>` token stands for (the two hex digits after "<0x";
/// like C's strtol, what does not parse reads as 0).
fn byte_of_byte_token(text: &str) -> u8 {
    let hex: String = text
        .chars()
        .skip(3)
        .take(2)
        .take_while(char::is_ascii_hexdigit)
        .collect();
    u8::from_str_radix(&hex, 16).unwrap_or(0)
}

/// Byte-level BPE token text back to bytes; characters that stand for no
/// byte are rendered the way llama.cpp renders them.
fn decode_byte_level(text: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    for c in text.chars() {
        match char_byte(c) {
            Some(b) => out.push(b),
            None => {
                out.extend_from_slice(b"[UNK_BYTE_0x");
                let mut buf = [0u8; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    out.extend_from_slice(format!("{b:02x}").as_bytes());
                }
                out.extend_from_slice(text.as_bytes());
                out.push(b']');
            }
        }
    }
    out
}

/// llama.cpp's clean_up_tokenization_spaces passes.
fn clean_up_spaces(t: &[u8]) -> Vec<u8> {
    // " ?", " !", " .", " ," lose the space
    let mut a: Vec<u8> = Vec::with_capacity(t.len());
    for (i, &x) in t.iter().enumerate() {
        if i > 0 && t[i - 1] == b' ' && matches!(x, b'?' | b'!' | b'.' | b',') {
            a.pop();
        }
        a.push(x);
    }
    // " ' " becomes "'"
    // (llama.cpp blanks the dropped space in place, so the character after
    // it does not see a space before it)
    let mut b: Vec<u8> = Vec::with_capacity(a.len());
    let mut i = 0;
    let mut prev_blanked = false;
    while i < a.len() {
        let x = a[i];
        let prev_space = i > 0 && a[i - 1] == b' ' && !prev_blanked;
        prev_blanked = false;
        if x == b'\'' && i + 1 < a.len() && prev_space && a[i + 1] == b' ' {
            b.pop();
            b.push(x);
            i += 2;
            prev_blanked = true;
            continue;
        }
        b.push(x);
        i += 1;
    }
    // " 's", " 'm", " 're", " 've" lose the space
    let mut c: Vec<u8> = Vec::with_capacity(b.len());
    for (i, &x) in b.iter().enumerate() {
        if i > 0 && b[i - 1] == b' ' && x == b'\'' && i + 1 < b.len() {
            let x1 = b[i + 1];
            let x2 = b.get(i + 2).copied();
            if matches!(x1, b's' | b'm')
                || matches!((x1, x2), (b'r', Some(b'e')) | (b'v', Some(b'e')))
            {
                c.pop();
            }
        }
        c.push(x);
    }
    c
}
