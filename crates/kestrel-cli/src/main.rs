//! The `kestrel` command line: flags follow llama.cpp's names where they overlap.

mod bench;
mod gpu;
mod perplexity;
mod profile;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use kestrel_engine::{Engine, GenerateParams, TokenLogprobs};
use kestrel_sampling::SamplerParams;
use kestrel_tokenizer::chat::ChatMessage;

#[derive(Parser)]
#[command(
    name = "kestrel",
    version,
    about = "Local LLM inference for GGUF models"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Generate text from a prompt.
    Run(RunArgs),
    /// Print the token ids of a text.
    Tokenize(TokenizeArgs),
    /// Describe a GGUF file: architecture, hyperparameters, tokenizer, tensors.
    Inspect(InspectArgs),
    /// Measure prompt and generation speed as llama-bench does.
    Bench(bench::BenchArgs),
    /// Break one prefill batch and one decode step down by kernel class.
    Profile(profile::ProfileArgs),
    /// Measure perplexity over a text file as llama-perplexity does.
    Perplexity(perplexity::PerplexityArgs),
    /// Serve the model over HTTP (OpenAI- and llama-server-compatible).
    Serve(ServeArgs),
    /// List the GPU adapters the GPU backend can use, best first.
    Devices,
}

/// `kestrel serve`: llama-server's flag names and defaults where they overlap.
#[derive(Args)]
struct ServeArgs {
    /// Path to a GGUF model.
    #[arg(short = 'm', long = "model")]
    model: PathBuf,
    /// Address to listen on; a path ending in .sock listens on a Unix socket.
    #[arg(long = "host", default_value = "127.0.0.1")]
    host: String,
    #[arg(long = "port", default_value_t = 8080)]
    port: u16,
    /// Context size in tokens, shared by the slots; 0 = the model's training
    /// context, as llama-server's (default: each slot gets min(4096, the
    /// model's training context)).
    #[arg(short = 'c', long = "ctx-size")]
    ctx_size: Option<usize>,
    /// Slots (`-np`): requests decoded together in one batch, each with its
    /// share of the context; more requests wait in the queue.
    #[arg(long = "parallel", default_value_t = 4)]
    parallel: usize,
    /// Worker threads (default, or 0 or less, as llama.cpp: every core).
    #[arg(short = 't', long = "threads", allow_negative_numbers = true)]
    threads: Option<i64>,
    /// Require this key (`Authorization: Bearer KEY`) on every endpoint but
    /// /health and /v1/models.
    #[arg(long = "api-key")]
    api_key: Option<String>,
    /// Enable the Prometheus /metrics endpoint.
    #[arg(long = "metrics")]
    metrics: bool,
    /// Enable the /slots endpoint (the default).
    #[arg(long = "slots", conflicts_with = "no_slots")]
    slots: bool,
    /// Disable the /slots endpoint.
    #[arg(long = "no-slots")]
    no_slots: bool,
    /// The model name clients see (default: the file name).
    #[arg(short = 'a', long = "alias")]
    alias: Option<String>,
    /// The most tokens a request may generate (-1 = no limit).
    #[arg(short = 'n', long = "n-predict", default_value_t = -1, allow_negative_numbers = true)]
    n_predict: i64,
    /// Requests that may wait while every slot is busy; beyond that, 503.
    #[arg(long = "max-queue", default_value_t = 64)]
    max_queue: usize,
    /// Seconds a client may take to send a request's head or its body, as
    /// llama-server's `--timeout`; an idle kept-alive connection closes
    /// after it too.
    #[arg(long = "timeout", default_value_t = 600)]
    timeout: u64,
    /// Web pages whose scripts may call the server (CORS): `*` (any, the
    /// default, as llama-server's), `localhost`, or a comma-separated list
    /// of origins such as `http://localhost:3000`.
    #[arg(long = "cors-origins", default_value = "*")]
    cors_origins: String,
    /// Sliding-window layers (Gemma 3) attend over a full-size cache, as
    /// llama.cpp's `--swa-full`; by default as its default window cache, a
    /// ring whose visiting order differs in the last bits past its size.
    #[arg(long = "swa-full")]
    swa_full: bool,
    /// Where the batch runs: cpu, gpu (tokens chosen on the device), or
    /// auto (a hardware GPU if there is one).
    #[arg(long = "device", value_enum, default_value = "cpu")]
    device: gpu::Device,
    /// llama.cpp's `-ngl`: any value above 0 puts every layer on the GPU.
    #[arg(long = "n-gpu-layers", allow_negative_numbers = true)]
    n_gpu_layers: Option<i64>,
    #[command(flatten)]
    weights: WeightArgs,
}

#[derive(Args)]
struct RunArgs {
    /// Path to a GGUF model.
    #[arg(short = 'm', long = "model")]
    model: PathBuf,
    /// The prompt (a user message unless --raw).
    #[arg(short = 'p', long = "prompt", conflicts_with = "file")]
    prompt: Option<String>,
    /// Read the prompt from a file.
    #[arg(short = 'f', long = "file")]
    file: Option<PathBuf>,
    /// Tokens to generate (-1 = until the context is full or an end token).
    #[arg(short = 'n', long = "n-predict", default_value_t = -1, allow_negative_numbers = true)]
    n_predict: i64,
    /// Temperature; 0 or less selects greedily.
    #[arg(long = "temp", default_value_t = 0.8, allow_negative_numbers = true)]
    temp: f32,
    /// Keep the K most likely tokens (0 or less = off).
    #[arg(long = "top-k", default_value_t = 40, allow_negative_numbers = true)]
    top_k: i32,
    /// Keep the smallest set whose probability reaches P (1.0 = off).
    #[arg(long = "top-p", default_value_t = 0.95)]
    top_p: f32,
    /// Drop tokens below P times the most likely one's probability (0.0 = off).
    #[arg(long = "min-p", default_value_t = 0.05)]
    min_p: f32,
    /// RNG seed (default, or -1 as llama.cpp's: random, reported on stderr).
    #[arg(short = 's', long = "seed", allow_negative_numbers = true, value_parser = parse_seed)]
    seed: Option<Seed>,
    /// Worker threads (default, or 0 or less, as llama.cpp: every core).
    #[arg(short = 't', long = "threads", allow_negative_numbers = true)]
    threads: Option<i64>,
    /// Context size in tokens; 0 = the model's training context, as
    /// llama.cpp's (default: min(4096, the model's training context)).
    #[arg(short = 'c', long = "ctx-size")]
    ctx_size: Option<usize>,
    /// Use the prompt as is, without the chat template.
    #[arg(long = "raw")]
    raw: bool,
    /// Divide positive logits of recent tokens by this, multiply negative ones (1.0 = off).
    #[arg(long = "repeat-penalty", default_value_t = 1.0)]
    repeat_penalty: f32,
    /// How many recent tokens the penalties look at (0 = off, -1 = all).
    #[arg(
        long = "repeat-last-n",
        default_value_t = 64,
        allow_negative_numbers = true
    )]
    repeat_last_n: i32,
    /// Subtract this from a recent token's logit per occurrence (0.0 = off).
    #[arg(
        long = "frequency-penalty",
        default_value_t = 0.0,
        allow_negative_numbers = true
    )]
    frequency_penalty: f32,
    /// Subtract this from the logit of any recent token (0.0 = off).
    #[arg(
        long = "presence-penalty",
        default_value_t = 0.0,
        allow_negative_numbers = true
    )]
    presence_penalty: f32,
    /// Add BIAS to a token's logit, as TOKEN_ID+BIAS or TOKEN_ID-BIAS
    /// (e.g. 15043+1, 15043-inf to ban the token); repeatable.
    #[arg(short = 'l', long = "logit-bias", value_name = "TOKEN_ID(+/-)BIAS")]
    logit_bias: Vec<String>,
    /// Do not stop at end-of-generation tokens (they are never sampled).
    #[arg(long = "ignore-eos")]
    ignore_eos: bool,
    /// Stop when the output contains this text (not printed); repeatable.
    #[arg(short = 'r', long = "reverse-prompt", value_name = "TEXT")]
    reverse_prompt: Vec<String>,
    /// Print, per generated token, its probability and the N most likely
    /// tokens' probabilities to stderr (0 = off).
    #[arg(long = "n-probs", default_value_t = 0, allow_negative_numbers = true)]
    n_probs: usize,
    /// Run each decode step's forward pass on the calling thread after its
    /// host work instead of overlapping them (same output; for comparison).
    #[arg(long = "no-pipeline")]
    no_pipeline: bool,
    /// Sliding-window layers (Gemma 3) attend over a full-size cache, as
    /// llama.cpp's `--swa-full`; by default as its default window cache, a
    /// ring whose visiting order differs in the last bits past its size.
    #[arg(long = "swa-full")]
    swa_full: bool,
    /// Where to compute: cpu, gpu (wgpu: Vulkan, Metal, DX12; no --n-probs
    /// there yet), or auto (a hardware GPU if there is one).
    #[arg(long = "device", value_enum, default_value = "cpu")]
    device: gpu::Device,
    /// llama.cpp's `-ngl`: any value above 0 puts every layer on the GPU.
    #[arg(long = "n-gpu-layers", allow_negative_numbers = true)]
    n_gpu_layers: Option<i64>,
    #[command(flatten)]
    weights: WeightArgs,
}

/// Where the weights live; shared by the commands that load a model.
#[derive(Args, Clone, Copy, Debug)]
pub(crate) struct WeightArgs {
    /// Keep the weights memory-mapped from the file (llama.cpp's default):
    /// faster to start, slower to decode. Default: read them into huge-page
    /// memory where the kernel offers transparent huge pages.
    #[arg(long = "mmap", conflicts_with = "no_mmap")]
    mmap: bool,
    /// Read the weights into memory (the default where huge pages exist;
    /// accepted as llama.cpp users type it).
    #[arg(long = "no-mmap")]
    no_mmap: bool,
}

impl WeightArgs {
    pub(crate) fn backing(self) -> kestrel_gguf::Backing {
        if self.mmap {
            kestrel_gguf::Backing::Mmap
        } else if self.no_mmap {
            kestrel_gguf::Backing::HugePages
        } else {
            kestrel_gguf::Backing::preferred()
        }
    }
}

#[derive(Args)]
struct TokenizeArgs {
    #[arg(short = 'm', long = "model")]
    model: PathBuf,
    #[arg(short = 'p', long = "prompt")]
    prompt: String,
    /// Print each token's text next to its id.
    #[arg(long = "pieces")]
    pieces: bool,
    /// Do not add BOS/EOS even if the vocabulary asks for them.
    #[arg(long = "no-bos")]
    no_bos: bool,
    /// Treat special-token text like <|im_start|> as plain text.
    #[arg(long = "no-parse-special")]
    no_parse_special: bool,
}

#[derive(Args)]
struct InspectArgs {
    /// Path to a GGUF file.
    model: PathBuf,
}

/// glibc malloc tunables: blocks up to 32 MiB from the heap rather than
/// their own mappings, and freed memory kept rather than trimmed.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MALLOC_TUNABLES: &str =
    "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=4294967296";

/// A forward pass allocates and frees buffers of a prompt's size (matmul
/// outputs, quantized activations, attention tiles) many times over. With
/// glibc's defaults each came back as fresh pages to fault in and zero: a
/// fifth of a 512-token prefill (pp512: SmolLM2 1020 -> 1277 t/s, Gemma 3
/// 1036 -> 1268, same peak RSS within 5%). glibc reads its tunables only at
/// startup, so the process re-executes itself once with them set; a
/// `GLIBC_TUNABLES` already in the environment (even empty) is left alone.
fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        use std::os::unix::process::CommandExt;
        if std::env::var_os("GLIBC_TUNABLES").is_some() {
            return;
        }
        let Ok(exe) = std::env::current_exe() else {
            return;
        };
        let err = std::process::Command::new(exe)
            .args(std::env::args_os().skip(1))
            .env("GLIBC_TUNABLES", MALLOC_TUNABLES)
            .exec();
        // exec returns only when it failed: run on with the defaults.
        eprintln!("kestrel: running with glibc's malloc defaults (re-exec failed: {err})");
    }
}

fn main() -> ExitCode {
    keep_freed_memory();
    // clap has no multi-letter short flags; llama-server's `-np` is
    // `--parallel`. Only `serve` has it, so other commands' values (a prompt
    // that reads "-np") are left alone.
    let mut args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == "serve") {
        for a in &mut args[2..] {
            if a == "-np" {
                *a = "--parallel".into();
            } else if a == "-ngl" {
                *a = "--n-gpu-layers".into();
            }
        }
    }
    // Likewise llama.cpp's `-ngl` for `run` (unless it is a prompt's text),
    // `bench` (llama-bench's flag), `profile` and `perplexity`.
    if args.get(1).is_some_and(|a| {
        ["run", "bench", "profile", "perplexity"]
            .iter()
            .any(|c| a == *c)
    }) {
        for i in 2..args.len() {
            let after_prompt = ["-p", "--prompt"].iter().any(|p| args[i - 1] == *p);
            if args[i] == "-ngl" && !after_prompt {
                args[i] = "--n-gpu-layers".into();
            }
        }
    }
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            // Help and version are not errors; every usage error exits 1, as
            // the other errors do (clap's own code would be 2).
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    let result = match cli.command {
        Command::Run(a) => run(a),
        Command::Tokenize(a) => tokenize(a),
        Command::Inspect(a) => inspect(a),
        Command::Bench(a) => bench::bench(a),
        Command::Profile(a) => profile::profile(a),
        Command::Perplexity(a) => perplexity::perplexity(a),
        Command::Serve(a) => serve(a),
        Command::Devices => devices(),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}

pub(crate) fn default_threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// Largest thread count accepted: far above any machine this runs on, low
/// enough that a typo cannot exhaust the process's threads (a pool of
/// 100000 took minutes to start).
pub(crate) const MAX_THREADS: usize = 1024;

/// `-t` as llama.cpp's common flags read it: absent, 0 or negative for
/// every available core.
pub(crate) fn threads_arg(t: Option<i64>) -> Result<usize> {
    match t {
        None => Ok(default_threads()),
        Some(t) if t <= 0 => Ok(default_threads()),
        Some(t) if t as u64 <= MAX_THREADS as u64 => Ok(t as usize),
        Some(t) => {
            bail!("--threads must be at most {MAX_THREADS} (0 or less: every core), got {t}")
        }
    }
}

/// A `--seed` value: a seed, or none for -1 (llama.cpp's "random").
#[derive(Clone, Copy, Debug)]
struct Seed(Option<u64>);

fn parse_seed(s: &str) -> Result<Seed, String> {
    if s.trim() == "-1" {
        return Ok(Seed(None));
    }
    s.trim().parse::<u64>().map(|v| Seed(Some(v))).map_err(|_| {
        format!("{s:?} is not a seed: give 0..=18446744073709551615, or -1 for a random one")
    })
}

fn devices() -> Result<()> {
    let all = kestrel_gpu::adapters();
    if all.is_empty() {
        bail!("{}", kestrel_gpu::GpuError::NoAdapter);
    }
    for (i, a) in all.iter().enumerate() {
        println!("{i}: {a}");
    }
    Ok(())
}

fn serve(a: ServeArgs) -> Result<()> {
    let threads = threads_arg(a.threads)?;
    if a.parallel == 0 || a.parallel > 256 {
        bail!("--parallel must be in 1..=256, got {}", a.parallel);
    }
    if a.max_queue == 0 {
        bail!("--max-queue must be at least 1");
    }
    let cors = kestrel_server::CorsOrigins::parse(&a.cors_origins)
        .map_err(|e| anyhow::anyhow!("--cors-origins: {e}"))?;
    if !(1..=86_400).contains(&a.timeout) {
        bail!("--timeout must be in 1..=86400 seconds, got {}", a.timeout);
    }
    // (0: the model's training context, checked once it is read.)
    if let Some(c) = a.ctx_size.filter(|&c| c > 0) {
        if c > 1 << 20 {
            bail!("--ctx-size must be in 0..=1048576, got {c}");
        }
        if c / a.parallel < 2 {
            bail!(
                "--ctx-size {c} leaves {} tokens to each of the {} slots; give at least 2 per slot",
                c / a.parallel,
                a.parallel
            );
        }
    }
    if !a.model.is_file() {
        bail!("model file {} does not exist", a.model.display());
    }
    kestrel_server::serve(kestrel_server::ServeConfig {
        model: a.model,
        host: a.host,
        port: a.port,
        n_ctx: a.ctx_size,
        parallel: a.parallel,
        threads,
        api_key: a.api_key,
        metrics: a.metrics,
        slots: a.slots || !a.no_slots,
        alias: a.alias,
        n_predict: a.n_predict,
        queue: a.max_queue,
        backing: a.weights.backing(),
        gpu: gpu::choose(a.device, a.n_gpu_layers) == gpu::Device::Gpu,
        swa_full: a.swa_full,
        timeout: std::time::Duration::from_secs(a.timeout),
        cors,
    })
}

fn run(a: RunArgs) -> Result<()> {
    let prompt = match (&a.prompt, &a.file) {
        (Some(p), _) => p.clone(),
        (None, Some(f)) => std::fs::read_to_string(f)
            .with_context(|| format!("reading prompt file {}", f.display()))?,
        (None, None) => bail!("no prompt: pass -p TEXT or -f FILE"),
    };
    let threads = threads_arg(a.threads)?;
    if !(a.top_p.is_finite() && (0.0..=1.0).contains(&a.top_p)) {
        bail!("--top-p must be in [0, 1], got {}", a.top_p);
    }
    if !(a.min_p.is_finite() && (0.0..=1.0).contains(&a.min_p)) {
        bail!("--min-p must be in [0, 1], got {}", a.min_p);
    }
    if !a.temp.is_finite() {
        bail!("--temp must be a finite number");
    }
    if !(a.repeat_penalty.is_finite() && a.repeat_penalty > 0.0) {
        bail!(
            "--repeat-penalty must be a finite number greater than 0, got {}",
            a.repeat_penalty
        );
    }
    if a.repeat_last_n < -1 {
        bail!(
            "--repeat-last-n must be -1 (all tokens), 0 (off) or positive, got {}",
            a.repeat_last_n
        );
    }
    if !a.frequency_penalty.is_finite() {
        bail!("--frequency-penalty must be a finite number");
    }
    if !a.presence_penalty.is_finite() {
        bail!("--presence-penalty must be a finite number");
    }
    let logit_bias = a
        .logit_bias
        .iter()
        .map(|s| parse_logit_bias(s))
        .collect::<Result<Vec<_>>>()?;
    let engine = Engine::load_backed(&a.model, threads, a.weights.backing())?;
    let n_vocab = engine.tokenizer.vocab_size();
    if let Some(((id, _), text)) = logit_bias
        .iter()
        .zip(&a.logit_bias)
        .find(|((id, _), _)| *id as usize >= n_vocab)
    {
        bail!("--logit-bias {text}: token id {id} is outside the vocabulary of {n_vocab} tokens");
    }
    let hp = &engine.model.spec.hparams;
    let train = hp.n_ctx_train.max(1);
    let n_ctx = match a.ctx_size {
        None => 4096.min(train),
        Some(0) if train > 1 << 20 => {
            bail!("--ctx-size 0: the model's training context of {train} tokens is past 1048576")
        }
        Some(0) => train,
        Some(c) if c > 1 << 20 => bail!("--ctx-size must be in 0..=1048576, got {c}"),
        Some(c) => c,
    };
    let text = if a.raw {
        prompt
    } else {
        if engine.template.is_none() {
            eprintln!("warning: the model has no chat template; using ChatML");
        }
        engine.render_chat(&[ChatMessage {
            role: "user".into(),
            content: prompt,
        }])?
    };
    let tokens = engine.tokenize_prompt(&text);
    let seed = match a.seed.and_then(|s| s.0) {
        Some(s) => s,
        None => {
            let s = kestrel_sampling::random_seed();
            eprintln!("seed: {s}");
            s
        }
    };
    let params = GenerateParams {
        n_predict: a.n_predict,
        n_ctx,
        sampler: SamplerParams {
            temperature: a.temp,
            top_k: a.top_k,
            top_p: a.top_p,
            min_p: a.min_p,
            seed,
            repeat_penalty: a.repeat_penalty,
            repeat_last_n: a.repeat_last_n,
            frequency_penalty: a.frequency_penalty,
            presence_penalty: a.presence_penalty,
            logit_bias,
        },
        ignore_eos: a.ignore_eos,
        stop: a.reverse_prompt.clone(),
        n_probs: a.n_probs,
        pipelined: !a.no_pipeline,
        swa_full: a.swa_full,
    };
    if gpu::choose(a.device, a.n_gpu_layers) == gpu::Device::Gpu {
        return gpu::run(&engine, &tokens, &params);
    }
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let mut index = 0usize;
    let result = engine.generate(&tokens, &params, |ev| {
        if let Some(lp) = ev.logprobs {
            index += 1;
            // stdout stays the generated text only; probabilities go to stderr.
            let _ = out.flush();
            eprintln!("{}", format_probs(&engine, index, lp));
        }
        ev.text.is_empty() || (out.write_all(ev.text.as_bytes()).is_ok() && out.flush().is_ok())
    })?;
    drop(out);
    let stats = &result.stats;
    eprintln!(
        "\nprompt: {} tokens, {:.1} t/s | generated: {} tokens, {:.1} t/s | stop: {:?}",
        stats.prompt_tokens,
        stats.prompt_tps(),
        stats.generated_tokens,
        stats.generate_tps(),
        stats.stop
    );
    Ok(())
}

/// Parses llama.cpp's `--logit-bias` value: `TOKEN_ID`, then `+` or `-`,
/// then the bias (a number, or `inf`).
fn parse_logit_bias(s: &str) -> Result<(u32, f32)> {
    let bad = || {
        anyhow::anyhow!(
            "--logit-bias {s:?}: expected TOKEN_ID+BIAS or TOKEN_ID-BIAS (e.g. 15043+1, 15043-inf)"
        )
    };
    let split = s
        .find(|c: char| !c.is_ascii_digit())
        .filter(|&i| i > 0)
        .ok_or_else(bad)?;
    let id: u32 = s[..split]
        .parse()
        .map_err(|_| anyhow::anyhow!("--logit-bias {s}: token id {} is too large", &s[..split]))?;
    let sign = match s.as_bytes()[split] {
        b'+' => 1.0f32,
        b'-' => -1.0f32,
        _ => return Err(bad()),
    };
    let magnitude: f32 = s[split + 1..].trim().parse().map_err(|_| bad())?;
    if magnitude.is_nan() {
        return Err(bad());
    }
    Ok((id, sign * magnitude))
}

/// One stderr line for `--n-probs`: the chosen token's probability, then the
/// most likely tokens' (probabilities of the model's raw distribution).
fn format_probs(engine: &Engine, index: usize, lp: &TokenLogprobs) -> String {
    let piece = |id: u32| {
        let bytes = engine.tokenizer.token_to_piece(id, true);
        format!("{:?}", String::from_utf8_lossy(&bytes))
    };
    let top: Vec<String> = lp
        .top
        .iter()
        .map(|&(id, l)| format!("{} {:.4}", piece(id), f64::from(l).exp()))
        .collect();
    format!(
        "[{index}] {} ({}) p={:.4} | {}",
        piece(lp.token),
        lp.token,
        f64::from(lp.logprob).exp(),
        top.join(", ")
    )
}

fn tokenize(a: TokenizeArgs) -> Result<()> {
    let file = kestrel_gguf::GgufFile::open(&a.model)
        .with_context(|| format!("opening {}", a.model.display()))?;
    let tok = kestrel_tokenizer::Tokenizer::from_gguf(&file)?;
    let ids = tok.encode(&a.prompt, !a.no_bos, !a.no_parse_special);
    if a.pieces {
        for id in ids {
            let piece = String::from_utf8_lossy(&tok.token_to_piece(id, true)).into_owned();
            println!("{id:6} -> {piece:?}");
        }
    } else {
        let list: Vec<String> = ids.iter().map(|i| i.to_string()).collect();
        println!("[{}]", list.join(", "));
    }
    Ok(())
}

fn inspect(a: InspectArgs) -> Result<()> {
    let file = kestrel_gguf::GgufFile::open(&a.model)
        .with_context(|| format!("opening {}", a.model.display()))?;
    print!("{}", kestrel_gguf::inspect_report(&file));
    match kestrel_model::ModelSpec::from_gguf(&file) {
        Ok(spec) => println!(
            "\nkestrel: supported ({:?} block: {:?})",
            spec.arch, spec.block
        ),
        Err(e) => println!("\nkestrel: cannot run this model: {e}"),
    }
    Ok(())
}
