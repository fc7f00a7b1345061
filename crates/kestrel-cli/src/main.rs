//! The `kestrel` command line: flags follow llama.cpp's names where they overlap.

mod bench;
mod profile;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use kestrel_engine::{Engine, GenerateParams};
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
    /// Keep the K most likely tokens (0 = off).
    #[arg(long = "top-k", default_value_t = 40)]
    top_k: i32,
    /// Keep the smallest set whose probability reaches P (1.0 = off).
    #[arg(long = "top-p", default_value_t = 0.95)]
    top_p: f32,
    /// Drop tokens below P times the most likely one's probability (0.0 = off).
    #[arg(long = "min-p", default_value_t = 0.05)]
    min_p: f32,
    /// RNG seed (default: random, reported on stderr).
    #[arg(short = 's', long = "seed")]
    seed: Option<u64>,
    /// Worker threads (default: available cores).
    #[arg(short = 't', long = "threads")]
    threads: Option<usize>,
    /// Context size in tokens (default: min(4096, the model's training context)).
    #[arg(short = 'c', long = "ctx-size")]
    ctx_size: Option<usize>,
    /// Use the prompt as is, without the chat template.
    #[arg(long = "raw")]
    raw: bool,
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

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
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

fn run(a: RunArgs) -> Result<()> {
    let prompt = match (&a.prompt, &a.file) {
        (Some(p), _) => p.clone(),
        (None, Some(f)) => std::fs::read_to_string(f)
            .with_context(|| format!("reading prompt file {}", f.display()))?,
        (None, None) => bail!("no prompt: pass -p TEXT or -f FILE"),
    };
    let threads = a.threads.unwrap_or_else(default_threads);
    if threads == 0 {
        bail!("--threads must be at least 1");
    }
    if !(a.top_p.is_finite() && (0.0..=1.0).contains(&a.top_p)) {
        bail!("--top-p must be in [0, 1], got {}", a.top_p);
    }
    if !(a.min_p.is_finite() && (0.0..=1.0).contains(&a.min_p)) {
        bail!("--min-p must be in [0, 1], got {}", a.min_p);
    }
    if !a.temp.is_finite() {
        bail!("--temp must be a finite number");
    }
    let engine = Engine::load_backed(&a.model, threads, a.weights.backing())?;
    let hp = &engine.model.spec.hparams;
    let n_ctx = a.ctx_size.unwrap_or(4096.min(hp.n_ctx_train.max(1)));
    if n_ctx == 0 || n_ctx > 1 << 20 {
        bail!("--ctx-size must be in 1..=1048576, got {n_ctx}");
    }
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
    let seed = match a.seed {
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
            ..SamplerParams::greedy()
        },
    };
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let (_, stats) = engine.generate(&tokens, &params, |piece| {
        out.write_all(piece.as_bytes()).is_ok() && out.flush().is_ok()
    })?;
    drop(out);
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
