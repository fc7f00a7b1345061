//! Q4_K (144 bytes / 256 elements): half `d`, half `dmin`, `scales[12]`
//! (eight packed 6-bit scale/min pairs, see [`super::k4_scale_min`]),
//! `qs[128]`. Eight sub-blocks of 32; value = d*scale*q - dmin*min, q 0..=15.
//!
//! Placement: sub-block j keeps its quants in bytes `qs[32*(j/2) ..][..32]`,
//! in the low nibble for even j and the high nibble for odd j.

use super::{affine_quant, affine_scales, k4_scale_min, pack_k4_scales, QK_K};
use crate::float::{read_f16, write_f16};
use crate::q8k;

pub(crate) const BLOCK: usize = 144;
const D: usize = 0;
const DMIN: usize = 2;
const SCALES: usize = 4;
const QS: usize = 16;

/// (byte index within qs, shift) of element `e`.
fn locate(e: usize) -> (usize, usize) {
    let (j, l) = (e / 32, e % 32);
    (32 * (j / 2) + l, 4 * (j % 2))
}

fn quant(b: &[u8], e: usize) -> i32 {
    let (byte, shift) = locate(e);
    i32::from((b[QS + byte] >> shift) & 0x0f)
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
        let (d, dmin, sc, m) = affine_scales(x, 32, 15, 63);
        b.fill(0);
        pack_k4_scales(&sc, &m, &mut b[SCALES..SCALES + 12]);
        for (e, &v) in x.iter().enumerate() {
            let j = e / 32;
            let q = affine_quant(v, d * f32::from(sc[j]), dmin * f32::from(m[j]), 15);
            let (byte, shift) = locate(e);
            b[QS + byte] |= q << shift;
        }
        write_f16(b, D, d);
        write_f16(b, DMIN, dmin);
    }
}

/// Follows ggml's AVX2 kernel lane for lane (see `crate::lanes`): lane l
/// collects, from every 32-element sub-block, the scaled products of elements
/// 4l..4l+3; the mins go through four lanes of their own.
pub(crate) fn vec_dot(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut acc = [0f32; 8];
    let mut acc_m = [0f32; 4];
    for (bw, ba) in w.chunks_exact(BLOCK).zip(a.chunks_exact(q8k::BLOCK)) {
        let da = q8k::d(ba);
        let d = da * read_f16(bw, D);
        let dmin = -da * read_f16(bw, DMIN);
        let mut sumi = [0i32; 8];
        let mut mins = [0i32; 8];
        for (j, min) in mins.iter_mut().enumerate() {
            let (sc, m) = k4_scale_min(&bw[SCALES..], j);
            *min = i32::from(m);
            for (l, lane) in sumi.iter_mut().enumerate() {
                let base = 32 * j + 4 * l;
                let s: i32 = (base..base + 4).map(|e| quant(bw, e) * q8k::q(ba, e)).sum();
                *lane += i32::from(sc) * s;
            }
        }
        for (lane, &s) in acc.iter_mut().zip(&sumi) {
            *lane = d.mul_add(s as f32, *lane);
        }
        for (p, lane) in acc_m.iter_mut().enumerate() {
            let sub = |j: usize| q8k::bsum(ba, 2 * j) + q8k::bsum(ba, 2 * j + 1);
            let prod = mins[2 * p] * sub(2 * p) + mins[2 * p + 1] * sub(2 * p + 1);
            *lane = dmin.mul_add(prod as f32, *lane);
        }
    }
    let m = (acc_m[0] + acc_m[2]) + (acc_m[1] + acc_m[3]);
    crate::lanes::hsum8(&acc) + m
}
