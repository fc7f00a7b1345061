//! The f16 row kernels' AVX2 builds (dot, multiply-add, scale,
//! conversions; see f16row.rs for the operations and their rounding).

use std::arch::x86_64::*;

/// Eight f16 at `i` widened.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn ph8(x: &[u16], i: usize) -> __m256 {
    debug_assert!(i + 8 <= x.len());
    // SAFETY: 8 u16 in bounds per the caller.
    unsafe { _mm256_cvtph_ps(_mm_loadu_si128(x.as_ptr().add(i) as *const __m128i)) }
}

/// Stores eight f32 at `i` as f16, nearest-even.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn store_ph8(x: &mut [u16], i: usize, v: __m256) {
    debug_assert!(i + 8 <= x.len());
    let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v);
    // SAFETY: 8 u16 in bounds per the caller.
    unsafe { _mm_storeu_si128(x.as_mut_ptr().add(i) as *mut __m128i, h) }
}

/// Declares a safe wrapper around an AVX2 f16-row body.
macro_rules! row_entry {
    ($name:ident($($arg:ident: $ty:ty),*) $(-> $ret:ty)? => $body:ident) => {
        pub(crate) fn $name($($arg: $ty),*) $(-> $ret)? {
            // SAFETY: called only after `avx2_available()` (see f16row.rs).
            unsafe { $body($($arg),*) }
        }
    };
}

row_entry!(f16_dot(a: &[u16], b: &[u16]) -> f32 => f16_dot_avx2);
row_entry!(f16_mad(acc: &mut [u16], v: &[u16], s: f32) => f16_mad_avx2);
row_entry!(f16_scale(acc: &mut [u16], s: f32) => f16_scale_avx2);
row_entry!(f32_mad_f16(acc: &mut [f32], v: &[u16], s: f32) => f32_mad_f16_avx2);
row_entry!(f16_to_f32_row(src: &[u16], dst: &mut [f32]) => f16_to_f32_row_avx2);
row_entry!(f32_to_f16_row(src: &[f32], dst: &mut [u16]) => f32_to_f16_row_avx2);

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn f16_dot_avx2(a: &[u16], b: &[u16]) -> f32 {
    let n = a.len().min(b.len());
    let np = n / 32 * 32;
    let mut acc = [_mm256_setzero_ps(); 4];
    for i in (0..np).step_by(32) {
        for (j, accj) in acc.iter_mut().enumerate() {
            unsafe {
                *accj = _mm256_fmadd_ps(ph8(a, i + 8 * j), ph8(b, i + 8 * j), *accj);
            }
        }
    }
    let mut lanes = [[0f32; 8]; 4];
    for (l, v) in lanes.iter_mut().zip(acc) {
        // SAFETY: l holds 8 floats.
        unsafe { _mm256_storeu_ps(l.as_mut_ptr(), v) };
    }
    crate::f16row::f16_dot_finish(&lanes, &a[np..n], &b[np..n])
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn f16_mad_avx2(acc: &mut [u16], v: &[u16], s: f32) {
    let n = acc.len().min(v.len());
    let n8 = n / 8 * 8;
    let vs = _mm256_set1_ps(s);
    for i in (0..n8).step_by(8) {
        unsafe {
            let y = _mm256_fmadd_ps(ph8(v, i), vs, ph8(acc, i));
            store_ph8(acc, i, y);
        }
    }
    crate::f16row::f16_mad_portable(&mut acc[n8..n], &v[n8..n], s);
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn f16_scale_avx2(acc: &mut [u16], s: f32) {
    let n8 = acc.len() / 8 * 8;
    let vs = _mm256_set1_ps(s);
    for i in (0..n8).step_by(8) {
        unsafe { store_ph8(acc, i, _mm256_mul_ps(ph8(acc, i), vs)) };
    }
    crate::f16row::f16_scale_portable(&mut acc[n8..], s);
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn f32_mad_f16_avx2(acc: &mut [f32], v: &[u16], s: f32) {
    let n = acc.len().min(v.len());
    let n8 = n / 8 * 8;
    let vs = _mm256_set1_ps(s);
    for i in (0..n8).step_by(8) {
        // SAFETY: i + 8 <= n8 <= both lengths.
        unsafe {
            let p = acc.as_mut_ptr().add(i);
            _mm256_storeu_ps(p, _mm256_fmadd_ps(ph8(v, i), vs, _mm256_loadu_ps(p)));
        }
    }
    crate::f16row::f32_mad_f16_portable(&mut acc[n8..n], &v[n8..n], s);
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn f16_to_f32_row_avx2(src: &[u16], dst: &mut [f32]) {
    let n = src.len().min(dst.len());
    let n8 = n / 8 * 8;
    for i in (0..n8).step_by(8) {
        // SAFETY: i + 8 <= n8 <= both lengths.
        unsafe { _mm256_storeu_ps(dst.as_mut_ptr().add(i), ph8(src, i)) };
    }
    for (d, &s) in dst[n8..n].iter_mut().zip(&src[n8..n]) {
        *d = crate::float::f16_to_f32(s);
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn f32_to_f16_row_avx2(src: &[f32], dst: &mut [u16]) {
    let n = src.len().min(dst.len());
    let n8 = n / 8 * 8;
    for i in (0..n8).step_by(8) {
        // SAFETY: i + 8 <= n8 <= both lengths.
        unsafe { store_ph8(dst, i, _mm256_loadu_ps(src.as_ptr().add(i))) };
    }
    for (d, &s) in dst[n8..n].iter_mut().zip(&src[n8..n]) {
        *d = crate::float::f32_to_f16(s);
    }
}
