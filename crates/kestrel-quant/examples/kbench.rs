//! Throughput of the dot kernels on an L2-resident and a DRAM-sized matrix
//! (one thread): `cargo run --release -p kestrel-quant --example kbench`.
use kestrel_quant::{dot_kernel, quantize_activations, quantize_row, DotPath, GgmlType};
use std::time::Instant;

fn main() {
    let cols = 896;
    for ty in [
        GgmlType::Q8_0,
        GgmlType::Q5_0,
        GgmlType::Q4_1,
        GgmlType::Q4_K,
        GgmlType::Q6_K,
    ] {
        let cols = if matches!(ty, GgmlType::Q4_K | GgmlType::Q6_K) {
            1024
        } else {
            cols
        };
        let x: Vec<f32> = (0..cols)
            .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
            .collect();
        let rb = ty.row_bytes(cols as u64).unwrap() as usize;
        let mut row = vec![0u8; rb];
        quantize_row(ty, &x, &mut row);
        let a = quantize_activations(ty, &x);
        let f = dot_kernel(DotPath::VecDot, ty);
        for rows in [64usize, 200_000] {
            let w: Vec<u8> = row.iter().copied().cycle().take(rb * rows).collect();
            let mut s = 0f32;
            let reps = (400_000_000 / (rb * rows)).max(1);
            let t0 = Instant::now();
            for _ in 0..reps {
                for r in 0..rows {
                    s += f(cols, &w[r * rb..(r + 1) * rb], &a);
                }
            }
            let dt = t0.elapsed().as_secs_f64();
            println!(
                "{ty} rows {rows}: {:.2} GB/s ({s})",
                (rb * rows * reps) as f64 / dt / 1e9
            );
        }
    }
}
