//! `kestrel profile`: where the time of a prefill batch and of a decode step
//! goes, by kernel class (matrix products per weight type with the GB/s they
//! reach, attention, norms, RoPE, activations, activation quantization,
//! sampling), with what no class accounts for shown as "sync, other".
//!
//! `--device gpu` times every pass on the device with timestamp queries
//! (where the adapter has them) and breaks the prompt (prefilled in chunks
//! of positions sharing weight reads) and the decode steps down by kernel
//! class the same way; the wall time comes from a separate run without the
//! timing.

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
    /// Worker threads (default, or 0 or less, as llama.cpp: every core).
    #[arg(short = 't', long = "threads", allow_negative_numbers = true)]
    threads: Option<i64>,
    #[command(flatten)]
    weights: crate::WeightArgs,
    /// Where to profile: cpu, gpu, or auto (a hardware GPU if any).
    #[arg(long = "device", value_enum, default_value = "cpu")]
    device: crate::gpu::Device,
    /// llama.cpp's `-ngl`: any value above 0 profiles the GPU.
    #[arg(long = "n-gpu-layers", allow_negative_numbers = true)]
    n_gpu_layers: Option<i64>,
}

pub fn profile(a: ProfileArgs) -> Result<()> {
    if a.n_prompt == 0 || a.n_gen == 0 {
        bail!("-p and -n must be at least 1");
    }
    let threads = crate::threads_arg(a.threads)?;
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
    if crate::gpu::choose(a.device, a.n_gpu_layers) == crate::gpu::Device::Gpu {
        return gpu_profile(&engine, &a, &tokens);
    }

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
        if kestrel_quant::avx512_in_use() && kestrel_quant::vnni_in_use() {
            "AVX2 kernels (AVX-VNNI lane sums; AVX-512 for Q4_1/Q5_0/Q8_0 prompts and \
             batches, Q4_1/Q5_0/Q4_K/Q6_K decode, Q4_K prompts)"
        } else if kestrel_quant::avx512_in_use() {
            "AVX2 kernels (AVX-512 VNNI lane sums for Q4_0/Q5_1/Q8_0 decode; AVX-512 for \
             Q4_1/Q5_0/Q8_0 prompts and batches, Q4_1/Q5_0/Q4_K/Q6_K decode, Q4_K prompts)"
        } else if kestrel_quant::vnni_in_use() {
            "AVX2 kernels (AVX-VNNI lane sums)"
        } else if kestrel_quant::avx2_in_use() {
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

/// The GPU's kernel class of a pass, from its pipeline's label.
fn gpu_class(label: &str) -> String {
    let (head, rest) = label.split_once(' ').unwrap_or((label, ""));
    match head {
        "matvec" => format!("matmul {rest}"),
        "quantize" => "activation quantization".into(),
        "attention" => "attention".into(),
        "kv" => "kv store".into(),
        "rms_norm" => "norms".into(),
        "rope" => "rope".into(),
        "elementwise" => "activation, add, scale".into(),
        "embed" => "embedding".into(),
        "sample" | "greedy" => "sampling".into(),
        _ => label.into(),
    }
}

/// Per class: device time, weight bytes, passes.
type ClassTimes = std::collections::BTreeMap<String, (f64, u64, u64)>;

fn add_passes(into: &mut ClassTimes, passes: Vec<kestrel_gpu::PassTime>) {
    for p in passes {
        let e = into.entry(gpu_class(&p.label)).or_default();
        e.0 += p.ns;
        e.1 += p.bytes;
        e.2 += 1;
    }
}

fn gpu_profile(engine: &Engine, a: &ProfileArgs, tokens: &[u32]) -> Result<()> {
    use kestrel_gpu::model::GpuModel;
    use kestrel_gpu::sample::SampleParams;
    let gpu = kestrel_gpu::Gpu::new()?;
    let adapter = gpu.adapter.to_string();
    let timed = gpu.has_timestamps;
    let model = GpuModel::load(
        gpu,
        engine.file.clone(),
        engine.model.spec.clone(),
        tokens.len(),
    )?;
    let g = &model.gpu;
    let greedy = SampleParams {
        temperature: 0.0,
        ..SampleParams::default()
    };
    let n_prompt = a.n_prompt;
    // One pass untimed for the wall clock (pipelined as `run` decodes),
    // after a warm-up step.
    let seq = model.new_seq();
    model.write_tokens(&seq, 0, &tokens[..n_prompt])?;
    model.step_async(&seq, 0, &greedy)?.wait(g)?;
    let t0 = Instant::now();
    model.prefill(&seq, 0, n_prompt - 1)?;
    let mut pending = model.step_async(&seq, n_prompt - 1, &greedy)?;
    pending = {
        let next = model.step_async(&seq, n_prompt, &greedy)?;
        pending.wait(g)?;
        next
    };
    let prefill_wall = t0.elapsed();
    let t0 = Instant::now();
    for pos in n_prompt + 1..n_prompt + a.n_gen {
        let next = model.step_async(&seq, pos, &greedy)?;
        pending.wait(g)?;
        pending = next;
    }
    pending.wait(g)?;
    let decode_wall = t0.elapsed();

    // The same steps again, each pass timed on the device.
    let mut prefill = ClassTimes::new();
    let mut decode = ClassTimes::new();
    if timed {
        let seq = model.new_seq();
        model.write_tokens(&seq, 0, &tokens[..n_prompt])?;
        g.set_profiling(true);
        // A chunk at a time: the query set holds 2048 passes.
        for from in (0..n_prompt - 1).step_by(kestrel_gpu::model::MAX_SEQS) {
            let n = (n_prompt - 1 - from).min(kestrel_gpu::model::MAX_SEQS);
            model.prefill(&seq, from, n)?;
            add_passes(&mut prefill, g.take_profile()?);
        }
        for pos in n_prompt - 1..n_prompt - 1 + a.n_gen {
            model.step_async(&seq, pos, &greedy)?.wait(g)?;
            add_passes(&mut decode, g.take_profile()?);
        }
        g.set_profiling(false);
    }
    println!(
        "model: {} | device: {adapter}{}",
        a.model.display(),
        if timed {
            ""
        } else {
            " (no timestamp queries: wall time only)"
        }
    );
    println!();
    let prompt_steps = (n_prompt - 1).max(1);
    println!(
        "prefill, {n_prompt} tokens in chunks of {}: {:.2} ms ({:.1} t/s)",
        kestrel_gpu::model::MAX_SEQS,
        ms(prefill_wall),
        n_prompt as f64 / prefill_wall.as_secs_f64()
    );
    if timed {
        print_gpu_table(&prefill, prompt_steps);
    }
    println!();
    let decode_steps = a.n_gen.saturating_sub(1).max(1);
    println!(
        "decode, pipelined steps at context {}..{} (mean of {decode_steps}): {:.2} ms ({:.1} t/s)",
        n_prompt,
        n_prompt + a.n_gen,
        ms(decode_wall) / decode_steps as f64,
        decode_steps as f64 / decode_wall.as_secs_f64()
    );
    if timed {
        print_gpu_table(&decode, a.n_gen);
    }
    Ok(())
}

/// Classes by device time per step; % of the device's busy time.
fn print_gpu_table(classes: &ClassTimes, steps: usize) {
    let busy: f64 = classes.values().map(|c| c.0).sum();
    let mut rows: Vec<(&String, &(f64, u64, u64))> = classes.iter().collect();
    rows.sort_by(|a, b| b.1 .0.total_cmp(&a.1 .0));
    let per = steps as f64;
    println!(
        "device busy {:.3} ms per step; by kernel class:",
        busy / 1e6 / per
    );
    println!("| class | ms | % | passes | GB/s |");
    println!("|---|---:|---:|---:|---:|");
    for (class, &(ns, bytes, calls)) in rows {
        let gbs = if bytes > 0 && ns > 0.0 {
            format!("{:.2}", bytes as f64 / ns)
        } else {
            String::new()
        };
        println!(
            "| {class} | {:.3} | {:.1} | {:.0} | {gbs} |",
            ns / 1e6 / per,
            100.0 * ns / busy.max(1e-9),
            calls as f64 / per
        );
    }
}
