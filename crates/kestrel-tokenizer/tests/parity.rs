//! Parity with llama.cpp: every string in tests/fixtures/tokenizer/strings.jsonl
//! must encode to the ids llama-tokenize gave (fixtures written by
//! scripts/gen-tokenizer-fixtures.sh), for each of the three test models.

use std::path::PathBuf;

use kestrel_gguf::GgufFile;
use kestrel_tokenizer::Tokenizer;
use serde::Deserialize;

#[derive(Deserialize)]
struct Row {
    text: String,
    /// `llama-tokenize --no-bos`: add_special=false, parse_special=false.
    ids: Vec<u32>,
    /// `llama-tokenize --parse-special`: add_special=model's add_bos, parse_special=true.
    ids_special: Vec<u32>,
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn load(model_file: &str) -> Tokenizer {
    let path = root().join("models").join(model_file);
    assert!(
        path.exists(),
        "model file {} is missing: run scripts/fetch-models.sh",
        path.display()
    );
    let f = GgufFile::open(&path).unwrap_or_else(|e| panic!("opening {}: {e}", path.display()));
    let t0 = std::time::Instant::now();
    let tok = Tokenizer::from_gguf(&f).unwrap_or_else(|e| panic!("tokenizer of {model_file}: {e}"));
    eprintln!("{model_file}: tokenizer built in {:?}", t0.elapsed());
    tok
}

fn rows(stem: &str) -> Vec<Row> {
    let path = root()
        .join("tests/fixtures/tokenizer")
        .join(format!("{stem}.jsonl"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "fixture {} unreadable ({e}): run scripts/gen-tokenizer-fixtures.sh",
            path.display()
        )
    });
    text.split('\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_str(l).expect("fixture line"))
        .collect()
}

fn check(model_file: &str) {
    let stem = model_file.trim_end_matches(".gguf");
    let tok = load(model_file);
    let rows = rows(stem);
    assert!(
        rows.len() >= 320,
        "{stem}: only {} fixture rows",
        rows.len()
    );
    let mut failures = Vec::new();
    let mut checked = 0;
    for row in &rows {
        for (mode, expected, add_special, parse_special) in [
            ("plain", &row.ids, false, false),
            ("bos+special", &row.ids_special, tok.add_bos(), true),
        ] {
            checked += 1;
            let got = tok.encode(&row.text, add_special, parse_special);
            if &got != expected {
                failures.push(format!(
                    "  [{mode}] text {:?}\n    expected {:?}\n    got      {:?}",
                    row.text, expected, got
                ));
            }
        }
        // Pieces of the plain encoding give the text back (special=true:
        // control tokens formed from plain text render as their text).
        // SentencePiece writes spaces as ▁, so a ▁ in the text comes back
        // as a space (in llama.cpp too).
        let back = tok.decode(&row.ids, true);
        let text = match tok.kind() {
            kestrel_tokenizer::TokenizerKind::Spm => row.text.replace('▁', " "),
            kestrel_tokenizer::TokenizerKind::Bpe => row.text.clone(),
        };
        if back != text {
            failures.push(format!(
                "  [round trip] text {:?}\n    decoded {:?}",
                row.text, back
            ));
        }
    }
    eprintln!(
        "{stem}: {} strings, {checked} encodings, {} mismatches",
        rows.len(),
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{stem}: {} of {checked} differ from llama.cpp; first ones:\n{}",
        failures.len(),
        failures
            .iter()
            .take(8)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn smollm2_matches_llama_cpp() {
    check("SmolLM2-135M-Instruct.Q4_1.gguf");
}

#[test]
fn qwen2_5_matches_llama_cpp() {
    check("qwen2.5-coder-0.5b-q4_k_m.gguf");
}

#[test]
fn gemma3_matches_llama_cpp() {
    check("gemma-3-270m-q4_k_m.gguf");
}

#[test]
fn special_ids_and_end_of_generation() {
    let smol = load("SmolLM2-135M-Instruct.Q4_1.gguf");
    assert_eq!(
        (smol.bos(), smol.eos(), smol.add_bos()),
        (Some(1), Some(2), false)
    );
    assert!(smol.is_eog(2) && smol.is_eog(0));
    assert!(!smol.is_eog(1));

    let qwen = load("qwen2.5-coder-0.5b-q4_k_m.gguf");
    let im_end = qwen.token_id("<|im_end|>").unwrap();
    let endoftext = qwen.token_id("<|endoftext|>").unwrap();
    assert!(qwen.is_eog(im_end) && qwen.is_eog(endoftext));
    assert_eq!(qwen.eos(), Some(im_end));
    assert!(!qwen.add_bos());

    let gemma = load("gemma-3-270m-q4_k_m.gguf");
    let eot = gemma.token_id("<end_of_turn>").unwrap();
    assert_eq!(
        (gemma.bos(), gemma.eos(), gemma.add_bos()),
        (Some(2), Some(1), true)
    );
    assert!(gemma.is_eog(eot) && gemma.is_eog(1));
    assert_eq!(gemma.eot(), Some(eot));
    assert_eq!(gemma.vocab_size(), 262_144);
    // control tokens render only when asked
    assert_eq!(gemma.token_to_piece(eot, false), b"");
    assert_eq!(gemma.token_to_piece(eot, true), b"<end_of_turn>");
}
