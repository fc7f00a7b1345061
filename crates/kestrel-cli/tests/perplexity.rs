//! `kestrel perplexity` against llama-perplexity: the same model, the same
//! text (the GPL-3 licence text Debian ships at
//! /usr/share/common-licenses/GPL-3), c = 512, the first 4 chunks, must give a
//! final PPL within 0.5% of llama.cpp's (fixtures from
//! scripts/gen-perplexity-fixtures.sh). Also: bad input is an error naming
//! the problem.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The text the fixtures were made from; part of Debian's base-files.
const TEXT: &str = "/usr/share/common-licenses/GPL-3";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn model_path(model: &str) -> PathBuf {
    let p = root().join("models").join(model);
    assert!(
        p.exists(),
        "{} is missing: run scripts/fetch-models.sh",
        p.display()
    );
    p
}

fn perplexity(model: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kestrel"))
        .args(["perplexity", "-m"])
        .arg(model)
        .args(args)
        .output()
        .expect("kestrel runs")
}

fn check_model(model: &str) {
    let stem = model.trim_end_matches(".gguf");
    let fixture = root().join(format!("tests/fixtures/perplexity/{stem}.json"));
    let text = std::fs::read_to_string(&fixture).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run scripts/gen-perplexity-fixtures.sh)",
            fixture.display()
        )
    });
    let want: serde_json::Value = serde_json::from_str(&text).expect("fixture is JSON");
    assert_eq!(want["text"], TEXT, "fixture made from another text");
    assert_eq!(want["n_ctx"], 512);
    let chunks = want["chunks"].as_u64().expect("chunks").to_string();
    let ref_ppl = want["ppl"].as_f64().expect("ppl");
    let ref_chunks: Vec<f64> = want["chunk_ppl"]
        .as_array()
        .expect("chunk_ppl")
        .iter()
        .map(|v| v.as_f64().expect("number"))
        .collect();
    assert!(
        Path::new(TEXT).exists(),
        "{TEXT} is missing (Debian's base-files ships it)"
    );

    let out = perplexity(
        &model_path(model),
        &["-f", TEXT, "-c", "512", "--chunks", &chunks, "-t", "2"],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "kestrel perplexity failed on {model}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ppl: f64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("Final estimate: PPL = "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no final estimate in {stdout:?}"));
    let running: Vec<f64> = stdout
        .lines()
        .next()
        .unwrap_or("")
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.split(']')
                .nth(1)
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("bad running value {s:?}"))
        })
        .collect();
    assert_eq!(running.len(), ref_chunks.len(), "{stdout}");
    for (i, (got, want)) in running.iter().zip(&ref_chunks).enumerate() {
        assert!(
            (got - want).abs() / want < 0.005,
            "{model}: chunk {} running PPL {got} vs llama.cpp {want}",
            i + 1
        );
    }
    let rel = (ppl - ref_ppl).abs() / ref_ppl;
    assert!(
        rel < 0.005,
        "{model}: PPL {ppl} vs llama-perplexity {ref_ppl} ({:.3}% apart)",
        rel * 100.0
    );
}

#[test]
fn smollm2_matches_llama_perplexity() {
    check_model("SmolLM2-135M-Instruct.Q4_1.gguf");
}

#[test]
fn gemma3_matches_llama_perplexity() {
    check_model("gemma-3-270m-q4_k_m.gguf");
}

#[test]
fn qwen2_matches_llama_perplexity() {
    check_model("qwen2.5-coder-0.5b-q4_k_m.gguf");
}

fn expect_error(out: &Output, needles: &[&str]) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "exit code; stderr: {err}");
    assert!(!err.contains("panicked"), "panic: {err}");
    let last = err.lines().last().unwrap_or("");
    assert!(last.starts_with("error:"), "stderr: {err}");
    for n in needles {
        assert!(err.contains(n), "expected {n:?} in: {err}");
    }
}

#[test]
fn too_short_text_names_both_numbers() {
    let dir = std::env::temp_dir().join(format!("kestrel-ppl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let short = dir.join("short.txt");
    std::fs::write(&short, "Hello world. ".repeat(40)).unwrap();
    let model = model_path("SmolLM2-135M-Instruct.Q4_1.gguf");
    let out = perplexity(&model, &["-f", short.to_str().unwrap(), "-c", "128"]);
    // The message gives the tokenizer's count and the 2 x 128 needed.
    expect_error(&out, &["only", "at least 256", "context of 128"]);
    let err = String::from_utf8_lossy(&out.stderr);
    let n: usize = err
        .split("only ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("token count in {err}"));
    assert!(n > 0 && n < 256, "{err}");

    let not_utf8 = dir.join("binary.txt");
    std::fs::write(&not_utf8, b"abc\xff\xfe").unwrap();
    let out = perplexity(&model, &["-f", not_utf8.to_str().unwrap()]);
    expect_error(&out, &["not UTF-8", "offset 3"]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_flags_are_errors() {
    let model = Path::new("no-such-model.gguf");
    for (args, needle) in [
        (&["-f", TEXT, "-c", "2"][..], "--ctx-size"),
        (&["-f", TEXT, "-b", "0"], "--batch-size"),
        (&["-f", TEXT, "--chunks", "0"], "--chunks"),
        (&["-f", TEXT, "-t", "5000"], "--threads"),
        (&["-f", "/no/such/file.txt"], "/no/such/file.txt"),
        (&["-f", TEXT], "no-such-model.gguf"),
    ] {
        expect_error(&perplexity(model, args), &[needle]);
    }
}
