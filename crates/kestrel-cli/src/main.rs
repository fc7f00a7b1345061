//! The `kestrel` command line: one file per subcommand; flags follow
//! llama.cpp's names where they overlap. Devices are reached only through
//! the engine (`kestrel_engine::Backend`).

mod bench;
mod device;
mod devices;
mod inspect;
mod lent;
mod perplexity;
mod profile;
mod run;
mod serve;
mod structured;
mod tokenize;

use std::process::ExitCode;

use anyhow::{bail, Result};
use clap::{Args, Parser, Subcommand};

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
    Run(run::RunArgs),
    /// Print the token ids of a text.
    Tokenize(tokenize::TokenizeArgs),
    /// Describe a GGUF file: architecture, hyperparameters, tokenizer, tensors.
    Inspect(inspect::InspectArgs),
    /// Measure prompt and generation speed as llama-bench does.
    Bench(bench::BenchArgs),
    /// Break one prefill batch and one decode step down by kernel class.
    Profile(profile::ProfileArgs),
    /// Measure perplexity over a text file as llama-perplexity does.
    Perplexity(perplexity::PerplexityArgs),
    /// Serve the model over HTTP (OpenAI- and llama-server-compatible).
    Serve(serve::ServeArgs),
    /// List the GPU adapters the GPU backend can use, best first.
    Devices,
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
        Command::Run(a) => run::run(a),
        Command::Tokenize(a) => tokenize::tokenize(a),
        Command::Inspect(a) => inspect::inspect(a),
        Command::Bench(a) => bench::bench(a),
        Command::Profile(a) => profile::profile(a),
        Command::Perplexity(a) => perplexity::perplexity(a),
        Command::Serve(a) => serve::serve(a),
        Command::Devices => devices::devices(),
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
