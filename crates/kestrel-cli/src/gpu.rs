//! `run --device gpu`: the prompt goes through the GPU model one token per
//! step, then each step's token is chosen on the device (the CPU sampler's
//! whole chain, seeded the same way) and read back one step behind, for
//! printing. Stop strings are matched on the host one step behind, on the
//! text as it streams: the step already submitted when a stop completes is
//! simply never read, so the output is what the CPU path would print for
//! the same tokens. What the GPU path does not do yet (logprobs) is refused
//! with a message.

use std::io::Write;

use anyhow::{bail, Result};
use kestrel_engine::{Engine, GenerateParams};
use kestrel_gpu::model::GpuModel;
use kestrel_gpu::sample::SampleParams;
use kestrel_gpu::Gpu;
use kestrel_sampling::StopMatcher;
use kestrel_tokenizer::StreamDecoder;

/// Where `run` computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Device {
    Cpu,
    Gpu,
    /// The GPU when wgpu finds a hardware adapter, else the CPU.
    Auto,
}

/// Resolves `--device` and llama.cpp's `-ngl N` (any N > 0 means every
/// layer on the GPU).
pub fn choose(device: Device, n_gpu_layers: Option<i64>) -> Device {
    match (device, n_gpu_layers) {
        (Device::Cpu, Some(n)) if n > 0 => Device::Gpu,
        (Device::Auto, _) => {
            let hardware = kestrel_gpu::adapters()
                .first()
                .is_some_and(|a| a.kind != "Cpu");
            if hardware {
                Device::Gpu
            } else {
                Device::Cpu
            }
        }
        (d, _) => d,
    }
}

pub fn run(engine: &Engine, tokens: &[u32], params: &GenerateParams) -> Result<()> {
    let sp = &params.sampler;
    if params.n_probs > 0 {
        bail!("--device gpu does not do --n-probs yet; use --device cpu");
    }
    if tokens.is_empty() || tokens.len() >= params.n_ctx {
        bail!(
            "the prompt has {} tokens, which does not fit the context of {}",
            tokens.len(),
            params.n_ctx
        );
    }
    let gpu = Gpu::new()?;
    eprintln!("device: {}", gpu.adapter);
    let model = GpuModel::load(
        gpu,
        engine.file.clone(),
        engine.model.spec.clone(),
        params.n_ctx,
    )?;
    let mut logit_bias = sp.logit_bias.clone();
    if params.ignore_eos {
        logit_bias.extend(
            engine
                .tokenizer
                .eog_ids()
                .iter()
                .map(|&id| (id, f32::NEG_INFINITY)),
        );
    }
    let sample = SampleParams {
        temperature: sp.temperature,
        top_k: sp.top_k,
        top_p: sp.top_p,
        min_p: sp.min_p,
        repeat_penalty: sp.repeat_penalty,
        repeat_last_n: sp.repeat_last_n,
        frequency_penalty: sp.frequency_penalty,
        presence_penalty: sp.presence_penalty,
        logit_bias,
    };
    let seq = model.new_seq();
    model.set_rng(&seq, kestrel_sampling::XorShift::new(sp.seed).state());
    model.write_tokens(&seq, 0, tokens)?;
    let t0 = std::time::Instant::now();
    model.prefill(&seq, 0, tokens.len() - 1)?;
    let t1 = std::time::Instant::now();
    let mut decoder = StreamDecoder::new(&engine.tokenizer, false);
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    // Pipelined: step N+1 is submitted before step N's token is read back
    // (the device reads it from the history buffer itself); a step
    // submitted after the last token is simply not read.
    let mut pos = tokens.len() - 1;
    let mut generated = 0i64;
    let mut stop = StopMatcher::new(params.stop.iter().cloned());
    let mut pending = model.step_async(&seq, pos, &sample)?;
    while params.n_predict < 0 || generated < params.n_predict {
        let next = (pos + 2 < params.n_ctx)
            .then(|| model.step_async(&seq, pos + 1, &sample))
            .transpose()?;
        let token = pending.wait(&model.gpu)?;
        if !params.ignore_eos && engine.tokenizer.is_eog(token) {
            break;
        }
        let shown = stop.push(&decoder.push(token));
        out.write_all(shown.text.as_bytes())?;
        out.flush()?;
        generated += 1;
        if shown.stopped {
            break;
        }
        pos += 1;
        match next {
            Some(n) => pending = n,
            None => break,
        }
    }
    if !stop.is_stopped() {
        let tail = stop.push(&decoder.finish());
        out.write_all(tail.text.as_bytes())?;
        out.write_all(stop.finish().as_bytes())?;
    }
    out.flush()?;
    let secs = |a: std::time::Instant, b: std::time::Instant| (b - a).as_secs_f64().max(1e-9);
    eprintln!(
        "\nprompt: {} tokens, {:.1} t/s | generated: {generated} tokens, {:.1} t/s (gpu)",
        tokens.len(),
        (tokens.len() - 1) as f64 / secs(t0, t1),
        generated as f64 / secs(t1, std::time::Instant::now())
    );
    Ok(())
}
