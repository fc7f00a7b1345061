//! The token trie over Kestrel's vocabulary: every token's bytes, as
//! llguidance needs them to walk the grammar, built once per model.
//!
//! A normal token's bytes are what it decodes to (`Tokenizer::token_to_piece`
//! without special rendering: SPM `▁` is a space, `<0x0A>` is one byte,
//! byte-level BPE is undone). A token that renders as nothing unless asked
//! for special text (control tokens, end-of-generation) gets toktrie's special
//! marker 0xFF before its text: no UTF-8 text contains 0xFF, so no grammar
//! string can produce it, and Lark's `<|name|>` syntax can still name it.
//! Tokens that render as nothing either way (unused slots) are never allowed.

use std::sync::Arc;

use kestrel_tokenizer::Tokenizer;
use llguidance::toktrie::{TokEnv, TokRxInfo, TokTrie, TokenId, TokenizerEnv};

use crate::ConstraintError;

/// Kestrel's vocabulary as llguidance sees it. Shared (`Arc`) by every
/// compiler, grammar and matcher of one model.
pub struct Vocabulary {
    env: TokEnv,
    eog: Vec<u32>,
    canonical: bool,
    /// Tokens whose text starts with an ASCII digit (made on first use).
    digit_leading: std::sync::OnceLock<Vec<u32>>,
}

/// How forced bytes become tokens: with the model's own tokenizer when the
/// vocabulary has one (canonical, so fast-forward is allowed), else greedily
/// through the trie (masks stay exact; nothing is fast-forwarded).
struct Env {
    trie: TokTrie,
    tokenizer: Option<Arc<Tokenizer>>,
}

impl TokenizerEnv for Env {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        match &self.tokenizer {
            Some(tok) => self
                .trie
                .tokenize_with_greedy_fallback(s, |text| tok.encode(text, false, false)),
            None => self.trie.greedy_tokenize(s),
        }
    }

    fn tokenize_is_canonical(&self) -> bool {
        self.tokenizer.is_some()
    }
}

impl Vocabulary {
    /// The vocabulary of `tok`. Forced text is not fast-forwarded (there is
    /// no tokenizer to split it as the model would); see
    /// [`Vocabulary::with_tokenizer`].
    pub fn new(tok: &Tokenizer) -> Result<Arc<Vocabulary>, ConstraintError> {
        Vocabulary::build(tok, None)
    }

    /// The vocabulary of `tok`, which also tokenizes text the grammar forces,
    /// so that [`Matcher::forced`](crate::Matcher::forced) can return it and
    /// masks at forced text allow just its first token. Falls back to
    /// [`Vocabulary::new`]'s behaviour for SentencePiece vocabularies that add
    /// a space prefix (encoding a piece of text would add a space to it).
    pub fn with_tokenizer(tok: Arc<Tokenizer>) -> Result<Arc<Vocabulary>, ConstraintError> {
        let canonical = !tok.add_space_prefix();
        let shared = canonical.then(|| tok.clone());
        Vocabulary::build(&tok, shared)
    }

    fn build(
        tok: &Tokenizer,
        tokenizer: Option<Arc<Tokenizer>>,
    ) -> Result<Arc<Vocabulary>, ConstraintError> {
        let n = tok.vocab_size();
        let n32 = u32::try_from(n)
            .map_err(|_| ConstraintError::Vocabulary(format!("{n} tokens is too many")))?;
        let eog: Vec<u32> = tok.eog_ids().iter().copied().filter(|&t| t < n32).collect();
        let Some(&first_eog) = eog.first().or(tok.eos().as_ref()) else {
            return Err(ConstraintError::Vocabulary(
                "no end-of-generation token".into(),
            ));
        };
        let eog = if eog.is_empty() { vec![first_eog] } else { eog };
        let words: Vec<Vec<u8>> = (0..n32).map(|id| token_bytes(tok, id, &eog)).collect();
        let info = TokRxInfo {
            vocab_size: n32,
            tok_eos: first_eog,
            tok_bos: tok.bos(),
            tok_pad: tok.pad(),
            tok_unk: tok.unk(),
            tok_end_of_turn: None,
        };
        let trie = TokTrie::from(&info, &words).with_eos_tokens(&eog);
        let canonical = tokenizer.is_some();
        let env: TokEnv = Arc::new(Env { trie, tokenizer });
        Ok(Arc::new(Vocabulary {
            env,
            eog,
            canonical,
            digit_leading: std::sync::OnceLock::new(),
        }))
    }

    /// Number of token ids (the mask's length in bits).
    pub fn n_vocab(&self) -> usize {
        self.env.tok_trie().vocab_size()
    }

    /// End-of-generation ids, ascending: all allowed where the grammar may end.
    pub fn eog_ids(&self) -> &[u32] {
        &self.eog
    }

    /// Whether forced text is tokenized by the model's tokenizer (and so
    /// fast-forwarded).
    pub fn fast_forwards(&self) -> bool {
        self.canonical
    }

    /// The tokens whose text starts with an ASCII digit.
    pub(crate) fn digit_leading(&self) -> &[u32] {
        self.digit_leading.get_or_init(|| {
            (0..self.n_vocab() as u32)
                .filter(|&t| self.token_bytes(t).first().is_some_and(u8::is_ascii_digit))
                .collect()
        })
    }

    /// The bytes a token stands for in the trie (special tokens: 0xFF first;
    /// never-allowed tokens: empty).
    pub fn token_bytes(&self, id: u32) -> &[u8] {
        self.env.tok_trie().token(id)
    }

    pub(crate) fn env(&self) -> &TokEnv {
        &self.env
    }
}

/// The trie bytes of one token (see the module comment). End-of-generation
/// tokens are always special, even where their type says normal text: the
/// sequence ends at them, so no grammar may produce them as text.
fn token_bytes(tok: &Tokenizer, id: u32, eog: &[u32]) -> Vec<u8> {
    let is_eog = eog.contains(&id);
    if !is_eog {
        let text = tok.token_to_piece(id, false);
        if !text.is_empty() {
            return text;
        }
    }
    let mut special = tok.token_to_piece(id, true);
    if special.is_empty() && is_eog {
        // An end-of-generation id stays a special token even without text.
        special = format!("<[{id}]>").into_bytes();
    }
    if special.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::with_capacity(special.len() + 1);
    out.push(TokTrie::SPECIAL_TOKEN_MARKER);
    out.extend_from_slice(&special);
    out
}
