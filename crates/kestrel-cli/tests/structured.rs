//! `kestrel run` structured output on SmolLM2-135M: a JSON schema's output
//! parses and holds the required integer, a GBNF grammar's is one of its
//! words, and a grammar or schema that cannot be used is an error naming
//! the problem before any generation.

use std::path::PathBuf;
use std::process::{Command, Output};

fn model() -> PathBuf {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../models/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(
        p.exists(),
        "{} is missing: run scripts/fetch-models.sh",
        p.display()
    );
    p
}

fn kestrel(prompt: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kestrel"))
        .args(["run", "-m"])
        .arg(model())
        .args(["-p", prompt, "-c", "512", "-t", "2"])
        .args(args)
        .output()
        .expect("kestrel runs")
}

/// stdout of a successful run.
fn text(prompt: &str, args: &[&str]) -> String {
    let out = kestrel(prompt, args);
    assert!(
        out.status.success(),
        "kestrel {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

const SCHEMA: &str = r#"{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}"#;

#[test]
fn json_schema_output_parses() {
    let out = text(
        "How many legs does a cat have?",
        &["--temp", "0", "-j", SCHEMA],
    );
    let v: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: not JSON: {out:?}"));
    assert!(v["n"].is_i64(), "no integer n: {out}");
}

#[test]
fn json_schema_file_and_sampling() {
    let dir = std::env::temp_dir().join(format!("kestrel-structured-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("schema.json");
    std::fs::write(&file, SCHEMA).unwrap();
    // Sampled rather than greedy: the mask holds whatever the sampler draws.
    let out = text(
        "Pick a number.",
        &[
            "--json-schema-file",
            file.to_str().unwrap(),
            "--temp",
            "1.0",
            "--seed",
            "7",
        ],
    );
    let _ = std::fs::remove_dir_all(&dir);
    let v: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: not JSON: {out:?}"));
    assert!(v["n"].is_i64(), "no integer n: {out}");
}

#[test]
fn grammar_gives_one_of_its_words() {
    for prompt in ["Is the sky blue?", "Is fire cold?"] {
        let out = text(
            prompt,
            &["--temp", "0", "--grammar", r#"root ::= ("yes" | "no")"#],
        );
        assert!(out == "yes" || out == "no", "{prompt}: {out:?}");
    }
}

fn expect_error(out: &Output, needles: &[&str]) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "exit code; stderr: {err}");
    assert!(!err.contains("panicked"), "panic: {err}");
    assert!(err.starts_with("error:"), "stderr: {err}");
    for needle in needles {
        assert!(err.contains(needle), "expected {needle:?} in: {err}");
    }
    assert!(out.stdout.is_empty(), "nothing generated: {err}");
}

#[test]
fn unusable_constraints_are_errors() {
    // A GBNF syntax error: line 2, column 13 is the stray parenthesis.
    let out = kestrel("x", &["--grammar", "root ::= \"a\"\nfoo ::= \"b\" )"]);
    expect_error(&out, &["--grammar", "GBNF 2:13"]);
    let out = kestrel("x", &["--grammar", r#"root ::= ("yes" | "no""#]);
    expect_error(&out, &["--grammar", "GBNF 1:23"]);
    // A file that does not exist, for either flag.
    for flag in ["--grammar-file", "--json-schema-file"] {
        let out = kestrel("x", &[flag, "/no/such/file"]);
        expect_error(&out, &[flag, "/no/such/file"]);
    }
    // Not JSON, and a schema the compiler refuses.
    let out = kestrel("x", &["-j", "{\"type\":"]);
    expect_error(&out, &["--json-schema: not JSON"]);
    let out = kestrel("x", &["-j", r#"{"type":"no-such-type"}"#]);
    expect_error(&out, &["--json-schema", "JSON schema"]);
    // At most one of the four flags.
    let out = kestrel("x", &["--grammar", "root ::= \"a\"", "-j", SCHEMA]);
    expect_error(&out, &["cannot be used with"]);
}
