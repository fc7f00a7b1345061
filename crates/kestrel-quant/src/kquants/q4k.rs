//! Q4_K (144 bytes / 256 elements): half `d`, half `dmin`, `scales[12]`
//! (eight packed 6-bit scale/min pairs, see [`super::k4_scale_min`]),
//! `qs[128]`. Eight sub-blocks of 32; value = d*scale*q - dmin*min, q 0..=15.
//!
//! Placement: sub-block j keeps its quants in bytes `qs[32*(j/2) ..][..32]`,
//! in the low nibble for even j and the high nibble for odd j.

use super::{
    affine_quant, affine_scales, k4_scale_min, pack_k4_scales, SuperBlock, Unpacked, QK_K,
};
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
#[inline(always)]
pub(crate) fn vec_dot(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut acc = [0f32; 8];
    let mut acc_m = [0f32; 4];
    for (bw, ba) in w.chunks_exact(BLOCK).zip(a.chunks_exact(q8k::BLOCK)) {
        let da = q8k::d(ba);
        let d = da * read_f16(bw, D);
        let dmin = -da * read_f16(bw, DMIN);
        let u = unpack(bw);
        let lanes = u.lanes(&u.quads(ba));
        for (lane, &s) in acc.iter_mut().zip(&lanes) {
            *lane = d.mul_add(s as f32, *lane);
        }
        for (p, lane) in acc_m.iter_mut().enumerate() {
            *lane = dmin.mul_add(u.min_sum(ba, 4 * p..4 * p + 4) as f32, *lane);
        }
    }
    let m = (acc_m[0] + acc_m[2]) + (acc_m[1] + acc_m[3]);
    crate::lanes::hsum8(&acc) + m
}

/// Quants, scales and minimums of a block, for the integer work.
#[inline(always)]
fn unpack(b: &[u8]) -> Unpacked {
    let mut q = [0i8; QK_K];
    for p in 0..4 {
        for l in 0..32 {
            let v = b[QS + 32 * p + l];
            q[64 * p + l] = (v & 0x0f) as i8;
            q[64 * p + 32 + l] = (v >> 4) as i8;
        }
    }
    let sm: [(u8, u8); 8] = std::array::from_fn(|j| k4_scale_min(&b[SCALES..], j));
    Unpacked {
        q,
        scale: std::array::from_fn(|i| i32::from(sm[i / 2].0)),
        min: std::array::from_fn(|i| i32::from(sm[i / 2].1)),
    }
}

#[inline(always)]
pub(crate) fn parts(bw: &[u8], ba: &[u8]) -> SuperBlock {
    unpack(bw).parts(ba, read_f16(bw, D), read_f16(bw, DMIN))
}

#[inline(always)]
pub(crate) fn dot_tiled(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    super::dot_tiled(w, a, BLOCK, parts)
}

/// The f32 order of ggml-cpu's AVX2 kernels for Q4_K weights repacked eight
/// rows at a time (the CPU_REPACK buffer, used whenever the weight's row
/// count is a multiple of 8). Every `group` sub-blocks contribute one FMA of
/// their integer sum with `d_w * d_a` and one of their minimum sum with
/// `dmin_w * d_a`, in two accumulators subtracted at the end: `group` is 8
/// (a whole super-block) for a lone activation row (`gemv_q4_K_8x8_q8_K`)
/// and 2 for rows taken four at a time (`gemm_q4_K_8x8_q8_K`).
#[inline(always)]
fn dot_repacked(w: &[u8], a: &[u8], group: usize) -> f32 {
    let (mut acc, mut acc_min) = (0f32, 0f32);
    for (bw, ba) in w.chunks_exact(BLOCK).zip(a.chunks_exact(q8k::BLOCK)) {
        let da = q8k::d(ba);
        let scale = read_f16(bw, D) * da;
        let scale_min = read_f16(bw, DMIN) * da;
        let u = unpack(bw);
        let quads = u.quads(ba);
        for j0 in (0..8).step_by(group) {
            let runs = 2 * j0..2 * (j0 + group);
            let sum = u.scaled_sum(&quads, runs.clone());
            let sum_min = u.min_sum(ba, runs);
            acc = (sum as f32).mul_add(scale, acc);
            acc_min = (sum_min as f32).mul_add(scale_min, acc_min);
        }
    }
    acc - acc_min
}

/// See [`dot_repacked`]: one activation row (`gemv`).
#[inline(always)]
pub(crate) fn dot_repack_gemv(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    dot_repacked(w, a, 8)
}

/// See [`dot_repacked`]: one of four activation rows (`gemm`).
#[inline(always)]
pub(crate) fn dot_repack_gemm(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    dot_repacked(w, a, 2)
}
