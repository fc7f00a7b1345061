//! Times the matrix-vector product of each weight type at a model's shapes
//! on the best adapter: `cargo run --release -p kestrel-gpu --example
//! kernelbench -- [ROWS COLS]...` (default: SmolLM2-135M's shapes); `KESTREL_GPU_TPR` sets the
//! threads per row.
//! Each product runs REPS times in one submission; ms per product is the
//! wall time over REPS after a warm-up.

use std::time::Instant;

use kestrel_gguf::GgmlType;
use kestrel_gpu::matvec::{Layout, MatVec};
use kestrel_gpu::Gpu;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let gpu = Gpu::new()?;
    println!("{}", gpu.adapter);
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let shapes: Vec<(usize, usize)> = if args.len() >= 2 {
        args.chunks_exact(2).map(|c| (c[0], c[1])).collect()
    } else {
        vec![(576, 576), (1536, 576), (576, 1536), (49152, 576)]
    };
    let reps = 20;
    let layout = Layout::for_adapter(&gpu);
    let tpr = layout.tpr;
    for ty in [
        GgmlType::Q4_1,
        GgmlType::Q8_0,
        GgmlType::Q4_K,
        GgmlType::Q6_K,
    ] {
        for &(rows, cols) in &shapes {
            if !cols.is_multiple_of(ty.block_size()) {
                continue;
            }
            let rb = ty.row_bytes(cols as u64).unwrap() as usize;
            let bytes: Vec<u8> = (0..rows * rb).map(|i| (i * 7 % 251) as u8 & 0x3b).collect();
            let m = gpu.upload_matrix("w", ty, rows, cols, &bytes)?;
            let x: Vec<f32> = (0..cols).map(|i| (i as f32 * 0.37).sin()).collect();
            let xb = gpu.upload_f32("x", &x)?;
            let yb = gpu.scratch_f32("y", rows);
            let mv = MatVec::with_layout(&gpu, ty, cols, layout)?;
            let run = |n: usize| -> Result<f64, Box<dyn std::error::Error>> {
                let t = Instant::now();
                gpu.begin_step();
                for _ in 0..n {
                    mv.run(&gpu, &m, &xb, &yb)?;
                }
                gpu.finish_step();
                gpu.read_f32(&yb, 1)?;
                Ok(t.elapsed().as_secs_f64() * 1e3 / n as f64)
            };
            run(2)?;
            let ms = run(reps)?;
            if let Some(aq) = mv.activations() {
                let t = Instant::now();
                gpu.begin_step();
                for _ in 0..reps {
                    aq.run(&gpu, &xb, cols)?;
                }
                gpu.finish_step();
                gpu.read_f32(&yb, 1)?;
                let q = t.elapsed().as_secs_f64() * 1e3 / reps as f64;
                print!("(quantize {q:.3} ms) ");
            }
            let gbs = (rows * rb) as f64 / (ms * 1e-3) / 1e9;
            println!("{ty:>5} {rows:>6}x{cols:<5} tpr {tpr:>2}: {ms:8.3} ms  {gbs:6.2} GB/s");
        }
    }
    Ok(())
}
