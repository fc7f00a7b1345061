//! `kestrel profile`: where the time of a prefill batch and of a decode step
//! goes, by kernel class (matrix products per weight type with the GB/s they
//! reach, attention, norms, RoPE, activations, activation quantization,
//! sampling), with what no class accounts for shown as "sync, other".

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use clap::Args;
use kestrel_engine::{Engine, Logits, Profile};

#[derive(Args, Debug)]
pub struct ProfileArgs {
    /// Path to a GGUF model.
    #[arg(short = 'm', long = "model")]
    model: PathBuf,
    /// Prompt batch size profiled (also the context the decode steps follow).
    #[arg(short = 'p', long = "n-prompt", default_value_t = 128)]
    n_prompt: usize,
    /// Decode steps averaged for the per-step figures.
    #[arg(short = 'n', long = "n-gen", default_value_t = 16)]
    n_gen: usize,
    /// Worker threads (default: available cores).
    #[arg(short = 't', long = "threads")]
    threads: Option<usize>,
    #[command(flatten)]
    weights: crate::WeightArgs,
}

pub fn profile(a: ProfileArgs) -> Result<()> {
    if a.n_prompt == 0 || a.n_gen == 0 {
        bail!("-p and -n must be at least 1");
    }
    let threads = a.threads.unwrap_or_else(crate::default_threads);
    if threads == 0 || threads > 1024 {
        bail!("-t {threads}: threads must be in 1..=1024");
    }
    let engine = Engine::load_backed(&a.model, threads, a.weights.backing())?;
    let model = &engine.model;
    let n_ctx = a.n_prompt + a.n_gen + 1;
    if n_ctx > model.spec.hparams.n_ctx_train.max(1) {
        bail!(
            "-p {} plus -n {} exceeds the model's context of {}",
            a.n_prompt,
            a.n_gen,
            model.spec.hparams.n_ctx_train
        );
    }
    let lead = engine
        .tokenizer
        .bos()
        .filter(|_| engine.tokenizer.add_bos());
    let tokens = crate::bench::draw_tokens(n_ctx, engine.tokenizer.vocab_size(), lead);
    let prompt = &tokens[..a.n_prompt];

    // Warm-up (page the weights in), then the profiled prefill.
    let mut cache = model.new_cache(n_ctx);
    model.forward(prompt, 0, &mut cache, Logits::Last);
    let mut cache = model.new_cache(n_ctx);
    model.set_profiling(true);
    let t0 = Instant::now();
    model.forward(prompt, 0, &mut cache, Logits::Last);
    let prefill_wall = t0.elapsed();
    let prefill = model.take_profile();

    // Decode steps after the prompt, sampling (greedy) included.
    let mut sampling = Duration::ZERO;
    let t0 = Instant::now();
    for (i, &tok) in tokens[a.n_prompt..a.n_prompt + a.n_gen].iter().enumerate() {
        let logits = model.forward(&[tok], a.n_prompt + i, &mut cache, Logits::Last);
        let s0 = Instant::now();
        std::hint::black_box(kestrel_sampling::argmax(&logits));
        sampling += s0.elapsed();
    }
    let decode_wall = t0.elapsed();
    let decode = model.take_profile();
    model.set_profiling(false);

    println!(
        "model: {} | threads: {threads} | {}",
        a.model.display(),
        if kestrel_quant::avx2_in_use() {
            "AVX2 kernels"
        } else {
            "portable kernels"
        }
    );
    println!();
    println!(
        "prefill, one batch of {} tokens: {:.2} ms ({:.1} t/s)",
        a.n_prompt,
        ms(prefill_wall),
        a.n_prompt as f64 / prefill_wall.as_secs_f64()
    );
    print_table(&prefill, prefill_wall, Duration::ZERO, 1);
    println!();
    println!(
        "decode, one step at context {}..{} (mean of {}): {:.2} ms ({:.1} t/s)",
        a.n_prompt,
        a.n_prompt + a.n_gen,
        a.n_gen,
        ms(decode_wall) / a.n_gen as f64,
        a.n_gen as f64 / decode_wall.as_secs_f64()
    );
    print_table(&decode, decode_wall, sampling, a.n_gen);
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// One table: classes by time, per `steps` (so decode shows one step).
fn print_table(p: &Profile, wall: Duration, sampling: Duration, steps: usize) {
    let mut rows: Vec<(String, Duration, u64, u64)> = p
        .entries
        .iter()
        .map(|e| (e.class.clone(), e.time, e.bytes, e.calls))
        .collect();
    if !sampling.is_zero() {
        rows.push(("sampling (greedy)".into(), sampling, 0, steps as u64));
    }
    let accounted: Duration = rows.iter().map(|r| r.1).sum();
    rows.sort_by_key(|r| std::cmp::Reverse(r.1));
    rows.push(("sync, other".into(), wall.saturating_sub(accounted), 0, 0));
    let per = steps as f64;
    println!("| class | ms | % | calls | GB/s |");
    println!("|---|---:|---:|---:|---:|");
    for (class, time, bytes, calls) in rows {
        let gbs = if bytes > 0 {
            format!("{:.2}", bytes as f64 / time.as_secs_f64() / 1e9)
        } else {
            String::new()
        };
        println!(
            "| {class} | {:.3} | {:.1} | {:.0} | {gbs} |",
            ms(time) / per,
            100.0 * time.as_secs_f64() / wall.as_secs_f64(),
            calls as f64 / per
        );
    }
}
