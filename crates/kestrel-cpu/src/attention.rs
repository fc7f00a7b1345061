//! Causal attention over the f16 KV cache, with optional sliding window and
//! grouped-query heads. It follows the two paths of ggml's CPU flash
//! attention because their rounding differs: batches under 64 queries
//! (decode, short prompts) convert Q to f16 and accumulate V in f16; larger
//! batches work in f32.

use crate::ops::dot_f16;
use kestrel_quant::{f16_to_f32, f32_to_f16};

/// ggml switches to its tiled f32 kernel at this many query rows.
const TILED_MIN_QUERIES: usize = 64;

pub struct AttnShape {
    pub n_head: usize,
    pub n_head_kv: usize,
    pub head_dim_k: usize,
    pub head_dim_v: usize,
    /// Multiplies q·k before the softmax.
    pub scale: f32,
    /// Sliding window in tokens (a query at p sees keys p-window+1..=p); 0 = none.
    pub window: usize,
}

/// q: n_tok rows of n_head*head_dim_k at positions pos0..; k/v cache rows hold
/// n_head_kv heads per position. Returns n_tok rows of n_head*head_dim_v.
pub fn attend(
    s: &AttnShape,
    q: &[f32],
    kc: &[u16],
    vc: &[u16],
    pos0: usize,
    n_tok: usize,
) -> Vec<f32> {
    let (dk, dv) = (s.head_dim_k, s.head_dim_v);
    let q_w = s.n_head * dk;
    let k_w = s.n_head_kv * dk;
    let v_w = s.n_head_kv * dv;
    let group = s.n_head / s.n_head_kv;
    let mut out = vec![0f32; n_tok * s.n_head * dv];
    let tiled = n_tok >= TILED_MIN_QUERIES;
    let mut q16 = vec![0u16; dk];
    let mut acc16 = vec![0u16; dv];
    let mut acc32 = vec![0f32; dv];
    let mut kf = vec![0f32; dk];
    for t in 0..n_tok {
        let p = pos0 + t;
        let lo = if s.window > 0 {
            (p + 1).saturating_sub(s.window)
        } else {
            0
        };
        for h in 0..s.n_head {
            let kvh = h / group;
            let qh = &q[t * q_w + h * dk..t * q_w + (h + 1) * dk];
            let dst = &mut out[(t * s.n_head + h) * dv..(t * s.n_head + h + 1) * dv];
            let mut m = f32::NEG_INFINITY;
            let mut sum = 0f32;
            if tiled {
                acc32.iter_mut().for_each(|a| *a = 0.0);
                for j in lo..=p {
                    let kr = &kc[j * k_w + kvh * dk..j * k_w + (kvh + 1) * dk];
                    kr.iter()
                        .zip(kf.iter_mut())
                        .for_each(|(&a, b)| *b = f16_to_f32(a));
                    let sc = qh.iter().zip(&kf).map(|(a, b)| a * b).sum::<f32>() * s.scale;
                    let vr = &vc[j * v_w + kvh * dv..j * v_w + (kvh + 1) * dv];
                    let (ms, vs) = online_step(&mut m, sc);
                    if ms != 1.0 {
                        acc32.iter_mut().for_each(|a| *a *= ms);
                    }
                    for (a, &vv) in acc32.iter_mut().zip(vr) {
                        *a = f16_to_f32(vv).mul_add(vs, *a);
                    }
                    sum = sum.mul_add(ms, vs);
                }
                let inv = if sum == 0.0 { 0.0 } else { 1.0 / sum };
                dst.iter_mut().zip(&acc32).for_each(|(d, a)| *d = a * inv);
            } else {
                qh.iter()
                    .zip(q16.iter_mut())
                    .for_each(|(&a, b)| *b = f32_to_f16(a));
                acc16.iter_mut().for_each(|a| *a = 0);
                for j in lo..=p {
                    let kr = &kc[j * k_w + kvh * dk..j * k_w + (kvh + 1) * dk];
                    let sc = dot_f16(kr, &q16) * s.scale;
                    let vr = &vc[j * v_w + kvh * dv..j * v_w + (kvh + 1) * dv];
                    let (ms, vs) = online_step(&mut m, sc);
                    if ms != 1.0 {
                        acc16
                            .iter_mut()
                            .for_each(|a| *a = f32_to_f16(f16_to_f32(*a) * ms));
                    }
                    for (a, &vv) in acc16.iter_mut().zip(vr) {
                        *a = f32_to_f16(f16_to_f32(vv).mul_add(vs, f16_to_f32(*a)));
                    }
                    sum = sum.mul_add(ms, vs);
                }
                let inv = if sum == 0.0 { 0.0 } else { 1.0 / sum };
                dst.iter_mut()
                    .zip(&acc16)
                    .for_each(|(d, &a)| *d = f16_to_f32(a) * inv);
            }
        }
    }
    out
}

/// One online-softmax step for score `s`: returns (factor for the running
/// accumulator, weight of this value), updating the running maximum.
fn online_step(m: &mut f32, s: f32) -> (f32, f32) {
    if s > *m {
        let old = *m;
        *m = s;
        ((old - s).exp(), 1.0)
    } else {
        (1.0, (s - *m).exp())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Plain softmax attention in f64 over f16-rounded inputs.
    fn reference(
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

    #[test]
    fn both_paths_match_reference_softmax_attention() {
        let mut st = 99u32;
        let mut rnd = || {
            st ^= st << 13;
            st ^= st >> 17;
            st ^= st << 5;
            (st as f32 / u32::MAX as f32) * 2.0 - 1.0
        };
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
            let got = attend(&s, &q, &kc, &vc, pos0, n_tok);
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
}
