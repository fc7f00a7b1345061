//! `run --device gpu`: the request runs as the only sequence of a GPU
//! batch ([`kestrel_engine::Batch::on_gpu`]), the server's path: the prompt
//! is prefilled, then each step's token is chosen on the device (the CPU
//! sampler's whole chain, seeded the same way) and read back one step
//! behind, after the next step is submitted. Stop strings, EOS and logprobs
//! (`--n-probs`, from the step's logits) are handled on the host as the
//! tokens come back, so the output is what the CPU path would print for the
//! same tokens.

use std::io::Write;

use anyhow::{bail, Result};
use kestrel_engine::{AdmitError, Batch, Engine, GenerateParams, TokenEvent};
use kestrel_gpu::model::GpuModel;
use kestrel_gpu::Gpu;

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
    // One slot, the whole prompt in the first step.
    let mut batch = Batch::on_gpu(engine, &model, 1, params.n_ctx, tokens.len())?;
    let mut out = std::io::stdout().lock();
    let mut index = 0usize;
    let sink = Box::new(move |ev: &TokenEvent<'_>| {
        if let Some(lp) = ev.logprobs {
            index += 1;
            // stdout stays the generated text only; probabilities go to stderr.
            let _ = out.flush();
            eprintln!("{}", crate::format_probs(engine, index, lp));
        }
        ev.text.is_empty() || (out.write_all(ev.text.as_bytes()).is_ok() && out.flush().is_ok())
    });
    match batch.admit(0, tokens.to_vec(), params, false, sink) {
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
        "\nprompt: {} tokens, {:.1} t/s | generated: {} tokens, {:.1} t/s | stop: {:?} (gpu)",
        stats.prompt_tokens,
        stats.prompt_tps(),
        stats.generated_tokens,
        stats.generate_tps(),
        stats.stop
    );
    Ok(())
}
