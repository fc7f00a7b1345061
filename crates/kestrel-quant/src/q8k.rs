//! Q8_K, the activation format that every K-quant weight is dotted with:
//! 256 elements as an f32 scale `d` (bytes 0..4), 256 signed quants
//! (4..260) and 16 i16 `bsums` (260..292), the sums of each run of 16 quants,
//! which let the K-quant dots apply their per-sub-block minimums without
//! touching the quants again.
//!
//! The quantizer must reproduce ggml-cpu bit for bit. On x86-64 ggml-cpu
//! has no SIMD Q8_K quantizer (`quantize_row_q8_K` forwards to
//! `quantize_row_q8_K_ref`), so this follows the reference algorithm:
//! - the scale is taken from the *signed* element of largest magnitude
//!   (the first one on ties), `iscale = -127 / max`, so that element
//!   becomes -127 and the others land in [-127, 127] (128 is clamped);
//! - quants round half-to-even, through ggml's "add 1.5 * 2^23" trick
//!   (`nearest_int`), reproduced here exactly;
//! - `d = 1 / iscale` in f32 (not `max / -127`, which may differ by an ulp);
//! - an all-zero block stores d = 0 and zero quants (and, unlike ggml, which
//!   leaves them untouched, zero bsums).

use crate::float::{read_f32, write_f32};

pub(crate) const QK_K: usize = 256;
pub(crate) const BLOCK: usize = 292;
const QS: usize = 4;
const BSUMS: usize = 260;

/// ggml's `nearest_int`: adding 1.5 * 2^23 leaves the rounded integer in the
/// low mantissa bits (the FPU rounds the addition half-to-even). Exact for
/// |x| <= 2^22; outside that it returns the same garbage ggml would.
#[inline]
pub(crate) fn nearest_int(x: f32) -> i32 {
    let v = x + 12_582_912.0;
    (v.to_bits() as i32 & 0x007f_ffff) - 0x0040_0000
}

/// The quant `j` of a Q8_K block.
#[inline]
pub(crate) fn q(block: &[u8], j: usize) -> i32 {
    i32::from(block[QS + j] as i8)
}

/// The scale of a Q8_K block.
#[inline]
pub(crate) fn d(block: &[u8]) -> f32 {
    read_f32(block, 0)
}

/// `bsums[j]`: the sum of quants 16j..16j+16.
pub(crate) fn bsum(block: &[u8], j: usize) -> i32 {
    let at = BSUMS + 2 * j;
    i32::from(i16::from_le_bytes([block[at], block[at + 1]]))
}

#[inline(always)]
pub(crate) fn quantize_q8_k(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(BLOCK)) {
        // The largest magnitude (NaNs never taken), as eight running lane
        // maxima that vectorize, then the first element that has it: the
        // element the reference's sequential scan keeps. That scan, one
        // compare-and-branch per element, was most of the quantizer's time
        // (4864 values: 3.6 us, a down product's input in Qwen2.5).
        let mut lanes = [0.0f32; 8];
        for c in x.chunks_exact(8) {
            for (m, &v) in lanes.iter_mut().zip(c) {
                let a = v.abs();
                *m = if a > *m { a } else { *m };
            }
        }
        let amax = lanes.iter().fold(0.0f32, |m, &a| if a > m { a } else { m });
        // Eight at a time, without stopping early inside a chunk, and on
        // the bits (the same test, amax being positive and no NaN), so the
        // test vectorizes too.
        let bits = amax.to_bits();
        let is_max = |v: &f32| v.abs().to_bits() == bits;
        let max = x
            .chunks_exact(8)
            .find(|c| c.iter().fold(false, |f, v| f | is_max(v)))
            .and_then(|c| c.iter().copied().find(is_max))
            .unwrap_or(0.0);
        if amax == 0.0 {
            b.fill(0);
            continue;
        }
        let iscale = -127.0 / max;
        for (o, &v) in b[QS..QS + QK_K].iter_mut().zip(x) {
            *o = nearest_int(iscale * v).min(127) as i8 as u8;
        }
        for j in 0..QK_K / 16 {
            let s: i32 = (0..16).map(|i| q(b, 16 * j + i)).sum();
            b[BSUMS + 2 * j..BSUMS + 2 * j + 2].copy_from_slice(&(s as i16).to_le_bytes());
        }
        write_f32(b, 0, 1.0 / iscale);
    }
}

pub(crate) fn dequantize_q8_k(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(BLOCK).zip(dst.chunks_exact_mut(QK_K)) {
        let d = d(b);
        for (j, o) in y.iter_mut().enumerate() {
            *o = d * q(b, j) as f32;
        }
    }
}

/// Not a ggml kernel (Q8_K is never a weight type there); provided so every
/// type has a dot.
pub(crate) fn vec_dot_q8_k_q8_k(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut sum = 0.0f32;
    for (bw, ba) in w.chunks_exact(BLOCK).zip(a.chunks_exact(BLOCK)) {
        let s: i32 = (0..QK_K).map(|j| q(bw, j) * q(ba, j)).sum();
        sum += d(bw) * d(ba) * s as f32;
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_int_is_round_half_even() {
        for (x, want) in [
            (0.5, 0),
            (1.5, 2),
            (2.5, 2),
            (-0.5, 0),
            (-1.5, -2),
            (126.7, 127),
        ] {
            assert_eq!(nearest_int(x), want, "{x}");
            assert_eq!(nearest_int(x) as f32, x.round_ties_even());
        }
    }

    /// The reference's scan: the first element whose magnitude beats all
    /// before it.
    fn scanned_max(x: &[f32]) -> f32 {
        let (mut max, mut amax) = (0.0f32, 0.0f32);
        for &v in x {
            if v.abs() > amax {
                amax = v.abs();
                max = v;
            }
        }
        max
    }

    #[test]
    fn scale_follows_the_reference_scan_on_ties_and_nans() {
        let mut st = 0x9e37_79b9u32;
        let mut rnd = || {
            st ^= st << 13;
            st ^= st >> 17;
            st ^= st << 5;
            st
        };
        for case in 0..400 {
            let mut x: Vec<f32> = (0..QK_K)
                .map(|_| (rnd() % 2001) as f32 / 100.0 - 10.0)
                .collect();
            // The largest magnitude twice, signs differing: the first wins.
            let (i, j) = (rnd() as usize % QK_K, rnd() as usize % QK_K);
            let m = 10.5 + (case % 7) as f32;
            x[i] = if case % 2 == 0 { m } else { -m };
            x[j] = -x[i];
            if case % 5 == 0 {
                x[rnd() as usize % QK_K] = f32::NAN;
            }
            if case % 11 == 0 {
                x.iter_mut().for_each(|v| *v = 0.0);
                x[rnd() as usize % QK_K] = -0.0;
            }
            let want = scanned_max(&x);
            let mut b = vec![0u8; BLOCK];
            quantize_q8_k(&x, &mut b);
            let want_d = if want == 0.0 {
                0.0
            } else {
                1.0 / (-127.0 / want)
            };
            assert_eq!(d(&b).to_bits(), want_d.to_bits(), "case {case}: max {want}");
        }
    }

    #[test]
    fn scale_comes_from_signed_max_and_bsums_add_up() {
        let mut x = [0.0f32; QK_K];
        for (i, v) in x.iter_mut().enumerate() {
            *v = ((i * 37 % 101) as f32 - 50.0) / 10.0;
        }
        x[17] = 8.0; // positive max -> negative iscale -> d < 0
        let mut b = vec![0u8; BLOCK];
        quantize_q8_k(&x, &mut b);
        assert_eq!(d(&b), 1.0 / (-127.0 / 8.0));
        assert!(d(&b) < 0.0);
        assert_eq!(q(&b, 17), -127);
        for j in 0..16 {
            assert_eq!(bsum(&b, j), (0..16).map(|i| q(&b, 16 * j + i)).sum::<i32>());
        }
    }
}
