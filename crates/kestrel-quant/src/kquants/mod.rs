//! The K-quant weight formats (Q2_K..Q6_K): 256-element super-blocks split
//! into 16- or 32-element sub-blocks, each with its own small integer scale
//! (and, for Q2_K/Q4_K/Q5_K, minimum) relative to half-precision super-block
//! factors. One file per format; this module holds what they share: the
//! per-sub-block scale search used by the weight quantizers and the 6-bit
//! scale packing of Q4_K/Q5_K.
//!
//! Every dot product here is against Q8_K activations and mirrors ggml's
//! structure: exact integer sums per sub-block, weighted by the integer
//! sub-block scales, then one f32 multiply by `d_a * d_w` per super-block;
//! the minimum terms use the activation `bsums` instead of the quants.
//!
//! The weight quantizers are deliberately simple (min/max per sub-block,
//! then max-based super-block factors); they are for building test models,
//! not for matching llama.cpp's quantize tool.

pub(crate) mod q2k;
pub(crate) mod q3k;
pub(crate) mod q4k;
pub(crate) mod q5k;
pub(crate) mod q6k;

pub(crate) use crate::q8k::QK_K;

/// Rounds to the nearest half and back, so quantizers can work with the
/// scale value that dequantization will actually see.
pub(crate) fn round_f16(x: f32) -> f32 {
    crate::float::f16_to_f32(crate::float::f32_to_f16(x))
}

/// The element with the largest magnitude, keeping its sign.
pub(crate) fn signed_absmax(x: &[f32]) -> f32 {
    x.iter()
        .fold(0.0f32, |m, &v| if v.abs() > m.abs() { v } else { m })
}

/// Affine scales for a super-block with unsigned quants 0..=nmax and
/// `x ~ d*sc[j]*q - dmin*m[j]`, with sc/m integers 0..=smax.
///
/// Each sub-block's range [min(lo, 0), hi] is spread over the quant levels;
/// the offset is clipped at zero because the format can only subtract a
/// non-negative minimum. The super-block factors map the largest sub-block
/// scale/offset to `smax`. Returns (d, dmin, sc, m) with d/dmin half-rounded.
pub(crate) fn affine_scales(
    x: &[f32],
    sub: usize,
    nmax: i32,
    smax: i32,
) -> (f32, f32, Vec<u8>, Vec<u8>) {
    let mut scale = Vec::with_capacity(x.len() / sub);
    let mut offset = Vec::with_capacity(x.len() / sub);
    for s in x.chunks_exact(sub) {
        let lo = s.iter().copied().fold(0.0f32, f32::min);
        let hi = s.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        scale.push((hi - lo) / nmax as f32);
        offset.push(-lo);
    }
    let d = round_f16(scale.iter().copied().fold(0.0, f32::max) / smax as f32);
    let dmin = round_f16(offset.iter().copied().fold(0.0, f32::max) / smax as f32);
    let to_int = |v: f32, f: f32| {
        if f > 0.0 {
            (v / f).round().clamp(0.0, smax as f32) as u8
        } else {
            0
        }
    };
    let sc = scale.iter().map(|&v| to_int(v, d)).collect();
    let m = offset.iter().map(|&v| to_int(v, dmin)).collect();
    (d, dmin, sc, m)
}

/// The nearest unsigned quant for `x ~ dl*q - ml`, clamped to 0..=nmax.
pub(crate) fn affine_quant(x: f32, dl: f32, ml: f32, nmax: i32) -> u8 {
    if dl > 0.0 {
        (((x + ml) / dl).round() as i32).clamp(0, nmax) as u8
    } else {
        0
    }
}

/// Symmetric signed scales: within each sub-block the largest-magnitude
/// element maps to the most negative quant `-qhalf`; the sub-block scales are
/// then integers in [-smax, smax] times a half-rounded `d`.
/// Returns (d, sc).
pub(crate) fn symmetric_scales(x: &[f32], sub: usize, qhalf: i32, smax: i32) -> (f32, Vec<i32>) {
    let scale: Vec<f32> = x
        .chunks_exact(sub)
        .map(|s| signed_absmax(s) / -(qhalf as f32))
        .collect();
    let d = round_f16(scale.iter().fold(0.0f32, |m, v| m.max(v.abs())) / smax as f32);
    let sc = scale
        .iter()
        .map(|&v| {
            if d > 0.0 {
                ((v / d).round() as i32).clamp(-smax, smax)
            } else {
                0
            }
        })
        .collect();
    (d, sc)
}

/// The nearest signed quant for `x ~ dl*q`, clamped to [-qhalf, qhalf-1].
pub(crate) fn symmetric_quant(x: f32, dl: f32, qhalf: i32) -> i32 {
    if dl != 0.0 {
        ((x / dl).round() as i32).clamp(-qhalf, qhalf - 1)
    } else {
        0
    }
}

/// Unpacks the (scale, min) pair of sub-block `j` (0..8) from the 12-byte
/// Q4_K/Q5_K scale field: sub-blocks 0..4 keep 6 bits in bytes j and j+4;
/// sub-blocks 4..8 keep their low nibbles in byte j+4 and their top two bits
/// in the spare top bits of bytes j-4 (scale) and j (min).
pub(crate) fn k4_scale_min(s: &[u8], j: usize) -> (u8, u8) {
    if j < 4 {
        (s[j] & 63, s[j + 4] & 63)
    } else {
        (
            (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4),
            (s[j + 4] >> 4) | ((s[j] >> 6) << 4),
        )
    }
}

/// Inverse of [`k4_scale_min`] for 8 pairs of 6-bit values.
pub(crate) fn pack_k4_scales(sc: &[u8], m: &[u8], s: &mut [u8]) {
    s[..12].fill(0);
    for j in 0..8 {
        if j < 4 {
            s[j] |= sc[j];
            s[j + 4] |= m[j];
        } else {
            s[j + 4] = (sc[j] & 0x0f) | ((m[j] & 0x0f) << 4);
            s[j - 4] |= (sc[j] >> 4) << 6;
            s[j] |= (m[j] >> 4) << 6;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn k4_scales_round_trip() {
        let sc: Vec<u8> = (0..8).map(|j| (j * 9 + 5) % 64).collect();
        let m: Vec<u8> = (0..8).map(|j| 63 - (j * 13) % 64).collect();
        let mut packed = [0u8; 12];
        pack_k4_scales(&sc, &m, &mut packed);
        for j in 0..8 {
            assert_eq!(k4_scale_min(&packed, j), (sc[j], m[j]));
        }
    }
}
