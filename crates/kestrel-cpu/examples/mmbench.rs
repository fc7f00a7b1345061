//! Throughput of `matmul` for a few activation rows (batched decode) on a
//! DRAM-sized weight matrix, in multiply-adds per second; with `prefill`, a
//! 128-token prompt batch through Qwen2.5-0.5B-shaped Q5_0/Q4_1 matrices.
//! usage: cargo run --release -p kestrel-cpu --example mmbench -- [THREADS] [prefill]
//! (decode: ROWS sets the matrix's rows, 65536 by default, so that it
//! comes from DRAM; a few thousand fit in L2; COLS its columns, 576; REPS
//! the repetitions)
//! (prefill: ROWS and COLS set one shape instead, NTOK the batch, REPS the
//! repetitions, TYPES the formats)

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
    if std::env::args().nth(2).as_deref() == Some("prefill") {
        prefill(&pool);
        return;
    }
    for ty in [GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q8_0] {
        let rows = env_usize("ROWS").unwrap_or(65536);
        let cols = env_usize("COLS").unwrap_or(576);
        let row: Vec<f32> = (0..cols)
            .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
            .collect();
        let data = quantized(ty, rows, cols, |_| row.clone());
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
            let reps = env_usize("REPS").unwrap_or(10);
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

/// A prompt batch: every weight row meets 128 distinct activation rows.
fn prefill(pool: &rayon::ThreadPool) {
    let env = env_usize;
    let n_tok = env("NTOK").unwrap_or(128);
    let shapes = match (env("ROWS"), env("COLS")) {
        (Some(r), Some(c)) => vec![(r, c)],
        _ => vec![(4864usize, 896usize), (896, 4864)],
    };
    // TYPES (names as GGUF prints them, comma-separated) picks the formats.
    let all = [
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q8_0,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
    ];
    let types: Vec<GgmlType> = match std::env::var("TYPES") {
        Ok(t) => t
            .split(',')
            .map(|n| *all.iter().find(|ty| ty.name() == n).expect("TYPES"))
            .collect(),
        Err(_) => vec![GgmlType::Q5_0, GgmlType::Q4_1],
    };
    for ty in types {
        for &(rows, cols) in &shapes {
            let mut s = 7u32;
            let mut rnd = move || {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                (s as f32 / u32::MAX as f32) - 0.5
            };
            let data = quantized(ty, rows, cols, |_| (0..cols).map(|_| rnd()).collect());
            let w = MatRef {
                ty,
                rows,
                cols,
                data: &data,
            };
            let x: Vec<f32> = (0..n_tok * cols).map(|_| rnd()).collect();
            let mut out = vec![0f32; n_tok * rows];
            matmul(w, &x, n_tok, &mut out, pool);
            let reps = std::env::var("REPS").map_or(5, |r| r.parse().expect("REPS"));
            let t0 = Instant::now();
            for _ in 0..reps {
                matmul(w, &x, n_tok, &mut out, pool);
            }
            let s = t0.elapsed().as_secs_f64() / reps as f64;
            println!(
                "{ty} {rows}x{cols} n_tok {n_tok}: {:.2} ms, {:.1} GMAC/s",
                s * 1e3,
                (rows * cols * n_tok) as f64 / s / 1e9
            );
        }
    }
}

/// A `rows` x `cols` matrix of `ty`, row r quantized from `row(r)`.
fn quantized(
    ty: GgmlType,
    rows: usize,
    cols: usize,
    mut row: impl FnMut(usize) -> Vec<f32>,
) -> Vec<u8> {
    let rb = ty.row_bytes(cols as u64).unwrap() as usize;
    let mut data = vec![0u8; rb * rows];
    for r in 0..rows {
        quantize_row(ty, &row(r), &mut data[r * rb..(r + 1) * rb]);
    }
    data
}

/// A whole-number setting from the environment, if set and valid.
fn env_usize(key: &str) -> Option<usize> {
    std::env::var(key).ok().and_then(|v| v.parse().ok())
}
