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

/// One weight super-block against one Q8_K block, before any f32 work: the
/// exact integer sums and the weight's half-precision factors.
pub(crate) struct SuperBlock {
    /// Sum over sub-blocks of scale * sum(q * a), with q signed as the
    /// format defines it.
    pub sum: i32,
    /// Sum over sub-blocks of min * sum(a) (0 for formats without minimums).
    pub sum_min: i32,
    pub d: f32,
    /// 0 for formats without minimums.
    pub dmin: f32,
}

/// A weight super-block unpacked for the integer work: quants as the format
/// defines them (signed where it subtracts an offset), and the scale and
/// minimum of every 16-element run (formats with 32-element sub-blocks repeat
/// each value twice).
pub(crate) struct Unpacked {
    pub q: [i8; QK_K],
    pub scale: [i32; 16],
    pub min: [i32; 16],
}

impl Unpacked {
    /// Builds one from per-element quants and per-16 scale/min lookups.
    #[inline(always)]
    pub fn from_fns(
        q: impl Fn(usize) -> i32,
        scale: impl Fn(usize) -> i32,
        min: impl Fn(usize) -> i32,
    ) -> Unpacked {
        Unpacked {
            q: std::array::from_fn(|e| q(e) as i8),
            scale: std::array::from_fn(&scale),
            min: std::array::from_fn(&min),
        }
    }

    /// Sums of 4 consecutive products with the activation quants, exact.
    #[inline(always)]
    pub fn quads(&self, ba: &[u8]) -> [i32; 64] {
        let a: &[u8; QK_K] = ba[4..4 + QK_K].try_into().expect("Q8_K block");
        let mut out = [0i32; 64];
        for ((o, q), a) in out
            .iter_mut()
            .zip(self.q.chunks_exact(4))
            .zip(a.chunks_exact(4))
        {
            *o = q
                .iter()
                .zip(a)
                .map(|(&q, &a)| i32::from(q) * i32::from(a as i8))
                .sum();
        }
        out
    }

    /// The integer lanes of ggml's AVX2 K-quant dots: lane l sums
    /// `scale * q * a` over the elements e with `e % 32` in 4l..4l+4.
    #[inline(always)]
    pub fn lanes(&self, quads: &[i32; 64]) -> [i32; 8] {
        let mut lanes = [0i32; 8];
        for (g, &s) in quads.iter().enumerate() {
            lanes[g % 8] += self.scale[g / 4] * s;
        }
        lanes
    }

    /// Sum of `scale * q * a` over the 16-element runs `runs`.
    #[inline(always)]
    pub fn scaled_sum(&self, quads: &[i32; 64], runs: std::ops::Range<usize>) -> i32 {
        runs.map(|i| {
            self.scale[i] * (quads[4 * i] + quads[4 * i + 1] + quads[4 * i + 2] + quads[4 * i + 3])
        })
        .sum()
    }

    /// The whole super-block's integer parts against `ba`, with the
    /// weight's factors `d` and `dmin` (0 without minimums).
    #[inline(always)]
    pub fn parts(&self, ba: &[u8], d: f32, dmin: f32) -> SuperBlock {
        SuperBlock {
            sum: self.scaled_sum(&self.quads(ba), 0..16),
            sum_min: self.min_sum(ba, 0..16),
            d,
            dmin,
        }
    }

    /// Sum of `min * sum(a)` over the 16-element runs `runs`.
    #[inline(always)]
    pub fn min_sum(&self, ba: &[u8], runs: std::ops::Range<usize>) -> i32 {
        runs.map(|i| self.min[i] * crate::q8k::bsum(ba, i)).sum()
    }
}

/// ggml-cpu's tiled K-quant matmul (`ggml-cpu/tiled`, AVX2), which takes
/// every product whose weight is not repacked and which has at least 8
/// activation rows. Per super-block: `r = d * sum`, then
/// `r = r - dmin * sum_min` fused, then `acc += r * d_a` fused, in order.
#[inline(always)]
pub(crate) fn dot_tiled(
    w: &[u8],
    a: &[u8],
    block: usize,
    parts: fn(&[u8], &[u8]) -> SuperBlock,
) -> f32 {
    let mut acc = 0f32;
    for (bw, ba) in w.chunks_exact(block).zip(a.chunks_exact(crate::q8k::BLOCK)) {
        let p = parts(bw, ba);
        let r = (-p.dmin).mul_add(p.sum_min as f32, p.d * p.sum as f32);
        acc = r.mul_add(crate::q8k::d(ba), acc);
    }
    acc
}

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
