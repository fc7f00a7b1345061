//! Q2_K (84 bytes / 256 elements): `scales[16]` (low nibble: scale, high
//! nibble: min, one pair per 16 elements), `qs[64]` (2-bit quants), then
//! half `d` and half `dmin`. Value = d*scale*q - dmin*min.
//!
//! Quant placement: the 256 elements form two halves of 128; within half n,
//! element 32*j + l (j = 0..4, l = 0..32) lives in byte `qs[32n + l]` at bit
//! offset 2j.

use super::{affine_quant, affine_scales, SuperBlock, Unpacked, QK_K};
use crate::float::{read_f16, write_f16};
use crate::q8k;

pub(crate) const BLOCK: usize = 84;
const QS: usize = 16;
const D: usize = 80;
const DMIN: usize = 82;

/// (byte index within qs, bit shift) of element `e`.
fn locate(e: usize) -> (usize, usize) {
    let (n, r) = (e / 128, e % 128);
    (32 * n + r % 32, 2 * (r / 32))
}

fn quant(b: &[u8], e: usize) -> i32 {
    let (byte, shift) = locate(e);
    i32::from((b[QS + byte] >> shift) & 3)
}

pub(crate) fn dequantize(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(BLOCK).zip(dst.chunks_exact_mut(QK_K)) {
        let d = read_f16(b, D);
        let dmin = read_f16(b, DMIN);
        for (e, o) in y.iter_mut().enumerate() {
            let s = b[e / 16];
            let dl = d * f32::from(s & 0x0f);
            let ml = dmin * f32::from(s >> 4);
            *o = dl * quant(b, e) as f32 - ml;
        }
    }
}

pub(crate) fn quantize(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(BLOCK)) {
        let (d, dmin, sc, m) = affine_scales(x, 16, 3, 15);
        b.fill(0);
        for j in 0..16 {
            b[j] = sc[j] | (m[j] << 4);
        }
        for (e, &v) in x.iter().enumerate() {
            let j = e / 16;
            let q = affine_quant(v, d * f32::from(sc[j]), dmin * f32::from(m[j]), 3);
            let (byte, shift) = locate(e);
            b[QS + byte] |= q << shift;
        }
        write_f16(b, D, d);
        write_f16(b, DMIN, dmin);
    }
}

#[inline(always)]
fn unpack(bw: &[u8]) -> Unpacked {
    Unpacked::from_fns(
        |e| quant(bw, e),
        |i| i32::from(bw[i] & 0x0f),
        |i| i32::from(bw[i] >> 4),
    )
}

#[inline(always)]
pub(crate) fn parts(bw: &[u8], ba: &[u8]) -> SuperBlock {
    unpack(bw).parts(ba, read_f16(bw, D), read_f16(bw, DMIN))
}

/// Follows ggml's AVX2 kernel lane for lane (see [`Unpacked::lanes`]): per
/// super-block each lane first takes two 16-element runs' minimum terms
/// (lane l: runs 2l and 2l+1), then its share of the scaled products.
#[inline(always)]
pub(crate) fn vec_dot(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut acc = [0f32; 8];
    for (bw, ba) in w.chunks_exact(BLOCK).zip(a.chunks_exact(q8k::BLOCK)) {
        let da = q8k::d(ba);
        let d = da * read_f16(bw, D);
        let dmin = -da * read_f16(bw, DMIN);
        let u = unpack(bw);
        let sums = u.lanes(&u.quads(ba));
        for (l, lane) in acc.iter_mut().enumerate() {
            *lane = dmin.mul_add(u.min_sum(ba, 2 * l..2 * l + 2) as f32, *lane);
            *lane = d.mul_add(sums[l] as f32, *lane);
        }
    }
    crate::lanes::hsum8(&acc)
}

#[inline(always)]
pub(crate) fn dot_tiled(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    super::dot_tiled(w, a, BLOCK, parts)
}
