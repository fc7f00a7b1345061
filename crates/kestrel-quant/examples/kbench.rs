//! Throughput of the dot kernels on an L2-resident and a DRAM-sized matrix
//! (one thread), and of the four-row prefill kernels on L1-resident data in
//! multiply-adds per second: `cargo run --release -p kestrel-quant --example kbench`.
//! (FOUR_ONLY=1: the four-token rates alone; COLS: their legacy formats'
//! row length, 896 by default; TYPES=q4_1,q8_0: those formats alone.)
use kestrel_quant::{
    dot2_kernel, dot4_kernel, dot_band_kernel, dot_kernel, dot_rows4_kernel, quantize_activations,
    quantize_row, DotPath, GgmlType,
};
use std::time::Instant;

fn main() {
    // FOUR_ONLY: the four-token rates alone.
    if std::env::var("FOUR_ONLY").is_ok() {
        prefill_rates();
        return;
    }
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
        // Each type's decode path (Q4_K's is llama.cpp's repacked gemv).
        let path = if ty == GgmlType::Q4_K {
            DotPath::RepackGemv
        } else {
            DotPath::VecDot
        };
        let f = dot_kernel(path, ty);
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
            if let Some(f2) = dot2_kernel(path, ty) {
                let t0 = Instant::now();
                for _ in 0..reps {
                    let half = rows / 2;
                    for r in 0..half {
                        let v = f2(
                            &w[r * rb..(r + 1) * rb],
                            &w[(half + r) * rb..(half + r + 1) * rb],
                            &a,
                        );
                        s += v[0] + v[1];
                    }
                }
                let dt = t0.elapsed().as_secs_f64();
                println!(
                    "{ty} rows {rows}, two at a time: {:.2} GB/s ({s})",
                    (rb * rows * reps) as f64 / dt / 1e9
                );
            }
            if let Some(f4) = dot_rows4_kernel(path, ty) {
                let t0 = Instant::now();
                for _ in 0..reps {
                    let q = rows / 4;
                    for r in 0..q {
                        let at = |k: usize| &w[(k * q + r) * rb..(k * q + r + 1) * rb];
                        let v = f4([at(0), at(1), at(2), at(3)], &a);
                        s += v[0] + v[1] + v[2] + v[3];
                    }
                }
                let dt = t0.elapsed().as_secs_f64();
                println!(
                    "{ty} rows {rows}, four at a time: {:.2} GB/s ({s})",
                    (rb * rows * reps) as f64 / dt / 1e9
                );
            }
            // The same four streams through the band kernel, one call.
            if let Some(band) = dot_band_kernel(path, ty) {
                let mut out = vec![0f32; rows];
                let t0 = Instant::now();
                for _ in 0..reps {
                    band(&w, &a, &mut out);
                    s += out[0] + out[rows - 1];
                }
                let dt = t0.elapsed().as_secs_f64();
                println!(
                    "{ty} rows {rows}, band: {:.2} GB/s ({s})",
                    (rb * rows * reps) as f64 / dt / 1e9
                );
            }
        }
    }
    prefill_rates();
}

/// Four activation rows against 16 weight rows of 896 (or 1024) columns,
/// repeated: the prefill kernels' arithmetic rate with every byte in L1.
fn prefill_rates() {
    // TYPES: these formats alone.
    let wanted = std::env::var("TYPES").ok();
    for (ty, path) in [
        (GgmlType::Q8_0, DotPath::VecDot),
        (GgmlType::Q5_0, DotPath::VecDot),
        (GgmlType::Q4_1, DotPath::VecDot),
        (GgmlType::Q4_K, DotPath::RepackGemm),
        (GgmlType::Q6_K, DotPath::Tiled),
    ] {
        if wanted.as_deref().is_some_and(|w| {
            !w.split(',')
                .any(|t| t.eq_ignore_ascii_case(&ty.to_string()))
        }) {
            continue;
        }
        let Some(f) = dot4_kernel(path, ty) else {
            continue;
        };
        // COLS sets the legacy formats' row length (SmolLM2's is 576).
        let legacy_cols = std::env::var("COLS")
            .ok()
            .and_then(|c| c.parse().ok())
            .unwrap_or(896);
        let cols = if matches!(ty, GgmlType::Q4_K | GgmlType::Q6_K) {
            1024
        } else {
            legacy_cols
        };
        let x: Vec<f32> = (0..cols)
            .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
            .collect();
        let rb = ty.row_bytes(cols as u64).unwrap() as usize;
        let mut row = vec![0u8; rb];
        quantize_row(ty, &x, &mut row);
        let rows = 16;
        let w: Vec<u8> = row.iter().copied().cycle().take(rb * rows).collect();
        let acts: Vec<Vec<u8>> = (0..4).map(|_| quantize_activations(ty, &x)).collect();
        let a = [&acts[0][..], &acts[1], &acts[2], &acts[3]];
        let reps = 20_000;
        let mut pre = Vec::new();
        (f.prepare)(a, &mut pre);
        let mut s = 0f32;
        let t0 = Instant::now();
        for _ in 0..reps {
            for r in 0..rows {
                s += (f.dot)(&w[r * rb..(r + 1) * rb], a, &pre)[0];
            }
        }
        let dt = t0.elapsed().as_secs_f64();
        println!(
            "{ty} x4 {path:?}: {:.2} GMAC/s ({s})",
            (4 * cols * rows * reps) as f64 / dt / 1e9
        );
        // Eight rows at a time, unpacking each weight row per call, then
        // from rows unpacked once (as a prompt's row tile does).
        let Some(dot8) = f.dot8 else { continue };
        let t0 = Instant::now();
        for _ in 0..reps / 2 {
            for r in 0..rows {
                s += dot8(&w[r * rb..(r + 1) * rb], &pre, &pre)[0];
            }
        }
        let dt = t0.elapsed().as_secs_f64();
        println!(
            "{ty} x8 {path:?}: {:.2} GMAC/s ({s})",
            (8 * cols * rows * (reps / 2)) as f64 / dt / 1e9
        );
        // Four rows against the group at once (batched decode's kernel).
        if let Some(rows4) = f.rows4 {
            let mut pre = Vec::new();
            (f.rows4_prepare)(a, &mut pre);
            let row = |r: usize| &w[r * rb..(r + 1) * rb];
            let t0 = Instant::now();
            for _ in 0..reps {
                for r in 0..rows / 4 {
                    let q = rows / 4;
                    s += rows4([row(r), row(q + r), row(2 * q + r), row(3 * q + r)], &pre)[0][0];
                }
            }
            let dt = t0.elapsed().as_secs_f64();
            println!(
                "{ty} x4 rows4 {path:?}: {:.2} GMAC/s ({s})",
                (4 * cols * rows * reps) as f64 / dt / 1e9
            );
        }
        let Some(unpacked) = f.unpacked else {
            continue;
        };
        let mut uw = vec![Vec::new(); rows];
        for (r, u) in uw.iter_mut().enumerate() {
            (unpacked.unpack)(&w[r * rb..(r + 1) * rb], u);
        }
        let (mut pre0, mut pre1) = (Vec::new(), Vec::new());
        (unpacked.prepare)(a, &mut pre0);
        (unpacked.prepare)([a[3], a[2], a[1], a[0]], &mut pre1);
        let t0 = Instant::now();
        for _ in 0..reps / 2 {
            for u in &uw {
                s += (unpacked.dot8)(u, &pre0, &pre1)[0];
            }
        }
        let dt = t0.elapsed().as_secs_f64();
        println!(
            "{ty} x8 unpacked {path:?}: {:.2} GMAC/s ({s})",
            (8 * cols * rows * (reps / 2)) as f64 / dt / 1e9
        );
    }
}
