//! Feeds the same tokens through the CPU and the GPU backends one position
//! at a time and prints, per position, the largest logit difference as a
//! fraction of the CPU's logit spread and whether the greedy picks agree:
//! `cargo run --release -p kestrel-gpu --example logitdiff -- MODEL [N]`.

use std::sync::Arc;

use kestrel_cpu::{CpuModel, Logits};
use kestrel_gguf::{GgufFile, GgufWriter, Value};
use kestrel_gpu::model::GpuModel;
use kestrel_gpu::Gpu;
use kestrel_model::ModelSpec;
use kestrel_sampling::SamplerParams;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args.next().ok_or("usage: logitdiff MODEL [N]")?;
    let n: usize = args.next().and_then(|v| v.parse().ok()).unwrap_or(40);
    let mut file = GgufFile::open(&path)?;
    // LAYERS=L keeps only the first L blocks (to find where the devices part).
    if let Some(keep) = std::env::var("LAYERS")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
    {
        let mut w = GgufWriter::new();
        for (k, v) in file.metadata() {
            let v = if k.ends_with(".block_count") {
                Value::U32(keep)
            } else {
                v.clone()
            };
            w.add(k, v);
        }
        for t in file.tensors() {
            let layer = t
                .name
                .strip_prefix("blk.")
                .and_then(|r| r.split('.').next()?.parse::<u32>().ok());
            if layer.is_none_or(|l| l < keep) {
                let mut data = file.tensor_data(t).to_vec();
                // MUTE=attn,ffn zeroes those blocks' output projections.
                let mute = std::env::var("MUTE").unwrap_or_default();
                if (mute.contains("attn") && t.name.ends_with("attn_output.weight"))
                    || (mute.contains("ffn") && t.name.ends_with("ffn_down.weight"))
                {
                    data.fill(0);
                }
                w.add_tensor(&t.name, &t.dims, t.ty, data);
            }
        }
        file = GgufFile::from_bytes(w.to_bytes())?;
    }
    let file = Arc::new(file);
    let spec = ModelSpec::from_gguf(&file)?;
    let nv = spec.hparams.n_vocab;
    let cpu = CpuModel::load(file.clone(), spec.clone(), 2)?;
    let gpu = GpuModel::load(Gpu::new()?, file, spec, n + 1)?;
    let tokens: Vec<u32> = (0..n as u32).map(|i| (i * 7919 + 13) % nv as u32).collect();
    let mut cache = cpu.new_cache(n + 1);
    let want = cpu.forward(&tokens, 0, &mut cache, Logits::All);
    let seq = gpu.new_seq();
    gpu.write_tokens(&seq, 0, &tokens)?;
    let greedy = SamplerParams {
        temperature: 0.0,
        ..SamplerParams::default()
    };
    for pos in 0..n {
        gpu.step(&seq, pos, Some(&greedy))?;
        let got = gpu.read_logits()?;
        // The sampler wrote its pick at pos + 1; the prompt goes on.
        gpu.write_tokens(&seq, pos + 1, &tokens[pos + 1..])?;
        let row = &want[pos * nv..(pos + 1) * nv];
        let (lo, hi) = row
            .iter()
            .fold((f32::MAX, f32::MIN), |(a, b), &v| (a.min(v), b.max(v)));
        let worst = got
            .iter()
            .zip(row)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        if std::env::var_os("LOGITDIFF_DETAIL").is_some() {
            let mut idx: Vec<usize> = (0..nv).collect();
            idx.sort_by(|&i, &j| (got[j] - row[j]).abs().total_cmp(&(got[i] - row[i]).abs()));
            for &i in &idx[..5] {
                println!("  logit {i}: gpu {} cpu {}", got[i], row[i]);
            }
            let mean: f32 =
                got.iter().zip(row).map(|(a, b)| (a - b).abs()).sum::<f32>() / nv as f32;
            println!("  mean |diff| {mean}, spread {}", hi - lo);
        }
        let (a, b) = (
            kestrel_sampling::argmax(&got),
            kestrel_sampling::argmax(row),
        );
        println!(
            "pos {pos:3}: worst {:.2e} of spread, gpu pick {a} cpu pick {b}{}",
            worst / (hi - lo),
            if a == b { "" } else { "  DIFFERENT" }
        );
    }
    Ok(())
}
