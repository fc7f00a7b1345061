//! Unquantized element types: F32, F16 and BF16 rows, their scalar
//! conversions, and their dot products; and ggml's f16 GELU table.
//!
//! ggml pairs float weights with activations of the same type (F16 weights
//! dot F16 activations), so each dot here widens both sides to f32, multiplies
//! in f32 and accumulates in f32, as ggml-cpu's AVX2 path does per lane.

use half::f16;

/// IEEE half to f32 (exact: every half is representable as an f32).
pub fn f16_to_f32(bits: u16) -> f32 {
    f16::from_bits(bits).to_f32()
}

/// f32 to IEEE half, rounding to nearest-even. This is what x86 F16C
/// (`_cvtss_sh(x, 0)`, ggml's `GGML_CPU_FP32_TO_FP16`) does, including
/// overflow to infinity and gradual underflow to subnormals.
pub fn f32_to_f16(x: f32) -> u16 {
    f16::from_f32(x).to_bits()
}

/// bfloat16 to f32: the bf16 bits are the top half of an f32.
pub fn bf16_to_f32(bits: u16) -> f32 {
    f32::from_bits(u32::from(bits) << 16)
}

/// f32 to bfloat16 with round-to-nearest-even; NaNs stay NaN and are made
/// quiet. Written out by hand rather than via `half` so the NaN payload rule
/// is exactly ggml's (`GGML_FP32_TO_BF16`): keep the top bits, set bit 6.
pub fn f32_to_bf16(x: f32) -> u16 {
    let u = x.to_bits();
    if (u & 0x7fff_ffff) > 0x7f80_0000 {
        return ((u >> 16) | 0x40) as u16;
    }
    // Adding 0x7fff plus the lowest kept bit rounds half-way cases to even.
    let rounded = u.wrapping_add(0x7fff + ((u >> 16) & 1));
    (rounded >> 16) as u16
}

pub(crate) fn read_f16(b: &[u8], at: usize) -> f32 {
    f16_to_f32(u16::from_le_bytes([b[at], b[at + 1]]))
}

pub(crate) fn write_f16(b: &mut [u8], at: usize, x: f32) {
    b[at..at + 2].copy_from_slice(&f32_to_f16(x).to_le_bytes());
}

pub(crate) fn read_f32(b: &[u8], at: usize) -> f32 {
    f32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

pub(crate) fn write_f32(b: &mut [u8], at: usize, x: f32) {
    b[at..at + 4].copy_from_slice(&x.to_le_bytes());
}

pub(crate) fn dequantize_f32(src: &[u8], dst: &mut [f32]) {
    for (d, c) in dst.iter_mut().zip(src.chunks_exact(4)) {
        *d = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
    }
}

pub(crate) fn quantize_f32(src: &[f32], dst: &mut [u8]) {
    for (s, c) in src.iter().zip(dst.chunks_exact_mut(4)) {
        c.copy_from_slice(&s.to_le_bytes());
    }
}

pub(crate) fn dequantize_f16(src: &[u8], dst: &mut [f32]) {
    for (d, c) in dst.iter_mut().zip(src.chunks_exact(2)) {
        *d = f16_to_f32(u16::from_le_bytes([c[0], c[1]]));
    }
}

pub(crate) fn quantize_f16(src: &[f32], dst: &mut [u8]) {
    for (s, c) in src.iter().zip(dst.chunks_exact_mut(2)) {
        c.copy_from_slice(&f32_to_f16(*s).to_le_bytes());
    }
}

pub(crate) fn dequantize_bf16(src: &[u8], dst: &mut [f32]) {
    for (d, c) in dst.iter_mut().zip(src.chunks_exact(2)) {
        *d = bf16_to_f32(u16::from_le_bytes([c[0], c[1]]));
    }
}

pub(crate) fn quantize_bf16(src: &[f32], dst: &mut [u8]) {
    for (s, c) in src.iter().zip(dst.chunks_exact_mut(2)) {
        c.copy_from_slice(&f32_to_bf16(*s).to_le_bytes());
    }
}

pub(crate) fn vec_dot_f32(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut sum = 0.0f32;
    for (cw, ca) in w.chunks_exact(4).zip(a.chunks_exact(4)) {
        sum += read_f32(cw, 0) * read_f32(ca, 0);
    }
    sum
}

pub(crate) fn vec_dot_f16(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut sum = 0.0f32;
    for (cw, ca) in w.chunks_exact(2).zip(a.chunks_exact(2)) {
        sum += read_f16(cw, 0) * read_f16(ca, 0);
    }
    sum
}

pub(crate) fn vec_dot_bf16(_n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut sum = 0.0f32;
    for (cw, ca) in w.chunks_exact(2).zip(a.chunks_exact(2)) {
        let x = bf16_to_f32(u16::from_le_bytes([cw[0], cw[1]]));
        let y = bf16_to_f32(u16::from_le_bytes([ca[0], ca[1]]));
        sum += x * y;
    }
    sum
}

/// GELU (tanh form) of every f16 input, as f16, indexed by the input's
/// bits: ggml computes GELU on the CPU through this table, built once the
/// same way, and both backends look it up to get its bits.
pub fn gelu_f16_table() -> &'static [u16] {
    static TABLE: std::sync::OnceLock<Vec<u16>> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| (0..=u16::MAX).map(gelu_f16).collect())
}

/// The table entry for the f16 input `h`.
fn gelu_f16(h: u16) -> u16 {
    let xh = f16_to_f32(h);
    // ggml's constant, written in full so it rounds to the same f32.
    #[allow(clippy::excessive_precision)]
    const SQRT_2_OVER_PI: f32 = 0.797_884_560_802_865_4;
    const COEF_A: f32 = 0.044715;
    // ggml's table is built by code its compiler contracts: 1 + (a·x)·x is fused.
    let inner = (COEF_A * xh).mul_add(xh, 1.0);
    let g = 0.5 * xh * (1.0 + (SQRT_2_OVER_PI * xh * inner).tanh());
    f32_to_f16(g)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_round_trip_and_rounding() {
        assert_eq!(f32_to_f16(1.0), 0x3c00);
        assert_eq!(f16_to_f32(0x3c00), 1.0);
        // 1 + 2^-11 is exactly half-way between 1 and the next half; ties go to even (1.0).
        assert_eq!(f32_to_f16(1.0 + 1.0 / 2048.0), 0x3c00);
        // 1 + 3*2^-11 is half-way between two halves; the even one is 1 + 2^-9.
        assert_eq!(f32_to_f16(1.0 + 3.0 / 2048.0), 0x3c02);
        assert_eq!(f32_to_f16(70000.0), 0x7c00);
        assert_eq!(f16_to_f32(0x0001), 2f32.powi(-24));
    }

    #[test]
    fn bf16_rounding_and_nan() {
        assert_eq!(f32_to_bf16(1.0), 0x3f80);
        assert_eq!(bf16_to_f32(0x3f80), 1.0);
        // Half-way between 0x3f80 and 0x3f81: ties to even keeps 0x3f80.
        assert_eq!(f32_to_bf16(f32::from_bits(0x3f80_8000)), 0x3f80);
        // Half-way between 0x3f81 and 0x3f82: ties to even rounds up.
        assert_eq!(f32_to_bf16(f32::from_bits(0x3f81_8000)), 0x3f82);
        assert_eq!(f32_to_bf16(f32::from_bits(0x3f80_8001)), 0x3f81);
        // A signalling NaN is made quiet, not rounded into infinity.
        assert_eq!(f32_to_bf16(f32::from_bits(0x7f80_0001)), 0x7fc0);
    }
}
