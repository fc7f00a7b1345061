//! Tokenizers on tiny hand-built vocabularies: BPE merge order, SentencePiece
//! scores and byte fallback, special-token splitting, errors, streaming; and
//! the lower bound on token counts, on those and on the three test models.

use kestrel_tokenizer::{token_type as tt, StreamDecoder, Tokenizer, TokenizerError, VocabData};

fn bpe_vocab() -> VocabData {
    let toks: &[(&str, i32)] = &[
        ("a", tt::NORMAL),              // 0
        ("b", tt::NORMAL),              // 1
        ("Ġ", tt::NORMAL),              // 2
        ("ab", tt::NORMAL),             // 3
        ("Ġa", tt::NORMAL),             // 4
        ("Ġab", tt::NORMAL),            // 5
        ("<|end|>", tt::CONTROL),       // 6
        ("<tool>", tt::USER_DEFINED),   // 7
        ("<", tt::NORMAL),              // 8
        ("|", tt::NORMAL),              // 9
        (">", tt::NORMAL),              // 10
        ("e", tt::NORMAL),              // 11
        ("n", tt::NORMAL),              // 12
        ("d", tt::NORMAL),              // 13
        ("t", tt::NORMAL),              // 14
        ("o", tt::NORMAL),              // 15
        ("l", tt::NORMAL),              // 16
        ("<|endoftext|>", tt::CONTROL), // 17
    ];
    VocabData {
        model: "gpt2".into(),
        pre: Some("gpt-2".into()),
        tokens: toks.iter().map(|t| t.0.to_string()).collect(),
        token_types: Some(toks.iter().map(|t| t.1).collect()),
        merges: Some(vec!["a b".into(), "Ġ a".into(), "Ġa b".into()]),
        bos_id: Some(17),
        eos_id: Some(17),
        ..VocabData::default()
    }
}

#[test]
fn bpe_merges_follow_rank_order() {
    let t = Tokenizer::from_vocab(bpe_vocab()).unwrap();
    // "ab": a+b (rank 0). " ab": a+b (rank 0) beats Ġ+a (rank 1), and
    // "Ġ ab" is no merge, so the word stays two tokens.
    assert_eq!(t.encode("ab ab", false, false), vec![3, 2, 3]);
    assert_eq!(t.encode(" a", false, false), vec![4]);
    assert_eq!(t.decode(&[3, 2, 3], false), "ab ab");
    assert!(t.encode("", true, true).is_empty()); // add_bos_token absent: gpt2 adds none
}

#[test]
fn bpe_special_tokens_need_parse_special_but_user_defined_do_not() {
    let t = Tokenizer::from_vocab(bpe_vocab()).unwrap();
    assert_eq!(t.encode("a<|end|>b", false, true), vec![0, 6, 1]);
    let plain = t.encode("a<|end|>b", false, false);
    assert!(!plain.contains(&6), "{plain:?}");
    assert_eq!(plain[..2], [0, 8]); // "a", "<" ...
                                    // user-defined tokens are split out either way
    assert_eq!(t.encode("a<tool>b", false, false), vec![0, 7, 1]);
    // control pieces render only with special=true; user-defined always
    assert_eq!(t.token_to_piece(6, false), b"");
    assert_eq!(t.token_to_piece(6, true), b"<|end|>");
    assert_eq!(t.token_to_piece(7, false), b"<tool>");
    assert_eq!(t.token_to_piece(2, false), b" ");
}

#[test]
fn end_of_generation_is_collected_from_ids_and_texts() {
    let t = Tokenizer::from_vocab(bpe_vocab()).unwrap();
    assert!(t.is_eog(17)); // eos
    assert!(t.is_eog(6)); // "<|end|>"
    assert!(!t.is_eog(7));
    assert_eq!(t.eog_ids(), &[6, 17]);
}

#[test]
fn unknown_pre_tokenizer_is_an_error_listing_supported_ones() {
    let mut v = bpe_vocab();
    v.pre = Some("no-such-pre".into());
    let e = Tokenizer::from_vocab(v).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, TokenizerError::UnknownPre { .. }));
    assert!(
        msg.contains("no-such-pre") && msg.contains("qwen2") && msg.contains("smollm"),
        "{msg}"
    );
}

#[test]
fn malformed_vocabularies_are_errors() {
    let mut v = bpe_vocab();
    v.merges = None;
    assert_eq!(
        Tokenizer::from_vocab(v).unwrap_err(),
        TokenizerError::MissingKey("tokenizer.ggml.merges")
    );
    let mut v = bpe_vocab();
    v.token_types = Some(vec![1; 3]);
    assert!(matches!(
        Tokenizer::from_vocab(v).unwrap_err(),
        TokenizerError::ShortArray { len: 3, .. }
    ));
    let mut v = bpe_vocab();
    v.model = "wordpiece-ish".into();
    assert!(Tokenizer::from_vocab(v)
        .unwrap_err()
        .to_string()
        .contains("wordpiece-ish"));
    let v = VocabData {
        model: "llama".into(),
        ..VocabData::default()
    };
    assert_eq!(
        Tokenizer::from_vocab(v).unwrap_err(),
        TokenizerError::EmptyVocab
    );
    // out-of-range special ids fall back instead of panicking later
    let mut v = bpe_vocab();
    v.bos_id = Some(9999);
    let t = Tokenizer::from_vocab(v).unwrap();
    assert_eq!(t.bos(), Some(11));
    assert_eq!(t.token_to_piece(9999, true), b"");
}

fn spm_vocab() -> VocabData {
    let toks: &[(&str, f32, i32)] = &[
        ("<unk>", 0.0, tt::UNKNOWN),  // 0
        ("<s>", 0.0, tt::CONTROL),    // 1
        ("</s>", 0.0, tt::CONTROL),   // 2
        ("▁", -5.0, tt::NORMAL),      // 3
        ("h", -5.0, tt::NORMAL),      // 4
        ("e", -5.0, tt::NORMAL),      // 5
        ("l", -5.0, tt::NORMAL),      // 6
        ("o", -5.0, tt::NORMAL),      // 7
        ("he", -1.0, tt::NORMAL),     // 8
        ("ll", -2.0, tt::NORMAL),     // 9
        ("▁he", -0.5, tt::NORMAL),    // 10
        ("llo", -1.5, tt::NORMAL),    // 11
        ("▁hello", -0.1, tt::NORMAL), // 12
        ("<0x21>", 0.0, tt::BYTE),    // 13
        ("<0xF0>", 0.0, tt::BYTE),    // 14
        ("<0x9F>", 0.0, tt::BYTE),    // 15
        ("<0x98>", 0.0, tt::BYTE),    // 16
        ("<0x80>", 0.0, tt::BYTE),    // 17
        ("<turn>", 0.0, tt::CONTROL), // 18
    ];
    VocabData {
        model: "llama".into(),
        tokens: toks.iter().map(|t| t.0.to_string()).collect(),
        scores: Some(toks.iter().map(|t| t.1).collect()),
        token_types: Some(toks.iter().map(|t| t.2).collect()),
        ..VocabData::default()
    }
}

#[test]
fn spm_merges_by_score_with_space_prefix_and_bos() {
    let t = Tokenizer::from_vocab(spm_vocab()).unwrap();
    // llama.cpp defaults for "llama": BOS 1, EOS 2, add BOS, space prefix
    assert_eq!(
        (t.bos(), t.eos(), t.add_bos(), t.add_space_prefix()),
        (Some(1), Some(2), true, true)
    );
    // he(-1) -> ▁he(-0.5) -> ll(-2) -> llo(-1.5) -> ▁hello(-0.1)
    assert_eq!(t.encode("hello", true, false), vec![1, 12]);
    assert_eq!(t.encode("hello", false, false), vec![12]);
    assert_eq!(t.decode(&[1, 12], false), " hello");
    // llama_detokenize: the prefix space goes unless a removed BOS led
    assert_eq!(t.detokenize(&[12], false, false), "hello");
    assert_eq!(t.detokenize(&[1, 12], true, false), " hello");
    assert_eq!(t.detokenize(&[1, 12], false, true), "<s> hello");
}

#[test]
fn spm_byte_fallback_and_unknown() {
    let t = Tokenizer::from_vocab(spm_vocab()).unwrap();
    // "!" has only a byte token; "😀" is four byte tokens; "z" has neither -> <unk>
    assert_eq!(
        t.encode("h!😀z", false, false),
        vec![3, 4, 13, 14, 15, 16, 17, 0]
    );
    assert_eq!(t.token_to_piece(13, false), b"!");
    assert_eq!(t.decode(&[14, 15, 16, 17], false), "😀");
}

#[test]
fn spm_space_prefix_follows_special_tokens() {
    let t = Tokenizer::from_vocab(spm_vocab()).unwrap();
    // each text fragment after a special token gets its own "▁"
    assert_eq!(t.encode("he<turn>he", false, true), vec![10, 18, 10]);
    let mut v = spm_vocab();
    v.add_space_prefix = Some(false);
    let t = Tokenizer::from_vocab(v).unwrap();
    assert_eq!(t.encode("he<turn>he", false, true), vec![8, 18, 8]);
}

#[test]
fn stream_decoder_never_emits_half_a_character() {
    let t = Tokenizer::from_vocab(spm_vocab()).unwrap();
    let mut d = StreamDecoder::new(&t, false);
    assert_eq!(d.push(12), " hello");
    assert_eq!(d.push(14), "");
    assert_eq!(d.push(15), "");
    assert_eq!(d.push(16), "");
    assert_eq!(d.pending_bytes(), [0xF0, 0x9F, 0x98]);
    assert_eq!(d.push(17), "😀");
    assert_eq!(d.push(13), "!");
    // a dangling lead byte is flushed lossily at the end
    assert_eq!(d.push(14), "");
    assert_eq!(d.finish(), "\u{FFFD}");

    // bytes that can never complete are replaced right away, not held
    let mut d = StreamDecoder::new(&t, false);
    assert_eq!(d.push(17), "\u{FFFD}");
    assert_eq!(d.push(14), "");
    assert_eq!(d.push(13), "\u{FFFD}!");
}

#[test]
fn max_bytes_per_token_on_tiny_vocabularies() {
    // Most bytes have no token in bpe_vocab: "é" gives no token at all,
    // and the bound does not count such bytes.
    let t = Tokenizer::from_vocab(bpe_vocab()).unwrap();
    assert!(t.encode("é", false, false).is_empty());
    assert_eq!(t.min_tokens("éé"), 0);
    for text in ["é a é", "hello world", "ab\u{0}é"] {
        assert!(t.encode(text, false, true).len() >= t.min_tokens(text));
    }

    // Every byte spelled, "a b" merging to "ab", a control token.
    let chars: Vec<String> = (0..=255u8).map(|b| gpt2_char(b).to_string()).collect();
    let mut tokens = chars.clone();
    tokens.extend(["ab".into(), "<|end|>".into()]);
    let mut types = vec![tt::NORMAL; tokens.len()];
    types[257] = tt::CONTROL;
    let v = VocabData {
        model: "gpt2".into(),
        pre: Some("gpt-2".into()),
        tokens,
        token_types: Some(types),
        merges: Some(vec!["a b".into()]),
        ..VocabData::default()
    };
    let t = Tokenizer::from_vocab(v.clone()).unwrap();
    assert_eq!(t.max_bytes_per_token(), Some(7)); // "<|end|>"
    assert_eq!(
        (
            t.min_tokens(""),
            t.min_tokens("1234567"),
            t.min_tokens("12345678")
        ),
        (0, 1, 2)
    );
    for text in ["abab", "<|end|><|end|>x", "é😀 ab\u{0}"] {
        assert!(t.encode(text, false, true).len() >= t.min_tokens(text));
    }
    // A merge whose result is no token: llama.cpp drops its non-ASCII bytes.
    let mut v2 = v.clone();
    v2.merges = Some(vec!["Ã ©".into()]);
    let t = Tokenizer::from_vocab(v2).unwrap();
    assert!(t.encode("é", false, false).is_empty());
    assert_eq!(t.max_bytes_per_token(), None);

    // SentencePiece: <unk> catches every byte; the longest text is "▁hello".
    let t = Tokenizer::from_vocab(spm_vocab()).unwrap();
    assert_eq!(t.max_bytes_per_token(), Some("▁hello".len()));
    assert_eq!(t.encode("zzz", false, false), [3, 0, 0, 0]); // ▁, then <unk>s
    assert!(t.encode("zzz", false, false).len() >= t.min_tokens("zzz"));
}

/// GPT-2's stand-in character of a byte.
fn gpt2_char(b: u8) -> char {
    let printable = matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    if printable {
        return char::from(b);
    }
    let n = (0..b)
        .filter(|&x| !matches!(x, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF))
        .count() as u32;
    char::from_u32(0x100 + n).unwrap()
}

fn load_model(file: &str) -> Tokenizer {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../models")
        .join(file);
    let f = kestrel_gguf::GgufFile::open(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (run scripts/fetch-models.sh)", path.display()));
    Tokenizer::from_gguf(&f).unwrap()
}

/// xorshift64
struct Rng(u64);
impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

#[test]
fn min_tokens_holds_on_the_test_models() {
    let pool: Vec<char> = "aZ09½ \n\t\u{3000}!$<>|'sRE中é😀\u{200d}▁\u{4}\u{f2}"
        .chars()
        .collect();
    let pieces = [
        "<|im_start|>",
        "<end_of_turn>",
        "<|endoftext|>",
        "        ",
        "▁▁▁▁▁▁▁▁",
        "================",
        " the",
        "\n\n",
        "\u{4}\u{4}",
    ];
    // SmolLM2 has no token for some bytes (0x04, 0xF1, ...): a text of
    // them encodes to nothing, and the bound leaves them out.
    for file in [
        "SmolLM2-135M-Instruct.Q4_1.gguf",
        "gemma-3-270m-q4_k_m.gguf",
        "qwen2.5-coder-0.5b-q4_k_m.gguf",
    ] {
        let t = load_model(file);
        let max = t.max_bytes_per_token();
        eprintln!("{file}: max bytes per token {max:?}");
        assert!(max.is_some(), "{file}");
        let mut texts: Vec<String> = pieces.iter().map(|p| p.repeat(300)).collect();
        texts.extend(pool.iter().map(|c| c.to_string().repeat(1000)));
        let mut rng = Rng(0x5851_f42d_4c95_7f2d);
        for _ in 0..300 {
            let k = 1 + rng.below(6);
            let sub: Vec<usize> = (0..k)
                .map(|_| rng.below(pool.len() + pieces.len()))
                .collect();
            let text: String = (0..rng.below(300))
                .map(|_| match sub[rng.below(k)] {
                    i if i < pool.len() => pool[i].to_string(),
                    i => pieces[i - pool.len()].to_string(),
                })
                .collect();
            texts.push(text);
        }
        let mut densest = 0.0f64;
        for text in &texts {
            let n = t.encode(text, false, true).len();
            assert!(
                n >= t.min_tokens(text),
                "{file}: {n} tokens for {} bytes, bound {max:?}: {text:?}",
                text.len()
            );
            densest = densest.max(text.len() as f64 / n.max(1) as f64);
        }
        let Some(max) = max else { continue };
        // Not absurdly loose: some text comes near it. The longest token's
        // own text (SentencePiece: with ▁ as typed) repeated is one.
        let longest = (0..t.vocab_size() as u32)
            .filter(|&id| !t.is_control(id))
            .max_by_key(|&id| t.token_text(id).map_or(0, str::len))
            .unwrap();
        let unit = match t.kind() {
            kestrel_tokenizer::TokenizerKind::Spm => t.token_text(longest).unwrap().to_owned(),
            kestrel_tokenizer::TokenizerKind::Bpe => {
                String::from_utf8_lossy(&t.token_to_piece(longest, true)).into_owned()
            }
        };
        let text = unit.repeat(50);
        let n = t.encode(&text, false, true).len();
        densest = densest.max(text.len() as f64 / n as f64);
        eprintln!("{file}: densest text seen {densest:.1} bytes per token");
        assert!(densest * 2.0 >= max as f64, "{file}: {densest} vs {max}");
    }
}
