//! Q6_K (210 bytes / 256 elements): `ql[128]` (low nibbles), `qh[64]` (top
//! two bits), `scales[16]` (signed bytes, one per 16 elements), half `d`.
//! Value = d*scale*(q - 32), q 0..=63.
//!
//! Placement: within half n (128 elements), element 32*k + l (k = 0..4,
//! l = 0..32) has its low nibble in `ql[64n + l + 32*(k%2)]` (low nibble for
//! k < 2, high for k >= 2) and its top bits in `qh[32n + l]` at shift 2k.

use super::{symmetric_quant, symmetric_scales, SuperBlock, Unpacked, QK_K};
use crate::float::{read_f16, write_f16};
use crate::q8k;

pub(crate) const BLOCK: usize = 210;
const QH: usize = 128;
const SCALES: usize = 192;
const D: usize = 208;

/// (ql byte, nibble shift, qh byte, qh shift) of element `e`.
fn locate(e: usize) -> (usize, usize, usize, usize) {
    let (n, r) = (e / 128, e % 128);
    let (k, l) = (r / 32, r % 32);
    (64 * n + l + 32 * (k % 2), 4 * (k / 2), 32 * n + l, 2 * k)
}

/// The signed quant (-32..=31) of element `e`.
fn quant(b: &[u8], e: usize) -> i32 {
    let (lbyte, lshift, hbyte, hshift) = locate(e);
    let low = (b[lbyte] >> lshift) & 0x0f;
    let high = (b[QH + hbyte] >> hshift) & 3;
    i32::from(low | (high << 4)) - 32
}

fn scale(b: &[u8], i: usize) -> i32 {
    i32::from(b[SCALES + i] as i8)
}

pub(crate) fn dequantize(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(BLOCK).zip(dst.chunks_exact_mut(QK_K)) {
        let d = read_f16(b, D);
        for (e, o) in y.iter_mut().enumerate() {
            *o = d * scale(b, e / 16) as f32 * quant(b, e) as f32;
        }
    }
}

pub(crate) fn quantize(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(BLOCK)) {
        let (d, sc) = symmetric_scales(x, 16, 32, 127);
        b.fill(0);
        for (i, &s) in sc.iter().enumerate() {
            b[SCALES + i] = s as i8 as u8;
        }
        for (e, &v) in x.iter().enumerate() {
            let u = (symmetric_quant(v, d * sc[e / 16] as f32, 32) + 32) as u8;
            let (lbyte, lshift, hbyte, hshift) = locate(e);
            b[lbyte] |= (u & 0x0f) << lshift;
            b[QH + hbyte] |= (u >> 4) << hshift;
        }
        write_f16(b, D, d);
    }
}

/// Quants (signed, -32..=31) and scales of a block, for the integer work.
#[inline(always)]
fn unpack(b: &[u8]) -> Unpacked {
    let mut q = [0i8; QK_K];
    for n in 0..2 {
        for l in 0..32 {
            let h = b[QH + 32 * n + l];
            for k in 0..4 {
                let low = (b[64 * n + l + 32 * (k % 2)] >> (4 * (k / 2))) & 0x0f;
                q[128 * n + 32 * k + l] = (low | (((h >> (2 * k)) & 3) << 4)) as i8 - 32;
            }
        }
    }
    Unpacked {
        q,
        scale: std::array::from_fn(|i| scale(b, i)),
        min: [0; 16],
    }
}

#[inline(always)]
pub(crate) fn parts(bw: &[u8], ba: &[u8]) -> SuperBlock {
    unpack(bw).parts(ba, read_f16(bw, D), 0.0)
}

#[inline(always)]
pub(crate) fn dot_tiled(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    super::dot_tiled(w, a, BLOCK, parts)
}

/// Follows ggml's AVX2 kernel lane for lane (see `crate::lanes`): quants are
/// taken unsigned (0..=63) and the offset of 32 comes off per lane through the
/// activation block sums.
#[inline(always)]
pub(crate) fn vec_dot(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut acc = [0f32; 8];
    for (bw, ba) in w.chunks_exact(BLOCK).zip(a.chunks_exact(q8k::BLOCK)) {
        let d = q8k::d(ba) * read_f16(bw, D);
        let mut u = unpack(bw);
        u.q.iter_mut().for_each(|q| *q += 32);
        let sumi = u.lanes(&u.quads(ba));
        for (l, lane) in acc.iter_mut().enumerate() {
            let offset = 32
                * (q8k::bsum(ba, 2 * l) * scale(bw, 2 * l)
                    + q8k::bsum(ba, 2 * l + 1) * scale(bw, 2 * l + 1));
            *lane = d.mul_add((sumi[l] - offset) as f32, *lane);
        }
    }
    crate::lanes::hsum8(&acc)
}
