//! Every GPU kernel against its CPU twin on random data (lavapipe in CI).
//!
//! Matrix-vector products: the GPU multiplies the dequantized weights by
//! f32 activations, so it is held to an f64 product of the CPU's own
//! dequantization (`kestrel_quant::dequantize_row`) within 1e-5 of
//! sum |w_i x_i| (f32 sums of up to a few thousand terms). Against the CPU
//! backend's product, which first rounds the activations to 8 bits (Q8_0,
//! Q8_1 or Q8_K per block), the bound is that rounding: 1.5e-2 of
//! sum |w_i x_i| for the 8-bit formats, the float types within 1e-3 (F16
//! activations for F16 weights).
//! RMSNorm: within 1e-5 of the CPU's, relative to the row's largest output.

use kestrel_gguf::GgmlType;
use kestrel_gpu::matvec::MatVec;
use kestrel_gpu::norm::RmsNorm;
use kestrel_gpu::Gpu;
use std::sync::OnceLock;

fn gpu() -> &'static Gpu {
    static GPU: OnceLock<Gpu> = OnceLock::new();
    GPU.get_or_init(|| {
        let g = Gpu::new().unwrap_or_else(|e| panic!("{e}"));
        eprintln!("GPU tests on {}", g.adapter);
        g
    })
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}

const TYPES: [GgmlType; 9] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::Q8_0,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q4_K,
    GgmlType::Q6_K,
];

/// Quantized random weights, their CPU dequantization and a random x.
fn case(ty: GgmlType, rows: usize, cols: usize, seed: u64) -> (Vec<u8>, Vec<f32>, Vec<f32>) {
    let mut rng = Rng(seed | 1);
    let rb = ty.row_bytes(cols as u64).unwrap() as usize;
    let mut bytes = vec![0u8; rows * rb];
    let mut deq = vec![0f32; rows * cols];
    for r in 0..rows {
        let wf: Vec<f32> = (0..cols).map(|_| rng.next()).collect();
        kestrel_quant::quantize_row(ty, &wf, &mut bytes[r * rb..(r + 1) * rb]);
        kestrel_quant::dequantize_row(
            ty,
            &bytes[r * rb..(r + 1) * rb],
            &mut deq[r * cols..(r + 1) * cols],
        );
    }
    let x: Vec<f32> = (0..cols).map(|_| rng.next()).collect();
    (bytes, deq, x)
}

fn gpu_matvec(ty: GgmlType, rows: usize, cols: usize, bytes: &[u8], x: &[f32]) -> Vec<f32> {
    let g = gpu();
    let m = g.upload_matrix("w", ty, rows, cols, bytes).expect("upload");
    let xb = g.upload_f32("x", x).unwrap();
    let yb = g.scratch_f32("y", rows);
    MatVec::new(g, ty)
        .expect("kernel")
        .run(g, &m, &xb, &yb)
        .expect("run");
    g.read_f32(&yb, rows).expect("read back")
}

#[test]
fn matvec_matches_the_cpu_for_every_type() {
    let mut failures = Vec::new();
    for (i, &ty) in TYPES.iter().enumerate() {
        // Odd row counts; rows of 1 to 6 K-quant blocks (a unit count that
        // is not a multiple of the 64 threads, and one above it).
        for (rows, cols) in [(37usize, 512usize), (5, 1536), (3, 2560)] {
            let (bytes, deq, x) = case(ty, rows, cols, 1000 + i as u64 * 7 + cols as u64);
            let got = gpu_matvec(ty, rows, cols, &bytes, &x);
            let mut cpu = vec![0f32; rows];
            let pool = rayon_pool();
            kestrel_cpu::matmul::matmul(
                kestrel_cpu::matmul::MatRef {
                    ty,
                    rows,
                    cols,
                    data: &bytes,
                },
                &x,
                1,
                &mut cpu,
                &pool,
            );
            let cpu_tol = match ty {
                GgmlType::F32 => 1e-5,
                GgmlType::F16 => 1e-3,
                _ => 1.5e-2,
            };
            for r in 0..rows {
                let w = &deq[r * cols..(r + 1) * cols];
                let exact: f64 = w.iter().zip(&x).map(|(&a, &b)| a as f64 * b as f64).sum();
                let mag: f64 = w
                    .iter()
                    .zip(&x)
                    .map(|(&a, &b)| (a as f64 * b as f64).abs())
                    .sum();
                let err = (got[r] as f64 - exact).abs() / mag;
                if err > 1e-5 {
                    failures.push(format!(
                        "{ty} {rows}x{cols} row {r}: gpu {} exact {exact} (err {err:.2e})",
                        got[r]
                    ));
                }
                let err_cpu = (got[r] as f64 - cpu[r] as f64).abs() / mag;
                if err_cpu > cpu_tol {
                    failures.push(format!(
                        "{ty} {rows}x{cols} row {r}: gpu {} cpu {} (err {err_cpu:.2e})",
                        got[r], cpu[r]
                    ));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

fn rayon_pool() -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .unwrap()
}

/// The bound above is tight enough to see a layout mistake: the same
/// weights read as the wrong format, or one scale misplaced, miss it.
#[test]
fn matvec_check_notices_a_wrong_layout() {
    let (rows, cols) = (8, 512);
    // Q4_1 bytes read by the Q4_0-sized kernel would be a shape error;
    // instead flip one scale byte and compare with the untouched reference.
    for &ty in &[GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q5_0] {
        let (mut bytes, deq, x) = case(ty, rows, cols, 77);
        let at = match ty {
            GgmlType::Q4_K => 4 + 5,   // a 6-bit scale of sub-block 5
            GgmlType::Q6_K => 192 + 3, // the scale of values 48..64
            _ => 3,                    // Q5_0: a fifth-bit byte
        };
        bytes[at] ^= 0x05;
        let got = gpu_matvec(ty, rows, cols, &bytes, &x);
        let exact: f64 = deq[..cols]
            .iter()
            .zip(&x)
            .map(|(&a, &b)| a as f64 * b as f64)
            .sum();
        let mag: f64 = deq[..cols]
            .iter()
            .zip(&x)
            .map(|(&a, &b)| (a as f64 * b as f64).abs())
            .sum();
        assert!(
            (got[0] as f64 - exact).abs() / mag > 1e-4,
            "{ty}: a changed byte went unnoticed"
        );
    }
}

#[test]
fn matvec_covers_more_rows_than_one_grid_row() {
    // Past 32768 workgroups the grid wraps into a second dimension.
    let (rows, cols, ty) = (40_000usize, 32usize, GgmlType::Q8_0);
    let (bytes, deq, x) = case(ty, rows, cols, 5);
    let got = gpu_matvec(ty, rows, cols, &bytes, &x);
    for r in [0, 1, 32_767, 32_768, 32_769, 39_999] {
        let exact: f64 = deq[r * cols..(r + 1) * cols]
            .iter()
            .zip(&x)
            .map(|(&a, &b)| a as f64 * b as f64)
            .sum();
        assert!(
            (got[r] as f64 - exact).abs() < 1e-4,
            "row {r}: {} vs {exact}",
            got[r]
        );
    }
}

#[test]
fn matvec_refuses_bad_shapes_by_name() {
    let g = gpu();
    let e = g
        .upload_matrix("blk.0.x", GgmlType::Q4_K, 2, 100, &[0u8; 10])
        .err()
        .unwrap();
    assert!(e.to_string().contains("blk.0.x"), "{e}");
    let e = g
        .upload_matrix("t", GgmlType::Q8_0, 2, 64, &[0u8; 10])
        .err()
        .unwrap();
    assert!(e.to_string().contains("10 bytes"), "{e}");
    assert!(MatVec::new(g, GgmlType::Q2_K).is_err());
}

#[test]
fn rms_norm_matches_the_cpu() {
    let g = gpu();
    let norm = RmsNorm::new(g);
    for (rows, width) in [(3usize, 576usize), (2, 1000), (1, 7)] {
        let mut rng = Rng(width as u64 * 31);
        let x: Vec<f32> = (0..rows * width).map(|_| rng.next() * 3.0).collect();
        let w: Vec<f32> = (0..width).map(|_| rng.next()).collect();
        let (xb, wb, yb) = (
            g.upload_f32("x", &x).unwrap(),
            g.upload_f32("w", &w).unwrap(),
            g.scratch_f32("y", rows * width),
        );
        norm.run(g, (&xb, &wb, &yb), (rows, width), 1e-6).unwrap();
        let got = g.read_f32(&yb, rows * width).unwrap();
        for r in 0..rows {
            let mut want = vec![0f32; width];
            kestrel_cpu::ops::rms_norm(&x[r * width..(r + 1) * width], &w, 1e-6, &mut want);
            let big = want.iter().fold(0f32, |m, v| m.max(v.abs()));
            for (i, (a, b)) in got[r * width..(r + 1) * width]
                .iter()
                .zip(&want)
                .enumerate()
            {
                assert!(
                    (a - b).abs() <= 1e-5 * big,
                    "row {r} [{i}]: gpu {a} cpu {b}"
                );
            }
        }
    }
}

/// The embedding lookup reads the token id from the history buffer and
/// dequantizes that row as the CPU does (to the last bit or two: a GPU
/// compiler may fuse d * q + m into one rounding).
#[test]
fn embedding_reads_the_token_from_history() {
    let g = gpu();
    for (i, &ty) in TYPES.iter().enumerate() {
        let (rows, cols) = (50usize, 512usize);
        let (bytes, deq, _) = case(ty, rows, cols, 300 + i as u64);
        let m = g.upload_matrix("tok_embd", ty, rows, cols, &bytes).unwrap();
        let embed = kestrel_gpu::embed::Embed::new(g, ty).unwrap();
        let history = g.upload_u32("history", &[5, 49, 17, 0]).unwrap();
        let y = g.scratch_f32("x", cols);
        for (pos, tok, scale) in [(1usize, 49usize, 1.0f32), (2, 17, 22.6)] {
            embed.run(g, &m, (&history, &y), pos, scale).unwrap();
            let got = g.read_f32(&y, cols).unwrap();
            let want = &deq[tok * cols..(tok + 1) * cols];
            let big = want.iter().fold(0f32, |a, v| a.max(v.abs())) * scale;
            for (j, (a, b)) in got.iter().zip(want).enumerate() {
                let b = b * scale;
                assert!(
                    (a - b).abs() <= 1e-6 * big,
                    "{ty} token {tok} [{j}]: gpu {a} cpu {b}"
                );
            }
        }
    }
}
