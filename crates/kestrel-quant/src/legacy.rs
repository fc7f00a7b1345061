//! The 32-element "legacy" block formats Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and
//! Q8_1: their byte layouts, dequantizers, weight quantizers, the Q8_0/Q8_1
//! activation quantizers, and the integer dot products against Q8_0/Q8_1.
//!
//! Layouts (little-endian, `d`/`m`/`s` are IEEE halves):
//! - Q4_0 (18 B): `d`, then 16 bytes; byte j holds element j in its low
//!   nibble and element j+16 in its high nibble; value = (q - 8) * d.
//! - Q4_1 (20 B): `d`, `m`, 16 nibble bytes as Q4_0; value = q * d + m.
//! - Q5_0 (22 B): `d`, a u32 `qh` whose bit i is the fifth bit of element i,
//!   16 nibble bytes; value = (q - 16) * d.
//! - Q5_1 (24 B): `d`, `m`, `qh`, nibbles; value = q * d + m.
//! - Q8_0 (34 B): `d`, 32 signed bytes; value = q * d.
//! - Q8_1 (36 B): `d`, `s` = d * sum(q), 32 signed bytes.

use crate::float::{read_f16, write_f16};

pub(crate) const QK: usize = 32;

// ---------------------------------------------------------------------------
// Activation quantizers (must match ggml-cpu on x86-64 AVX2 bit for bit).
// ---------------------------------------------------------------------------

/// Rounds like `_mm256_round_ps(v, _MM_ROUND_NEAREST)` followed by
/// `_mm256_cvtps_epi32`: ties go to even (not away from zero as C `roundf`
/// would), and a NaN or out-of-range value becomes `i32::MIN`, the x86
/// "integer indefinite" value. Only reachable when the block's max-abs is so
/// small that `127 / max` overflows, but mirroring it keeps even that case
/// identical to ggml.
#[inline]
fn x86_round_to_i32(v: f32) -> i32 {
    let r = v.round_ties_even();
    if r.is_nan() || !(-2147483648.0..2147483648.0).contains(&r) {
        i32::MIN
    } else {
        r as i32
    }
}

/// The saturating i32 -> i8 narrowing of `_mm256_packs_epi32` + `packs_epi16`.
#[inline]
fn saturate_i8(v: i32) -> i8 {
    v.clamp(-128, 127) as i8
}

/// Quantizes one 32-element block the way ggml's AVX2 `quantize_row_q8_0` /
/// `quantize_row_q8_1` do. Returns (unrounded f32 scale, quants, i32 sum of
/// the pre-narrowing quants).
///
/// Differences from ggml's portable `quantize_row_q8_0_ref`, deliberately
/// following the x86 path:
/// - the multiplier is `127 / amax`, not `1 / (amax / 127)`; the two can
///   differ by an ulp, which flips a quant now and then;
/// - rounding is nearest-even, not `roundf` (half away from zero).
#[inline]
fn q8_block_x86(x: &[f32]) -> (f32, [i8; QK], i32) {
    let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
    let mut qs = [0i8; QK];
    let mut sum = 0i32;
    for (q, v) in qs.iter_mut().zip(x) {
        let i = x86_round_to_i32(v * id);
        // hsum_i32_8 adds the unsaturated 32-bit values with wrapping adds.
        sum = sum.wrapping_add(i);
        *q = saturate_i8(i);
    }
    (d, qs, sum)
}

#[inline]
pub(crate) fn quantize_q8_0(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(34)) {
        let (d, qs, _) = q8_block_x86(x);
        write_f16(b, 0, d);
        for (o, q) in b[2..].iter_mut().zip(qs) {
            *o = q as u8;
        }
    }
}

#[inline]
pub(crate) fn quantize_q8_1(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(36)) {
        let (d, qs, sum) = q8_block_x86(x);
        write_f16(b, 0, d);
        // ggml multiplies the unrounded f32 scale by the integer sum and only
        // then rounds to half; using the stored half `d` would differ.
        write_f16(b, 2, d * sum as f32);
        for (o, q) in b[4..].iter_mut().zip(qs) {
            *o = q as u8;
        }
    }
}

pub(crate) fn dequantize_q8_0(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(34).zip(dst.chunks_exact_mut(QK)) {
        let d = read_f16(b, 0);
        for (o, &q) in y.iter_mut().zip(&b[2..]) {
            *o = f32::from(q as i8) * d;
        }
    }
}

pub(crate) fn dequantize_q8_1(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(36).zip(dst.chunks_exact_mut(QK)) {
        let d = read_f16(b, 0);
        for (o, &q) in y.iter_mut().zip(&b[4..]) {
            *o = f32::from(q as i8) * d;
        }
    }
}

// ---------------------------------------------------------------------------
// 4- and 5-bit weights.
// ---------------------------------------------------------------------------

/// The unsigned 4- or 5-bit quant of element `j` of a block whose nibble
/// bytes start at `qs` (and fifth bits are in `qh`, if any).
fn nibble(qs: &[u8], j: usize) -> u8 {
    if j < QK / 2 {
        qs[j] & 0x0f
    } else {
        qs[j - QK / 2] >> 4
    }
}

fn fifth_bit(qh: u32, j: usize) -> u8 {
    (((qh >> j) & 1) as u8) << 4
}

fn read_qh(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

pub(crate) fn dequantize_q4_0(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(18).zip(dst.chunks_exact_mut(QK)) {
        let d = read_f16(b, 0);
        for (j, o) in y.iter_mut().enumerate() {
            *o = (i32::from(nibble(&b[2..], j)) - 8) as f32 * d;
        }
    }
}

pub(crate) fn dequantize_q4_1(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(20).zip(dst.chunks_exact_mut(QK)) {
        let d = read_f16(b, 0);
        let m = read_f16(b, 2);
        for (j, o) in y.iter_mut().enumerate() {
            *o = f32::from(nibble(&b[4..], j)) * d + m;
        }
    }
}

pub(crate) fn dequantize_q5_0(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(22).zip(dst.chunks_exact_mut(QK)) {
        let d = read_f16(b, 0);
        let qh = read_qh(b, 2);
        for (j, o) in y.iter_mut().enumerate() {
            let q = nibble(&b[6..], j) | fifth_bit(qh, j);
            *o = (i32::from(q) - 16) as f32 * d;
        }
    }
}

pub(crate) fn dequantize_q5_1(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(24).zip(dst.chunks_exact_mut(QK)) {
        let d = read_f16(b, 0);
        let m = read_f16(b, 2);
        let qh = read_qh(b, 4);
        for (j, o) in y.iter_mut().enumerate() {
            let q = nibble(&b[8..], j) | fifth_bit(qh, j);
            *o = f32::from(q) * d + m;
        }
    }
}

/// Writes 32 unsigned quants (< 32) as nibble bytes plus, for 5-bit formats,
/// the `qh` word of fifth bits.
fn pack_nibbles(q: &[u8; QK], qs: &mut [u8]) -> u32 {
    let mut qh = 0u32;
    for j in 0..QK / 2 {
        qs[j] = (q[j] & 0x0f) | ((q[j + QK / 2] & 0x0f) << 4);
    }
    for (j, &v) in q.iter().enumerate() {
        qh |= u32::from(v >> 4) << j;
    }
    qh
}

/// The element with the largest magnitude, keeping its sign.
fn signed_absmax(x: &[f32]) -> f32 {
    x.iter()
        .fold(0.0f32, |m, &v| if v.abs() > m.abs() { v } else { m })
}

/// Symmetric weight quantizer: the largest-magnitude element maps to the
/// most negative level `-half`, so the full signed range is used on that side
/// and no level is wasted. Quants are computed against the half-rounded scale
/// that dequantization will use. Returns (scale, unsigned quants).
fn quantize_symmetric(x: &[f32], half: i32) -> (f32, [u8; QK]) {
    let max = signed_absmax(x);
    let d = crate::float::f16_to_f32(crate::float::f32_to_f16(max / -(half as f32)));
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut q = [0u8; QK];
    for (o, &v) in q.iter_mut().zip(x) {
        *o = ((v * id).round() as i32 + half).clamp(0, 2 * half - 1) as u8;
    }
    (d, q)
}

/// Affine weight quantizer: min maps to level 0 and max to `levels - 1`.
/// Returns (scale, offset, quants), scale and offset already half-rounded.
fn quantize_affine(x: &[f32], levels: i32) -> (f32, f32, [u8; QK]) {
    let min = x.iter().copied().fold(f32::INFINITY, f32::min);
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let round16 = |v: f32| crate::float::f16_to_f32(crate::float::f32_to_f16(v));
    let d = round16((max - min) / (levels - 1) as f32);
    let m = round16(min);
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut q = [0u8; QK];
    for (o, &v) in q.iter_mut().zip(x) {
        *o = (((v - m) * id).round() as i32).clamp(0, levels - 1) as u8;
    }
    (d, m, q)
}

pub(crate) fn quantize_q4_0(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(18)) {
        let (d, q) = quantize_symmetric(x, 8);
        write_f16(b, 0, d);
        pack_nibbles(&q, &mut b[2..]);
    }
}

pub(crate) fn quantize_q4_1(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(20)) {
        let (d, m, q) = quantize_affine(x, 16);
        write_f16(b, 0, d);
        write_f16(b, 2, m);
        pack_nibbles(&q, &mut b[4..]);
    }
}

pub(crate) fn quantize_q5_0(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(22)) {
        let (d, q) = quantize_symmetric(x, 16);
        write_f16(b, 0, d);
        let qh = pack_nibbles(&q, &mut b[6..]);
        b[2..6].copy_from_slice(&qh.to_le_bytes());
    }
}

pub(crate) fn quantize_q5_1(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(24)) {
        let (d, m, q) = quantize_affine(x, 32);
        write_f16(b, 0, d);
        write_f16(b, 2, m);
        let qh = pack_nibbles(&q, &mut b[8..]);
        b[4..8].copy_from_slice(&qh.to_le_bytes());
    }
}

// ---------------------------------------------------------------------------
// Dot products. Each block contributes (d_w * d_a) * integer_sum, summed in
// f32; the affine (_1) formats add m_w * s_a, where s_a = d_a * sum(q_a), so
// the offset never has to be multiplied into every element.
// ---------------------------------------------------------------------------

/// The 32 signed activation quants of a Q8_0 (`at` = 2) or Q8_1 (4) block.
#[inline(always)]
fn act(block: &[u8], at: usize) -> &[u8; QK] {
    block[at..at + QK]
        .try_into()
        .expect("block length checked by caller")
}

/// Unpacks 16 nibble bytes (and, for 5-bit formats, the `qh` fifth bits)
/// into 32 quants minus `offset`.
#[inline(always)]
fn unpack(qs: &[u8], qh: u32, offset: i8) -> [i8; QK] {
    let mut w = [0i8; QK];
    for j in 0..QK / 2 {
        let hi_j = (((qh >> j) & 1) << 4) as u8;
        let hi_k = (((qh >> (j + QK / 2)) & 1) << 4) as u8;
        w[j] = ((qs[j] & 0x0f) | hi_j) as i8 - offset;
        w[j + QK / 2] = ((qs[j] >> 4) | hi_k) as i8 - offset;
    }
    w
}

/// The eight exact integer lanes of ggml's AVX2 block dots: lane l sums the
/// products of elements 4l..4l+3.
#[inline(always)]
fn lanes32(w: &[i8; QK], a: &[u8; QK]) -> [i32; 8] {
    let mut out = [0i32; 8];
    for ((o, w), a) in out.iter_mut().zip(w.chunks_exact(4)).zip(a.chunks_exact(4)) {
        *o = w
            .iter()
            .zip(a)
            .map(|(&w, &a)| i32::from(w) * i32::from(a as i8))
            .sum();
    }
    out
}

/// The float accumulation of ggml's AVX2 block dots, reproduced lane for
/// lane so results match llama.cpp bit for bit: each block's eight integer
/// lanes ([`lanes32`]) are converted to f32 and fused-multiply-added into
/// eight running sums with the block's scale; the sums are then reduced in
/// `hsum_float_8`'s order.
struct Lanes([f32; 8]);

impl Lanes {
    fn new() -> Lanes {
        Lanes([0.0; 8])
    }

    #[inline(always)]
    fn block(&mut self, scale: f32, w: &[i8; QK], a: &[u8; QK]) {
        for (acc, s) in self.0.iter_mut().zip(lanes32(w, a)) {
            *acc = scale.mul_add(s as f32, *acc);
        }
    }

    fn hsum(&self) -> f32 {
        crate::lanes::hsum8(&self.0)
    }
}

#[inline(always)]
pub(crate) fn vec_dot_q4_0_q8_0(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut acc = Lanes::new();
    for (bw, ba) in w.chunks_exact(18).zip(a.chunks_exact(34)) {
        let d = read_f16(bw, 0) * read_f16(ba, 0);
        acc.block(d, &unpack(&bw[2..], 0, 8), act(ba, 2));
    }
    acc.hsum()
}

/// ggml-cpu's AVX2 kernels for Q4_0 weights repacked eight rows at a time
/// (`gemv`/`gemm_q4_0_8x8_q8_0`, which order the f32 work alike): one FMA
/// per block of its exact integer sum with `d_w * d_a`.
#[inline(always)]
pub(crate) fn dot_q4_0_repacked(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut acc = 0f32;
    for (bw, ba) in w.chunks_exact(18).zip(a.chunks_exact(34)) {
        let s: i32 = lanes32(&unpack(&bw[2..], 0, 8), act(ba, 2)).iter().sum();
        acc = (s as f32).mul_add(read_f16(bw, 0) * read_f16(ba, 0), acc);
    }
    acc
}

#[inline(always)]
pub(crate) fn vec_dot_q4_1_q8_1(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut acc = Lanes::new();
    // ggml sums the min terms separately; its compiler fuses `summs += m * s`.
    let mut summs = 0.0f32;
    for (bw, ba) in w.chunks_exact(20).zip(a.chunks_exact(36)) {
        summs = read_f16(bw, 2).mul_add(read_f16(ba, 2), summs);
        let d = read_f16(bw, 0) * read_f16(ba, 0);
        acc.block(d, &unpack(&bw[4..], 0, 0), act(ba, 4));
    }
    acc.hsum() + summs
}

#[inline(always)]
pub(crate) fn vec_dot_q5_0_q8_0(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut acc = Lanes::new();
    for (bw, ba) in w.chunks_exact(22).zip(a.chunks_exact(34)) {
        let d = read_f16(bw, 0) * read_f16(ba, 0);
        acc.block(d, &unpack(&bw[6..], read_qh(bw, 2), 16), act(ba, 2));
    }
    acc.hsum()
}

#[inline(always)]
pub(crate) fn vec_dot_q5_1_q8_1(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut acc = Lanes::new();
    let mut summs = 0.0f32;
    for (bw, ba) in w.chunks_exact(24).zip(a.chunks_exact(36)) {
        summs = read_f16(bw, 2).mul_add(read_f16(ba, 2), summs);
        let d = read_f16(bw, 0) * read_f16(ba, 0);
        acc.block(d, &unpack(&bw[8..], read_qh(bw, 4), 0), act(ba, 4));
    }
    acc.hsum() + summs
}

#[inline(always)]
pub(crate) fn vec_dot_q8_0_q8_0(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut acc = Lanes::new();
    for (bw, ba) in w.chunks_exact(34).zip(a.chunks_exact(34)) {
        let d = read_f16(bw, 0) * read_f16(ba, 0);
        acc.block(d, &act(bw, 2).map(|q| q as i8), act(ba, 2));
    }
    acc.hsum()
}

/// Not a ggml kernel (ggml never stores Q8_1 weights); provided so every type
/// has a dot. The `s` fields are unused: both sides are symmetric.
#[inline(always)]
pub(crate) fn vec_dot_q8_1_q8_1(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut sum = 0.0f32;
    for (bw, ba) in w.chunks_exact(36).zip(a.chunks_exact(36)) {
        let s: i32 = lanes32(&act(bw, 4).map(|q| q as i8), act(ba, 4))
            .iter()
            .sum();
        sum += read_f16(bw, 0) * read_f16(ba, 0) * s as f32;
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q8_0_ties_round_to_even() {
        // amax = 127 makes the multiplier exactly 1, so x*id == x and the
        // half-way inputs expose the rounding mode: roundf would give 3, -3, 1.
        let mut x = [0.0f32; QK];
        x[0] = 127.0;
        x[1] = 2.5;
        x[2] = -2.5;
        x[3] = 0.5;
        x[4] = 3.5;
        let mut b = [0u8; 34];
        quantize_q8_0(&x, &mut b);
        assert_eq!(read_f16(&b, 0), 1.0);
        assert_eq!(&b[2..7], &[127u8, 2, (-2i8) as u8, 0, 4]);
    }

    #[test]
    fn q8_1_sum_uses_unrounded_scale() {
        // d = 1/127 is not a half; s must be half(d_f32 * sum), not half(half(d) * sum).
        let x: Vec<f32> = (0..QK).map(|i| (i as f32 - 3.0) / 29.0).collect();
        let mut b = [0u8; 36];
        quantize_q8_1(&x, &mut b);
        let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let sum: i32 = b[4..].iter().map(|&q| i32::from(q as i8)).sum();
        assert_eq!(
            u16::from_le_bytes([b[2], b[3]]),
            crate::float::f32_to_f16(d * sum as f32)
        );
    }

    #[test]
    fn q8_0_tiny_block_mirrors_x86_overflow() {
        // 127 / 1e-45 overflows to +inf: x86 turns inf and NaN (0*inf) into the
        // integer-indefinite value, which saturates to -128.
        let mut x = [0.0f32; QK];
        x[0] = f32::from_bits(1);
        let mut b = [0u8; 34];
        quantize_q8_0(&x, &mut b);
        assert_eq!(b[2] as i8, -128);
        assert_eq!(b[3] as i8, -128);
    }
}
