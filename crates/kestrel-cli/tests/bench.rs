//! `kestrel bench` end to end on SmolLM2: the shape of its json, csv and
//! markdown reports, and the errors bad flags get. No timing thresholds; only
//! that the figures exist, are positive and agree with each other.

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

const SMOLLM2: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
/// llama-bench's `model_size` and `model_n_params` for SmolLM2.
const SMOLLM2_BYTES: u64 = 96_576_768;
const SMOLLM2_PARAMS: u64 = 134_515_008;

fn model() -> PathBuf {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../models")
        .join(SMOLLM2);
    assert!(
        p.exists(),
        "{} is missing: run scripts/fetch-models.sh",
        p.display()
    );
    p
}

fn bench(flags: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kestrel"))
        .arg("bench")
        .arg("-m")
        .arg(model())
        .args(flags)
        .output()
        .expect("kestrel runs")
}

/// `bench` with its flags written as one line.
fn bench_line(flags: &str) -> Output {
    bench(&flags.split_whitespace().collect::<Vec<_>>())
}

fn stdout_ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "kestrel bench failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).expect("utf-8 output")
}

fn expect_error(out: &Output, needle: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "exit code; stderr: {err}");
    assert!(err.starts_with("error:"), "stderr: {err}");
    assert!(!err.contains("panicked"), "panic: {err}");
    assert!(
        err.to_lowercase().contains(&needle.to_lowercase()),
        "expected {needle:?} in: {err}"
    );
    assert!(out.stdout.is_empty(), "no report on error");
}

fn num(v: &Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} is not a number: {v}"))
}

#[test]
fn json_report() {
    let text = stdout_ok(&bench(&[
        "-p", "16", "-n", "4", "-r", "2", "-t", "2", "-o", "json", "--bw-mib", "64",
    ]));
    let v: Value = serde_json::from_str(&text).expect("json output");
    let tests = v.as_array().expect("an array of tests");
    assert_eq!(tests.len(), 2, "{text}");
    let (pp, tg) = (&tests[0], &tests[1]);
    assert_eq!(
        (pp["test"].as_str(), tg["test"].as_str()),
        (Some("pp16"), Some("tg4"))
    );
    assert_eq!(
        (pp["n_prompt"].as_u64(), pp["n_gen"].as_u64()),
        (Some(16), Some(0))
    );
    assert_eq!(
        (tg["n_prompt"].as_u64(), tg["n_gen"].as_u64()),
        (Some(0), Some(4))
    );
    for t in tests {
        assert_eq!(t["model_size"].as_u64(), Some(SMOLLM2_BYTES));
        assert_eq!(t["model_n_params"].as_u64(), Some(SMOLLM2_PARAMS));
        assert_eq!(t["model_type"], "llama 135M Q4_1");
        assert_eq!(t["backends"], "CPU");
        assert_eq!(t["n_threads"].as_u64(), Some(2));
        // SmolLM2 ties its output matrix to the embedding table, so a decode
        // step reads every tensor.
        assert_eq!(t["weight_bytes_per_token"].as_u64(), Some(SMOLLM2_BYTES));

        let ns: Vec<u64> = t["samples_ns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap())
            .collect();
        let ts: Vec<f64> = t["samples_ts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect();
        assert_eq!((ns.len(), ts.len()), (2, 2), "{t}");
        let n_tok = t["n_prompt"].as_u64().unwrap() + t["n_gen"].as_u64().unwrap();
        for (&n, &s) in ns.iter().zip(&ts) {
            assert!(n > 0 && s > 0.0, "{t}");
            let want = n_tok as f64 * 1e9 / n as f64;
            assert!((s - want).abs() <= 1e-9 * want, "{s} vs {want}");
        }
        let avg = num(t, "avg_ts");
        assert!((avg - (ts[0] + ts[1]) / 2.0).abs() <= 1e-9 * avg, "{t}");
        let sd = num(t, "stddev_ts");
        let want_sd = (ts[0] - ts[1]).abs() / 2f64.sqrt();
        assert!((sd - want_sd).abs() <= 1e-6 * avg, "{sd} vs {want_sd}");
        let want_ns = ((ns[0] + ns[1]) as f64 / 2.0).round() as u64;
        assert_eq!(t["avg_ns"].as_u64(), Some(want_ns), "{t}");

        let bw = num(t, "mem_bw_gbs");
        assert!(bw > 0.0 && bw.is_finite(), "{t}");
        assert_eq!(t["mem_bw_bytes"].as_u64(), Some(64 << 20));
        // The mapped weights were all touched, so they are part of the peak.
        assert!(t["peak_rss_bytes"].as_u64().unwrap() > SMOLLM2_BYTES, "{t}");
    }
    assert!(pp["decode_gbs"].is_null() && pp["decode_bw_pct"].is_null());
    let gbs = num(tg, "decode_gbs");
    let want = SMOLLM2_BYTES as f64 * num(tg, "avg_ts") / 1e9;
    assert!((gbs - want).abs() <= 1e-9 * want, "{gbs} vs {want}");
    let pct = num(tg, "decode_bw_pct");
    let want = 100.0 * gbs / num(tg, "mem_bw_gbs");
    assert!((pct - want).abs() <= 1e-9 * want, "{pct} vs {want}");
}

#[test]
fn markdown_and_csv_reports() {
    let md = stdout_ok(&bench(&[
        "-p", "8", "-n", "2", "-r", "1", "-t", "1", "--bw-mib", "16",
    ]));
    let lines: Vec<&str> = md.lines().collect();
    let cols: Vec<&str> = lines[0].split('|').map(str::trim).collect();
    assert_eq!(
        cols,
        ["", "model", "size", "params", "backend", "threads", "test", "t/s", ""],
        "{md}"
    );
    assert!(
        lines[1].starts_with("| ---") && lines[1].ends_with(": |"),
        "{md}"
    );
    for (line, test) in lines[2..4].iter().zip(["pp8", "tg2"]) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        assert_eq!(
            cells[1..7],
            ["llama 135M Q4_1", "92.10 MiB", "134.52 M", "CPU", "1", test],
            "{md}"
        );
        let (avg, sd) = cells[7].split_once(" ± ").expect("avg ± sd");
        assert!(avg.parse::<f64>().unwrap() > 0.0, "{md}");
        assert_eq!(sd, "0.00", "one repetition has no spread: {md}");
    }
    assert_eq!(lines[4], "", "{md}");
    assert!(lines[5].starts_with("memory read bandwidth: "), "{md}");
    assert!(
        lines[5].contains("16.00 MiB read by 1 threads, best of 5"),
        "{md}"
    );
    assert!(
        lines[6].starts_with("tg2: 92.10 MiB of weights per token x "),
        "{md}"
    );
    assert!(lines[6].contains("% of the measured bandwidth"), "{md}");
    assert!(
        lines[7].starts_with("peak RSS: ") && lines[7].ends_with(" MiB"),
        "{md}"
    );
    assert_eq!(lines.len(), 8, "{md}");

    // Only the generation test, no bandwidth probe.
    let csv = stdout_ok(&bench(&[
        "-p", "0", "-n", "2", "-r", "1", "-o", "csv", "--bw-mib", "0",
    ]));
    let rows: Vec<&str> = csv.lines().collect();
    assert_eq!(rows.len(), 2, "{csv}");
    let header: Vec<&str> = rows[0].split(',').collect();
    for f in [
        "n_prompt",
        "n_gen",
        "avg_ts",
        "stddev_ts",
        "mem_bw_gbs",
        "samples_ns",
        "samples_ts",
    ] {
        assert!(header.contains(&f), "{f} missing: {csv}");
    }
    let cell = |name: &str| {
        let i = header.iter().position(|h| *h == name).unwrap();
        rows[1].split(',').nth(i).unwrap().to_string()
    };
    assert_eq!(cell("test"), "\"tg2\"");
    assert_eq!((cell("n_prompt"), cell("n_gen")), ("0".into(), "2".into()));
    assert!(cell("avg_ts").parse::<f64>().unwrap() > 0.0);
    assert_eq!(cell("mem_bw_gbs"), "", "probe skipped: {csv}");
}

/// `--bw-paired`: one set of rounds for the generation test only, each
/// round's percentage positive, the median the middle one, and the
/// markdown line that reports them.
#[test]
fn paired_rounds() {
    let text = stdout_ok(&bench_line(
        "-p 4 -n 2 -r 1 -t 1 -o json --bw-mib 16 --bw-paired 3",
    ));
    let v: Value = serde_json::from_str(&text).expect("json output");
    let (pp, tg) = (&v[0], &v[1]);
    assert!(
        pp["decode_bw_paired_pct"].is_null() && pp["decode_bw_paired_pcts"].is_null(),
        "{text}"
    );
    let pcts: Vec<f64> = tg["decode_bw_paired_pcts"]
        .as_array()
        .expect("the rounds' percentages")
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    assert_eq!(pcts.len(), 3, "{text}");
    assert!(pcts.iter().all(|&p| p > 0.0 && p.is_finite()), "{text}");
    assert!(pcts.windows(2).all(|w| w[0] <= w[1]), "sorted: {text}");
    assert_eq!(num(tg, "decode_bw_paired_pct"), pcts[1], "{text}");

    let md = stdout_ok(&bench_line("-p 0 -n 2 -r 1 -t 1 --bw-mib 16 --bw-paired 2"));
    let line = md
        .lines()
        .find(|l| l.starts_with("tg2: 2 paired rounds (probe, run, probe): "))
        .unwrap_or_else(|| panic!("no paired line: {md}"));
    assert!(
        line.contains("% of the probes around each run (median; "),
        "{md}"
    );
}

/// `-j`: each generation test gains `+loop` and `+json` rows (the loop
/// unconstrained and under the built-in schema), the json row carries the
/// constraint's host time and its ratio to the loop row, and the markdown
/// says the ratio.
#[test]
fn constrained_rows() {
    let text = stdout_ok(&bench_line("-p 0 -n 8 -r 2 -t 2 -o json --bw-mib 0 -j"));
    let v: Value = serde_json::from_str(&text).expect("json output");
    let tests = v.as_array().expect("an array of tests");
    let names: Vec<&str> = tests.iter().map(|t| t["test"].as_str().unwrap()).collect();
    assert_eq!(names, ["tg8", "tg8+loop", "tg8+json"], "{text}");
    let (tg, free, json) = (&tests[0], &tests[1], &tests[2]);
    for t in tests {
        assert_eq!(
            (t["n_prompt"].as_u64(), t["n_gen"].as_u64()),
            (Some(0), Some(8))
        );
        assert!(num(t, "avg_ts") > 0.0, "{t}");
        assert_eq!(t["samples_ns"].as_array().unwrap().len(), 2, "{t}");
    }
    for t in [tg, free] {
        assert!(t["constraint_ms_per_token"].is_null(), "{t}");
        assert!(t["constrained_ratio"].is_null(), "{t}");
    }
    assert!(num(json, "constraint_ms_per_token") > 0.0, "{json}");
    let ratio = num(json, "constrained_ratio");
    let want = num(json, "avg_ts") / num(free, "avg_ts");
    assert!((ratio - want).abs() <= 1e-9 * want, "{ratio} vs {want}");
    // Two pairs: the median is the mean of their ratios.
    let ts = |t: &Value, i: usize| t["samples_ts"][i].as_f64().unwrap();
    let pairs = (ts(json, 0) / ts(free, 0) + ts(json, 1) / ts(free, 1)) / 2.0;
    let pair = num(json, "constrained_pair_ratio");
    assert!((pair - pairs).abs() <= 1e-9 * pairs, "{pair} vs {pairs}");

    let md = stdout_ok(&bench_line(
        "-p 0 -n 4 -r 1 -t 2 --bw-mib 0 --json-schema {\"type\":\"array\",\"minItems\":10}",
    ));
    assert!(md.contains("| tg4+loop |"), "{md}");
    assert!(md.contains("| tg4+json |"), "{md}");
    let line = md
        .lines()
        .find(|l| l.starts_with("tg4+json: "))
        .unwrap_or_else(|| panic!("no ratio line: {md}"));
    assert!(
        line.contains(" of tg4+loop's t/s (median of the run pairs: "),
        "{md}"
    );
    assert!(line.ends_with(" ms/token on the host, overlapped with the forward pass"));
}

#[test]
fn bad_flags() {
    expect_error(&bench(&["--bogus"]), "--bogus");
    expect_error(&bench(&["-r", "0"]), "repetitions");
    expect_error(&bench(&["-p", "abc"]), "abc");
    expect_error(&bench(&["-n", "-3"]), "-3");
    expect_error(&bench(&["-o", "xml"]), "xml");
    expect_error(&bench(&["-t", "0"]), "threads");
    expect_error(
        &bench(&["--bw-paired", "2", "--bw-mib", "0"]),
        "--bw-paired",
    );
    expect_error(&bench(&["--bw-paired", "1000000"]), "--bw-paired");
    expect_error(&bench(&["-p", "0", "-n", "0"]), "nothing to benchmark");
    expect_error(&bench(&["-j", "{nope"]), "--json-schema: not JSON");
    expect_error(
        &bench(&["--json-schema-file", "/no/such/schema.json"]),
        "/no/such/schema.json",
    );
    // A schema whose output ends before the test's tokens.
    expect_error(
        &bench_line("-p 0 -n 8 -r 1 -t 2 --bw-mib 0 -j {\"type\":\"boolean\"}"),
        "stopped after",
    );
    // SmolLM2 was trained on 8192 tokens.
    expect_error(&bench(&["-p", "100000", "-r", "1"]), "training context");
    let out = Command::new(env!("CARGO_BIN_EXE_kestrel"))
        .args(["bench", "-m", "/nonexistent/model.gguf", "-r", "1"])
        .output()
        .unwrap();
    expect_error(&out, "/nonexistent/model.gguf");
}
