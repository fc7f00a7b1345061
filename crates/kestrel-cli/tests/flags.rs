//! llama.cpp's readings of the flags Kestrel shares with it, on the real
//! binary and SmolLM2: `-t` 0 or less is every core, `-s -1` a random seed,
//! `--top-k` 0 or less no top-k, `-c 0` the model's training context; and
//! the limits that keep a typo from hanging the process.

use std::path::PathBuf;
use std::process::{Command, Output};

fn model() -> PathBuf {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../models")
        .join("SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(
        p.exists(),
        "{} is missing: run scripts/fetch-models.sh",
        p.display()
    );
    p
}

fn kestrel(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kestrel"))
        .args(args)
        .output()
        .expect("kestrel runs")
}

/// `kestrel run` on SmolLM2 with a short raw prompt, then `extra`.
fn run(extra: &[&str]) -> Output {
    let m = model();
    let mut args = vec!["run", "--raw", "-p", "The sea is", "-n", "6", "-m"];
    args.push(m.to_str().unwrap());
    args.extend_from_slice(extra);
    kestrel(&args)
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn ok(o: &Output) -> String {
    assert!(o.status.success(), "failed: {}", stderr(o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn error(o: &Output, needles: &[&str]) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(1), "exit code; stderr: {err}");
    assert!(!err.contains("panicked"), "{err}");
    for n in needles {
        assert!(err.contains(n), "expected {n:?} in: {err}");
    }
}

/// The seed a run drew, from its `seed: N` line.
fn drawn_seed(o: &Output) -> u64 {
    let err = stderr(o);
    err.lines()
        .find_map(|l| l.strip_prefix("seed: "))
        .unwrap_or_else(|| panic!("no drawn seed reported: {err}"))
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn threads_zero_or_less_means_every_core_and_a_typo_is_an_error() {
    let greedy = ok(&run(&["--temp", "0", "-t", "1"]));
    assert!(!greedy.is_empty());
    // (Greedy decode gives the same text on any number of threads.)
    assert_eq!(ok(&run(&["--temp", "0", "-t", "0"])), greedy);
    assert_eq!(ok(&run(&["--temp", "0", "-t", "-1"])), greedy);
    // A pool of 100000 threads took minutes to start: every command that
    // loads a model names the limit instead.
    let m = model();
    let m = m.to_str().unwrap();
    for cmd in [
        vec!["run", "-m", m, "-p", "x", "-t", "100000"],
        vec!["serve", "-m", m, "-t", "100000"],
        vec!["profile", "-m", m, "-t", "100000"],
        vec!["perplexity", "-m", m, "-f", m, "-t", "100000"],
        vec!["bench", "-m", m, "-t", "100000"],
    ] {
        error(&kestrel(&cmd), &["--threads", "1024", "100000"]);
    }
}

#[test]
fn seed_minus_one_draws_a_seed_and_others_are_checked() {
    // -1 draws one (reported), as no --seed does; two draws differ.
    let a = drawn_seed(&run(&["-s", "-1"]));
    let b = drawn_seed(&run(&["--seed", "-1"]));
    assert_ne!(a, b);
    // The drawn seed, given back, repeats the text.
    let first = run(&["-s", "-1", "--temp", "1.5"]);
    let text = ok(&first);
    let again = run(&["-s", &drawn_seed(&first).to_string(), "--temp", "1.5"]);
    assert_eq!(ok(&again), text);
    // A given seed is not reported as drawn.
    assert!(!stderr(&again).contains("seed: "));
    ok(&run(&["-s", "18446744073709551615"]));
    error(&run(&["-s", "-2"]), &["-2", "seed", "-1"]);
    error(&run(&["-s", "many"]), &["many", "seed"]);
}

#[test]
fn top_k_below_zero_is_off_as_zero() {
    let at = |k: &str| {
        ok(&run(&[
            "--temp", "1.5", "-s", "11", "--top-k", k, "--top-p", "1",
        ]))
    };
    let off = at("0");
    assert_eq!(at("-1"), off);
    assert_eq!(at("-40"), off);
    // (The filter does something at this temperature and seed: with it on,
    // another text.)
    assert_ne!(at("2"), off);
}

#[test]
fn ctx_size_zero_is_the_training_context() {
    // SmolLM2 was trained on 8192 tokens; the default is 4096. A prompt
    // longer than both is refused before any work, naming the context.
    let m = model();
    let long = "hello ".repeat(9000);
    let prompt = |extra: &[&str]| {
        let mut args = vec!["run", "--raw", "-n", "1", "-p", &long, "-m"];
        args.push(m.to_str().unwrap());
        args.extend_from_slice(extra);
        kestrel(&args)
    };
    error(&prompt(&[]), &["does not fit the context of 4096"]);
    error(&prompt(&["-c", "0"]), &["does not fit the context of 8192"]);
    error(
        &prompt(&["-c", "6000"]),
        &["does not fit the context of 6000"],
    );
    error(&prompt(&["-c", "2000000"]), &["--ctx-size", "2000000"]);
}
