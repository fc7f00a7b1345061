//! Tests across the attention paths, and the helpers the paths' own tests
//! share.

use super::*;
use kestrel_quant::{f16_to_f32, f32_to_f16};

/// Xorshift32 values uniform in [-1, 1), from `seed`.
pub(super) fn uniform(seed: u32) -> impl FnMut() -> f32 {
    let mut st = seed;
    move || {
        st ^= st << 13;
        st ^= st >> 17;
        st ^= st << 5;
        (st as f32 / u32::MAX as f32) * 2.0 - 1.0
    }
}

/// Plain softmax attention in f64 over f16-rounded inputs.
pub(super) fn reference(
    s: &AttnShape,
    q: &[f32],
    kc: &[u16],
    vc: &[u16],
    pos0: usize,
    n_tok: usize,
) -> Vec<f64> {
    let (dk, dv) = (s.head_dim_k, s.head_dim_v);
    let group = s.n_head / s.n_head_kv;
    let mut out = vec![0f64; n_tok * s.n_head * dv];
    for t in 0..n_tok {
        let p = pos0 + t;
        let lo = if s.window > 0 {
            (p + 1).saturating_sub(s.window)
        } else {
            0
        };
        for h in 0..s.n_head {
            let kvh = h / group;
            let qh = &q[t * s.n_head * dk + h * dk..][..dk];
            let scores: Vec<f64> = (lo..=p)
                .map(|j| {
                    let kr = &kc[j * s.n_head_kv * dk + kvh * dk..][..dk];
                    qh.iter()
                        .zip(kr)
                        .map(|(a, &b)| *a as f64 * f16_to_f32(b) as f64)
                        .sum::<f64>()
                        * s.scale as f64
                })
                .collect();
            let mx = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let w: Vec<f64> = scores.iter().map(|x| (x - mx).exp()).collect();
            let z: f64 = w.iter().sum();
            for (i, j) in (lo..=p).enumerate() {
                let vr = &vc[j * s.n_head_kv * dv + kvh * dv..][..dv];
                for d in 0..dv {
                    out[(t * s.n_head + h) * dv + d] += w[i] / z * f16_to_f32(vr[d]) as f64;
                }
            }
        }
    }
    out
}

/// Six query heads over two KV heads of `dim`, scale 1/4.
pub(super) fn six_over_two(dim: usize, window: usize) -> AttnShape {
    AttnShape {
        n_head: 6,
        n_head_kv: 2,
        head_dim_k: dim,
        head_dim_v: dim,
        scale: 0.25,
        window,
    }
}

/// A position-major cache of `rows` rows for `s`: random keys and values.
pub(super) fn random_cache(
    s: &AttnShape,
    rows: usize,
    rnd: &mut impl FnMut() -> f32,
) -> [Vec<u16>; 2] {
    let n = rows * s.n_head_kv * s.head_dim_k;
    [3.0, 4.0].map(|spread| (0..n).map(|_| f32_to_f16(rnd() * spread)).collect())
}

#[test]
fn both_paths_match_reference_softmax_attention() {
    let mut rnd = uniform(99u32);
    for (n_tok, window) in [(5usize, 0usize), (70, 0), (5, 3), (70, 16)] {
        let s = AttnShape {
            n_head: 4,
            n_head_kv: 2,
            head_dim_k: 32,
            head_dim_v: 32,
            scale: 0.3,
            window,
        };
        let pos0 = 3;
        let n_pos = pos0 + n_tok;
        let kc: Vec<u16> = (0..n_pos * 2 * 32).map(|_| f32_to_f16(rnd())).collect();
        let vc: Vec<u16> = (0..n_pos * 2 * 32).map(|_| f32_to_f16(rnd())).collect();
        let q: Vec<f32> = (0..n_tok * 4 * 32).map(|_| rnd() * 2.0).collect();
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let got = attend(&s, &q, &kc, &vc, pos0, n_tok, &pool);
        let want = reference(&s, &q, &kc, &vc, pos0, n_tok);
        // The short-batch path accumulates in f16 (about 3 decimal digits).
        let tol = if n_tok >= TILED_MIN_QUERIES {
            1e-4
        } else {
            4e-3
        };
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                (*g as f64 - w).abs() < tol,
                "n_tok={n_tok} window={window} i={i}: {g} vs {w}"
            );
        }
    }
}

/// The same cache stored head-major gives every path's bits as stored
/// position-major: decode with and without split-KV chunks, in a ring,
/// short batches, and the tiled path.
#[test]
fn head_major_cache_gives_position_major_bits() {
    let mut rnd = uniform(23);
    for (n_tok, pos0, window, ring, cells) in [
        (1usize, 40usize, 0usize, 0usize, 256usize),
        (1, 700, 0, 0, 1024),
        (1, 900, 200, 512, 512),
        (3, 50, 0, 0, 256),
        (70, 20, 0, 0, 256),
        (80, 600, 100, 512, 512),
    ] {
        let s = six_over_two(64, window);
        let (n_head, n_head_kv, dim) = (s.n_head, s.n_head_kv, s.head_dim_k);
        let rows = if ring > 0 { ring } else { cells };
        let [kc, vc] = random_cache(&s, rows, &mut rnd);
        // [row][head][dim] -> [head][row][dim].
        let by_head = |c: &[u16]| -> Vec<u16> {
            (0..n_head_kv)
                .flat_map(|h| (0..rows).map(move |r| (r * n_head_kv + h) * dim))
                .flat_map(|at| c[at..at + dim].to_vec())
                .collect()
        };
        let (kh, vh) = (by_head(&kc), by_head(&vc));
        let q: Vec<f32> = (0..n_tok * n_head * dim).map(|_| rnd() * 2.0).collect();
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let item = |kc, vc, lay| AttnItem {
            q: &q,
            kc,
            vc,
            lay,
            pos0,
            n_tok,
            kv_cells: rows,
            ring,
        };
        let want = attend_batch(&s, &[item(&kc, &vc, KvLayout::position_major(&s))], &pool);
        let got = attend_batch(&s, &[item(&kh, &vh, KvLayout::head_major(&s, rows))], &pool);
        let bits = |v: &[Vec<f32>]| v.concat().iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(
            bits(&got),
            bits(&want),
            "{n_tok} queries at {pos0}, ring {ring}"
        );
    }
}
