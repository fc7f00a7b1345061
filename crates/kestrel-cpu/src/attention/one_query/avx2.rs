//! The one-query path's AVX2/FMA/F16C build: its entry point, its 256-bit
//! registers for the shared body, and its dot product.

use super::x86::{heads_x86, F16Block};
use super::Query;

/// [`head`](super::head) with AVX2: the scores and the online-softmax factors first (a
/// sequence that depends on the scores alone), then the values 64
/// dimensions at a time, the f16 accumulator held in registers and rounded
/// through f16 at every step exactly where `f16_scale` and `f16_mad` store
/// it; eight independent chains per key instead of a call and a
/// load/convert/store round trip per key. Same values (tested).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn heads_avx2(
    x: &Query<'_>,
    h0: usize,
    dst: &mut [f32],
    stats: Option<&mut [(f32, f32)]>,
) {
    // SAFETY: AVX2, FMA and F16C are enabled here.
    unsafe { heads_x86::<false>(x, h0, dst, stats) }
}

#[cfg(target_arch = "x86_64")]
impl F16Block for std::arch::x86_64::__m256 {
    type Block = [Self; 8];
    const LANES: usize = 8;
    #[inline(always)]
    unsafe fn zero_block() -> Self::Block {
        // SAFETY (all methods): the caller has AVX2, FMA and F16C; the
        // pointers cover LANES elements (the callers' contract).
        unsafe { [std::arch::x86_64::_mm256_setzero_ps(); 8] }
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> Self {
        unsafe { std::arch::x86_64::_mm256_set1_ps(x) }
    }
    #[inline(always)]
    unsafe fn load_f16(p: *const u16) -> Self {
        use std::arch::x86_64::*;
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i)) }
    }
    #[inline(always)]
    unsafe fn mul_round(a: Self, f: Self) -> Self {
        use std::arch::x86_64::*;
        unsafe {
            _mm256_cvtph_ps(_mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm256_mul_ps(
                a, f,
            )))
        }
    }
    #[inline(always)]
    unsafe fn fma_round(x: Self, w: Self, a: Self) -> Self {
        use std::arch::x86_64::*;
        unsafe {
            _mm256_cvtph_ps(_mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(
                _mm256_fmadd_ps(x, w, a),
            ))
        }
    }
    #[inline(always)]
    unsafe fn store_scaled(self, p: *mut f32, s: f32) {
        use std::arch::x86_64::*;
        unsafe { _mm256_storeu_ps(p, _mm256_mul_ps(self, _mm256_set1_ps(s))) }
    }
}

/// `f16_dot` for lengths that are multiples of 32 (no f64 tail), reduced in
/// registers in the same order as `f16_dot_finish`: per lane (a0 + a2) +
/// (a1 + a3), then the halves, then (x0 + x1) + (x2 + x3).
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn f16_dot32(a: &[u16], b: &[u16]) -> f32 {
    use std::arch::x86_64::*;
    assert!(a.len() == b.len() && a.len().is_multiple_of(32));
    let ph8 = |x: &[u16], i: usize| {
        // SAFETY: i + 8 <= len (the loop below steps within the length).
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(x.as_ptr().add(i) as *const __m128i)) }
    };
    let mut acc = [_mm256_setzero_ps(); 4];
    for i in (0..a.len()).step_by(32) {
        for (j, accj) in acc.iter_mut().enumerate() {
            *accj = _mm256_fmadd_ps(ph8(a, i + 8 * j), ph8(b, i + 8 * j), *accj);
        }
    }
    let x = _mm256_add_ps(_mm256_add_ps(acc[0], acc[2]), _mm256_add_ps(acc[1], acc[3]));
    let t = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps::<1>(x));
    let u = _mm_add_ps(t, _mm_movehdup_ps(t));
    _mm_cvtss_f32(_mm_add_ss(u, _mm_movehl_ps(u, u)))
}
