//! The legacy formats' lane sums per instruction set ([`Lanes`]: AVX2's
//! multiply-adds, AVX-VNNI's `vpdpbusd`, AVX-512 VL's EVEX `vpdpbusd` on
//! 256-bit registers) and the decode builds that take them: the band
//! kernels and the AVX-VNNI and EVEX four-row kernels.

use std::arch::x86_64::*;

use super::*;

/// How a kernel forms the eight i32 lanes of a block (lane l: the exact
/// sum of products 4l..4l+3 of unsigned weight bytes and signed
/// activations): AVX2's pairwise i16 multiply-add then i32 add, or one
/// VNNI `vpdpbusd`. The sums are exact either way, so the f32 steps that
/// follow, and the results, are the same bits.
pub(super) trait Lanes {
    /// Whether `lanes_plus` is one instruction (so the offset form of the
    /// signed formats pays).
    const FUSED_ADD: bool;
    unsafe fn lanes(u: __m256i, a: __m256i) -> __m256i;
    /// c + lanes(u, a).
    unsafe fn lanes_plus(c: __m256i, u: __m256i, a: __m256i) -> __m256i;
}

pub(super) struct Avx2Lanes;
pub(super) struct VnniLanes;
/// VNNI's lane sums by AVX-512 VL's EVEX form of `vpdpbusd`.
pub(super) struct EvexLanes;

impl Lanes for Avx2Lanes {
    const FUSED_ADD: bool = false;
    #[inline(always)]
    unsafe fn lanes(u: __m256i, a: __m256i) -> __m256i {
        // SAFETY: AVX2 is enabled in every caller.
        unsafe { _mm256_madd_epi16(_mm256_maddubs_epi16(u, a), _mm256_set1_epi16(1)) }
    }
    #[inline(always)]
    unsafe fn lanes_plus(c: __m256i, u: __m256i, a: __m256i) -> __m256i {
        // SAFETY: as `lanes`.
        unsafe { _mm256_add_epi32(c, Self::lanes(u, a)) }
    }
}

impl Lanes for VnniLanes {
    const FUSED_ADD: bool = true;
    #[inline(always)]
    unsafe fn lanes(u: __m256i, a: __m256i) -> __m256i {
        // SAFETY: AVX-VNNI is enabled in every caller (the VNNI entries).
        unsafe { _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u, a) }
    }
    #[inline(always)]
    unsafe fn lanes_plus(c: __m256i, u: __m256i, a: __m256i) -> __m256i {
        // SAFETY: as `lanes`.
        unsafe { _mm256_dpbusd_avx_epi32(c, u, a) }
    }
}

impl Lanes for EvexLanes {
    const FUSED_ADD: bool = true;
    #[inline(always)]
    unsafe fn lanes(u: __m256i, a: __m256i) -> __m256i {
        // SAFETY: AVX-512 VL and VNNI are enabled in every caller (the
        // EVEX entries).
        unsafe { _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, a) }
    }
    #[inline(always)]
    unsafe fn lanes_plus(c: __m256i, u: __m256i, a: __m256i) -> __m256i {
        // SAFETY: as `lanes`.
        unsafe { _mm256_dpbusd_epi32(c, u, a) }
    }
}

legacy_bands! {
    band_q4_0, bandv_q4_0 => Q40;
    band_q4_1, bandv_q4_1 => Q41;
    band_q5_0, bandv_q5_0 => Q50;
    band_q5_1, bandv_q5_1 => Q51;
    band_q8_0, bandv_q8_0 => Q80;
}
// The same with AVX-512's EVEX `vpdpbusd` on 256-bit registers, for the
// formats the AVX-512 builds leave to these (CPUs with AVX-512 VNNI but no
// AVX-VNNI: Zen 4, Ice Lake, Cascade Lake).
band!(
    bande_q4_0,
    "avx2,fma,f16c,avx512f,avx512vl,avx512vnni",
    legacy_rows::<Q40, EvexLanes, 4>
);
band!(
    bande_q5_1,
    "avx2,fma,f16c,avx512f,avx512vl,avx512vnni",
    legacy_rows::<Q51, EvexLanes, 4>
);
band!(
    bande_q8_0,
    "avx2,fma,f16c,avx512f,avx512vl,avx512vnni",
    legacy_rows::<Q80, EvexLanes, 4>
);

entry_rows4!(rows4v_q4_0 => vnni Q40);
entry_rows4!(rows4v_q4_1 => vnni Q41);
entry_rows4!(rows4v_q5_0 => vnni Q50);
entry_rows4!(rows4v_q5_1 => vnni Q51);
entry_rows4!(rows4v_q8_0 => vnni Q80);
entry_rows4!(rows4e_q4_0 => evex Q40);
entry_rows4!(rows4e_q5_1 => evex Q51);
entry_rows4!(rows4e_q8_0 => evex Q80);
