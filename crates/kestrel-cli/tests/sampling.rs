//! `kestrel run` sampling flags on SmolLM2-135M: seeds reproduce across runs
//! and thread counts and differ from each other, top-k 1 is greedy, stop
//! strings, logit bias, --n-probs and --no-pipeline behave, and bad values
//! are errors that name the flag.

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

const PROMPT: &str = "Once upon a time";

fn kestrel(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kestrel"))
        .args(["run", "-m"])
        .arg(model())
        .args(["--raw", "-p", PROMPT, "-c", "256"])
        .args(args)
        .output()
        .expect("kestrel runs")
}

/// stdout of a successful run.
fn text(args: &[&str]) -> String {
    let out = kestrel(args);
    assert!(
        out.status.success(),
        "kestrel {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

const SAMPLED: &[&str] = &[
    "-n",
    "32",
    "--temp",
    "1.0",
    "--repeat-penalty",
    "1.2",
    "--frequency-penalty",
    "0.1",
    "--presence-penalty",
    "0.1",
];

fn with<'a>(base: &[&'a str], more: &[&'a str]) -> Vec<&'a str> {
    base.iter().chain(more).copied().collect()
}

#[test]
fn same_seed_same_output_across_runs_and_threads() {
    let a = text(&with(SAMPLED, &["--seed", "42", "-t", "1"]));
    let b = text(&with(SAMPLED, &["--seed", "42", "-t", "2"]));
    let c = text(&with(SAMPLED, &["--seed", "42", "-t", "2"]));
    let d = text(&with(
        SAMPLED,
        &["--seed", "42", "-t", "2", "--no-pipeline"],
    ));
    assert!(!a.is_empty());
    assert_eq!(a, b, "-t 1 vs -t 2");
    assert_eq!(b, c, "two runs");
    assert_eq!(b, d, "pipelined vs --no-pipeline");
}

#[test]
fn different_seeds_differ() {
    let outs: Vec<String> = ["1", "2", "3"]
        .iter()
        .map(|s| text(&with(SAMPLED, &["--seed", s, "-t", "2"])))
        .collect();
    assert_ne!(outs[0], outs[1]);
    assert_ne!(outs[1], outs[2]);
    assert_ne!(outs[0], outs[2]);
}

#[test]
fn top_k_one_is_greedy() {
    let greedy = text(&["-n", "32", "--temp", "0", "-t", "2"]);
    let top1 = text(&[
        "-n", "32", "--temp", "1.5", "--top-k", "1", "--seed", "9", "-t", "2",
    ]);
    assert_eq!(top1, greedy);
}

#[test]
fn reverse_prompt_stops_before_the_stop_string() {
    let greedy = text(&["-n", "32", "--temp", "0", "-t", "2"]);
    // A stop string made of the middle of the output's third word and what follows.
    let at = greedy
        .match_indices(' ')
        .nth(2)
        .map(|(i, _)| i)
        .expect("a few words");
    let stop: String = greedy[at..].chars().take(4).collect();
    let want = &greedy[..greedy.find(&stop).unwrap()];
    let out = kestrel(&[
        "-n", "32", "--temp", "0", "-t", "2", "-r", &stop, "-r", "\u{7}x",
    ]);
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), want, "stop {stop:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("StopString"));
}

#[test]
fn logit_bias_bans_a_token() {
    let first = |args: &[&str]| {
        let out = kestrel(&with(
            &["-n", "1", "--temp", "0", "-t", "2", "--n-probs", "2"],
            args,
        ));
        assert!(out.status.success());
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        // "[1] "piece" (ID) p=…" (the piece may hold parentheses itself)
        let id = err
            .lines()
            .find_map(|l| l.strip_prefix("[1] "))
            .and_then(|l| l.split_once(") p=").map(|(head, _)| head))
            .and_then(|head| head.rsplit_once('(').map(|(_, id)| id))
            .map(str::to_string)
            .unwrap_or_else(|| panic!("no --n-probs line in {err}"));
        (String::from_utf8_lossy(&out.stdout).into_owned(), id)
    };
    let (text0, id0) = first(&[]);
    let ban = format!("{id0}-inf");
    let (text1, id1) = first(&["--logit-bias", &ban]);
    assert_ne!(id0, id1);
    assert_ne!(text0, text1);
    // A large positive bias forces a token.
    let (_, forced) = first(&["--logit-bias", "1000+100"]);
    assert_eq!(forced, "1000");
}

#[test]
fn n_probs_goes_to_stderr_only() {
    let plain = text(&["-n", "8", "--temp", "0", "-t", "2"]);
    let out = kestrel(&["-n", "8", "--temp", "0", "-t", "2", "--n-probs", "3"]);
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), plain);
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with('[')).collect();
    assert_eq!(lines.len(), 8, "{err}");
    assert!(
        lines[0].starts_with("[1] ") && lines[0].contains(" p="),
        "{err}"
    );
    assert_eq!(
        lines[0].matches(", ").count(),
        2,
        "three alternatives: {err}"
    );
}

fn expect_error(out: &Output, needle: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "exit code; stderr: {err}");
    assert!(!err.contains("panicked"), "panic: {err}");
    assert!(err.starts_with("error:"), "stderr: {err}");
    assert!(err.contains(needle), "expected {needle:?} in: {err}");
}

#[test]
fn bad_values_name_the_flag() {
    for (args, needle) in [
        (&["--repeat-penalty", "0"][..], "--repeat-penalty"),
        (&["--repeat-penalty", "nan"], "--repeat-penalty"),
        (&["--repeat-penalty", "abc"], "--repeat-penalty"),
        (&["--repeat-last-n", "-2"], "--repeat-last-n"),
        (&["--frequency-penalty", "inf"], "--frequency-penalty"),
        (&["--presence-penalty", "nan"], "--presence-penalty"),
        (&["--logit-bias", "abc"], "--logit-bias"),
        (&["--logit-bias", "15043"], "--logit-bias"),
        (&["--logit-bias", "15043*2"], "--logit-bias"),
        (&["--logit-bias", "15043+x"], "--logit-bias"),
        (&["--logit-bias", "15043+nan"], "--logit-bias"),
        (&["--logit-bias", "99999999999+1"], "--logit-bias"),
        (&["--n-probs", "-1"], "--n-probs"),
        (&["--seed", "x"], "--seed"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_kestrel"))
            .args(["run", "-m", "no-such-model.gguf", "-p", "hi"])
            .args(args)
            .output()
            .unwrap();
        expect_error(&out, needle);
    }
    // The vocabulary check needs the model: SmolLM2 has 49152 tokens.
    let out = kestrel(&["-n", "1", "--logit-bias", "49152+1"]);
    expect_error(&out, "--logit-bias 49152+1");
    expect_error(&out, "49152 tokens");
}
