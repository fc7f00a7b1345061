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

#[inline]
pub(crate) fn quantize_q8_k(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(BLOCK)) {
        let mut max = 0.0f32;
        let mut amax = 0.0f32;
        for &v in x {
            if v.abs() > amax {
                amax = v.abs();
                max = v;
            }
        }
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
