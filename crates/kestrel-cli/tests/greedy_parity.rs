//! Greedy parity with llama.cpp: `kestrel run --raw --temp 0 -n 64` must print
//! exactly what `llama-completion --temp 0 -no-cnv` (built for AVX2, the
//! rounding Kestrel follows) printed for the same prompt (fixtures from
//! scripts/gen-greedy-fixtures.sh): short prompts, and long ones whose
//! decode steps take ggml's split-KV path (a cache view of 512+ cells).

use std::path::PathBuf;
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn check_model(model: &str) {
    check_fixture(model, "", 10);
}

fn check_fixture(model: &str, dir: &str, min_cases: usize) {
    let model_path = root().join("models").join(model);
    assert!(
        model_path.exists(),
        "{} is missing: run scripts/fetch-models.sh",
        model_path.display()
    );
    let stem = model.trim_end_matches(".gguf");
    let fixture = root().join(format!("tests/fixtures/greedy/{dir}{stem}.jsonl"));
    let text = std::fs::read_to_string(&fixture).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run scripts/gen-greedy-fixtures.sh)",
            fixture.display()
        )
    });
    let mut failures = Vec::new();
    let mut count = 0;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let case: serde_json::Value = serde_json::from_str(line).expect("fixture line is JSON");
        let prompt = case["prompt"].as_str().expect("prompt");
        let want = case["output"].as_str().expect("output");
        let n = case["n_predict"].as_u64().expect("n_predict");
        let out = Command::new(env!("CARGO_BIN_EXE_kestrel"))
            .args(["run", "-m"])
            .arg(&model_path)
            .args(["--raw", "--temp", "0", "-c", "4096", "-t", "2", "-n"])
            .arg(n.to_string())
            .arg("-p")
            .arg(prompt)
            .output()
            .expect("kestrel runs");
        assert!(
            out.status.success(),
            "kestrel failed on {prompt:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let got = String::from_utf8_lossy(&out.stdout);
        count += 1;
        if got != want {
            failures.push(format!(
                "prompt {prompt:?}\n  llama.cpp: {want:?}\n  kestrel:   {got:?}"
            ));
        }
    }
    assert!(
        count >= min_cases,
        "{}: only {count} cases",
        fixture.display()
    );
    assert!(
        failures.is_empty(),
        "{model}: {} of {count} prompts differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn smollm2_matches_llama_cpp() {
    check_model("SmolLM2-135M-Instruct.Q4_1.gguf");
}

// Gemma-3 and Qwen2.5 (Q4_K_M) mix Q4_K, Q6_K, Q5_0 and Q8_0 weights, so
// these two cover llama.cpp's repacked Q4_K gemv/gemm kernels, its tiled
// K-quant matmul (prompt batches of 8 or more tokens) and llamafile's sgemm.
#[test]
fn gemma3_matches_llama_cpp() {
    check_model("gemma-3-270m-q4_k_m.gguf");
}

#[test]
fn qwen2_matches_llama_cpp() {
    check_model("qwen2.5-coder-0.5b-q4_k_m.gguf");
}

// Prompts of about 300 and 650 tokens: every decode step reads a cache view
// of 512 or 768 cells, where ggml splits the keys into one chunk per thread
// and merges the chunks' partial softmax sums.
#[test]
fn smollm2_long_context_matches_llama_cpp() {
    check_fixture("SmolLM2-135M-Instruct.Q4_1.gguf", "long/", 2);
}

#[test]
fn gemma3_long_context_matches_llama_cpp() {
    check_fixture("gemma-3-270m-q4_k_m.gguf", "long/", 2);
}

#[test]
fn qwen2_long_context_matches_llama_cpp() {
    check_fixture("qwen2.5-coder-0.5b-q4_k_m.gguf", "long/", 2);
}
