//! Row operations on f16 vectors, as attention over an f16 KV cache needs
//! them, each in the rounding of the ggml-cpu routine llama.cpp runs for it
//! (`ggml_vec_dot_f16`, `ggml_vec_mad_f16`, `ggml_vec_scale_f16`). The
//! portable versions here are the reference; on x86-64 with AVX2/FMA/F16C the
//! `x86` module runs the same operations eight lanes at a time (exact: every
//! element sees the same f32 operations), selected at run time.

use crate::float::{f16_to_f32, f32_to_f16};

/// ggml's AVX2 `ggml_vec_dot_f16` order: four 8-lane f32 accumulators over
/// 32-element steps (fused multiply-add), reduced pairwise, then the tail
/// summed in f64.
pub fn f16_dot(a: &[u16], b: &[u16]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if crate::cpu_features::avx2_available() {
        return crate::x86::f16_dot(a, b);
    }
    f16_dot_portable(a, b)
}

pub(crate) fn f16_dot_portable(a: &[u16], b: &[u16]) -> f32 {
    let n = a.len().min(b.len());
    let np = n / 32 * 32;
    let mut acc = [[0f32; 8]; 4];
    for i in (0..np).step_by(32) {
        for (j, accj) in acc.iter_mut().enumerate() {
            for (l, lane) in accj.iter_mut().enumerate() {
                let k = i + j * 8 + l;
                *lane = f16_to_f32(a[k]).mul_add(f16_to_f32(b[k]), *lane);
            }
        }
    }
    f16_dot_finish(&acc, &a[np..n], &b[np..n])
}

/// GGML_F32x8_REDUCE of the four accumulators, plus the f64 tail.
pub(crate) fn f16_dot_finish(acc: &[[f32; 8]; 4], ta: &[u16], tb: &[u16]) -> f32 {
    let [a0, a1, a2, a3] = acc;
    let mut x = [0f32; 8];
    for l in 0..8 {
        x[l] = (a0[l] + a2[l]) + (a1[l] + a3[l]);
    }
    let t0 = [x[0] + x[4], x[1] + x[5], x[2] + x[6], x[3] + x[7]];
    let mut sum = ((t0[0] + t0[1]) + (t0[2] + t0[3])) as f64;
    for (&p, &q) in ta.iter().zip(tb) {
        sum += (f16_to_f32(p) * f16_to_f32(q)) as f64;
    }
    sum as f32
}

/// acc[i] = f16(v[i] * s + acc[i]), fused, with acc widened from f16.
pub fn f16_mad(acc: &mut [u16], v: &[u16], s: f32) {
    #[cfg(target_arch = "x86_64")]
    if crate::cpu_features::avx2_available() {
        return crate::x86::f16_mad(acc, v, s);
    }
    f16_mad_portable(acc, v, s);
}

pub(crate) fn f16_mad_portable(acc: &mut [u16], v: &[u16], s: f32) {
    for (a, &x) in acc.iter_mut().zip(v) {
        *a = f32_to_f16(f16_to_f32(x).mul_add(s, f16_to_f32(*a)));
    }
}

/// acc[i] = f16(acc[i] * s).
pub fn f16_scale(acc: &mut [u16], s: f32) {
    #[cfg(target_arch = "x86_64")]
    if crate::cpu_features::avx2_available() {
        return crate::x86::f16_scale(acc, s);
    }
    f16_scale_portable(acc, s);
}

pub(crate) fn f16_scale_portable(acc: &mut [u16], s: f32) {
    for a in acc.iter_mut() {
        *a = f32_to_f16(f16_to_f32(*a) * s);
    }
}

/// acc[i] = v[i] * s + acc[i], fused, v widened from f16.
pub fn f32_mad_f16(acc: &mut [f32], v: &[u16], s: f32) {
    #[cfg(target_arch = "x86_64")]
    if crate::cpu_features::avx2_available() {
        return crate::x86::f32_mad_f16(acc, v, s);
    }
    f32_mad_f16_portable(acc, v, s);
}

pub(crate) fn f32_mad_f16_portable(acc: &mut [f32], v: &[u16], s: f32) {
    for (a, &x) in acc.iter_mut().zip(v) {
        *a = f16_to_f32(x).mul_add(s, *a);
    }
}

/// Widens an f16 row (exact).
pub fn f16_to_f32_row(src: &[u16], dst: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if crate::cpu_features::avx2_available() {
        return crate::x86::f16_to_f32_row(src, dst);
    }
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = f16_to_f32(s);
    }
}

/// Rounds an f32 row to f16, nearest-even (as F16C and ggml do).
pub fn f32_to_f16_row(src: &[f32], dst: &mut [u16]) {
    #[cfg(target_arch = "x86_64")]
    if crate::cpu_features::avx2_available() {
        return crate::x86::f32_to_f16_row(src, dst);
    }
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = f32_to_f16(s);
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    /// The AVX2 versions give the portable bits, on odd lengths with tails,
    /// including values that overflow or underflow f16 on the way back.
    #[test]
    fn avx2_row_ops_equal_portable() {
        if !crate::cpu_features::avx2_available() {
            return;
        }
        let mut st = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            st ^= st << 13;
            st ^= st >> 7;
            st ^= st << 17;
            ((st >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 300.0
        };
        for n in [0usize, 1, 7, 8, 31, 32, 33, 64, 100, 257] {
            let a: Vec<u16> = (0..n).map(|_| f32_to_f16(next())).collect();
            let b: Vec<u16> = (0..n).map(|_| f32_to_f16(next() / 300.0)).collect();
            let s = next() / 7.0;
            assert_eq!(
                crate::x86::f16_dot(&a, &b).to_bits(),
                f16_dot_portable(&a, &b).to_bits(),
                "dot n={n}"
            );
            let (mut x, mut y) = (a.clone(), a.clone());
            crate::x86::f16_mad(&mut x, &b, s);
            f16_mad_portable(&mut y, &b, s);
            assert_eq!(x, y, "mad n={n}");
            crate::x86::f16_scale(&mut x, s * 400.0);
            f16_scale_portable(&mut y, s * 400.0);
            assert_eq!(x, y, "scale n={n}");
            let mut p: Vec<f32> = (0..n).map(|_| next()).collect();
            let mut q = p.clone();
            crate::x86::f32_mad_f16(&mut p, &b, s);
            f32_mad_f16_portable(&mut q, &b, s);
            assert_eq!(
                p.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                q.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "f32 mad n={n}"
            );
            let mut w = vec![0f32; n];
            crate::x86::f16_to_f32_row(&a, &mut w);
            assert!(w
                .iter()
                .zip(&a)
                .all(|(w, &a)| w.to_bits() == f16_to_f32(a).to_bits()));
            let mut h = vec![0u16; n];
            let big: Vec<f32> = p.iter().map(|v| v * 1000.0).collect();
            crate::x86::f32_to_f16_row(&big, &mut h);
            assert!(
                h.iter().zip(&big).all(|(&h, &v)| h == f32_to_f16(v)),
                "to f16 n={n}"
            );
        }
    }
}
