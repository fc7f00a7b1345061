//! `kestrel bench`: prompt-processing and generation speed measured the way
//! llama-bench measures it, so the two tools' numbers can be set side by side.
//!
//! For each test a warm-up run (not counted), then `-r` repetitions, each
//! from an empty KV cache, through the engine's backend calls on either
//! device: `ppN` times one step over N tokens (random ids, led by BOS when
//! the vocabulary adds one, as llama-bench draws them) that ends with the
//! first token chosen; `tgN` times N one-token decode steps from the first
//! token, each step's token chosen greedily on the device and fed to the
//! next step there, read back one step behind (as `run` decodes; no
//! end-of-generation check). Only the steps are inside the clock.
//!
//! With `-j`, each `tgN` gets two more tests through the decode loop `run`
//! and `serve` use (`kestrel_engine::Batch` on the same backend): `tgN+loop`
//! generates N tokens greedily from the first token with end tokens
//! ignored, and `tgN+json` the same under a JSON schema, compiled afresh
//! (outside the clock) for each run so that no run inherits the lexer
//! states an earlier one built. Their repetitions alternate, so that the
//! ratio of the two meets the same minutes of a shared machine. A run is
//! timed from the prompt's submission to the last token.
//!
//! After the model tests it records the peak RSS and then probes the memory
//! read bandwidth (CPU only), so the probe's buffer does not inflate the
//! RSS figure.

mod membw;
mod report;
mod stats;

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Result};
use clap::{Args, ValueEnum};
use kestrel_engine::backend::{Feed, SeqId, Want};
use kestrel_engine::{Backend, BackendOptions, Device, Engine, GenerateParams};
use kestrel_gguf::GgufFile;
use kestrel_sampling::XorShift;

use crate::MAX_THREADS;

use crate::structured::SchemaChoice;
use report::{
    decode_weight_bytes, model_desc, test_name, ModelInfo, Paired, PairedRound, Report, TestPath,
    TestResult,
};

/// Largest bandwidth buffer accepted, in MiB.
const MAX_BW_MIB: u64 = 64 * 1024;
/// Runs of the bandwidth probe; the fastest is reported.
const BW_RUNS: usize = 5;
/// Probe runs on each side of a `--bw-paired` run (the best of them).
const PAIRED_PROBE_RUNS: usize = 2;
/// The most `--bw-paired` rounds.
const MAX_PAIRED: usize = 1000;
/// Seed of the token draw ("kestrel" in ASCII), fixed so repeated benchmarks
/// feed the same ids.
const TOKEN_SEED: u64 = 0x006b_6573_7472_656c;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Md,
    Csv,
    Json,
}

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Path to a GGUF model.
    #[arg(short = 'm', long = "model")]
    model: PathBuf,
    /// Prompt lengths to test, comma-separated (0 skips the prompt test).
    #[arg(
        short = 'p',
        long = "n-prompt",
        value_delimiter = ',',
        default_value = "512"
    )]
    n_prompt: Vec<usize>,
    /// Generation lengths to test, comma-separated (0 skips the generation test).
    #[arg(
        short = 'n',
        long = "n-gen",
        value_delimiter = ',',
        default_value = "128"
    )]
    n_gen: Vec<usize>,
    /// Timed repetitions of each test.
    #[arg(short = 'r', long = "repetitions", default_value_t = 5)]
    repetitions: usize,
    /// Worker threads (default: available cores).
    #[arg(short = 't', long = "threads")]
    threads: Option<usize>,
    #[command(flatten)]
    weights: crate::WeightArgs,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Md)]
    output: OutputFormat,
    /// Skip the warm-up run before each test.
    #[arg(long = "no-warmup")]
    no_warmup: bool,
    /// Print each run's progress on stderr.
    #[arg(long = "progress")]
    progress: bool,
    /// MiB the memory bandwidth probe reads (0 skips the probe).
    #[arg(long = "bw-mib", default_value_t = 1024)]
    bw_mib: u64,
    /// Rounds of a paired check for each generation test on the CPU, after
    /// the report's tests: a bandwidth probe, one more timed run, another
    /// probe; each run's decode traffic is then taken against the probes
    /// of the same seconds (0: none).
    #[arg(long = "bw-paired", default_value_t = 0)]
    bw_paired: usize,
    #[command(flatten)]
    schema: crate::structured::SchemaArgs,
    #[command(flatten)]
    devices: crate::device::DeviceArgs,
}

/// What runs the tests: a backend with one sequence.
struct Runner {
    backend: Box<dyn Backend>,
    seq: SeqId,
}

impl Runner {
    /// One step over `tokens` from an empty cache that ends with the next
    /// token chosen; its nanoseconds.
    fn prompt(&mut self, tokens: &[u32]) -> Result<u64> {
        let seq = self.seq;
        self.backend.start(seq, tokens, 0, &plain_greedy())?;
        let t0 = Instant::now();
        self.backend.submit(&[Feed {
            seq,
            from: 0,
            to: tokens.len(),
            want: Want::NEXT,
        }])?;
        std::hint::black_box(self.backend.read()?);
        Ok(nanos(t0))
    }

    /// `tokens.len()` pipelined decode steps from the first token: each
    /// step's greedy pick is the next step's input; step N+1 is submitted
    /// before step N's token is read. Its nanoseconds.
    fn generation(&mut self, tokens: &[u32]) -> Result<u64> {
        let seq = self.seq;
        self.backend.start(seq, &tokens[..1], 0, &plain_greedy())?;
        let t0 = Instant::now();
        for pos in 0..tokens.len() {
            self.backend.submit(&[Feed {
                seq,
                from: pos,
                to: pos + 1,
                want: Want::NEXT,
            }])?;
            if pos > 0 {
                std::hint::black_box(self.backend.read()?);
            }
        }
        std::hint::black_box(self.backend.read()?);
        Ok(nanos(t0))
    }
}

fn nanos(t0: Instant) -> u64 {
    u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// One test to run: a prompt of `n_prompt` tokens or `n_gen` decode steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct TestSpec {
    n_prompt: usize,
    n_gen: usize,
}

/// Checks the flags that need no model and lists the tests in llama-bench's
/// order: every prompt test, then every generation test.
fn plan(a: &BenchArgs) -> Result<Vec<TestSpec>> {
    if a.repetitions == 0 {
        bail!("--repetitions must be at least 1");
    }
    if let Some(t) = a.threads {
        if t == 0 || t > MAX_THREADS {
            bail!("--threads must be in 1..={MAX_THREADS}, got {t}");
        }
    }
    if a.bw_mib > MAX_BW_MIB {
        bail!("--bw-mib must be at most {MAX_BW_MIB}, got {}", a.bw_mib);
    }
    if a.bw_paired > MAX_PAIRED {
        bail!(
            "--bw-paired must be at most {MAX_PAIRED}, got {}",
            a.bw_paired
        );
    }
    if a.bw_paired > 0 && a.bw_mib == 0 {
        bail!("--bw-paired needs the bandwidth probe: --bw-mib 0 turns it off");
    }
    let tests: Vec<TestSpec> = a
        .n_prompt
        .iter()
        .filter(|&&p| p > 0)
        .map(|&p| TestSpec {
            n_prompt: p,
            n_gen: 0,
        })
        .chain(a.n_gen.iter().filter(|&&n| n > 0).map(|&n| TestSpec {
            n_prompt: 0,
            n_gen: n,
        }))
        .collect();
    if tests.is_empty() {
        bail!("nothing to benchmark: both --n-prompt and --n-gen are 0");
    }
    Ok(tests)
}

pub fn bench(a: BenchArgs) -> Result<()> {
    let tests = plan(&a)?;
    let schema = a.schema.read()?;
    let threads = a.threads.unwrap_or_else(crate::default_threads);
    let engine = Engine::load_backed(&a.model, threads, a.weights.backing())?;
    // Caches and activations grow with the test length; the training context
    // bounds it so a typo cannot ask for terabytes.
    let max_len = engine.model.spec.hparams.n_ctx_train.max(1);
    for t in &tests {
        let len = t.n_prompt + t.n_gen;
        if len > max_len {
            bail!(
                "{}: {len} tokens exceed the model's training context of {max_len}",
                test_name(t.n_prompt, t.n_gen)
            );
        }
    }
    if engine.tokenizer.vocab_size() == 0 {
        bail!("the model's vocabulary is empty");
    }

    let device = a.devices.device();
    let on_gpu = device == Device::Gpu;
    let n_ctx = tests
        .iter()
        .map(|t| t.n_prompt + t.n_gen)
        .max()
        .unwrap_or(1)
        + 1;
    let mut backend = engine.backend(BackendOptions {
        device,
        n_ctx,
        swa_full: false,
    })?;
    let facts = backend.facts().clone();
    if on_gpu && a.progress {
        eprintln!("kestrel bench: device {}", facts.name);
    }
    let backend_name = if on_gpu { facts.api } else { "CPU".to_string() };
    let seq = backend.create_seq()?;
    let mut runner = Runner { backend, seq };
    let mut results = tests
        .iter()
        .map(|t| measure(&engine, &mut runner, *t, &a))
        .collect::<Result<Vec<TestResult>>>()?;
    if let Some(schema) = &schema {
        for t in tests.iter().filter(|t| t.n_prompt == 0) {
            let [free, json] = measure_loop(&engine, &mut *runner.backend, t.n_gen, schema, &a)?;
            results.extend([free, json]);
        }
    }

    let peak_rss = membw::peak_rss_bytes();
    let bandwidth = if a.bw_mib > 0 && !on_gpu {
        if a.progress {
            eprintln!("kestrel bench: memory bandwidth probe ({} MiB)", a.bw_mib);
        }
        Some(membw::read_bandwidth(
            a.bw_mib << 20,
            engine.model.threads(),
            BW_RUNS,
        )?)
    } else {
        None
    };
    let model = model_info(&a.model, &engine.file);
    let paired = if a.bw_paired > 0 && !on_gpu {
        let probe = membw::Probe::new(a.bw_mib << 20, engine.model.threads())?;
        tests
            .iter()
            .filter(|t| t.n_prompt == 0 && t.n_gen > 0)
            .map(|t| measure_paired(&engine, &mut runner, *t, &a, &probe, model.decode_bytes))
            .collect::<Result<Vec<Paired>>>()?
    } else {
        Vec::new()
    };

    let report = Report {
        model,
        backend: backend_name,
        threads: engine.model.threads(),
        tests: results,
        bandwidth,
        peak_rss,
        paired,
    };
    let text = match a.output {
        OutputFormat::Md => report.markdown(),
        OutputFormat::Json => report.json(),
        OutputFormat::Csv => report.csv(),
    };
    print!("{text}");
    Ok(())
}

/// A test's `len` token ids: the seeded draw, after BOS where the model
/// adds one.
fn test_tokens(engine: &Engine, len: usize) -> Vec<u32> {
    let lead = engine
        .tokenizer
        .bos()
        .filter(|_| engine.tokenizer.add_bos());
    draw_tokens(len, engine.tokenizer.vocab_size(), lead)
}

/// Runs one test: the warm-up, then the timed repetitions.
fn measure(
    engine: &Engine,
    runner: &mut Runner,
    spec: TestSpec,
    a: &BenchArgs,
) -> Result<TestResult> {
    let len = spec.n_prompt + spec.n_gen;
    let tokens = test_tokens(engine, len);
    let name = test_name(spec.n_prompt, spec.n_gen);
    if !a.no_warmup {
        if a.progress {
            eprintln!("kestrel bench: {name}: warm-up");
        }
        // llama-bench warms generation with a single step: it touches
        // every weight once, which is what the warm-up is for.
        let warm = if spec.n_prompt > 0 {
            &tokens[..]
        } else {
            &tokens[..1]
        };
        runner.prompt(warm)?;
    }
    let mut samples_ns = Vec::with_capacity(a.repetitions);
    for rep in 0..a.repetitions {
        let ns = if spec.n_prompt > 0 {
            runner.prompt(&tokens)?
        } else {
            runner.generation(&tokens)?
        };
        if a.progress {
            eprintln!(
                "kestrel bench: {name}: run {}/{}: {:.2} t/s",
                rep + 1,
                a.repetitions,
                stats::tokens_per_second(len, ns)
            );
        }
        samples_ns.push(ns);
    }
    Ok(TestResult {
        n_prompt: spec.n_prompt,
        n_gen: spec.n_gen,
        samples_ns,
        path: TestPath::Steps,
    })
}

/// `tgN+loop` and `tgN+json`: `n_gen` tokens from the first test token
/// through the decode loop, without and with the schema, repetitions
/// alternating.
fn measure_loop(
    engine: &Engine,
    backend: &mut dyn Backend,
    n_gen: usize,
    schema: &SchemaChoice,
    a: &BenchArgs,
) -> Result<[TestResult; 2]> {
    let prompt = test_tokens(engine, 1);
    let structured = schema.for_tokens(n_gen);
    let free = GenerateParams {
        n_predict: n_gen as i64,
        sampler: plain_greedy(),
        ignore_eos: true,
        ..GenerateParams::default()
    };
    let mut lp = crate::lent::Loop::new(engine, backend)?;
    let mut run = |constrained: bool| -> Result<(u64, f64)> {
        let params = GenerateParams {
            constraint: constrained
                .then(|| structured.compile(engine))
                .transpose()?,
            ..free.clone()
        };
        let g = lp.generate(prompt.clone(), &params)?;
        let s = &g.stats;
        if s.generated_tokens != n_gen {
            bail!(
                "{}: generation stopped after {} of {n_gen} tokens ({:?}): give a schema \
                 that cannot end before {n_gen} tokens",
                test_name(0, n_gen),
                s.generated_tokens,
                s.stop
            );
        }
        let ns = ((s.prompt_ms + s.generate_ms) * 1e6).round() as u64;
        Ok((ns, s.constraint_ms))
    };
    if !a.no_warmup {
        run(true)?;
    }
    let name = test_name(0, n_gen);
    let (mut free_ns, mut json_ns, mut constraint_ms) = (Vec::new(), Vec::new(), 0.0);
    for rep in 0..a.repetitions {
        let (ns, _) = run(false)?;
        free_ns.push(ns);
        let (ns, ms) = run(true)?;
        json_ns.push(ns);
        constraint_ms += ms;
        if a.progress {
            eprintln!(
                "kestrel bench: {name}+loop / {name}+json: run {}/{}: {:.2} / {:.2} t/s",
                rep + 1,
                a.repetitions,
                stats::tokens_per_second(n_gen, free_ns[rep]),
                stats::tokens_per_second(n_gen, ns)
            );
        }
    }
    let result = |samples_ns, path| TestResult {
        n_prompt: 0,
        n_gen,
        samples_ns,
        path,
    };
    let per_token = constraint_ms / (a.repetitions * n_gen) as f64;
    Ok([
        result(free_ns, TestPath::Loop),
        result(
            json_ns,
            TestPath::Json {
                constraint_ms_per_token: per_token,
            },
        ),
    ])
}

/// `--bw-paired`'s rounds for one generation test (see [`Paired`]); the
/// model is warm from the test itself.
fn measure_paired(
    engine: &Engine,
    runner: &mut Runner,
    spec: TestSpec,
    a: &BenchArgs,
    probe: &membw::Probe,
    decode_bytes: u64,
) -> Result<Paired> {
    let tokens = test_tokens(engine, spec.n_gen);
    let mut rounds = Vec::with_capacity(a.bw_paired);
    for k in 0..a.bw_paired {
        let probe_before = probe.best_of(PAIRED_PROBE_RUNS)?.gb_per_s;
        let ns = runner.generation(&tokens)?;
        let probe_after = probe.best_of(PAIRED_PROBE_RUNS)?.gb_per_s;
        let round = PairedRound {
            decode_gbs: decode_bytes as f64 * stats::tokens_per_second(spec.n_gen, ns) / 1e9,
            probe_before,
            probe_after,
        };
        if a.progress {
            eprintln!(
                "kestrel bench: {}: paired round {}/{}: probe {probe_before:.2} GB/s, \
                 decode {:.2} GB/s, probe {probe_after:.2} GB/s: {:.1}%",
                test_name(0, spec.n_gen),
                k + 1,
                a.bw_paired,
                round.decode_gbs,
                round.percent()
            );
        }
        rounds.push(round);
    }
    Ok(Paired {
        n_gen: spec.n_gen,
        rounds,
    })
}

/// The model columns, counted over the file's tensors as llama.cpp counts them.
fn model_info(path: &Path, file: &GgufFile) -> ModelInfo {
    let tensors = file.tensors();
    let n_params = tensors.iter().map(|t| t.n_elements()).sum();
    ModelInfo {
        filename: path.display().to_string(),
        desc: model_desc(
            file.architecture().unwrap_or("unknown"),
            file.get_str("general.size_label"),
            n_params,
            file.get_u32("general.file_type"),
        ),
        size_bytes: tensors.iter().map(|t| t.n_bytes).sum(),
        n_params,
        decode_bytes: decode_weight_bytes(tensors.iter().map(|t| (t.name.as_str(), t.n_bytes))),
    }
}

/// `len` token ids below `n_vocab`, the first being `lead` when given.
pub(crate) fn draw_tokens(len: usize, n_vocab: usize, lead: Option<u32>) -> Vec<u32> {
    let mut rng = XorShift::new(TOKEN_SEED);
    let mut out: Vec<u32> = (0..len)
        .map(|_| (rng.next_u32() as u64 % n_vocab as u64) as u32)
        .collect();
    if let (Some(first), Some(id)) = (out.first_mut(), lead) {
        if (id as usize) < n_vocab {
            *first = id;
        }
    }
    out
}

/// Greedy selection with nothing applied before the maximum.
fn plain_greedy() -> kestrel_sampling::SamplerParams {
    kestrel_sampling::SamplerParams {
        temperature: 0.0,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        a: BenchArgs,
    }

    fn args(flags: &[&str]) -> BenchArgs {
        let argv = ["bench", "-m", "x.gguf"].iter().chain(flags);
        Cli::try_parse_from(argv).unwrap().a
    }

    #[test]
    fn defaults_are_llama_benchs() {
        let a = args(&[]);
        assert_eq!(
            (a.n_prompt.clone(), a.n_gen.clone(), a.repetitions),
            (vec![512], vec![128], 5)
        );
        assert_eq!(a.output, OutputFormat::Md);
        assert_eq!(
            plan(&a).unwrap(),
            [
                TestSpec {
                    n_prompt: 512,
                    n_gen: 0
                },
                TestSpec {
                    n_prompt: 0,
                    n_gen: 128
                }
            ]
        );
    }

    #[test]
    fn lists_and_skips() {
        let a = args(&["-p", "128,512", "-n", "0"]);
        assert_eq!(
            plan(&a).unwrap(),
            [
                TestSpec {
                    n_prompt: 128,
                    n_gen: 0
                },
                TestSpec {
                    n_prompt: 512,
                    n_gen: 0
                }
            ]
        );
        let a = args(&["-p", "0", "-n", "16", "-n", "32"]);
        assert_eq!(
            plan(&a).unwrap(),
            [
                TestSpec {
                    n_prompt: 0,
                    n_gen: 16
                },
                TestSpec {
                    n_prompt: 0,
                    n_gen: 32
                }
            ]
        );
    }

    #[test]
    fn bad_plans() {
        let err = |f: &[&str]| plan(&args(f)).unwrap_err().to_string();
        assert!(err(&["-p", "0", "-n", "0"]).contains("nothing to benchmark"));
        assert!(err(&["-r", "0"]).contains("--repetitions"));
        assert!(err(&["-t", "0"]).contains("--threads"));
        assert!(err(&["-t", "5000"]).contains("--threads"));
        assert!(err(&["--bw-mib", "99999999"]).contains("--bw-mib"));
        let cli = |f: &[&str]| Cli::try_parse_from(["bench", "-m", "x"].iter().chain(f)).is_err();
        assert!(cli(&["-p", "abc"]));
        assert!(cli(&["-n", "-1"]));
        assert!(cli(&["-o", "xml"]));
    }

    #[test]
    fn tokens_are_in_range_and_led_by_bos() {
        let t = draw_tokens(1000, 50, Some(7));
        assert_eq!(t.len(), 1000);
        assert_eq!(t[0], 7);
        assert!(t.iter().all(|&id| id < 50));
        // Random, not constant: many distinct ids.
        let mut d = t.clone();
        d.sort_unstable();
        d.dedup();
        assert!(d.len() > 40, "{}", d.len());
        assert_eq!(draw_tokens(3, 50, Some(70))[0], draw_tokens(3, 50, None)[0]);
        assert!(draw_tokens(0, 50, Some(7)).is_empty());
    }
}
