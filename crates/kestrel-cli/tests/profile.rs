//! `kestrel profile` end to end on SmolLM2: both tables are there, every
//! weight type of the model has a matmul row with a GB/s figure, the
//! percentages of a table add up to 100, and bad flags are errors.

use std::path::PathBuf;
use std::process::{Command, Output};

fn profile(flags: &[&str]) -> Output {
    let model = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../models/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(model.exists(), "run scripts/fetch-models.sh");
    Command::new(env!("CARGO_BIN_EXE_kestrel"))
        .arg("profile")
        .arg("-m")
        .arg(model)
        .args(flags)
        .output()
        .expect("kestrel runs")
}

/// The rows of the table that follows the line starting with `title`:
/// (class, ms, %, GB/s).
fn table(text: &str, title: &str) -> Vec<(String, f64, f64, String)> {
    let start = text
        .lines()
        .position(|l| l.starts_with(title))
        .unwrap_or_else(|| panic!("no '{title}' in:\n{text}"));
    text.lines()
        .skip(start + 3)
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            let c: Vec<&str> = l.trim_matches('|').split('|').map(str::trim).collect();
            (
                c[0].to_string(),
                c[1].parse().expect("ms"),
                c[2].parse().expect("%"),
                c[4].to_string(),
            )
        })
        .collect()
}

#[test]
fn profile_reports_both_tables() {
    let out = profile(&["-p", "8", "-n", "2", "-t", "2"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    for title in ["prefill", "decode"] {
        let rows = table(&text, title);
        for ty in ["q4_1", "q8_0"] {
            let row = rows
                .iter()
                .find(|r| r.0 == format!("matmul {ty}"))
                .unwrap_or_else(|| panic!("{title}: no matmul {ty} row"));
            assert!(row.1 > 0.0, "{title} {ty}: {} ms", row.1);
            assert!(row.3.parse::<f64>().expect("GB/s") > 0.0, "{title} {ty}");
        }
        for class in [
            "attention",
            "norm",
            "rope",
            "activation",
            "quantize activations",
        ] {
            assert!(rows.iter().any(|r| r.0 == class), "{title}: no {class} row");
        }
        let pct: f64 = rows.iter().map(|r| r.2).sum();
        assert!(
            (pct - 100.0).abs() < 1.0,
            "{title}: percentages add to {pct}"
        );
    }
    assert!(table(&text, "decode").iter().any(|r| r.0 == "sampling"));
}

/// `-j`: the constrained decode's line puts the constraint's host time per
/// token beside the step's, both positive, after the unconstrained run's.
#[test]
fn constrained_decode_line() {
    let out = profile(&["-p", "8", "-n", "8", "-t", "2", "-j"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("unconstrained 8 tokens, json schema 8 tokens"),
        "{text}"
    );
    assert!(text.contains("\nunconstrained: step "), "{text}");
    let line = text
        .lines()
        .find(|l| l.starts_with("json schema: "))
        .unwrap_or_else(|| panic!("no json schema line in:\n{text}"));
    let (_, tail) = line
        .split_once("constraint (host, overlapped): ")
        .unwrap_or_else(|| panic!("{line}"));
    let (constraint, step) = tail
        .strip_suffix(" ms/token step")
        .and_then(|t| t.split_once(" ms/token of "))
        .unwrap_or_else(|| panic!("{line}"));
    let (constraint, step): (f64, f64) = (constraint.parse().unwrap(), step.parse().unwrap());
    assert!(constraint > 0.0 && step > constraint, "{line}");
    assert!(line.contains(", forward pass "), "{line}");
}

#[test]
fn bad_flags_are_errors() {
    for flags in [
        &["-p", "0"][..],
        &["-n", "0"],
        &["-t", "5000"],
        &["-p", "999999"],
        &["--bogus"],
        &["-j", "{nope"],
        &["--json-schema-file", "/no/such/schema.json"],
    ] {
        let out = profile(flags);
        assert_eq!(out.status.code(), Some(1), "{flags:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("error"),
            "{flags:?}"
        );
    }
}
