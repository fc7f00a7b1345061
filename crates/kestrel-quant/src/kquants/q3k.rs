//! Q3_K (110 bytes / 256 elements): `hmask[32]` (third bits), `qs[64]` (low
//! two bits), `scales[12]` (sixteen 6-bit scales, biased by 32), half `d`.
//! Value = d*(scale-32)*q with q in -4..=3: the low two bits, minus 4 when the
//! element's hmask bit is *clear*.
//!
//! Placement: within half n (128 elements), element 32*j + l (j = 0..4,
//! l = 0..32) has its low bits in `qs[32n + l]` at shift 2j and its high bit
//! in `hmask[l]` at bit 4n + j.
//!
//! Scale packing: scale i (0..16) keeps its low nibble in byte i (i < 8) or
//! in the high nibble of byte i-8 (i >= 8), and its top two bits in byte
//! 8 + i%4 at bit offset 2*(i/4).

use super::{symmetric_quant, symmetric_scales, SuperBlock, Unpacked, QK_K};
use crate::float::{read_f16, write_f16};
use crate::q8k;

pub(crate) const BLOCK: usize = 110;
const QS: usize = 32;
const SCALES: usize = 96;
const D: usize = 108;

/// (low-bits byte within qs, shift, hmask byte, hmask bit) of element `e`.
fn locate(e: usize) -> (usize, usize, usize, usize) {
    let (n, r) = (e / 128, e % 128);
    let (j, l) = (r / 32, r % 32);
    (32 * n + l, 2 * j, l, 4 * n + j)
}

fn quant(b: &[u8], e: usize) -> i32 {
    let (byte, shift, hbyte, hbit) = locate(e);
    let low = i32::from((b[QS + byte] >> shift) & 3);
    if (b[hbyte] >> hbit) & 1 == 1 {
        low
    } else {
        low - 4
    }
}

/// The signed scale (-32..=31) of sub-block `i`.
fn scale(b: &[u8], i: usize) -> i32 {
    let s = &b[SCALES..SCALES + 12];
    let low = if i < 8 { s[i] & 0x0f } else { s[i - 8] >> 4 };
    let high = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
    i32::from(low | (high << 4)) - 32
}

fn pack_scales(sc: &[i32], s: &mut [u8]) {
    s[..12].fill(0);
    for (i, &v) in sc.iter().enumerate() {
        let u = (v + 32) as u8;
        if i < 8 {
            s[i] |= u & 0x0f;
        } else {
            s[i - 8] |= (u & 0x0f) << 4;
        }
        s[8 + i % 4] |= (u >> 4) << (2 * (i / 4));
    }
}

pub(crate) fn dequantize(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(BLOCK).zip(dst.chunks_exact_mut(QK_K)) {
        let d = read_f16(b, D);
        for (e, o) in y.iter_mut().enumerate() {
            let dl = d * scale(b, e / 16) as f32;
            *o = dl * quant(b, e) as f32;
        }
    }
}

pub(crate) fn quantize(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(BLOCK)) {
        // Scales stay within [-31, 31] so the biased 6-bit value fits.
        let (d, sc) = symmetric_scales(x, 16, 4, 31);
        b.fill(0);
        pack_scales(&sc, &mut b[SCALES..SCALES + 12]);
        for (e, &v) in x.iter().enumerate() {
            let q = symmetric_quant(v, d * sc[e / 16] as f32, 4);
            let u = (q + 4) as u8; // 0..=7; bit 2 set means "do not subtract 4"
            let (byte, shift, hbyte, hbit) = locate(e);
            b[QS + byte] |= (u & 3) << shift;
            b[hbyte] |= (u >> 2) << hbit;
        }
        write_f16(b, D, d);
    }
}

#[inline(always)]
fn unpack(bw: &[u8]) -> Unpacked {
    Unpacked::from_fns(|e| quant(bw, e), |i| scale(bw, i), |_| 0)
}

#[inline(always)]
pub(crate) fn parts(bw: &[u8], ba: &[u8]) -> SuperBlock {
    unpack(bw).parts(ba, read_f16(bw, D), 0.0)
}

/// Follows ggml's AVX2 kernel lane for lane (see [`Unpacked::lanes`]).
#[inline(always)]
pub(crate) fn vec_dot(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut acc = [0f32; 8];
    for (bw, ba) in w.chunks_exact(BLOCK).zip(a.chunks_exact(q8k::BLOCK)) {
        let d = q8k::d(ba) * read_f16(bw, D);
        let u = unpack(bw);
        for (lane, s) in acc.iter_mut().zip(u.lanes(&u.quads(ba))) {
            *lane = d.mul_add(s as f32, *lane);
        }
    }
    crate::lanes::hsum8(&acc)
}

#[inline(always)]
pub(crate) fn dot_tiled(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    super::dot_tiled(w, a, BLOCK, parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scales_round_trip() {
        let sc: Vec<i32> = (0..16).map(|i| (i * 23 % 64) - 32).collect();
        let mut b = [0u8; BLOCK];
        pack_scales(&sc, &mut b[SCALES..SCALES + 12]);
        for (i, &v) in sc.iter().enumerate() {
            assert_eq!(scale(&b, i), v);
        }
    }
}
