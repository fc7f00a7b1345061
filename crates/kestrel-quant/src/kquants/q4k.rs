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

pub(crate) fn vec_dot(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut sum = 0.0f32;
    for (bw, ba) in w.chunks_exact(BLOCK).zip(a.chunks_exact(q8k::BLOCK)) {
        let mut isum = 0i32;
        let mut summ = 0i32;
        for j in 0..8 {
            let (sc, m) = k4_scale_min(&bw[SCALES..], j);
            let sub: i32 = (32 * j..32 * j + 32)
                .map(|e| quant(bw, e) * q8k::q(ba, e))
                .sum();
            isum += i32::from(sc) * sub;
            summ += i32::from(m) * (q8k::bsum(ba, 2 * j) + q8k::bsum(ba, 2 * j + 1));
        }
        let da = q8k::d(ba);
        let dall = da * read_f16(bw, D);
        let dmin = da * read_f16(bw, DMIN);
        sum += dall * isum as f32 - dmin * summ as f32;
    }
    sum
}
