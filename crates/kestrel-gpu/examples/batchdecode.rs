//! Aggregate decode tokens/s of the GPU model for 1, 2 and 4 sequences
//! stepped together (one submission per step, weights read once per
//! step): `cargo run --release -p kestrel-gpu --example batchdecode --
//! MODEL [STEPS]`.

use std::sync::Arc;
use std::time::Instant;

use kestrel_gguf::GgufFile;
use kestrel_gpu::model::{GpuModel, GpuSeq};
use kestrel_gpu::Gpu;
use kestrel_model::ModelSpec;
use kestrel_sampling::SamplerParams;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args.next().ok_or("usage: batchdecode MODEL [STEPS]")?;
    let steps: usize = args.next().and_then(|v| v.parse().ok()).unwrap_or(8);
    let file = Arc::new(GgufFile::open(&path)?);
    let spec = ModelSpec::from_gguf(&file)?;
    let model = GpuModel::load(Gpu::new()?, file, spec, steps + 2)?;
    println!("{}", model.gpu.adapter);
    let greedy = SamplerParams {
        temperature: 0.0,
        ..SamplerParams::default()
    };
    for n in [1usize, 2, 4] {
        let seqs: Vec<GpuSeq> = (0..n).map(|_| model.new_seq()).collect();
        for (k, s) in seqs.iter().enumerate() {
            model.write_tokens(s, 0, &[1 + k as u32])?;
        }
        let params = vec![greedy.clone(); n];
        let step = |pos: usize| {
            let batch: Vec<(&GpuSeq, usize)> = seqs.iter().map(|s| (s, pos)).collect();
            model.step_batch(&batch, &params)
        };
        for p in step(0)? {
            p.wait(&model.gpu)?;
        }
        let t0 = Instant::now();
        let mut pending = step(1)?;
        for pos in 2..=steps {
            let next = step(pos)?;
            for p in pending {
                p.wait(&model.gpu)?;
            }
            pending = next;
        }
        for p in pending {
            p.wait(&model.gpu)?;
        }
        let s = t0.elapsed().as_secs_f64();
        println!(
            "{n} sequences: {:.2} t/s aggregate ({:.1} ms per step)",
            (n * steps) as f64 / s,
            s * 1e3 / steps as f64
        );
    }
    Ok(())
}
