//! Logit-level parity with llama.cpp (its AVX2 build; fixtures from
//! scripts/gen-logit-fixtures.sh): each greedy step's most likely token and
//! its logit to six decimals, on two threads, where matching tokens could
//! hide last-bit differences.
//! - A sliding-window model decoding past its window cache's size:
//!   Gemma-3-270M, a 652-token prompt and 440 steps (positions to 1091).
//!   llama.cpp's default window cache is a ring of 1024 cells (window 512 +
//!   a 512-token micro-batch), so from position 1024 its attention visits
//!   the newest keys first; with `--swa-full` it keeps every position in
//!   order. The two fixtures part at step 373 (position 1024), and Kestrel
//!   must match each in the matching mode. And 16 steps after a 1611-token
//!   prompt, whose later micro-batches attend in the ring.
//! - A prompt of 512 + 16-21 tokens on each test model, 8 steps: llama.cpp
//!   runs it as a 512-token micro-batch and a short one, whose rows take
//!   other kernels than one pass of them all would.

use std::path::PathBuf;

use kestrel_engine::{Engine, Logits};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// (prompt token count, [(step's top token, its logit to six decimals)]).
fn fixture(path: &str) -> (usize, Vec<(u32, String)>) {
    let path = root().join(path);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run scripts/gen-logit-fixtures.sh)",
            path.display()
        )
    });
    let mut lines = text.lines();
    let n_prompt = lines
        .next()
        .and_then(|l| l.strip_prefix("# prompt tokens "))
        .and_then(|n| n.parse().ok())
        .expect("header: # prompt tokens N");
    let steps: Vec<(u32, String)> = lines
        .enumerate()
        .map(|(i, l)| {
            let f: Vec<&str> = l.split(' ').collect();
            assert_eq!(f.len(), 3, "line {l:?}");
            assert_eq!(f[0].parse::<usize>().ok(), Some(i), "step numbers in order");
            (f[1].parse().expect("token id"), f[2].to_string())
        })
        .collect();
    assert!(!steps.is_empty(), "{}: no steps", path.display());
    (n_prompt, steps)
}

fn check(model: &str, prompt: &str, fixture_path: &str, full_swa: bool) {
    let model_path = root().join(format!("models/{model}.gguf"));
    assert!(
        model_path.exists(),
        "{} is missing: run scripts/fetch-models.sh",
        model_path.display()
    );
    // ggml's split-KV chunks, and so the bits, depend on the thread count.
    let engine = Engine::load(&model_path, 2).expect("the model loads");
    let (n_prompt, want) = fixture(fixture_path);
    let mut tokens = engine.tokenize_prompt(prompt);
    assert_eq!(tokens.len(), n_prompt, "{model}: prompt tokens");
    let mut cache = engine.model.new_cache(4096);
    if full_swa {
        cache.full_swa();
    }
    let mut logits = engine.model.forward(&tokens, 0, &mut cache, Logits::Last);
    for (step, (id, logit)) in want.iter().enumerate() {
        // The first of equal maxima, as the fixture's loop takes it.
        let best = (1..logits.len()).fold(0, |b, t| if logits[t] > logits[b] { t } else { b });
        let got = format!("{:.6}", logits[best]);
        assert_eq!(
            (best as u32, &got),
            (*id, logit),
            "{fixture_path}: step {step} (logits of position {})",
            tokens.len() - 1
        );
        tokens.push(best as u32);
        logits = engine
            .model
            .forward(&[best as u32], tokens.len() - 1, &mut cache, Logits::Last);
    }
}

fn long_prompts() -> Vec<String> {
    let prompts: Vec<String> = serde_json::from_str(
        &std::fs::read_to_string(root().join("tests/fixtures/greedy/long-prompts.json"))
            .expect("long prompts"),
    )
    .expect("a JSON list of strings");
    assert_eq!(prompts.len(), 2, "two long prompts");
    prompts
}

fn long_prompt() -> String {
    long_prompts().swap_remove(1)
}

const GEMMA: &str = "gemma-3-270m-q4_k_m";

#[test]
fn gemma3_past_its_window_ring_matches_llama_cpp_logits() {
    check(
        GEMMA,
        &long_prompt(),
        &format!("tests/fixtures/greedy/ring/{GEMMA}.txt"),
        false,
    );
}

#[test]
fn gemma3_with_swa_full_matches_llama_cpp_logits() {
    check(
        GEMMA,
        &long_prompt(),
        &format!("tests/fixtures/greedy/ring/{GEMMA}.full.txt"),
        true,
    );
}

#[test]
fn gemma3_prompt_past_its_window_ring_matches_llama_cpp_logits() {
    let p = long_prompts();
    check(
        GEMMA,
        &format!("{}\n\n{}\n\n{}", p[1], p[1], p[0]),
        &format!("tests/fixtures/greedy/ring/{GEMMA}.long-prompt.txt"),
        false,
    );
}

#[test]
fn prompts_past_one_micro_batch_match_llama_cpp_logits() {
    let prompt = std::fs::read_to_string(root().join("tests/fixtures/greedy/ubatch/prompt.txt"))
        .expect("the micro-batch prompt");
    for model in [
        "SmolLM2-135M-Instruct.Q4_1",
        GEMMA,
        "qwen2.5-coder-0.5b-q4_k_m",
    ] {
        check(
            model,
            &prompt,
            &format!("tests/fixtures/greedy/ubatch/{model}.txt"),
            false,
        );
    }
}
