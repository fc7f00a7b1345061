//! The K-quants' (Q4_K, Q6_K against Q8_K) AVX2 kernels: the plain dots,
//! ggml's repacked and tiled orders, the two- and four-row decode builds
//! and the four-token prompt kernels (see kquants/ for the layouts and
//! orders).

use std::arch::x86_64::*;

use super::*;

pub(super) const Q8K: usize = crate::q8k::BLOCK;
pub(super) const Q8K_QS: usize = 4;
pub(super) const Q8K_BSUMS: usize = 260;

pub(super) fn q8k_d(ba: &[u8]) -> f32 {
    crate::q8k::d(ba)
}

pub(super) const Q4K: usize = 144;

/// Q4_K's eight 6-bit sub-block scales and mins, one byte each (as
/// `k4_scale_min` unpacks them), with whole-word masks instead of per-byte
/// shifts.
#[inline(always)]
pub(super) fn q4k_scale_min(bw: &[u8]) -> (u64, u64) {
    let word = |at: usize| u32::from_le_bytes([bw[at], bw[at + 1], bw[at + 2], bw[at + 3]]);
    let (u0, u1, u2) = (word(4), word(8), word(12));
    let (low6, low4, top2) = (0x3f3f_3f3fu32, 0x0f0f_0f0fu32, 0x0303_0303u32);
    let sc_hi = (u2 & low4) | (((u0 >> 6) & top2) << 4);
    let m_hi = ((u2 >> 4) & low4) | (((u1 >> 6) & top2) << 4);
    (
        u64::from(u0 & low6) | (u64::from(sc_hi) << 32),
        u64::from(u1 & low6) | (u64::from(m_hi) << 32),
    )
}

/// Eight packed bytes as i16 in both 128-bit lanes, for [`splat_i16`].
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn bytes_i16_both_lanes(v: u64) -> __m256i {
    _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(v as i64)))
}

/// Byte-shuffle masks that copy i16 element k of each 128-bit lane to the
/// whole lane (`SPLAT[k]`), or element 2m to the low lane and 2m + 1 to the
/// high lane (`PAIR[m]`). Tables, so a mask is one load even where the
/// index is not a compile-time constant.
pub(super) const fn shuffle_masks() -> ([[u8; 32]; 8], [[u8; 32]; 4]) {
    let mut splat = [[0u8; 32]; 8];
    let mut pair = [[0u8; 32]; 4];
    let mut k = 0;
    while k < 8 {
        let mut i = 0;
        while i < 16 {
            splat[k][2 * i] = (2 * k) as u8;
            splat[k][2 * i + 1] = (2 * k + 1) as u8;
            let e = if i < 8 { 2 * (k % 4) } else { 2 * (k % 4) + 1 };
            pair[k % 4][2 * i] = (2 * e) as u8;
            pair[k % 4][2 * i + 1] = (2 * e + 1) as u8;
            i += 1;
        }
        k += 1;
    }
    (splat, pair)
}

pub(super) static MASKS: ([[u8; 32]; 8], [[u8; 32]; 4]) = shuffle_masks();

/// A mask of [`MASKS`] as a vector.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn mask(m: &[u8; 32]) -> __m256i {
    // SAFETY: m holds 32 bytes.
    unsafe { _mm256_loadu_si256(m.as_ptr() as *const __m256i) }
}

/// Element `k` of eight i16 (as `bytes_i16_both_lanes` lays them out) in
/// all 16 lanes: one byte shuffle instead of a scalar extract and broadcast.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn splat_i16(v: __m256i, k: usize) -> __m256i {
    _mm256_shuffle_epi8(v, mask(&MASKS.0[k]))
}

/// Eight per-sub-block bytes as 16 i16 lanes, one per 16-element run.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn runs_of_sub_blocks(v: u64) -> __m256i {
    let b = _mm_cvtsi64_si128(v as i64);
    _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(b, b))
}

/// Q6_K's 16 signed run scales as i16 lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q6k_runs(bw: &[u8]) -> __m256i {
    assert!(bw.len() >= 208);
    // SAFETY: bytes 192..208 are in bounds (checked).
    unsafe { _mm256_cvtepi8_epi16(_mm_loadu_si128(bw.as_ptr().add(192) as *const __m128i)) }
}

/// Lane k = run[2k] * bsums[2k] + run[2k + 1] * bsums[2k + 1] for the Q8_K
/// block `ba` (exact), so lane k covers elements 32k..32k+32.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn bsum_lanes(ba: &[u8], runs: __m256i) -> __m256i {
    unsafe { _mm256_madd_epi16(load32(ba, Q8K_BSUMS), runs) }
}

/// [lanes 0+1, 2+3, 4+5, 6+7]: sub-block sums by pairs of sub-blocks.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn pair_sums(l: __m256i) -> __m128i {
    let h = _mm256_hadd_epi32(l, l);
    _mm_unpacklo_epi64(_mm256_castsi256_si128(h), _mm256_extracti128_si256::<1>(h))
}

/// The scaled integer lanes of one Q4_K block, one vector per pair of
/// sub-blocks (64 elements): lane l sums scale * q * a over elements with
/// index % 32 in 4l..4l+4.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q4k_pair_lanes(bw: &[u8], ba: &[u8], sc: u64) -> [__m256i; 4] {
    let scales = bytes_i16_both_lanes(sc);
    let mut out = [_mm256_setzero_si256(); 4];
    for (p, o) in out.iter_mut().enumerate() {
        unsafe {
            let raw = load32(bw, 16 + 32 * p);
            let lo = _mm256_and_si256(raw, _mm256_set1_epi8(0x0f));
            let hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), _mm256_set1_epi8(0x0f));
            let a_lo = load32(ba, Q8K_QS + 64 * p);
            let a_hi = load32(ba, Q8K_QS + 64 * p + 32);
            let s_lo = splat_i16(scales, 2 * p);
            let s_hi = splat_i16(scales, 2 * p + 1);
            *o = _mm256_add_epi32(lanes_scaled(lo, a_lo, s_lo), lanes_scaled(hi, a_hi, s_hi));
        }
    }
    out
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q4_k_vec_dot(w: &[u8], a: &[u8]) -> f32 {
    let mut acc = _mm256_setzero_ps();
    let mut acc_m = _mm_setzero_ps();
    for (bw, ba) in w.chunks_exact(Q4K).zip(a.chunks_exact(Q8K)) {
        let da = q8k_d(ba);
        let d = da * f16_at(bw, 0);
        let dmin = -da * f16_at(bw, 2);
        let (sc, m) = q4k_scale_min(bw);
        unsafe {
            let p = q4k_pair_lanes(bw, ba, sc);
            let sum = _mm256_add_epi32(_mm256_add_epi32(p[0], p[1]), _mm256_add_epi32(p[2], p[3]));
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sum), acc);
            let mins = pair_sums(bsum_lanes(ba, runs_of_sub_blocks(m)));
            acc_m = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(mins), acc_m);
        }
    }
    let mut am = [0f32; 4];
    // SAFETY: am holds 4 floats.
    unsafe { _mm_storeu_ps(am.as_mut_ptr(), acc_m) };
    let m = (am[0] + am[2]) + (am[1] + am[3]);
    unsafe { hsum_ps(acc) + m }
}

/// The repacked-Q4_K order (see `q4k::dot_repacked`): one FMA per `group`
/// sub-blocks, 8 for gemv and 2 for gemm.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q4_k_repacked(w: &[u8], a: &[u8], group: usize) -> f32 {
    let (mut acc, mut acc_min) = (0f32, 0f32);
    for (bw, ba) in w.chunks_exact(Q4K).zip(a.chunks_exact(Q8K)) {
        let da = q8k_d(ba);
        let (d, dmin) = f16x2_at(bw, 0);
        let (scale_d, scale_min) = (d * da, dmin * da);
        let (sc, m) = q4k_scale_min(bw);
        let pairs = unsafe { q4k_pair_lanes(bw, ba, sc) };
        let min_lanes = unsafe { bsum_lanes(ba, runs_of_sub_blocks(m)) };
        if group == 8 {
            // One sum for the whole block: add the lanes first (exact).
            let all = _mm256_add_epi32(
                _mm256_add_epi32(pairs[0], pairs[1]),
                _mm256_add_epi32(pairs[2], pairs[3]),
            );
            acc = (hsum_epi32(all) as f32).mul_add(scale_d, acc);
            acc_min = (hsum_epi32(min_lanes) as f32).mul_add(scale_min, acc_min);
        } else {
            let mut mins = [0i32; 4];
            // SAFETY: mins holds 4 i32.
            unsafe { _mm_storeu_si128(mins.as_mut_ptr() as *mut __m128i, pair_sums(min_lanes)) };
            for (v, sum_min) in pairs.into_iter().zip(mins) {
                acc = (hsum_epi32(v) as f32).mul_add(scale_d, acc);
                acc_min = (sum_min as f32).mul_add(scale_min, acc_min);
            }
        }
    }
    acc - acc_min
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q4_k_gemv(w: &[u8], a: &[u8]) -> f32 {
    unsafe { q4_k_repacked(w, a, 8) }
}

/// One block of `q4_k_gemv` (the `group == 8` case of `q4_k_repacked`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q4_k_gemv_step(bw: &[u8], ba: &[u8], acc: &mut (f32, f32)) {
    let da = q8k_d(ba);
    let (d, dmin) = f16x2_at(bw, 0);
    let (sc, m) = q4k_scale_min(bw);
    let pairs = unsafe { q4k_pair_lanes(bw, ba, sc) };
    let all = _mm256_add_epi32(
        _mm256_add_epi32(pairs[0], pairs[1]),
        _mm256_add_epi32(pairs[2], pairs[3]),
    );
    let min_lanes = unsafe { bsum_lanes(ba, runs_of_sub_blocks(m)) };
    acc.0 = (hsum_epi32(all) as f32).mul_add(d * da, acc.0);
    acc.1 = (hsum_epi32(min_lanes) as f32).mul_add(dmin * da, acc.1);
}

/// `q4_k_gemv` of `N` rows at once (see [`crate::VecDotRows4Fn`]).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q4_k_gemv_rows<const N: usize>(rows: [&[u8]; N], a: &[u8]) -> [f32; N] {
    let blocks = a.len() / Q8K;
    assert!(rows.iter().all(|r| r.len() >= blocks * Q4K), "weight rows");
    let mut acc = [(0f32, 0f32); N];
    for (i, ba) in a.chunks_exact(Q8K).enumerate() {
        for (r, acc) in acc.iter_mut().enumerate() {
            unsafe { q4_k_gemv_step(&rows[r][i * Q4K..(i + 1) * Q4K], ba, acc) };
        }
    }
    acc.map(|(sum, min)| sum - min)
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q4_k_gemm(w: &[u8], a: &[u8]) -> f32 {
    unsafe { q4_k_repacked(w, a, 2) }
}

/// The tiled order (see `kquants::dot_tiled`).
#[inline(always)]
pub(super) fn tiled_step(acc: f32, d: f32, dmin: f32, sum: i32, sum_min: i32, da: f32) -> f32 {
    let r = (-dmin).mul_add(sum_min as f32, d * sum as f32);
    r.mul_add(da, acc)
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q4_k_tiled(w: &[u8], a: &[u8]) -> f32 {
    let mut acc = 0f32;
    for (bw, ba) in w.chunks_exact(Q4K).zip(a.chunks_exact(Q8K)) {
        let (sc, m) = q4k_scale_min(bw);
        let (sum, sum_min) = unsafe {
            let p = q4k_pair_lanes(bw, ba, sc);
            (
                hsum_epi32(_mm256_add_epi32(
                    _mm256_add_epi32(p[0], p[1]),
                    _mm256_add_epi32(p[2], p[3]),
                )),
                hsum_epi32(bsum_lanes(ba, runs_of_sub_blocks(m))),
            )
        };
        acc = tiled_step(acc, f16_at(bw, 0), f16_at(bw, 2), sum, sum_min, q8k_d(ba));
    }
    acc
}

pub(super) const Q6K: usize = 210;

/// A Q6_K block's 16 run scales as i16, each half (runs 8n..8n+8) in both
/// 128-bit lanes, so one byte shuffle gives any run pair's scale vector.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q6k_scale_halves(bw: &[u8]) -> [__m256i; 2] {
    let s = unsafe { q6k_runs(bw) };
    [
        _mm256_broadcastsi128_si256(_mm256_castsi256_si128(s)),
        _mm256_broadcastsi128_si256(_mm256_extracti128_si256::<1>(s)),
    ]
}

/// The scale vector for the 32 quants of runs 8n + 2k and 8n + 2k + 1
/// (i16 scale of the first run in the low lane, of the second in the
/// high lane), from `q6k_scale_halves`' half n.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn q6k_pair_scale(half: __m256i, k: usize) -> __m256i {
    _mm256_shuffle_epi8(half, mask(&MASKS.1[k]))
}

/// 32 * (the run scales times the bsums), per lane as [`bsum_lanes`]: what
/// taking the quants unsigned added.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q6k_offset(bw: &[u8], ba: &[u8]) -> __m256i {
    unsafe { _mm256_slli_epi32::<5>(bsum_lanes(ba, q6k_runs(bw))) }
}

/// Lanes of one Q6_K block with the quants taken unsigned (0..=63): lane l
/// sums scale * q * a over elements with index % 32 in 4l..4l+4.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q6k_unsigned_lanes(bw: &[u8], ba: &[u8]) -> __m256i {
    unsafe {
        let halves = q6k_scale_halves(bw);
        let m4 = _mm256_set1_epi8(0x0f);
        let m3 = _mm256_set1_epi8(0x03);
        let mut sum = _mm256_setzero_si256();
        for (n, half) in halves.into_iter().enumerate() {
            let ql0 = load32(bw, 64 * n);
            let ql1 = load32(bw, 64 * n + 32);
            let qh = load32(bw, 128 + 32 * n);
            let quants = [
                _mm256_or_si256(
                    _mm256_and_si256(ql0, m4),
                    _mm256_slli_epi16(_mm256_and_si256(qh, m3), 4),
                ),
                _mm256_or_si256(
                    _mm256_and_si256(ql1, m4),
                    _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m3), 4),
                ),
                _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                    _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m3), 4),
                ),
                _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                    _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m3), 4),
                ),
            ];
            for (k, q) in quants.into_iter().enumerate() {
                let sc = q6k_pair_scale(half, k);
                let act = load32(ba, Q8K_QS + 128 * n + 32 * k);
                sum = _mm256_add_epi32(sum, lanes_scaled(q, act, sc));
            }
        }
        sum
    }
}

/// One block of `q6_k_vec_dot`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q6_k_vec_dot_step(bw: &[u8], ba: &[u8], acc: &mut __m256) {
    let d = q8k_d(ba) * f16_at(bw, 208);
    unsafe {
        let lanes = q6k_unsigned_lanes(bw, ba);
        let s = _mm256_cvtepi32_ps(_mm256_sub_epi32(lanes, q6k_offset(bw, ba)));
        *acc = _mm256_fmadd_ps(_mm256_set1_ps(d), s, *acc);
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q6_k_vec_dot(w: &[u8], a: &[u8]) -> f32 {
    let mut acc = _mm256_setzero_ps();
    for (bw, ba) in w.chunks_exact(Q6K).zip(a.chunks_exact(Q8K)) {
        unsafe { q6_k_vec_dot_step(bw, ba, &mut acc) };
    }
    unsafe { hsum_ps(acc) }
}

/// Blocks ahead that the several-row Q6_K kernels ask for: 2.5 KiB, about
/// the legacy kernels' distance (`wide::ROWS4_PREFETCH`). Two blocks (420
/// bytes) left decode's Q6_K products short of the bandwidth the others
/// reach (Qwen2.5, `kestrel profile`: Q6_K 23-27 GB/s against Q5_0's
/// 32-41): a Qwen2.5 ffn_down-shaped product (896 x 24 rows of 4864, two
/// threads) read 17-29 GB/s at 2 blocks, 32-37 at 6, 36-47 at 12 (one
/// run each, alternated, three rounds), and 24 was slower again.
pub(super) const Q6K_PREFETCH: usize = 12;

/// Asks for the cache lines of `len` bytes at `at` in `row` (past its end is
/// allowed: a prefetch never faults, and the address is never dereferenced).
#[inline(always)]
pub(super) fn prefetch_block(row: &[u8], at: usize, len: usize) {
    let p = row.as_ptr().wrapping_add(at);
    for off in (0..len).step_by(64).chain([len - 1]) {
        // SAFETY: a prefetch hint does not access memory architecturally.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(off) as *const i8) };
    }
}

/// `q6_k_vec_dot` of `N` rows at once (see [`crate::VecDotRows4Fn`]).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q6_k_vec_dot_rows<const N: usize>(rows: [&[u8]; N], a: &[u8]) -> [f32; N] {
    let blocks = a.len() / Q8K;
    assert!(rows.iter().all(|r| r.len() >= blocks * Q6K), "weight rows");
    let mut acc = [_mm256_setzero_ps(); N];
    for (i, ba) in a.chunks_exact(Q8K).enumerate() {
        for (r, acc) in acc.iter_mut().enumerate() {
            if N >= 4 {
                prefetch_block(rows[r], (i + Q6K_PREFETCH) * Q6K, Q6K);
            }
            unsafe { q6_k_vec_dot_step(&rows[r][i * Q6K..(i + 1) * Q6K], ba, acc) };
        }
    }
    let mut out = [0f32; N];
    for (o, a) in out.iter_mut().zip(acc) {
        *o = unsafe { hsum_ps(a) };
    }
    out
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q6_k_tiled(w: &[u8], a: &[u8]) -> f32 {
    let mut acc = 0f32;
    for (bw, ba) in w.chunks_exact(Q6K).zip(a.chunks_exact(Q8K)) {
        let sum = unsafe {
            hsum_epi32(_mm256_sub_epi32(
                q6k_unsigned_lanes(bw, ba),
                q6k_offset(bw, ba),
            ))
        };
        acc = tiled_step(acc, f16_at(bw, 208), 0.0, sum, 0, q8k_d(ba));
    }
    acc
}

/// [hsum(l[0]), hsum(l[1]), hsum(l[2]), hsum(l[3])]: four rows' integer
/// lanes reduced together (exact), so the f32 steps after run lane-wise
/// for all four rows at once.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn hsum4_epi32(l: [__m256i; 4]) -> __m128i {
    let h = _mm256_hadd_epi32(_mm256_hadd_epi32(l[0], l[1]), _mm256_hadd_epi32(l[2], l[3]));
    _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256::<1>(h))
}

/// The four rows' Q8_K scales of block `i` (SSE only, so it can be forced
/// inline into the kernels).
#[inline(always)]
pub(super) fn q8k_d4(a: [&[u8]; 4], i: usize) -> __m128 {
    // SAFETY: SSE is part of the x86-64 baseline.
    unsafe {
        _mm_setr_ps(
            q8k_d(&a[0][i * Q8K..]),
            q8k_d(&a[1][i * Q8K..]),
            q8k_d(&a[2][i * Q8K..]),
            q8k_d(&a[3][i * Q8K..]),
        )
    }
}

/// Block `i` of a Q4_K row against four Q8_K rows, as both four-token
/// kernels begin it: the four activation blocks, the packed sub-block
/// scales, d x da and dmin x da per row, and the min sums per pair of
/// sub-blocks (vector p for pair p, the rows in its lanes; exact).
pub(crate) struct Q4kGemmBlock<'a> {
    pub(crate) rows: [&'a [u8]; 4],
    pub(crate) sc: u64,
    pub(crate) scale_d: __m128,
    pub(crate) scale_min: __m128,
    pub(crate) min_sums: [__m128i; 4],
}

/// See [`Q4kGemmBlock`]; `bw` is the weight block `i`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn q4k_gemm_block<'a>(bw: &[u8], a: [&'a [u8]; 4], i: usize) -> Q4kGemmBlock<'a> {
    let (sc, m) = q4k_scale_min(bw);
    let rows = [
        &a[0][i * Q8K..(i + 1) * Q8K],
        &a[1][i * Q8K..(i + 1) * Q8K],
        &a[2][i * Q8K..(i + 1) * Q8K],
        &a[3][i * Q8K..(i + 1) * Q8K],
    ];
    let (d, dmin) = f16x2_at(bw, 0);
    let da = q8k_d4(a, i);
    Q4kGemmBlock {
        rows,
        sc,
        scale_d: _mm_mul_ps(_mm_set1_ps(d), da),
        scale_min: _mm_mul_ps(_mm_set1_ps(dmin), da),
        min_sums: unsafe { q4k_pair_min_sums(rows, m) },
    }
}

/// The min sums of [`Q4kGemmBlock`]: after the two hadds, even = [p0 |
/// p2] and odd = [p1 | p3] for rows 0..4.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q4k_pair_min_sums(rows: [&[u8]; 4], m: u64) -> [__m128i; 4] {
    let mins = runs_of_sub_blocks(m);
    let m = rows.map(|ba| unsafe { bsum_lanes(ba, mins) });
    let x = _mm256_hadd_epi32(m[0], m[1]);
    let y = _mm256_hadd_epi32(m[2], m[3]);
    let even = _mm256_castps_si256(_mm256_shuffle_ps::<0x88>(
        _mm256_castsi256_ps(x),
        _mm256_castsi256_ps(y),
    ));
    let odd = _mm256_castps_si256(_mm256_shuffle_ps::<0xdd>(
        _mm256_castsi256_ps(x),
        _mm256_castsi256_ps(y),
    ));
    [
        _mm256_castsi256_si128(even),
        _mm256_castsi256_si128(odd),
        _mm256_extracti128_si256::<1>(even),
        _mm256_extracti128_si256::<1>(odd),
    ]
}

/// `q4_k_gemm` for four rows: the integer sums of each pair of sub-blocks
/// are reduced for all four rows together, and its two FMAs run lane-wise
/// (lane t = row t), in the same order per row.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q4_k_gemm_x4(w: &[u8], a: [&[u8]; 4], _pre: &[Chunk32]) -> [f32; 4] {
    let blocks = w.len() / Q4K;
    assert!(a.iter().all(|r| r.len() >= blocks * Q8K), "activation rows");
    let (mut acc, mut acc_min) = (_mm_setzero_ps(), _mm_setzero_ps());
    for (i, bw) in w.chunks_exact(Q4K).enumerate() {
        let blk = unsafe { q4k_gemm_block(bw, a, i) };
        let scales = bytes_i16_both_lanes(blk.sc);
        for (p, min_sum) in blk.min_sums.into_iter().enumerate() {
            let raw = unsafe { load32(bw, 16 + 32 * p) };
            let lo = _mm256_and_si256(raw, _mm256_set1_epi8(0x0f));
            let hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), _mm256_set1_epi8(0x0f));
            let s_lo = splat_i16(scales, 2 * p);
            let s_hi = splat_i16(scales, 2 * p + 1);
            let lanes = blk.rows.map(|ba| unsafe {
                _mm256_add_epi32(
                    lanes_scaled(lo, load32(ba, Q8K_QS + 64 * p), s_lo),
                    lanes_scaled(hi, load32(ba, Q8K_QS + 64 * p + 32), s_hi),
                )
            });
            let sums = _mm_cvtepi32_ps(hsum4_epi32(lanes));
            acc = _mm_fmadd_ps(sums, blk.scale_d, acc);
            acc_min = _mm_fmadd_ps(_mm_cvtepi32_ps(min_sum), blk.scale_min, acc_min);
        }
    }
    let mut out = [0f32; 4];
    // SAFETY: out holds 4 floats.
    unsafe { _mm_storeu_ps(out.as_mut_ptr(), _mm_sub_ps(acc, acc_min)) };
    out
}

/// `q6_k_tiled` for four rows: the -32 offset is taken off in the integer
/// lanes (bsums times scales), the four rows reduced together, and the
/// tiled step (d * sum, then one FMA with the row's scale) run lane-wise.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q6_k_tiled_x4(w: &[u8], a: [&[u8]; 4], _pre: &[Chunk32]) -> [f32; 4] {
    let blocks = w.len() / Q6K;
    assert!(a.iter().all(|r| r.len() >= blocks * Q8K), "activation rows");
    let mut acc = _mm_setzero_ps();
    let m4 = _mm256_set1_epi8(0x0f);
    let m3 = _mm256_set1_epi8(0x03);
    for (i, bw) in w.chunks_exact(Q6K).enumerate() {
        let rows = [
            &a[0][i * Q8K..(i + 1) * Q8K],
            &a[1][i * Q8K..(i + 1) * Q8K],
            &a[2][i * Q8K..(i + 1) * Q8K],
            &a[3][i * Q8K..(i + 1) * Q8K],
        ];
        let halves = unsafe { q6k_scale_halves(bw) };
        let mut lanes = [_mm256_setzero_si256(); 4];
        for (l, ba) in lanes.iter_mut().zip(rows) {
            *l = _mm256_sub_epi32(_mm256_setzero_si256(), unsafe { q6k_offset(bw, ba) });
        }
        // Each quant vector (unsigned, 0..=63) is built once and used by
        // all four rows before the next: few live registers.
        for (n, half) in halves.into_iter().enumerate() {
            let (ql0, ql1, qh) = unsafe {
                (
                    load32(bw, 64 * n),
                    load32(bw, 64 * n + 32),
                    load32(bw, 128 + 32 * n),
                )
            };
            for k in 0..4 {
                let low = match k {
                    0 => _mm256_and_si256(ql0, m4),
                    1 => _mm256_and_si256(ql1, m4),
                    2 => _mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                    _ => _mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                };
                let high =
                    _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * k as i32)), m3);
                let q = _mm256_or_si256(low, _mm256_slli_epi16(high, 4));
                let sc = q6k_pair_scale(half, k);
                let g = 4 * n + k;
                for (l, ba) in lanes.iter_mut().zip(rows) {
                    let act = unsafe { load32(ba, Q8K_QS + 32 * g) };
                    *l = _mm256_add_epi32(*l, lanes_scaled(q, act, sc));
                }
            }
        }
        let sums = _mm_cvtepi32_ps(hsum4_epi32(lanes));
        let r = _mm_mul_ps(_mm_set1_ps(f16_at(bw, 208)), sums);
        acc = _mm_fmadd_ps(r, q8k_d4(a, i), acc);
    }
    let mut out = [0f32; 4];
    // SAFETY: out holds 4 floats.
    unsafe { _mm_storeu_ps(out.as_mut_ptr(), acc) };
    out
}

entry4!(dot4_q4_k_gemm => q4_k_gemm_x4);
entry4!(dot4_q6_k_tiled => q6_k_tiled_x4);

entry2!(dot2_q4_k_gemv => rows q4_k_gemv_rows);
entry2!(dot2_q6_k => rows q6_k_vec_dot_rows);

band!(band_q4_k_gemv, "avx2,fma,f16c", q4_k_gemv_rows::<4>);
band!(band_q6_k, "avx2,fma,f16c", q6_k_vec_dot_rows::<4>);

entry_rows4!(rows4_q4_k_gemv => rows q4_k_gemv_rows);
entry_rows4!(rows4_q6_k => rows q6_k_vec_dot_rows);

entry!(dot_q4_k => q4_k_vec_dot);
entry!(dot_q4_k_gemv => q4_k_gemv);
entry!(dot_q4_k_gemm => q4_k_gemm);
entry!(dot_q4_k_tiled => q4_k_tiled);
entry!(dot_q6_k => q6_k_vec_dot);
entry!(dot_q6_k_tiled => q6_k_tiled);
