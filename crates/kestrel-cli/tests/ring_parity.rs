//! Logit-level parity with llama.cpp for a sliding-window model decoding
//! past its window cache's size (fixtures from scripts/gen-ring-fixtures.sh):
//! Gemma-3-270M, a 652-token prompt and 440 greedy steps (positions to
//! 1091) on two threads, each step's most likely token and its logit to six
//! decimals. llama.cpp's default window cache is a ring of 1024 cells
//! (window 512 + a 512-token micro-batch), so from position 1024 its
//! attention visits the newest keys first; with `--swa-full` it keeps every
//! position in order. The two fixtures part at step 373 (position 1024),
//! and Kestrel must match each in the matching mode.

use std::path::PathBuf;

use kestrel_engine::{Engine, Logits};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

const MODEL: &str = "gemma-3-270m-q4_k_m";

/// (prompt token count, [(step's top token, its logit to six decimals)]).
fn fixture(name: &str) -> (usize, Vec<(u32, String)>) {
    let path = root().join(format!("tests/fixtures/greedy/ring/{name}.txt"));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (run scripts/gen-ring-fixtures.sh)", path.display()));
    let mut lines = text.lines();
    let n_prompt = lines
        .next()
        .and_then(|l| l.strip_prefix("# prompt tokens "))
        .and_then(|n| n.parse().ok())
        .expect("header: # prompt tokens N");
    let steps = lines
        .enumerate()
        .map(|(i, l)| {
            let f: Vec<&str> = l.split(' ').collect();
            assert_eq!(f.len(), 3, "line {l:?}");
            assert_eq!(f[0].parse::<usize>().ok(), Some(i), "step numbers in order");
            (f[1].parse().expect("token id"), f[2].to_string())
        })
        .collect();
    (n_prompt, steps)
}

fn check(full_swa: bool) {
    let model = root().join(format!("models/{MODEL}.gguf"));
    assert!(
        model.exists(),
        "{} is missing: run scripts/fetch-models.sh",
        model.display()
    );
    // ggml's split-KV chunks, and so the bits, depend on the thread count.
    let engine = Engine::load(&model, 2).expect("the model loads");
    let prompts: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("tests/fixtures/greedy/long-prompts.json"))
            .expect("long prompts"),
    )
    .expect("JSON");
    let prompt = prompts[1].as_str().expect("a second long prompt");
    let (n_prompt, want) = fixture(&format!("{MODEL}{}", if full_swa { ".full" } else { "" }));
    let mut tokens = engine.tokenize_prompt(prompt);
    assert_eq!(tokens.len(), n_prompt, "prompt tokens");
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
            "step {step} (position {}), swa_full {full_swa}",
            tokens.len() - 1
        );
        tokens.push(best as u32);
        logits = engine
            .model
            .forward(&[best as u32], tokens.len() - 1, &mut cache, Logits::Last);
    }
}

#[test]
fn gemma3_past_its_window_ring_matches_llama_cpp_logits() {
    check(false);
}

#[test]
fn gemma3_with_swa_full_matches_llama_cpp_logits() {
    check(true);
}
