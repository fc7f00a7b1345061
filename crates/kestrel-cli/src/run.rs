//! `kestrel run`: one generation from a prompt, printed as it comes, on
//! the CPU or the GPU: the request is the only sequence of a one-slot
//! scheduler ([`kestrel_engine::Batch`]), the loop `serve` runs; under a
//! grammar or JSON schema when asked (`crate::structured`).

use std::io::Write;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use kestrel_engine::{
    AdmitError, BackendOptions, Device, Engine, GenerateParams, TokenEvent, TokenLogprobs,
};
use kestrel_sampling::SamplerParams;
use kestrel_tokenizer::chat::ChatMessage;

use crate::{threads_arg, WeightArgs};

#[derive(Args)]
pub struct RunArgs {
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
    /// Read each decode step as soon as it is submitted instead of one step
    /// behind, overlapping nothing (same output; for comparison).
    #[arg(long = "no-pipeline")]
    no_pipeline: bool,
    /// Sliding-window layers (Gemma 3) attend over a full-size cache, as
    /// llama.cpp's `--swa-full`; by default as its default window cache, a
    /// ring whose visiting order differs in the last bits past its size.
    #[arg(long = "swa-full")]
    swa_full: bool,
    #[command(flatten)]
    structured: crate::structured::GrammarArgs,
    #[command(flatten)]
    devices: crate::device::DeviceArgs,
    #[command(flatten)]
    weights: WeightArgs,
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

pub fn run(a: RunArgs) -> Result<()> {
    let prompt = match (&a.prompt, &a.file) {
        (Some(p), _) => p.clone(),
        (None, Some(f)) => std::fs::read_to_string(f)
            .with_context(|| format!("reading prompt file {}", f.display()))?,
        (None, None) => bail!("no prompt: pass -p TEXT or -f FILE"),
    };
    let threads = threads_arg(a.threads)?;
    check_sampler_flags(&a)?;
    let logit_bias = a
        .logit_bias
        .iter()
        .map(|s| parse_logit_bias(s))
        .collect::<Result<Vec<_>>>()?;
    let structured = a.structured.read()?;
    let engine = Engine::load_backed(&a.model, threads, a.weights.backing())?;
    let constraint = structured.map(|s| s.compile(&engine)).transpose()?;
    let n_vocab = engine.tokenizer.vocab_size();
    if let Some(((id, _), text)) = logit_bias
        .iter()
        .zip(&a.logit_bias)
        .find(|((id, _), _)| *id as usize >= n_vocab)
    {
        bail!("--logit-bias {text}: token id {id} is outside the vocabulary of {n_vocab} tokens");
    }
    let train = engine.model.spec.hparams.n_ctx_train;
    let n_ctx = kestrel_engine::context_size(a.ctx_size, Some(train), 1)?.per_slot;
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
        constraint,
    };
    let device = a.devices.device();
    let opts = BackendOptions {
        device,
        n_ctx,
        swa_full: a.swa_full,
    };
    let mut batch = engine
        .batch(opts, 1, kestrel_engine::PROMPT_CHUNK)?
        .pipelined(!a.no_pipeline);
    let on_gpu = device == Device::Gpu;
    if on_gpu {
        eprintln!("device: {}", batch.device().name);
    }
    let mut out = std::io::stdout().lock();
    let mut index = 0usize;
    let engine = &engine;
    let sink = Box::new(move |ev: &TokenEvent<'_>| {
        if let Some(lp) = ev.logprobs {
            index += 1;
            // stdout stays the generated text only; probabilities go to stderr.
            let _ = out.flush();
            eprintln!("{}", format_probs(engine, index, lp));
        }
        ev.text.is_empty() || (out.write_all(ev.text.as_bytes()).is_ok() && out.flush().is_ok())
    });
    match batch.admit(0, tokens, &params, false, sink) {
        Ok(_) => {}
        Err(AdmitError::Invalid(e)) => return Err(e.into()),
        Err(AdmitError::Busy) => bail!("internal error: the slot is busy"),
    }
    let result = loop {
        if let Some((_, r)) = batch.step().pop() {
            break r?;
        }
    };
    drop(batch);
    let stats = &result.stats;
    eprintln!(
        "\nprompt: {} tokens, {:.1} t/s | generated: {} tokens, {:.1} t/s | stop: {:?}{}",
        stats.prompt_tokens,
        stats.prompt_tps(),
        stats.generated_tokens,
        stats.generate_tps(),
        stats.stop,
        if on_gpu { " (gpu)" } else { "" }
    );
    Ok(())
}

/// The sampler flags against the ranges the server holds its JSON fields
/// to (`kestrel_sampling::check`), the error naming the flag. A negative
/// temperature is llama.cpp's greedy, as 0 is.
fn check_sampler_flags(a: &RunArgs) -> Result<()> {
    let params = SamplerParams {
        temperature: if a.temp < 0.0 { 0.0 } else { a.temp },
        top_k: a.top_k,
        top_p: a.top_p,
        min_p: a.min_p,
        repeat_penalty: a.repeat_penalty,
        repeat_last_n: a.repeat_last_n,
        frequency_penalty: a.frequency_penalty,
        presence_penalty: a.presence_penalty,
        ..SamplerParams::greedy()
    };
    params.check().map_err(|e| {
        let flag = match e.field {
            "temperature" => "--temp".to_string(),
            field => format!("--{}", field.replace('_', "-")),
        };
        anyhow::anyhow!("{flag}: {e}")
    })
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
pub(crate) fn format_probs(engine: &Engine, index: usize, lp: &TokenLogprobs) -> String {
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
