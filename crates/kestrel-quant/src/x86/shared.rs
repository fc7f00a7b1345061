//! The AVX2 helpers every block family's kernels share: half-float loads,
//! 32-byte loads, the integer lane products and horizontal sums, the 4-
//! and 5-bit unpacking.

use std::arch::x86_64::*;

/// `v` unchanged, but opaque to the optimiser. Where only some lanes of a
/// half-to-float conversion are used, LLVM narrows the zero-extending move
/// into a `vpinsrw` that merges into whatever register is free, often a
/// loop's accumulator; the false dependency then serialises the loop.
#[inline(always)]
pub(super) fn opaque(v: __m128i) -> __m128i {
    let mut v = v;
    // SAFETY: an empty asm block that only claims to modify `v`.
    unsafe {
        std::arch::asm!("/* {0} */", inout(xmm_reg) v, options(pure, nomem, nostack, preserves_flags));
    }
    v
}

/// The IEEE half at `at`, widened with F16C (exact, as every conversion).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn f16_at(b: &[u8], at: usize) -> f32 {
    let bits = u16::from_le_bytes([b[at], b[at + 1]]);
    _mm_cvtss_f32(_mm_cvtph_ps(opaque(_mm_cvtsi32_si128(i32::from(bits)))))
}

/// The halves at `bw[at_w]` and `ba[at_a]`, widened together.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn f16_pair(bw: &[u8], at_w: usize, ba: &[u8], at_a: usize) -> (f32, f32) {
    let w = u32::from(u16::from_le_bytes([bw[at_w], bw[at_w + 1]]));
    let a = u32::from(u16::from_le_bytes([ba[at_a], ba[at_a + 1]]));
    let v = _mm_cvtph_ps(_mm_cvtsi32_si128((w | (a << 16)) as i32));
    (_mm_cvtss_f32(v), _mm_cvtss_f32(_mm_movehdup_ps(v)))
}

/// The two adjacent halves at `b[at..at + 4]`, widened together.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn f16x2_at(b: &[u8], at: usize) -> (f32, f32) {
    let bits = u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
    let v = _mm_cvtph_ps(opaque(_mm_cvtsi32_si128(bits as i32)));
    (_mm_cvtss_f32(v), _mm_cvtss_f32(_mm_movehdup_ps(v)))
}

/// The product of the halves at `bw[at_w]` and `ba[at_a]`, in f32.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn f16_product(bw: &[u8], at_w: usize, ba: &[u8], at_a: usize) -> f32 {
    let (w, a) = f16_pair(bw, at_w, ba, at_a);
    w * a
}

/// 32 bytes at `at` (the caller guarantees `at + 32 <= b.len()`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn load32(b: &[u8], at: usize) -> __m256i {
    debug_assert!(at + 32 <= b.len());
    // SAFETY: in bounds per the caller; unaligned load.
    unsafe { _mm256_loadu_si256(b.as_ptr().add(at) as *const __m256i) }
}

/// Lane l = sum of w[j] * a[j] for j in 4l..4l+4, both signed bytes, exact
/// (ggml's sign trick: |w| times a with w's sign, pairs in i16 then i32).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn lanes_signed(w: __m256i, a: __m256i) -> __m256i {
    let p = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w));
    _mm256_madd_epi16(p, _mm256_set1_epi16(1))
}

/// As [`lanes_signed`] for unsigned weight bytes (below 128).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn lanes_unsigned(w: __m256i, a: __m256i) -> __m256i {
    _mm256_madd_epi16(_mm256_maddubs_epi16(w, a), _mm256_set1_epi16(1))
}

/// As [`lanes_unsigned`], each i16 pair sum scaled by `scale` first (still
/// exact: the pair sums are below 2^14 and the scales below 2^7).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn lanes_scaled(w: __m256i, a: __m256i, scale: __m256i) -> __m256i {
    _mm256_madd_epi16(_mm256_maddubs_epi16(w, a), scale)
}

/// The 8 f32 lanes reduced in `hsum_float_8`'s order.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn hsum_ps(v: __m256) -> f32 {
    let mut x = [0f32; 8];
    // SAFETY: x holds 8 floats.
    unsafe { _mm256_storeu_ps(x.as_mut_ptr(), v) };
    crate::lanes::hsum8(&x)
}

/// Sum of the 8 i32 lanes (exact: integer adds in any order).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn hsum_epi32(v: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01_00_11_10>(s));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s));
    _mm_cvtsi128_si32(s)
}

/// 16 nibble bytes at `at` as 32 bytes: low nibbles are elements 0..16,
/// high nibbles 16..32.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn nibbles32(b: &[u8], at: usize) -> __m256i {
    debug_assert!(at + 16 <= b.len());
    unsafe {
        // SAFETY: 16 bytes in bounds per the block layout.
        // Both halves from one broadcast load, the upper one shifted by a
        // nibble: no cross-lane shuffle (those queue on one port).
        let lo = _mm_loadu_si128(b.as_ptr().add(at) as *const __m128i);
        let both = _mm256_broadcastsi128_si256(lo);
        let shifted = _mm256_srlv_epi32(both, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4));
        _mm256_and_si256(shifted, _mm256_set1_epi8(0x0f))
    }
}

/// 0xff in byte j where bit j of `qh` is set, else 0.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn bit_mask(qh: u32) -> __m256i {
    let spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32(qh as i32),
        _mm256_setr_epi64x(
            0x0000_0000_0000_0000,
            0x0101_0101_0101_0101,
            0x0202_0202_0202_0202,
            0x0303_0303_0303_0303,
        ),
    );
    let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
    _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit)
}

/// 0x10 in byte j where bit j of `qh` is set, else 0.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn fifth_bits(qh: u32) -> __m256i {
    _mm256_and_si256(bit_mask(qh), _mm256_set1_epi8(0x10))
}

/// Q5_0 quants minus 16 as signed bytes: a nibble whose fifth bit is clear
/// gets 0xf0 or-ed in, which is the nibble minus 16 in two's complement.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q5_0_quants(bw: &[u8]) -> __m256i {
    let high = _mm256_andnot_si256(bit_mask(qh_at(bw, 2)), _mm256_set1_epi8(0xf0u8 as i8));
    _mm256_or_si256(unsafe { nibbles32(bw, 6) }, high)
}

pub(super) fn qh_at(b: &[u8], at: usize) -> u32 {
    // One four-byte load (byte by byte, LLVM assembled it with shifts).
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
