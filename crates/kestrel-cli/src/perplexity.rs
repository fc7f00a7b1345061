//! `kestrel perplexity`: llama-perplexity's evaluation and output. The
//! running per-chunk values (`[1]16.3211,[2]…`) and the final estimate go to
//! stdout, progress and timings to stderr. The method itself lives in
//! `kestrel_engine::perplexity`. `--device gpu` scores each chunk on the
//! GPU model: the unscored first half prefilled in chunks of positions,
//! then one step per scored position, its logits read back.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use kestrel_engine::{Engine, PerplexityParams};

/// The logits of one batch (`n_batch x n_vocab` f32) may take at most this
/// much memory; beyond it `-b` is refused rather than running out of memory.
const MAX_LOGITS_BYTES: usize = 4 << 30;

#[derive(Args, Debug)]
pub struct PerplexityArgs {
    /// Path to a GGUF model.
    #[arg(short = 'm', long = "model")]
    model: PathBuf,
    /// The text to evaluate (one trailing newline is dropped, as llama.cpp does).
    #[arg(short = 'f', long = "file")]
    file: PathBuf,
    /// Tokens per chunk.
    #[arg(short = 'c', long = "ctx-size", default_value_t = 512)]
    ctx_size: usize,
    /// Evaluate at most N chunks (default: every whole chunk of the text).
    #[arg(long = "chunks")]
    chunks: Option<usize>,
    /// Tokens per forward pass (default: min(ctx-size, 2048), as llama.cpp's
    /// default batch of 2048 clamped to the context).
    #[arg(short = 'b', long = "batch-size")]
    batch_size: Option<usize>,
    /// Worker threads (default, or 0 or less, as llama.cpp: every core).
    #[arg(short = 't', long = "threads", allow_negative_numbers = true)]
    threads: Option<i64>,
    /// Sliding-window layers (Gemma 3) attend over a full-size cache, as
    /// llama.cpp's `--swa-full`; by default as its default window cache, a
    /// ring whose visiting order differs in the last bits past its size.
    #[arg(long = "swa-full")]
    swa_full: bool,
    #[command(flatten)]
    weights: crate::WeightArgs,
    #[command(flatten)]
    devices: crate::device::DeviceArgs,
}

pub fn perplexity(a: PerplexityArgs) -> Result<()> {
    let threads = crate::threads_arg(a.threads)?;
    let n_ctx = a.ctx_size;
    if !(4..=1 << 20).contains(&n_ctx) {
        bail!("--ctx-size must be in 4..=1048576, got {n_ctx}");
    }
    let n_batch = a.batch_size.unwrap_or(n_ctx.min(2048));
    if n_batch == 0 {
        bail!("--batch-size must be at least 1");
    }
    if a.chunks == Some(0) {
        bail!("--chunks must be at least 1");
    }
    let bytes = std::fs::read(&a.file).with_context(|| format!("reading {}", a.file.display()))?;
    let mut text = String::from_utf8(bytes).map_err(|e| {
        anyhow::anyhow!(
            "{}: not UTF-8 text (invalid byte at offset {})",
            a.file.display(),
            e.utf8_error().valid_up_to()
        )
    })?;
    if text.ends_with('\n') {
        text.pop();
    }

    let engine = Engine::load_backed(&a.model, threads, a.weights.backing())?;
    let hp = &engine.model.spec.hparams;
    let n_vocab = hp.n_vocab;
    let n_batch_eff = n_batch.min(n_ctx);
    if n_batch_eff.saturating_mul(n_vocab).saturating_mul(4) > MAX_LOGITS_BYTES {
        bail!(
            "--batch-size {n_batch}: the logits of one batch ({n_batch_eff} x {n_vocab} floats) \
             would exceed {} GiB; use a smaller batch",
            MAX_LOGITS_BYTES >> 30
        );
    }
    if n_ctx > hp.n_ctx_train {
        eprintln!(
            "warning: the model was trained on only {} context tokens ({n_ctx} asked for)",
            hp.n_ctx_train
        );
    }

    let t0 = Instant::now();
    let tokens = engine.tokenize_text(&text);
    eprintln!(
        "perplexity: {} tokens ({:.0} ms to tokenize)",
        tokens.len(),
        t0.elapsed().as_secs_f64() * 1000.0
    );
    if tokens.len() < 2 * n_ctx {
        bail!(
            "{} tokenizes to only {} tokens; a context of {n_ctx} needs at least {} \
             (use a longer text or a smaller --ctx-size)",
            a.file.display(),
            tokens.len(),
            2 * n_ctx
        );
    }
    let n_chunks = a
        .chunks
        .map_or(tokens.len() / n_ctx, |c| c.min(tokens.len() / n_ctx));
    eprintln!(
        "perplexity: calculating perplexity over {n_chunks} chunks, n_ctx={n_ctx}, batch_size={n_batch_eff}"
    );

    let params = PerplexityParams {
        n_ctx,
        n_batch: n_batch_eff,
        n_chunks: a.chunks,
        swa_full: a.swa_full,
    };
    let stdout = std::io::stdout();
    let device = a.devices.device();
    let started = Instant::now();
    let result = engine.perplexity(&tokens, &params, device, |r| {
        let mut out = stdout.lock();
        let _ = write!(out, "[{}]{:.4},", r.chunk, r.ppl);
        let _ = out.flush();
        let elapsed = started.elapsed().as_secs_f64();
        let eta = elapsed / r.chunk as f64 * (r.n_chunks - r.chunk) as f64;
        eprintln!(
            "perplexity: chunk {}/{} done, {:.2} s per pass, ETA {:.0} s",
            r.chunk, r.n_chunks, r.seconds, eta
        );
    });
    println!();
    let result = result?;
    match result.uncertainty {
        Some(u) => println!("Final estimate: PPL = {:.4} +/- {:.5}", result.ppl, u),
        None => {
            println!("Final estimate: PPL = {:.4}", result.ppl);
            eprintln!(
                "warning: the variance of the log-likelihoods is not positive; no uncertainty"
            );
        }
    }
    eprintln!(
        "perplexity: {} tokens scored in {} chunks, {:.2} s",
        result.count,
        result.n_chunks,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
