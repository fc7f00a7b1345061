//! Q5_K (176 bytes / 256 elements): half `d`, half `dmin`, `scales[12]` (as
//! Q4_K), `qh[32]` (fifth bits), `qs[128]` (low nibbles, placed as Q4_K).
//! Value = d*scale*q - dmin*min, q 0..=31; element l of sub-block j has its
//! fifth bit in `qh[l]` at bit j.

use super::{
    affine_quant, affine_scales, k4_scale_min, pack_k4_scales, SuperBlock, Unpacked, QK_K,
};
use crate::float::{read_f16, write_f16};
use crate::q8k;

pub(crate) const BLOCK: usize = 176;
const D: usize = 0;
const DMIN: usize = 2;
const SCALES: usize = 4;
const QH: usize = 16;
const QS: usize = 48;

/// (nibble byte within qs, nibble shift, qh byte, qh bit) of element `e`.
fn locate(e: usize) -> (usize, usize, usize, usize) {
    let (j, l) = (e / 32, e % 32);
    (32 * (j / 2) + l, 4 * (j % 2), l, j)
}

fn quant(b: &[u8], e: usize) -> i32 {
    let (byte, shift, hbyte, hbit) = locate(e);
    let low = (b[QS + byte] >> shift) & 0x0f;
    let high = ((b[QH + hbyte] >> hbit) & 1) << 4;
    i32::from(low | high)
}

pub(crate) fn dequantize(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(BLOCK).zip(dst.chunks_exact_mut(QK_K)) {
        let d = read_f16(b, D);
        let dmin = read_f16(b, DMIN);
        for (e, o) in y.iter_mut().enumerate() {
            let (sc, m) = k4_scale_min(&b[SCALES..], e / 32);
            let dl = d * f32::from(sc);
            let ml = dmin * f32::from(m);
            *o = dl * quant(b, e) as f32 - ml;
        }
    }
}

pub(crate) fn quantize(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(BLOCK)) {
        let (d, dmin, sc, m) = affine_scales(x, 32, 31, 63);
        b.fill(0);
        pack_k4_scales(&sc, &m, &mut b[SCALES..SCALES + 12]);
        for (e, &v) in x.iter().enumerate() {
            let j = e / 32;
            let q = affine_quant(v, d * f32::from(sc[j]), dmin * f32::from(m[j]), 31);
            let (byte, shift, hbyte, hbit) = locate(e);
            b[QS + byte] |= (q & 0x0f) << shift;
            b[QH + hbyte] |= (q >> 4) << hbit;
        }
        write_f16(b, D, d);
        write_f16(b, DMIN, dmin);
    }
}

#[inline(always)]
fn unpack(bw: &[u8]) -> Unpacked {
    let sm: [(u8, u8); 8] = std::array::from_fn(|j| k4_scale_min(&bw[SCALES..], j));
    Unpacked::from_fns(
        |e| quant(bw, e),
        |i| i32::from(sm[i / 2].0),
        |i| i32::from(sm[i / 2].1),
    )
}

#[inline(always)]
pub(crate) fn parts(bw: &[u8], ba: &[u8]) -> SuperBlock {
    unpack(bw).parts(ba, read_f16(bw, D), read_f16(bw, DMIN))
}

/// Follows ggml's AVX2 kernel lane for lane (see [`Unpacked::lanes`]); the
/// minimum terms go into one scalar sum, one fused multiply-add per
/// super-block, added after the lanes are reduced.
#[inline(always)]
pub(crate) fn vec_dot(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut acc = [0f32; 8];
    let mut summs = 0f32;
    for (bw, ba) in w.chunks_exact(BLOCK).zip(a.chunks_exact(q8k::BLOCK)) {
        let da = q8k::d(ba);
        let d = da * read_f16(bw, D);
        let dmin = -da * read_f16(bw, DMIN);
        let u = unpack(bw);
        summs = dmin.mul_add(u.min_sum(ba, 0..16) as f32, summs);
        for (lane, s) in acc.iter_mut().zip(u.lanes(&u.quads(ba))) {
            *lane = d.mul_add(s as f32, *lane);
        }
    }
    crate::lanes::hsum8(&acc) + summs
}

#[inline(always)]
pub(crate) fn dot_tiled(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    super::dot_tiled(w, a, BLOCK, parts)
}
