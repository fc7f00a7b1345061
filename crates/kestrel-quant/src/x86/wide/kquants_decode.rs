//! The K-quants' AVX-512 four-row decode kernels: Q6_K (a block's two
//! halves in one register) and Q4_K's repacked gemv (four rows' scales in
//! one register), with their band builds.

use std::arch::x86_64::*;

/// Q6_K's four-row decode kernel with both halves of a block (128 quants
/// each) in one register: the AVX2 kernel (`q6_k_vec_dot_rows`) unpacks,
/// scales and sums each half's four groups of 32 quants in turn; here
/// group k of half 0 sits beside group k of half 1, so each step serves
/// both, and `vpdpwssd` takes the run scales and the sum in one
/// instruction. The integer lanes are the same sums (exact, in any
/// order), reduced from 16 lanes to the AVX2 kernel's 8 (lane l + lane
/// 8 + l: the same element positions), then the same f32 steps: the same
/// bits.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn q6_k_rows4(rows: [&[u8]; 4], a: &[u8]) -> [f32; 4] {
    use crate::x86::{
        f16_at, hsum_ps, prefetch_block, q6k_offset, q6k_runs, q8k_d, MASKS, Q6K, Q6K_PREFETCH,
        Q8K, Q8K_QS,
    };
    let blocks = a.len() / Q8K;
    assert!(rows.iter().all(|r| r.len() >= blocks * Q6K), "weight rows");
    // `q6k_pair_scale`'s masks in both 256-bit halves.
    let masks: [__m512i; 4] = std::array::from_fn(|k| {
        // SAFETY: a mask holds 32 bytes.
        _mm512_broadcast_i64x4(unsafe { _mm256_loadu_si256(MASKS.1[k].as_ptr() as *const __m256i) })
    });
    let (m4, m3) = (_mm512_set1_epi8(0x0f), _mm512_set1_epi8(0x03));
    let mut acc = [_mm256_setzero_ps(); 4];
    for (i, ba) in a.chunks_exact(Q8K).enumerate() {
        // SAFETY (all raw reads below): a Q8_K block holds 256 quants from
        // Q8K_QS, and each weight block is Q6K = 210 bytes, of which the
        // reads take 0..192 (checked above, i < blocks).
        let act: [__m512i; 4] = std::array::from_fn(|k| unsafe {
            let at = |h: usize| ba.as_ptr().add(Q8K_QS + 128 * h + 32 * k) as *const __m256i;
            _mm512_inserti64x4::<1>(
                _mm512_castsi256_si512(_mm256_loadu_si256(at(0))),
                _mm256_loadu_si256(at(1)),
            )
        });
        let da = q8k_d(ba);
        for (r, acc) in acc.iter_mut().enumerate() {
            prefetch_block(rows[r], (i + Q6K_PREFETCH) * Q6K, Q6K);
            let bw = &rows[r][i * Q6K..(i + 1) * Q6K];
            // SAFETY: see above.
            unsafe {
                let p = bw.as_ptr();
                // ql: half 0's 64 bytes, then half 1's; qh: 32 bytes each.
                let (l0, l1) = (
                    _mm512_loadu_si512(p as *const __m512i),
                    _mm512_loadu_si512(p.add(64) as *const __m512i),
                );
                let ql0 = _mm512_shuffle_i64x2::<0b01_00_01_00>(l0, l1);
                let ql1 = _mm512_shuffle_i64x2::<0b11_10_11_10>(l0, l1);
                let qh = _mm512_loadu_si512(p.add(128) as *const __m512i);
                let runs = _mm512_castsi256_si512(q6k_runs(bw));
                // Runs 0..8 in the first two 128-bit lanes, 8..16 in the others.
                let halves = _mm512_shuffle_i64x2::<0b01_01_00_00>(runs, runs);
                let high = |v: __m512i| _mm512_slli_epi16::<4>(_mm512_and_si512(v, m3));
                let quants = [
                    _mm512_or_si512(_mm512_and_si512(ql0, m4), high(qh)),
                    _mm512_or_si512(_mm512_and_si512(ql1, m4), high(_mm512_srli_epi16::<2>(qh))),
                    _mm512_or_si512(
                        _mm512_and_si512(_mm512_srli_epi16::<4>(ql0), m4),
                        high(_mm512_srli_epi16::<4>(qh)),
                    ),
                    _mm512_or_si512(
                        _mm512_and_si512(_mm512_srli_epi16::<4>(ql1), m4),
                        high(_mm512_srli_epi16::<6>(qh)),
                    ),
                ];
                let mut sum = _mm512_setzero_si512();
                for k in 0..4 {
                    let sc = _mm512_shuffle_epi8(halves, masks[k]);
                    sum = _mm512_dpwssd_epi32(sum, _mm512_maddubs_epi16(quants[k], act[k]), sc);
                }
                let lanes = _mm256_add_epi32(
                    _mm512_castsi512_si256(sum),
                    _mm512_extracti64x4_epi64::<1>(sum),
                );
                let d = da * f16_at(bw, 208);
                let s = _mm256_cvtepi32_ps(_mm256_sub_epi32(lanes, q6k_offset(bw, ba)));
                *acc = _mm256_fmadd_ps(_mm256_set1_ps(d), s, *acc);
            }
        }
    }
    // SAFETY: AVX2 is enabled here.
    acc.map(|a| unsafe { hsum_ps(a) })
}

crate::x86::band!(
    band_q6_k,
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    q6_k_rows4
);

pub(crate) fn rows4z_q6_k(rows: [&[u8]; 4], a: &[u8]) -> [f32; 4] {
    // SAFETY: handed out only after `avx512_available()` confirmed the features.
    unsafe { q6_k_rows4(rows, a) }
}

/// A Q8_K block's quants as the Q4_K kernels here pair them with a
/// register of weight quants: sub-blocks (0, 2), (1, 3), (4, 6), (5, 7),
/// one 256-bit half each. The caller enables AVX-512.
#[inline(always)]
pub(super) unsafe fn q8k_sub_block_pairs(ba: &[u8]) -> [__m512i; 4] {
    assert!(ba.len() >= crate::x86::Q8K, "Q8_K block");
    // SAFETY: 256 quants from Q8K_QS are within the block (checked).
    unsafe {
        let qa = ba.as_ptr().add(crate::x86::Q8K_QS);
        let two = |x: usize, y: usize| {
            _mm512_inserti64x4::<1>(
                _mm512_castsi256_si512(_mm256_loadu_si256(qa.add(x) as *const __m256i)),
                _mm256_loadu_si256(qa.add(y) as *const __m256i),
            )
        };
        [two(0, 64), two(32, 96), two(128, 192), two(160, 224)]
    }
}

/// Byte-shuffle masks for [`q4_k_gemv_rows4`]'s per-lane scale word
/// (bytes 0..4: scales 4..8, 4..8: scales 0..4, 8..16: mins 0..8): the
/// four sub-block pairs' scale vectors (i16, zero-extended; the low 256
/// bits take the pair's first sub-block, the high 256 its second), then
/// the eight mins as i16.
pub(super) const fn q4k_masks() -> ([[u8; 64]; 4], [u8; 64]) {
    const fn scale_byte(k: usize) -> u8 {
        (if k < 4 { 4 + k } else { k - 4 }) as u8
    }
    let subs = [(0, 2), (1, 3), (4, 6), (5, 7)];
    let mut scales = [[0u8; 64]; 4];
    let mut mins = [0u8; 64];
    let mut t = 0;
    while t < 4 {
        let mut b = 0;
        while b < 64 {
            let k = if b < 32 { subs[t].0 } else { subs[t].1 };
            scales[t][b] = if b % 2 == 0 { scale_byte(k) } else { 0x80 };
            mins[b] = if b % 2 == 0 {
                (8 + (b % 16) / 2) as u8
            } else {
                0x80
            };
            b += 1;
        }
        t += 1;
    }
    (scales, mins)
}

pub(super) static Q4K_MASKS: ([[u8; 64]; 4], [u8; 64]) = q4k_masks();

/// Bytes ahead in each Q4_K row that the decode kernel asks for (16
/// blocks; Q6_K's kernel asks 12 of its larger blocks ahead).
pub(super) const Q4K_PREFETCH: usize = 16;

/// Q4_K's four-row decode kernel in the repacked-gemv order (see
/// `q4k::dot_repacked`, group 8): per block and row one exact integer sum
/// of scale x quant x activation, one of min x sub-block sum, each folded
/// in by one fused add with d x da (dmin x da). The AVX2 kernel
/// (`q4_k_gemv_rows`) unpacked each row's scales with scalar shifts and
/// reduced each sum alone, about 75 instructions per row and block, which
/// bound it below the memory's pace (Qwen2.5-0.5B's ffn_down, profile: 52
/// GB/s beside Q6_K's 76). Here the four rows' scale words are unpacked in
/// one register (a 128-bit lane per row), a whole 64-quant half of a block
/// is one `vpmaddubsw` + `vpdpwssd` against its two sub-blocks' scales, and
/// the four rows' sums are reduced together and folded in with four-lane
/// fused adds: each lane is one row's scalar step, so the same bits.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn q4_k_gemv_rows4(rows: [&[u8]; 4], a: &[u8]) -> [f32; 4] {
    use crate::x86::{prefetch_block, q8k_d, Q4K, Q8K, Q8K_BSUMS};
    let blocks = a.len() / Q8K;
    assert!(rows.iter().all(|r| r.len() >= blocks * Q4K), "weight rows");
    let load64 = |m: &[u8; 64]| {
        // SAFETY: m holds 64 bytes.
        unsafe { _mm512_loadu_si512(m.as_ptr() as *const __m512i) }
    };
    let scale_masks = Q4K_MASKS.0.each_ref().map(load64);
    let min_mask = load64(&Q4K_MASKS.1);
    let m4 = _mm512_set1_epi8(0x0f);
    let low6 = _mm512_set_epi32(
        0,
        0x3f3f_3f3f,
        0x3f3f_3f3f,
        0,
        0,
        0x3f3f_3f3f,
        0x3f3f_3f3f,
        0,
        0,
        0x3f3f_3f3f,
        0x3f3f_3f3f,
        0,
        0,
        0x3f3f_3f3f,
        0x3f3f_3f3f,
        0,
    );
    let by4 = _mm512_set_epi32(4, 0, 0, 0, 4, 0, 0, 0, 4, 0, 0, 0, 4, 0, 0, 0);
    // Half k of row r's (d, dmin) word: d's to 0..4, dmin's to 4..8.
    let dm_index = _mm512_set_epi16(
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 25, 17, 9, 1, 24,
        16, 8, 0,
    );
    let lane_words = _mm512_set_epi32(3, 2, 1, 0, 3, 2, 1, 0, 3, 2, 1, 0, 3, 2, 1, 0);
    let mut acc = _mm_setzero_ps();
    let mut acc_min = _mm_setzero_ps();
    for (i, ba) in a.chunks_exact(Q8K).enumerate() {
        // SAFETY (all raw reads below): a Q8_K block holds 256 quants from
        // Q8K_QS and 16 i16 sums from Q8K_BSUMS; each row's block i is
        // 144 bytes (checked above, i < blocks): d, dmin and the scales in
        // 0..16, the quants in 16..144. AVX2 and AVX-512 are enabled here.
        unsafe {
            let act = q8k_sub_block_pairs(ba);
            // The eight sub-block sums as i16 in every 128-bit lane.
            let bs = _mm256_madd_epi16(
                _mm256_loadu_si256(ba.as_ptr().add(Q8K_BSUMS) as *const __m256i),
                _mm256_set1_epi16(1),
            );
            let bsub = _mm512_broadcast_i32x4(_mm_packs_epi32(
                _mm256_castsi256_si128(bs),
                _mm256_extracti128_si256::<1>(bs),
            ));
            let p = rows.map(|r| r.as_ptr().add(i * Q4K));
            for r in rows {
                prefetch_block(r, (i + Q4K_PREFETCH) * Q4K, Q4K);
            }
            // Row r's words d|dmin, u0, u1, u2 in 128-bit lane r.
            let head = |r: usize| _mm_loadu_si128(p[r] as *const __m128i);
            let head = _mm512_inserti32x4::<3>(
                _mm512_inserti32x4::<2>(
                    _mm512_inserti32x4::<1>(_mm512_castsi128_si512(head(0)), head(1)),
                    head(2),
                ),
                head(3),
            );
            // `q4k_scale_min` in each lane: scales 0..4 (u0 & 0x3f..) and
            // mins 0..4 (u1 & 0x3f..) stay in words 1 and 2; scales 4..8
            // go to word 0, from u2's low nibbles and u0's top bits, and
            // mins 4..8 to word 3, from u2's high nibbles and u1's.
            let u2 = _mm512_shuffle_epi32::<0xE7>(head);
            let u01 = _mm512_shuffle_epi32::<0xA5>(head);
            let high = _mm512_or_si512(
                _mm512_and_si512(_mm512_srlv_epi32(u2, by4), m4),
                _mm512_and_si512(_mm512_srli_epi32::<2>(u01), _mm512_set1_epi8(0x30)),
            );
            let sm = _mm512_mask_blend_epi32(0x9999, _mm512_and_si512(head, low6), high);
            let mut sums = [_mm512_setzero_si512(); 4];
            for (r, sum) in sums.iter_mut().enumerate() {
                let q01 = _mm512_loadu_si512(p[r].add(16) as *const __m512i);
                let q23 = _mm512_loadu_si512(p[r].add(80) as *const __m512i);
                let quants = [
                    _mm512_and_si512(q01, m4),
                    _mm512_and_si512(_mm512_srli_epi16::<4>(q01), m4),
                    _mm512_and_si512(q23, m4),
                    _mm512_and_si512(_mm512_srli_epi16::<4>(q23), m4),
                ];
                // Row r's lane in all four lanes.
                let own = _mm512_permutexvar_epi32(
                    _mm512_add_epi32(_mm512_set1_epi32(4 * r as i32), lane_words),
                    sm,
                );
                for k in 0..4 {
                    let sc = _mm512_shuffle_epi8(own, scale_masks[k]);
                    *sum = _mm512_dpwssd_epi32(*sum, _mm512_maddubs_epi16(quants[k], act[k]), sc);
                }
            }
            // The four rows' sums: lane r of `s` is row r's.
            let pairs = |x: __m512i, y: __m512i| {
                _mm512_add_epi32(_mm512_unpacklo_epi32(x, y), _mm512_unpackhi_epi32(x, y))
            };
            let (s01, s23) = (pairs(sums[0], sums[1]), pairs(sums[2], sums[3]));
            let c = _mm512_add_epi32(
                _mm512_unpacklo_epi64(s01, s23),
                _mm512_unpackhi_epi64(s01, s23),
            );
            let c = _mm256_add_epi32(_mm512_castsi512_si256(c), _mm512_extracti64x4_epi64::<1>(c));
            let s = _mm_add_epi32(_mm256_castsi256_si128(c), _mm256_extracti128_si256::<1>(c));
            // Each row's min x sub-block sums, in its lane's four words.
            let m = _mm512_madd_epi16(_mm512_shuffle_epi8(sm, min_mask), bsub);
            let m = _mm512_add_epi32(m, _mm512_shuffle_epi32::<0xB1>(m));
            let m = _mm512_add_epi32(m, _mm512_shuffle_epi32::<0x4E>(m));
            let m = _mm512_castsi512_si128(_mm512_permutexvar_epi32(
                _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12, 8, 4, 0),
                m,
            ));
            // d x da and dmin x da per row, each rounded as the scalar step.
            let dm = _mm256_cvtph_ps(_mm512_castsi512_si128(_mm512_permutexvar_epi16(
                dm_index, head,
            )));
            let dm = _mm256_mul_ps(dm, _mm256_set1_ps(q8k_d(ba)));
            acc = _mm_fmadd_ps(_mm_cvtepi32_ps(s), _mm256_castps256_ps128(dm), acc);
            acc_min = _mm_fmadd_ps(_mm_cvtepi32_ps(m), _mm256_extractf128_ps::<1>(dm), acc_min);
        }
    }
    let mut out = [0f32; 4];
    // SAFETY: out holds four floats.
    unsafe { _mm_storeu_ps(out.as_mut_ptr(), _mm_sub_ps(acc, acc_min)) };
    out
}

crate::x86::band!(
    band_q4_k_gemv,
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    q4_k_gemv_rows4
);

pub(crate) fn rows4z_q4_k_gemv(rows: [&[u8]; 4], a: &[u8]) -> [f32; 4] {
    // SAFETY: handed out only after `avx512_available()` confirmed the features.
    unsafe { q4_k_gemv_rows4(rows, a) }
}
