//! Every GPU kernel against its CPU twin on random data (lavapipe in CI).
//!
//! Matrix-vector products: the GPU rounds the activations to 8 bits on the
//! device exactly as the CPU does (checked bit for bit), sums each block's
//! products as integers and applies the scales in f32, so it is held to the
//! CPU's own products (the portable `vec_dot` and the CPU backend's matmul)
//! within 1e-5 of sum |w_i x_i|, and the legacy block types, which add in
//! ggml's order, to the CPU matmul's bits. The float types are held to the
//! same bound (F16 weights take x rounded to f16 on both devices).
//! RMSNorm: the CPU's bits.

use kestrel_gguf::GgmlType;
use kestrel_gpu::matvec::{Layout, MatVec};
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

/// Whether the CPU's libm expf is the build the GPU emulates; says so
/// once when it is not, as the checks that need it fall back to bounds.
fn libm_is_emulated() -> bool {
    let yes = kestrel_gpu::exact::host_expf_is_glibc_fma();
    if !yes {
        static SAID: std::sync::Once = std::sync::Once::new();
        SAID.call_once(|| {
            eprintln!("NOTE: libm is not glibc's FMA build: exps held to bounds, not bits")
        });
    }
    yes
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

/// The types whose products give the CPU's bits.
const LANE_TYPES: [GgmlType; 5] = [
    GgmlType::Q8_0,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
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
    gpu_matvec_with(ty, (rows, cols), bytes, x, 1)
}

/// Every layout the products are built in: threads per row, and native
/// or unpacked byte dots.
const LAYOUTS: [(u32, bool); 4] = [(1, false), (4, true), (32, false), (32, true)];

/// The product with `tpr` threads per row (and native dots from 4 up).
fn gpu_matvec_with(
    ty: GgmlType,
    (rows, cols): (usize, usize),
    bytes: &[u8],
    x: &[f32],
    tpr: u32,
) -> Vec<f32> {
    gpu_matvec_layout(
        ty,
        (rows, cols),
        bytes,
        x,
        Layout {
            tpr,
            native_dot: tpr >= 4,
            subgroups: false,
        },
    )
}

fn gpu_matvec_layout(
    ty: GgmlType,
    (rows, cols): (usize, usize),
    bytes: &[u8],
    x: &[f32],
    layout: Layout,
) -> Vec<f32> {
    let g = gpu();
    let m = g.upload_matrix("w", ty, rows, cols, bytes).expect("upload");
    let xb = g.upload_f32("x", x).unwrap();
    let yb = g.scratch_f32("y", rows);
    MatVec::with_layout(g, ty, cols, layout)
        .expect("kernel")
        .run(g, &m, &xb, &yb)
        .expect("run");
    g.read_f32(&yb, rows).expect("read back")
}

#[test]
fn matvec_matches_the_cpu_for_every_type() {
    let mut failures = Vec::new();
    for (i, &ty) in TYPES.iter().enumerate() {
        // Odd row counts; rows of 1 to 10 K-quant blocks (unit counts that
        // are not a multiple of the threads per row, and above 64).
        // (40 rows: Q4_0 as the CPU repacks it, one chain per row.)
        for (rows, cols) in [(37usize, 512usize), (5, 1536), (3, 2560), (40, 256)] {
            let (bytes, deq, mut x) = case(ty, rows, cols, 1000 + i as u64 * 7 + cols as u64);
            // Activations of very different sizes per block, as a model's
            // are (and small enough for subnormal f16 scales).
            for (j, v) in x.iter_mut().enumerate() {
                *v *= [1.0, 1e-4, 30.0, 1e-6][(j / 256) % 4];
            }
            let pool = rayon_pool();
            let mut cpu = vec![0f32; rows];
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
            let rb = bytes.len() / rows;
            let act = kestrel_quant::quantize_activations(ty, &x);
            let portable = kestrel_quant::portable_kernels(ty);
            for (tpr, native_dot) in LAYOUTS {
                let layout = Layout {
                    tpr,
                    native_dot,
                    subgroups: false,
                };
                let got = gpu_matvec_layout(ty, (rows, cols), &bytes, &x, layout);
                for r in 0..rows {
                    let w = &deq[r * cols..(r + 1) * cols];
                    let mag: f64 = w
                        .iter()
                        .zip(&x)
                        .map(|(&a, &b)| (a as f64 * b as f64).abs())
                        .sum();
                    let twin = (portable.vec_dot)(cols, &bytes[r * rb..(r + 1) * rb], &act);
                    for (what, want) in [("portable vec_dot", twin), ("cpu matmul", cpu[r])] {
                        let err = (got[r] as f64 - want as f64).abs() / mag;
                        // The legacy types sum in the CPU's (ggml's) order.
                        let bits = LANE_TYPES.contains(&ty) && what == "cpu matmul";
                        if (bits && got[r].to_bits() != want.to_bits()) || err > 1e-5 {
                            failures.push(format!(
                                "{ty} {rows}x{cols} {layout:?} row {r}: gpu {} {what} {want} (err {err:.2e})",
                                got[r]
                            ));
                        }
                    }
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

/// The device rounds activations to Q8_0, Q8_1 and Q8_K bit for bit as the
/// CPU does: the same quants, the same f16 (or f32) scales and sums.
#[test]
fn activation_quantization_is_bit_identical_to_the_cpu() {
    let g = gpu();
    let n = 2048;
    let mut rng = Rng(99);
    let mut x: Vec<f32> = (0..n).map(|_| rng.next()).collect();
    // Per-256 scales from subnormal f16 territory to large; an all-zero
    // block; a block whose largest magnitude is negative; exact ties.
    let scales = [1.0, 3e-6, 1e-3, 250.0, 0.0, 1.0, 7.5, 1e-5];
    for (j, v) in x.iter_mut().enumerate() {
        *v *= scales[j / 256];
    }
    x[5 * 256 + 17] = -40.0;
    for (j, v) in x[6 * 256..6 * 256 + 32].iter_mut().enumerate() {
        *v = (j as f32 - 16.0) * 0.5;
    }
    let xb = g.upload_f32("x", &x).unwrap();
    for (wt, at) in [
        (GgmlType::Q8_0, GgmlType::Q8_0),
        (GgmlType::Q4_1, GgmlType::Q8_1),
        (GgmlType::Q4_K, GgmlType::Q8_K),
    ] {
        let mv = MatVec::new(g, wt, n).unwrap();
        let aq = mv.activations().expect("a quantized type quantizes x");
        assert_eq!(aq.ty, at);
        aq.run(g, &xb, n).unwrap();
        let q = g.read_u32(&aq.q, n / 4).unwrap();
        let qbytes: Vec<u8> = q.iter().flat_map(|w| w.to_le_bytes()).collect();
        let cpu = kestrel_quant::quantize_activations(wt, &x);
        let mut bad = Vec::new();
        match at {
            GgmlType::Q8_K => {
                let meta = g.read_u32(&aq.meta, (n / 256) * 17).unwrap();
                // d (f32), 256 quants, 16 i16 sums.
                for (b, blk) in cpu.chunks_exact(4 + 256 + 32).enumerate() {
                    if blk[..4] != meta[17 * b].to_le_bytes() {
                        bad.push(format!("block {b}: d"));
                    }
                    if blk[4..260] != qbytes[256 * b..256 * (b + 1)] {
                        bad.push(format!("block {b}: quants"));
                    }
                    for s in 0..16 {
                        let want = i16::from_le_bytes([blk[260 + 2 * s], blk[261 + 2 * s]]);
                        if i32::from(want) != meta[17 * b + 1 + s] as i32 {
                            bad.push(format!("block {b}: sum {s}"));
                        }
                    }
                }
            }
            _ => {
                let words = if at == GgmlType::Q8_1 { 2 } else { 1 };
                let head = 2 * words;
                let meta = g.read_f32(&aq.meta, (n / 32) * words).unwrap();
                for (b, blk) in cpu.chunks_exact(head + 32).enumerate() {
                    for k in 0..words {
                        let half = u16::from_le_bytes([blk[2 * k], blk[2 * k + 1]]);
                        let want = kestrel_quant::f16_to_f32(half);
                        if want.to_bits() != meta[words * b + k].to_bits() {
                            bad.push(format!(
                                "block {b}: scale {k} gpu {} cpu {want}",
                                meta[words * b + k]
                            ));
                        }
                    }
                    if blk[head..] != qbytes[32 * b..32 * (b + 1)] {
                        bad.push(format!("block {b}: quants"));
                    }
                }
            }
        }
        assert!(bad.is_empty(), "{at}: {}", bad.join(", "));
    }
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
    // One row per workgroup to get there.
    let (rows, cols, ty) = (40_000usize, 32usize, GgmlType::Q8_0);
    let (bytes, deq, x) = case(ty, rows, cols, 5);
    let got = gpu_matvec_with(ty, (rows, cols), &bytes, &x, 64);
    let act = kestrel_quant::quantize_activations(ty, &x);
    for r in [0, 1, 32_767, 32_768, 32_769, 39_999] {
        let want = kestrel_quant::vec_dot(ty, cols, &bytes[34 * r..34 * (r + 1)], &act);
        let mag: f64 = deq[r * cols..(r + 1) * cols]
            .iter()
            .zip(&x)
            .map(|(&a, &b)| (a as f64 * b as f64).abs())
            .sum();
        assert!(
            ((got[r] - want) as f64).abs() <= 1e-5 * mag,
            "row {r}: {} vs {want}",
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
    assert!(MatVec::new(g, GgmlType::Q2_K, 256).is_err());
    let odd = Layout {
        tpr: 3,
        native_dot: false,
        subgroups: false,
    };
    assert!(MatVec::with_layout(g, GgmlType::Q8_0, 256, odd).is_err());
}

/// RMSNorm gives the CPU's bits (its f64 sum of squares is reproduced by an
/// exact integer sum, its square root and division are rounded correctly)
/// on rows of every scale: small, large, with a few huge outliers (as
/// SmolLM2's activations have), mixed with subnormals, and all zeros.
#[test]
fn rms_norm_matches_the_cpu() {
    let g = gpu();
    let norm = RmsNorm::new(g);
    let mut failures = Vec::new();
    for (rows, width) in [(6usize, 576usize), (6, 1000), (6, 12), (6, 4096), (6, 64)] {
        let mut rng = Rng(width as u64 * 31);
        let mut x: Vec<f32> = Vec::with_capacity(rows * width);
        for r in 0..rows {
            for i in 0..width {
                let v = rng.next();
                x.push(match r {
                    0 => v * 3.0,
                    1 => v * 1e-3,
                    2 => v * 1e3,
                    // A few huge values among ordinary ones.
                    3 => v * if i % 97 == 5 { 3e4 } else { 1.0 },
                    4 => v * if i % 2 == 0 { 1e-41 } else { 1e-20 },
                    _ => 0.0,
                });
            }
        }
        let w: Vec<f32> = (0..width).map(|_| rng.next()).collect();
        let (xb, wb, yb) = (
            g.upload_f32("x", &x).unwrap(),
            g.upload_f32("w", &w).unwrap(),
            g.scratch_f32("y", rows * width),
        );
        for eps in [1e-6f32, 1e-5] {
            norm.run(g, (&xb, &wb, &yb), (rows, width), eps).unwrap();
            let got = g.read_f32(&yb, rows * width).unwrap();
            for r in 0..rows {
                let mut want = vec![0f32; width];
                kestrel_cpu::ops::rms_norm(&x[r * width..(r + 1) * width], &w, eps, &mut want);
                let row = &got[r * width..(r + 1) * width];
                if let Some(i) = (0..width).find(|&i| row[i].to_bits() != want[i].to_bits()) {
                    failures.push(format!(
                        "width {width} row {r} eps {eps} [{i}]: gpu {} cpu {}",
                        row[i], want[i]
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let (xb, yb) = (g.scratch_f32("x", 7), g.scratch_f32("y", 7));
    let e = norm.run(g, (&xb, &xb, &yb), (1, 7), 1e-6).unwrap_err();
    assert!(e.to_string().contains("multiple of 4"), "{e}");
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

/// RoPE from the host-built table rotates as the CPU, to the bit (same
/// cos/sin bits, the same fused form, `fmaf` rounding once where the
/// adapter's fma does not); both pairings, odd positions, a partial
/// rotation.
#[test]
fn rope_matches_the_cpu() {
    use kestrel_cpu::ops::{rope_apply, rope_cache};
    let g = gpu();
    let ops = kestrel_gpu::ops::Ops::new(g);
    let (n_tok, n_head, head_dim) = (3usize, 4usize, 64usize);
    for (neox, n_rot, base) in [
        (false, 64usize, 10000.0f32),
        (true, 64, 1_000_000.0),
        (true, 32, 10000.0),
    ] {
        let positions = [0u32, 7, 4095];
        let max_pos = 4096;
        let mut table = Vec::with_capacity(max_pos * n_rot);
        let mut row = Vec::new();
        for p in 0..max_pos {
            rope_cache(p, n_rot, base, 1.0, &mut row);
            table.extend_from_slice(&row);
        }
        let mut rng = Rng(n_rot as u64 + u64::from(neox));
        let v: Vec<f32> = (0..n_tok * n_head * head_dim).map(|_| rng.next()).collect();
        let vb = g.upload_f32("v", &v).unwrap();
        let tb = g.upload_f32("table", &table).unwrap();
        let pb = g.upload_u32("pos", &positions).unwrap();
        ops.rope(g, (&vb, &tb, &pb), n_tok, n_head, head_dim, n_rot, neox)
            .unwrap();
        let got = g.read_f32(&vb, v.len()).unwrap();
        let mut want = v.clone();
        for (t, &p) in positions.iter().enumerate() {
            rope_cache(p as usize, n_rot, base, 1.0, &mut row);
            for h in 0..n_head {
                let at = (t * n_head + h) * head_dim;
                rope_apply(&mut want[at..at + head_dim], &row, n_rot, neox);
            }
        }
        for (i, (a, b)) in got.iter().zip(&want).enumerate() {
            assert_eq!(
                a.to_bits(),
                b.to_bits(),
                "neox {neox} n_rot {n_rot} [{i}]: gpu {a} cpu {b}"
            );
        }
        assert_ne!(got, v, "rotation happened");
    }
}

/// SwiGLU to the bit (ggml's SIMD exp for whole groups of 8, its fused
/// steps rounding once through `fmaf`; glibc's expf in a row's tail);
/// GeGLU to the bit (both look GELU up in ggml's
/// f16 table); softcap within 1e-5 of the cap (tanh is not correctly
/// rounded on GPUs); add exact.
#[test]
fn glu_softcap_and_add_match_the_cpu() {
    use kestrel_gpu::ops::{Glu, Ops};
    let g = gpu();
    let ops = Ops::new(g);
    let n = 1000;
    let mut rng = Rng(3);
    let mut gate: Vec<f32> = (0..n).map(|_| rng.next() * 6.0).collect();
    // Both of GELU's pass-through edges.
    gate[..4].copy_from_slice(&[12.0, -11.0, 10.0, -10.0]);
    let up: Vec<f32> = (0..n).map(|_| rng.next() * 2.0).collect();
    let (gb, ub, yb) = (
        g.upload_f32("g", &gate).unwrap(),
        g.upload_f32("u", &up).unwrap(),
        g.scratch_f32("y", n),
    );
    for act in [Glu::Silu, Glu::Gelu] {
        // Two rows of 500 (each with a tail past its last group of 8).
        let row = n / 2;
        ops.glu(g, act, (&gb, &ub, &yb), (n, row)).unwrap();
        let got = g.read_f32(&yb, n).unwrap();
        let mut want = vec![0f32; n];
        for r in 0..2 {
            let (gr, ur) = (&gate[r * row..(r + 1) * row], &up[r * row..(r + 1) * row]);
            let wr = &mut want[r * row..(r + 1) * row];
            match act {
                Glu::Silu => kestrel_cpu::ops::swiglu_portable(gr, ur, wr),
                Glu::Gelu => kestrel_cpu::ops::geglu_portable(gr, ur, wr),
            }
        }
        for i in 0..n {
            // SiLU's tail takes libm's expf on the CPU: bits only where
            // that is the glibc build the GPU emulates.
            let tail = act == Glu::Silu && i % row >= row / 8 * 8;
            if tail && !libm_is_emulated() {
                let tol = 4.0 * f32::EPSILON * want[i].abs();
                assert!((got[i] - want[i]).abs() <= tol, "{act:?} tail [{i}]");
                continue;
            }
            assert_eq!(
                got[i].to_bits(),
                want[i].to_bits(),
                "{act:?} [{i}] gate {}: gpu {} cpu {}",
                gate[i],
                got[i],
                want[i]
            );
        }
    }
    let xb = g.upload_f32("x", &gate).unwrap();
    ops.softcap(g, &xb, n, 3.0).unwrap();
    let got = g.read_f32(&xb, n).unwrap();
    let mut want = gate.clone();
    kestrel_cpu::ops::softcap(&mut want, 3.0);
    for i in 0..n {
        assert!(
            (got[i] - want[i]).abs() <= 1e-5 * 3.0,
            "softcap [{i}]: gpu {} cpu {}",
            got[i],
            want[i]
        );
    }
    let xb = g.upload_f32("x", &gate).unwrap();
    ops.add(g, &xb, &ub, n).unwrap();
    let got = g.read_f32(&xb, n).unwrap();
    for i in 0..n {
        assert_eq!(got[i], gate[i] + up[i], "add [{i}]");
    }
}

/// SiLU where ggml's exp rounds x·log2(e) to an integer: it adds 1.5·2^23
/// in a fused step, so a product that rounds onto a half but is not one
/// goes the other way than rounding the product first would. Gates packed
/// around every such half in the exp's range, and a dense random sweep,
/// all through the SIMD path (a row of whole groups of 8), to the bit.
#[test]
fn silu_rounds_the_exponent_as_the_cpu() {
    use kestrel_gpu::ops::{Glu, Ops};
    let g = gpu();
    let ops = Ops::new(g);
    let log2e = f32::from_bits(0x3fb8_aa3b);
    let shift = f32::from_bits(0x4b40_0000);
    let mut gate = Vec::new();
    for k in -150i32..150 {
        let half = ((k as f64 + 0.5) / log2e as f64) as f32;
        for d in -48i32..=48 {
            gate.push(f32::from_bits(half.to_bits().wrapping_add(d as u32)));
        }
    }
    let mut rng = Rng(0x51);
    gate.extend((0..200_000).map(|_| rng.next() * 120.0));
    gate.truncate(gate.len() / 8 * 8);
    // The sweep must hold gates where the two roundings part, or it
    // could not tell them apart.
    let parted = gate
        .iter()
        .filter(|&&x| (-x * log2e).round_ties_even() != (-x).mul_add(log2e, shift) - shift)
        .count();
    assert!(parted >= 10, "only {parted} gates tell the roundings apart");
    let n = gate.len();
    let up = vec![1f32; n];
    let (gb, ub, yb) = (
        g.upload_f32("g", &gate).unwrap(),
        g.upload_f32("u", &up).unwrap(),
        g.scratch_f32("y", n),
    );
    ops.glu(g, Glu::Silu, (&gb, &ub, &yb), (n, n)).unwrap();
    let got = g.read_f32(&yb, n).unwrap();
    let mut want = vec![0f32; n];
    kestrel_cpu::ops::swiglu_portable(&gate, &up, &mut want);
    let bad: Vec<String> = (0..n)
        .filter(|&i| got[i].to_bits() != want[i].to_bits())
        .map(|i| format!("silu({:e}): gpu {:e} cpu {:e}", gate[i], got[i], want[i]))
        .collect();
    assert!(
        bad.is_empty(),
        "{} of {n} differ ({parted} gates part the roundings):\n{}",
        bad.len(),
        bad[..bad.len().min(10)].join("\n")
    );
}

/// Keys and values stored as f16 (round to nearest even, as the CPU's
/// f32_to_f16_row, bit for bit), then one-query attention for grouped
/// heads, a sliding window and a long context. The GPU follows the CPU's
/// decode path step for step (f16 query, ggml's lanes in the score sums,
/// glibc's expf, fused sums rounding once, running value sums rounded to
/// f16), so it is held to the CPU's bits, and to an f64 softmax attention
/// over the same f16 inputs within 5e-3, the f16 accumulation's own error.
#[test]
fn kv_store_and_attention_match_the_cpu() {
    use kestrel_cpu::attention::{attend, AttnShape};
    use kestrel_gpu::attention::{Attention, Shape};
    let g = gpu();
    let att = Attention::new(g);
    let pool = rayon_pool();
    let mut bad = Vec::new();
    // The CPU's softmax takes libm's expf: its bits are the GPU's only where
    // that is the glibc build the GPU emulates.
    let exact_exps = libm_is_emulated();
    for (n_head, n_head_kv, hd, window, pos) in [
        (4usize, 2usize, 64usize, 0usize, 0usize),
        (9, 3, 64, 0, 130),
        (4, 1, 128, 16, 100),
        (8, 8, 64, 0, 700),
    ] {
        let mut rng = Rng((n_head * 1000 + pos) as u64);
        let (kw, vw) = (n_head_kv * hd, n_head_kv * hd);
        let n_pos = pos + 1;
        let keys: Vec<f32> = (0..n_pos * kw).map(|_| rng.next()).collect();
        let vals: Vec<f32> = (0..n_pos * vw).map(|_| rng.next()).collect();
        let q: Vec<f32> = (0..n_head * hd).map(|_| rng.next() * 2.0).collect();
        // CPU cache.
        let mut kc = vec![0u16; n_pos * kw];
        let mut vc = vec![0u16; n_pos * vw];
        kestrel_quant::f32_to_f16_row(&keys, &mut kc);
        kestrel_quant::f32_to_f16_row(&vals, &mut vc);
        // GPU cache, written row by row by the store kernel.
        let kb = g.upload("kc", &vec![0u8; n_pos * kw * 2]).unwrap();
        let vb = g.upload("vc", &vec![0u8; n_pos * vw * 2]).unwrap();
        for p in 0..n_pos {
            let kr = g.upload_f32("k row", &keys[p * kw..(p + 1) * kw]).unwrap();
            let vr = g.upload_f32("v row", &vals[p * vw..(p + 1) * vw]).unwrap();
            att.store(g, (&kr, &kb), kw, p).unwrap();
            att.store(g, (&vr, &vb), vw, p).unwrap();
        }
        let stored = g.read_u32(&kb, n_pos * kw / 2).unwrap();
        for (i, w) in stored.iter().enumerate() {
            let want = u32::from(kc[2 * i]) | (u32::from(kc[2 * i + 1]) << 16);
            assert_eq!(*w, want, "stored key halves {}..{}", 2 * i, 2 * i + 2);
        }
        let scale = 1.0 / (hd as f32).sqrt();
        let shape = AttnShape {
            n_head,
            n_head_kv,
            head_dim_k: hd,
            head_dim_v: hd,
            scale,
            window,
        };
        let want = attend(&shape, &q, &kc, &vc, pos, 1, &pool);
        let qb = g.upload_f32("q", &q).unwrap();
        let scratch = g.scratch_f32("scores", n_head * n_pos);
        let out = g.scratch_f32("out", n_head * hd);
        let s = Shape {
            n_head,
            n_head_kv,
            head_dim_k: hd,
            head_dim_v: hd,
            scale,
            window,
        };
        att.attend(g, (&qb, &kb, &vb, &scratch, &out), &s, pos)
            .unwrap();
        let got = g.read_f32(&out, n_head * hd).unwrap();
        let big = want.iter().fold(0f32, |a, v| a.max(v.abs()));
        let f16 = |h: u16| kestrel_quant::f16_to_f32(h) as f64;
        let lo = if window > 0 {
            (pos + 1).saturating_sub(window)
        } else {
            0
        };
        for h in 0..n_head {
            let kvh = h / (n_head / n_head_kv);
            let qh: Vec<f64> = q[h * hd..(h + 1) * hd]
                .iter()
                .map(|&x| f16(kestrel_quant::f32_to_f16(x)))
                .collect();
            let scores: Vec<f64> = (lo..=pos)
                .map(|j| {
                    (0..hd)
                        .map(|d| qh[d] * f16(kc[j * kw + kvh * hd + d]))
                        .sum::<f64>()
                        * scale as f64
                })
                .collect();
            let m = scores.iter().cloned().fold(f64::MIN, f64::max);
            let w: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
            let total: f64 = w.iter().sum();
            for d in 0..hd {
                let exact: f64 = (lo..=pos)
                    .zip(&w)
                    .map(|(j, wj)| wj * f16(vc[j * vw + kvh * hd + d]))
                    .sum::<f64>()
                    / total;
                let (i, a) = (h * hd + d, got[h * hd + d]);
                let tag = format!("heads {n_head}/{n_head_kv} window {window} pos {pos} [{i}]");
                assert!(
                    (a as f64 - exact).abs() <= 5e-3 * big as f64,
                    "{tag}: gpu {a} exact {exact}"
                );
                if exact_exps && a.to_bits() != want[i].to_bits() {
                    bad.push(format!("{tag}: gpu {a} cpu {}", want[i]));
                }
            }
        }
    }
    assert!(
        bad.is_empty(),
        "{} outputs differ from the CPU's:\n{}",
        bad.len(),
        bad[..bad.len().min(10)].join("\n")
    );
}

/// Several activation rows through one product (the matrix-matrix case):
/// every row's result has exactly the bits of that row run alone, for
/// every type and layout, and a wrong row count is refused by name.
#[test]
fn batched_products_equal_each_row_alone() {
    let g = gpu();
    let (rows, cols, n) = (13usize, 512usize, 5usize);
    let mut failures = Vec::new();
    for (i, &ty) in TYPES.iter().enumerate() {
        let (bytes, _, _) = case(ty, rows, cols, 300 + i as u64);
        let mut rng = Rng(77 + i as u64);
        let xs: Vec<f32> = (0..n * cols)
            .map(|j| rng.next() * [1.0, 20.0, 1e-3, 3.0, 0.5][j / cols])
            .collect();
        let m = g.upload_matrix("w", ty, rows, cols, &bytes).unwrap();
        for (tpr, native_dot) in LAYOUTS {
            let mv = MatVec::with_layout(
                g,
                ty,
                cols,
                Layout {
                    tpr,
                    native_dot,
                    subgroups: false,
                },
            )
            .unwrap();
            let xb = g.upload_f32("xs", &xs).unwrap();
            let yb = g.scratch_f32("ys", n * rows);
            mv.run_batch(g, &m, (&xb, &yb), n).unwrap();
            let batched = g.read_f32(&yb, n * rows).unwrap();
            for c in 0..n {
                let xc = g.upload_f32("x", &xs[c * cols..(c + 1) * cols]).unwrap();
                let yc = g.scratch_f32("y", rows);
                mv.run(g, &m, &xc, &yc).unwrap();
                let alone = g.read_f32(&yc, rows).unwrap();
                for r in 0..rows {
                    if alone[r].to_bits() != batched[c * rows + r].to_bits() {
                        failures.push(format!(
                            "{ty} tpr {tpr} row {c} [{r}]: batched {} alone {}",
                            batched[c * rows + r],
                            alone[r]
                        ));
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let m = g
        .upload_matrix("w", GgmlType::Q8_0, 2, 32, &[0u8; 68])
        .unwrap();
    let mv = MatVec::new(g, GgmlType::Q8_0, 32).unwrap();
    let xb = g.scratch_f32("x", 32 * 17);
    let yb = g.scratch_f32("y", 2 * 17);
    let e = mv.run_batch(g, &m, (&xb, &yb), 17).unwrap_err();
    assert!(e.to_string().contains("at most 16"), "{e}");
}

/// A matrix bigger than the adapter's largest binding goes up in parts of
/// whole rows: products (one row and a batch, every layout) and embedding
/// lookups on either side of every part boundary give the bits of the
/// matrix in one piece; a row that fits no binding is refused by name.
#[test]
fn matrices_split_over_bindings_give_the_same_bits() {
    let mut g = Gpu::new().unwrap_or_else(|e| panic!("{e}"));
    let full_limit = g.max_binding;
    let (rows, cols, n) = (37usize, 512usize, 3usize);
    let mut failures = Vec::new();
    for (i, &ty) in TYPES.iter().enumerate() {
        let (bytes, _, _) = case(ty, rows, cols, 900 + i as u64);
        let rb = ty.row_bytes(cols as u64).unwrap() as usize;
        let whole = g.upload_matrix("w", ty, rows, cols, &bytes).unwrap();
        // Five rows per part (and a short last one).
        g.max_binding = (5 * rb + 3) as u64;
        let split = g.upload_matrix("w", ty, rows, cols, &bytes).unwrap();
        g.max_binding = full_limit;
        assert_eq!(whole.parts.len(), 1);
        assert_eq!(split.parts.len(), 8, "{ty}");
        assert_eq!(split.parts[7].rows, 2, "{ty}");
        let mut rng = Rng(55 + i as u64);
        let xs: Vec<f32> = (0..n * cols).map(|_| rng.next()).collect();
        let xb = g.upload_f32("xs", &xs).unwrap();
        for (tpr, native_dot) in LAYOUTS {
            let mv = MatVec::with_layout(
                &g,
                ty,
                cols,
                Layout {
                    tpr,
                    native_dot,
                    subgroups: false,
                },
            )
            .unwrap();
            for batch in [1, n] {
                let mut out = Vec::new();
                for m in [&whole, &split] {
                    let yb = g.scratch_f32("ys", batch * rows);
                    mv.run_batch(&g, m, (&xb, &yb), batch).unwrap();
                    out.push(g.read_f32(&yb, batch * rows).unwrap());
                }
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                if bits(&out[0]) != bits(&out[1]) {
                    failures.push(format!("{ty} tpr {tpr} batch {batch}"));
                }
            }
        }
        let embed = kestrel_gpu::embed::Embed::new(&g, ty).unwrap();
        // Rows 4/5 and 34/35 sit on part boundaries; 37 is outside.
        let ids = [0u32, 4, 5, 34, 35, 36, 37];
        let history = g.upload_u32("history", &ids).unwrap();
        for (pos, id) in ids.iter().enumerate() {
            let mut out = Vec::new();
            for m in [&whole, &split] {
                let y = g.upload_f32("x", &vec![7.0; cols]).unwrap();
                embed.run(&g, m, (&history, &y), pos, 1.5).unwrap();
                out.push(g.read_f32(&y, cols).unwrap());
            }
            if out[0] != out[1] {
                failures.push(format!("{ty} embedding of id {id}"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    g.max_binding = 100;
    match g.upload_matrix("blk.0.big", GgmlType::Q8_0, 2, 256, &[0u8; 544]) {
        Err(e) => assert!(e.to_string().contains("blk.0.big"), "{e}"),
        Ok(_) => panic!("a 272-byte row fit a 100-byte binding"),
    }
}

/// Where the adapter has subgroups in thread order (lavapipe does), the
/// products that exchange partial sums in registers give exactly the bits
/// of those that go through workgroup memory, for every type, 4 to 64
/// threads per row and a batch of rows.
#[test]
fn subgroup_reductions_give_the_bits_of_the_memory_ones() {
    let g = gpu();
    assert!(
        g.subgroups,
        "{} has no subgroups in thread order: this test needs them",
        g.adapter
    );
    let (rows, cols, n) = (21usize, 512usize, 3usize);
    let mut failures = Vec::new();
    for (i, &ty) in TYPES.iter().enumerate() {
        let (bytes, _, _) = case(ty, rows, cols, 500 + i as u64);
        let m = g.upload_matrix("w", ty, rows, cols, &bytes).unwrap();
        let mut rng = Rng(88 + i as u64);
        let xs: Vec<f32> = (0..n * cols).map(|_| rng.next()).collect();
        let xb = g.upload_f32("xs", &xs).unwrap();
        for tpr in [4u32, 16, 32, 64] {
            let mut out = Vec::new();
            for subgroups in [false, true] {
                let layout = Layout {
                    tpr,
                    native_dot: true,
                    subgroups,
                };
                let mv = MatVec::with_layout(g, ty, cols, layout).unwrap();
                let yb = g.scratch_f32("ys", n * rows);
                mv.run_batch(g, &m, (&xb, &yb), n).unwrap();
                let y = g.read_f32(&yb, n * rows).unwrap();
                out.push(y.iter().map(|v| v.to_bits()).collect::<Vec<_>>());
            }
            if out[0] != out[1] {
                failures.push(format!("{ty} tpr {tpr}"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join(", "));
}
