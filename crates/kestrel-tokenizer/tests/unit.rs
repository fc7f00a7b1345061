//! Tokenizers on tiny hand-built vocabularies: BPE merge order, SentencePiece
//! scores and byte fallback, special-token splitting, errors, streaming.

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
