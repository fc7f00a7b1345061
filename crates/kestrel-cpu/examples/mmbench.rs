//! Throughput of `matmul` for a few activation rows (batched decode) on a
//! DRAM-sized weight matrix, in multiply-adds per second.
//! usage: cargo run --release -p kestrel-cpu --example mmbench -- [THREADS]

use std::time::Instant;

use kestrel_cpu::matmul::{matmul, MatRef};
use kestrel_gguf::GgmlType;
use kestrel_quant::quantize_row;

fn main() {
    let threads = std::env::args()
        .nth(1)
        .map_or(1, |t| t.parse().expect("threads"));
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap();
    for ty in [GgmlType::Q4_1, GgmlType::Q8_0] {
        let (rows, cols) = (65536usize, 576usize);
        let rb = ty.row_bytes(cols as u64).unwrap() as usize;
        let mut data = vec![0u8; rb * rows];
        let row: Vec<f32> = (0..cols)
            .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
            .collect();
        for r in 0..rows {
            quantize_row(ty, &row, &mut data[r * rb..(r + 1) * rb]);
        }
        let w = MatRef {
            ty,
            rows,
            cols,
            data: &data,
        };
        for n_tok in [1usize, 2, 4, 8] {
            let x: Vec<f32> = (0..n_tok * cols)
                .map(|i| ((i * 31) % 97) as f32 / 50.0 - 1.0)
                .collect();
            let mut out = vec![0f32; n_tok * rows];
            matmul(w, &x, n_tok, &mut out, &pool);
            let reps = 10;
            let t0 = Instant::now();
            for _ in 0..reps {
                matmul(w, &x, n_tok, &mut out, &pool);
            }
            let s = t0.elapsed().as_secs_f64() / reps as f64;
            println!(
                "{ty} n_tok {n_tok}: {:.2} ms, {:.1} GMAC/s, {:.1} GB/s of weights",
                s * 1e3,
                (rows * cols * n_tok) as f64 / s / 1e9,
                data.len() as f64 / s / 1e9
            );
        }
    }
}
