//! The legacy formats' AVX-512 decode kernels: Q4_1's, Q5_0's and Q8_0's
//! four-row kernels for four, two or one token and their band builds, and
//! Q5_0's single-token kernel with two rows a register.

use std::arch::x86_64::*;

use super::*;

/// The four-row kernels' one check for their raw reads: four rows of
/// `blocks` whole blocks and a prepared group with units for as many.
/// Returns `blocks` and where the group's 64-aligned units start.
#[inline(always)]
pub(super) fn rows4_bases<F: Legacy>(
    rows: [&[u8]; 4],
    pre: &[Chunk32],
    units: usize,
) -> (usize, *const u8) {
    let blocks = rows[0].len() / F::WB;
    assert!(
        rows.iter().all(|r| r.len() == blocks * F::WB),
        "weight rows"
    );
    assert!(pre.len() > blocks * 2 * units, "prepared activations");
    // The 64-aligned part of the prepared buffer (within it: `start`).
    (blocks, pre[start(pre)..].as_ptr() as *const u8)
}

/// Bytes ahead of each row's block that `dotw_rows4` asks for. Four
/// tokens' arithmetic per weight byte left the hardware prefetchers behind
/// (a single token's kernel keeps pace without): batchbench, SmolLM2, four
/// sequences, 5.9 -> 5.3 ms per step at 1 KiB (256 B to 8 KiB all helped).
/// 3 KiB (about five Q8_0 rows of 576) kept Q8_0 further ahead: mmbench,
/// two threads, GMAC/s at 1 / 3 KiB: Q8_0 two tokens 87-103 / 117-119,
/// four 154-155 / 164-172; Q4_1 the same (62 / 61, 90 / 90).
pub(super) const ROWS4_PREFETCH: usize = 3072;

/// A block's 32 quants in both 256-bit halves of a register (the
/// two-token kernels' weight operand), unpacked straight into it where the
/// format allows.
pub(super) trait Unpack2: Legacy {
    /// The caller enables AVX-512 and passes a whole block.
    #[inline(always)]
    unsafe fn unpack2(bw: &[u8]) -> __m512i {
        // SAFETY: as the trait method's contract.
        unsafe { _mm512_broadcast_i64x4(Self::unpack(bw)) }
    }
}

impl Unpack2 for Q41 {
    /// The 16 nibble bytes in all four 128-bit lanes, split
    /// (`split_nibbles`): low nibbles (elements 0..16), high nibbles
    /// (16..32), twice; two instructions after the load instead of five.
    #[inline(always)]
    unsafe fn unpack2(bw: &[u8]) -> __m512i {
        assert!(bw.len() >= 20, "Q4_1 block");
        // SAFETY: 16 bytes at 4 are within the block (checked); AVX-512
        // is enabled in every caller.
        unsafe {
            split_nibbles(_mm512_broadcast_i32x4(_mm_loadu_si128(
                bw.as_ptr().add(4) as *const __m128i
            )))
        }
    }
}

/// Nibble bytes in each 128-bit lane to codes: lanes 0 and 2 keep their
/// low nibbles, lanes 1 and 3 their high ones (shifted down by 4 as 16-bit
/// words; the mask drops what crosses a byte).
#[inline(always)]
pub(super) unsafe fn split_nibbles(x: __m512i) -> __m512i {
    let by4 = 0x0004_0004_0004_0004i64;
    let shift = _mm512_set_epi64(by4, by4, 0, 0, by4, by4, 0, 0);
    // SAFETY: AVX-512 F/BW are enabled in every caller.
    unsafe { _mm512_and_si512(_mm512_srlv_epi16(x, shift), _mm512_set1_epi8(0x0f)) }
}

impl Unpack2 for Q50Bw {}

impl Unpack2 for Q80 {
    /// The 32 bytes broadcast from memory: a load, no shuffle.
    #[inline(always)]
    unsafe fn unpack2(bw: &[u8]) -> __m512i {
        assert!(bw.len() >= 34, "Q8_0 block");
        // SAFETY: 32 bytes at 2 are within the block (checked).
        unsafe { _mm512_broadcast_i64x4(_mm256_loadu_si256(bw.as_ptr().add(2) as *const __m256i)) }
    }
}

/// Four weight rows (take them from four streams, as decode does) against
/// one group of four tokens: each token's steps exactly as in `dotw`, the
/// four rows' blocks interleaved so that each activation load serves four
/// rows and eight independent sums are in flight. Batched decode's few
/// tokens went one weight row per call, and each call's sums waited on
/// each other block by block.
#[inline(always)]
pub(super) unsafe fn dotw_rows4<F: Unpack2, const H: usize>(
    rows: [&[u8]; 4],
    pre: &[Chunk32],
) -> [[f32; 4]; 4] {
    let (blocks, base) = rows4_bases::<F>(rows, pre, units::<F>());
    let mut acc = [[_mm512_setzero_ps(); H]; 4];
    let mut summs = [_mm_setzero_ps(); 4];
    for i in 0..blocks {
        // SAFETY: i < blocks; the activation reads are within the length
        // checked above, in 64-aligned units; AVX2 and AVX-512 are enabled
        // in every caller.
        unsafe {
            let unit = |k: usize| base.add((i * units::<F>() + k) * 64);
            let act: [__m512i; H] =
                std::array::from_fn(|h| _mm512_load_si512(unit(h) as *const __m512i));
            let da: [__m512; H] =
                std::array::from_fn(|h| _mm512_load_ps(unit(2 + h) as *const f32));
            let s = if F::SIGNED {
                _mm_setzero_ps()
            } else {
                _mm_load_ps(unit(4) as *const f32)
            };
            for r in 0..4 {
                let bw = &rows[r][i * F::WB..(i + 1) * F::WB];
                // A hint: the address is not dereferenced, and may lie
                // past the row (the stream's next row follows it).
                _mm_prefetch::<_MM_HINT_T0>(bw.as_ptr().wrapping_add(ROWS4_PREFETCH) as *const i8);
                let q = F::unpack2(bw);
                let start_lanes = if F::SIGNED {
                    // -128 x the sum of each lane's four signed weights.
                    _mm512_madd_epi16(
                        _mm512_maddubs_epi16(_mm512_set1_epi8(1), q),
                        _mm512_set1_epi16(-128),
                    )
                } else {
                    _mm512_setzero_si512()
                };
                let (dw, mw) = f16x2_at(bw, 0);
                let dw16 = _mm512_set1_ps(dw);
                if !F::SIGNED {
                    summs[r] = _mm_fmadd_ps(_mm_set1_ps(mw), s, summs[r]);
                }
                for h in 0..H {
                    let l = if F::SIGNED {
                        _mm512_dpbusd_epi32(start_lanes, act[h], q)
                    } else {
                        _mm512_dpbusd_epi32(start_lanes, q, act[h])
                    };
                    let d = _mm512_mul_ps(dw16, da[h]);
                    acc[r][h] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(l), acc[r][h]);
                }
            }
        }
    }
    let mut out = [[0f32; 4]; 4];
    for (o, (&a, &s)) in out.iter_mut().zip(acc.iter().zip(&summs)) {
        // SAFETY: AVX2 and AVX-512 are enabled in every caller.
        *o = unsafe { finish::<F, H>(a, s) };
    }
    out
}

/// A four-row group kernel (`VecDot4x4Fn`) from its body, inlined into a
/// function with the AVX-512 builds' target features.
macro_rules! rows4 {
    ($name:ident, $body:expr) => {
        pub(crate) fn $name(rows: [&[u8]; 4], pre: &[Chunk32]) -> [[f32; 4]; 4] {
            #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
            unsafe fn body(rows: [&[u8]; 4], pre: &[Chunk32]) -> [[f32; 4]; 4] {
                unsafe { $body(rows, pre) }
            }
            // SAFETY: handed out only after `avx512_available()` confirmed the
            // features.
            unsafe { body(rows, pre) }
        }
    };
}

/// Q4_1's four weight rows against a prepared group of four tokens (or
/// of its first `T` = 2 or 1), with the rows across the register instead of the
/// tokens: lane 4r + j of `lo` holds row r's quants 4j..4j + 4 (low
/// nibbles), of `hi` its quants 16 + 4j.. (high nibbles), so one
/// `vpdpbusd` against a token's half block broadcast to the four 128-bit
/// lanes gives all four rows' lane sums j and 4 + j of that token. Each
/// (row, token) still gets exactly `dotw_rows4`'s lanes, products and fused
/// adds in the same order (its lane sums j and 4 + j sit in two of these
/// registers' lanes 4r + j, the d x da product is the same one, the final
/// pairings are `finish`'s within each row's 128-bit lane), so the bits
/// are the same; but the weight block needs no broadcast per token pair,
/// and the per-row work (d and m, the nibble split, the m x s sums) is done
/// once for four rows: 29 multiply, convert and fused-add instructions per
/// block of four rows where `dotw_rows4` spends 36. kbench, one thread,
/// four tokens with the rows in L1, six alternated runs: 101-110 -> 113-120
/// GMAC/s; batchbench, SmolLM2, four sequences, Q4_1 products per step
/// (four alternated runs): 2.93-3.32 -> 2.72-3.04 ms.
#[inline(always)]
pub(super) unsafe fn q4_1_rows4_across<const T: usize>(
    rows: [&[u8]; 4],
    pre: &[Chunk32],
) -> [[f32; 4]; 4] {
    const WB: usize = 20;
    let (blocks, base) = rows4_bases::<Q41>(rows, pre, across_units::<Q41>());
    // Lane 4r + x takes row r's d (element 2r of the converted (d, m)
    // pairs) or its m (2r + 1).
    let d_at = _mm512_set_epi32(6, 6, 6, 6, 4, 4, 4, 4, 2, 2, 2, 2, 0, 0, 0, 0);
    let m_at = _mm512_add_epi32(d_at, _mm512_set1_epi32(1));
    // [token][low / high half of the block], lanes 4r + j.
    let mut acc = [[_mm512_setzero_ps(); 2]; T];
    // Lanes 4r + t: row r's m x token t's s.
    let mut summs = _mm512_setzero_ps();
    // Two blocks at a time while 64 bytes from block i stay within each
    // row: one load per row, and the two blocks' quants and (d, m) words
    // gathered by two-table permutes, where a block at a time took three
    // 128-bit inserts and three dword inserts (six shuffle-port uops a
    // block, now two for the quants and under three for the scales; the
    // loop was bound by its 42 vector uops on two ports). kbench, one
    // thread, `x4 rows4`, ten alternated runs: median 51.2 -> 58.2 GMAC/s.
    // Dwords of a row's 64 bytes: block i's (d, m) at 0, its quants at
    // 1..5; block i + 1's at 5 and 6..10.
    let quants_idx = _mm512_setr_epi32(1, 2, 3, 4, 17, 18, 19, 20, 6, 7, 8, 9, 22, 23, 24, 25);
    let dm_idx = _mm512_setr_epi32(0, 16, 5, 21, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    let dm_merge = _mm512_setr_epi32(0, 1, 16, 17, 2, 3, 18, 19, 0, 0, 0, 0, 0, 0, 0, 0);
    let first = (d_at, m_at);
    // Block i + 1's pairs sit eight lanes up.
    let up = _mm512_set1_epi32(8);
    let second = (_mm512_add_epi32(d_at, up), _mm512_add_epi32(m_at, up));
    // Block i's prepared activations (64-aligned units).
    let unit = |i: usize| base.wrapping_add(i * across_units::<Q41>() * 64);
    let mut i = 0;
    while i + 4 <= blocks {
        // SAFETY: (i + 4) * 20 >= i * 20 + 64, so each 64-byte read lies
        // within its row (length checked above), and blocks i and i + 1 <
        // blocks have their activation units within the prepared buffer
        // (checked above); AVX-512 F/BW/VNNI is enabled in every caller.
        unsafe {
            let z = |r: usize| {
                let at = rows[r].as_ptr().add(i * WB);
                // A hint (one per 40 bytes reaches every line): the address
                // is not dereferenced, and may lie past the row (the
                // stream's next row follows it).
                _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(ROWS4_PREFETCH) as *const i8);
                _mm512_loadu_si512(at as *const _)
            };
            let (z0, z1, z2, z3) = (z(0), z(1), z(2), z(3));
            // Rows 0, 1 (and 2, 3): block i's quants, then block i + 1's.
            let a = _mm512_permutex2var_epi32(z0, quants_idx, z1);
            let b = _mm512_permutex2var_epi32(z2, quants_idx, z3);
            // The (d, m) words of rows 0..4 for block i, then block i + 1.
            let dm01 = _mm512_permutex2var_epi32(z0, dm_idx, z1);
            let dm23 = _mm512_permutex2var_epi32(z2, dm_idx, z3);
            let dm = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutex2var_epi32(
                dm01, dm_merge, dm23,
            )));
            q4_1_across_block(
                &mut acc,
                &mut summs,
                unit(i),
                _mm512_shuffle_i64x2::<0b01_00_01_00>(a, b),
                dm,
                first,
            );
            q4_1_across_block(
                &mut acc,
                &mut summs,
                unit(i + 1),
                _mm512_shuffle_i64x2::<0b11_10_11_10>(a, b),
                dm,
                second,
            );
        }
        i += 2;
    }
    for i in i..blocks {
        // SAFETY: i < blocks, so each row's block i is within its row and
        // its activation units within the prepared buffer (both checked
        // above); AVX2 and AVX-512 are enabled in every caller.
        unsafe {
            let at = |r: usize| rows[r].as_ptr().add(i * WB);
            let qs16 = |r: usize| _mm_loadu_si128(at(r).add(4) as *const __m128i);
            let qs = _mm512_inserti32x4::<3>(
                _mm512_inserti32x4::<2>(
                    _mm512_inserti32x4::<1>(_mm512_castsi128_si512(qs16(0)), qs16(1)),
                    qs16(2),
                ),
                qs16(3),
            );
            let dm = |r: usize| (at(r) as *const i32).read_unaligned();
            let dm =
                _mm512_castps256_ps512(_mm256_cvtph_ps(_mm_set_epi32(dm(3), dm(2), dm(1), dm(0))));
            q4_1_across_block(&mut acc, &mut summs, unit(i), qs, dm, first);
        }
    }
    // SAFETY: the features are enabled in every caller.
    unsafe { across_finish(&acc, Some(summs)) }
}

/// The rows-across kernels' results, `[row][token]`: each token's lanes j
/// and 4 + j, then `finish`'s pairings within each row's 128-bit lane (the
/// sum lands in lane 4r), plus `summs`' lane 4r + t (row r's m x token t's
/// s) for the unsigned formats; tokens past T: 0, as `finish`. The caller
/// has AVX-512 F.
#[inline(always)]
pub(super) unsafe fn across_finish<const T: usize>(
    acc: &[[__m512; 2]; T],
    summs: Option<__m512>,
) -> [[f32; 4]; 4] {
    let sums: [__m512; 4] = std::array::from_fn(|t| {
        let Some(&[lo, hi]) = acc.get(t) else {
            return _mm512_setzero_ps();
        };
        let y = _mm512_add_ps(lo, hi);
        let z = _mm512_add_ps(y, _mm512_permute_ps::<0b01_00_11_10>(y));
        _mm512_add_ps(z, _mm512_permute_ps::<0b10_11_00_01>(z))
    });
    // Lane 4r + t from token t's lane 4r.
    let s01 = _mm512_unpacklo_ps(sums[0], sums[1]);
    let s23 = _mm512_unpacklo_ps(sums[2], sums[3]);
    let v = _mm512_shuffle_ps::<0b01_00_01_00>(s01, s23);
    let keep: __mmask16 = match T {
        4 => 0xffff,
        2 => 0x3333,
        _ => 0x1111,
    };
    let v = match summs {
        Some(summs) => _mm512_maskz_add_ps(keep, v, summs),
        None => _mm512_maskz_mov_ps(keep, v),
    };
    let mut out = [[0f32; 4]; 4];
    // SAFETY: out is 16 contiguous floats, lane 4r + t = out[r][t].
    unsafe { _mm512_storeu_ps(out.as_mut_ptr() as *mut f32, v) };
    out
}

/// Q8_0's four weight rows against a prepared group of four tokens (or of
/// its first `T` = 2), rows across the register as in
/// [`q4_1_rows4_across`]: lane 4r + j of `lo` holds row r's quants
/// 4j..4j + 4, of `hi` its quants 16 + 4j.., and each lane starts at -128
/// x the sum of its four weights (the activations are unsigned, + 128, as
/// `dotw_rows4` takes them), so one `vpdpbusd` against a token's half
/// block broadcast to the four 128-bit lanes gives all four rows' exact
/// signed lane sums j (or 4 + j). Each (row, token) gets `dotw_rows4`'s
/// lanes, d x da product and fused adds in the same order, so the same
/// bits; but the lane starts, the scales and the weight loads are done
/// once for four rows instead of once per row, and no weight broadcast per
/// token pair: 24 multiply-add-port instructions per block of four rows
/// and four tokens where `dotw_rows4` spends 32 (the output matrix of
/// batched decode).
#[inline(always)]
pub(super) unsafe fn q8_0_rows4_across<const T: usize>(
    rows: [&[u8]; 4],
    pre: &[Chunk32],
) -> [[f32; 4]; 4] {
    const WB: usize = 34;
    let (blocks, base) = rows4_bases::<Q80>(rows, pre, across_units::<Q80>());
    // Lane 4r + x takes row r's d.
    let d_at = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
    // Qwords of [row 0 | row 1] (0..8) and [row 2 | row 3] (8..16): each
    // row's first 16 quants, then its last 16.
    let lo_idx = _mm512_setr_epi64(0, 1, 4, 5, 8, 9, 12, 13);
    let hi_idx = _mm512_setr_epi64(2, 3, 6, 7, 10, 11, 14, 15);
    let ones = _mm512_set1_epi8(1);
    let minus128 = _mm512_set1_epi16(-128);
    let mut acc = [[_mm512_setzero_ps(); 2]; T];
    for i in 0..blocks {
        // SAFETY: i < blocks, so each row's block i (34 bytes) is within
        // its row and the block's activation units within the prepared
        // buffer (both checked above); AVX-512 F/BW/VNNI and F16C are
        // enabled in every caller.
        unsafe {
            let at = |r: usize| rows[r].as_ptr().add(i * WB);
            let q = |r: usize| {
                // A hint (one per 34 bytes reaches every line): the address
                // is not dereferenced, and may lie past the row.
                _mm_prefetch::<_MM_HINT_T0>(at(r).wrapping_add(ROWS4_PREFETCH) as *const i8);
                _mm256_loadu_si256(at(r).add(2) as *const __m256i)
            };
            let z01 = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(q(0)), q(1));
            let z23 = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(q(2)), q(3));
            let lo = _mm512_permutex2var_epi64(z01, lo_idx, z23);
            let hi = _mm512_permutex2var_epi64(z01, hi_idx, z23);
            let start = |w: __m512i| _mm512_madd_epi16(_mm512_maddubs_epi16(ones, w), minus128);
            let halves = [(lo, start(lo)), (hi, start(hi))];
            let d16 = |r: usize| (at(r) as *const i16).read_unaligned();
            let d4 = _mm_cvtph_ps(_mm_setr_epi16(d16(0), d16(1), d16(2), d16(3), 0, 0, 0, 0));
            let dw = _mm512_permutexvar_ps(d_at, _mm512_castps128_ps512(d4));
            let unit = |k: usize| base.add((i * across_units::<Q80>() + k) * 64);
            let da = unit(8) as *const f32;
            for (t, acc) in acc.iter_mut().enumerate() {
                let d = _mm512_mul_ps(dw, _mm512_set1_ps(da.add(t).read()));
                for (h, (acc, &(q, st))) in acc.iter_mut().zip(&halves).enumerate() {
                    let act = _mm512_loadu_si512(unit(2 * t + h) as *const _);
                    let l = _mm512_dpbusd_epi32(st, act, q);
                    *acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(l), *acc);
                }
            }
        }
    }
    // SAFETY: the features are enabled in every caller.
    unsafe { across_finish(&acc, None) }
}

/// One block of [`q4_1_rows4_across`]: its four rows' quants `qs` (row r's
/// 16 bytes in 128-bit lane r) and their (d, m) pairs as f32 in `dm`, at
/// the lanes `at` names (`at.0`: lane 4r + x takes row r's d, `at.1` its
/// m), against the block's prepared activations at `act`. The caller has
/// AVX-512 F/BW/VNNI and `act` holds the block's [`across_units`] units.
#[inline(always)]
pub(super) unsafe fn q4_1_across_block<const T: usize>(
    acc: &mut [[__m512; 2]; T],
    summs: &mut __m512,
    act: *const u8,
    qs: __m512i,
    dm: __m512,
    at: (__m512i, __m512i),
) {
    // SAFETY: the reads are within the block's units (the caller's
    // contract); the features are enabled in every caller.
    unsafe {
        let unit = |k: usize| act.add(k * 64);
        let nibble = _mm512_set1_epi8(0x0f);
        let lo = _mm512_and_si512(qs, nibble);
        let hi = _mm512_and_si512(_mm512_srli_epi16::<4>(qs), nibble);
        let dw = _mm512_permutexvar_ps(at.0, dm);
        let mw = _mm512_permutexvar_ps(at.1, dm);
        let s = _mm512_loadu_ps(unit(9) as *const f32);
        *summs = _mm512_fmadd_ps(mw, s, *summs);
        // One multiply per token with its d broadcast from memory (the
        // sixteen products in one multiply, then an in-lane permute per
        // token, ran slower: kbench, five alternated runs, 58-62 against
        // 60-71 GMAC/s).
        let da = unit(8) as *const f32;
        for (t, acc) in acc.iter_mut().enumerate() {
            let d = _mm512_mul_ps(dw, _mm512_set1_ps(da.add(t).read()));
            for (h, (acc, q)) in acc.iter_mut().zip([lo, hi]).enumerate() {
                let act = _mm512_loadu_si512(unit(2 * t + h) as *const _);
                let l = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q, act);
                *acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(l), *acc);
            }
        }
    }
}

rows4!(rows4x4_q4_1, q4_1_rows4_across::<4>);
rows4!(rows4x4_q5_0, dotw_rows4::<Q50Bw, 2>);
rows4!(rows4x4_q8_0, q8_0_rows4_across::<4>);
// The group's first two tokens only (two sequences decoding): one register
// of the two, half the arithmetic.
rows4!(rows4x2_q4_1, q4_1_rows4_across::<2>);
rows4!(rows4x2_q5_0, dotw_rows4::<Q50Bw, 1>);
rows4!(rows4x2_q8_0, q8_0_rows4_across::<2>);

/// The band kernels' one check: `w` holds 4q weight rows and every output
/// slice 4q results or none, the first `wanted` all there. Returns q and
/// the bytes of a row.
pub(super) fn band_shape(w: &[u8], out: &[&mut [f32]], wanted: usize) -> (usize, usize) {
    let n = out[0].len();
    let q = n / 4;
    let rb = w.len().checked_div(n).unwrap_or(0);
    assert!(
        n == 4 * q
            && w.len() == rb * n
            && out[..wanted].iter().all(|o| o.len() == n)
            && out.iter().all(|o| o.is_empty() || o.len() == n),
        "a band of four quarters"
    );
    (q, rb)
}

/// A band kernel (`VecDot4x4BandFn`) from a four-row group kernel inlined
/// into it: the loop over the band's quarters runs inside one call with the
/// target features, so the setup and the reductions of one four-row call
/// overlap the next rows' loads (perf, four SmolLM2 sequences: the
/// four-row calls' loop in `rows_into` alone held 5.5% of the step).
/// batchbench, eight alternated runs, medians: step 8.06 -> 7.50 ms, Q4_1
/// products 5.08 -> 4.83, the Q8_0 output 1.33 -> 1.26.
macro_rules! rows4_band {
    ($name:ident, $body:expr) => {
        pub(crate) fn $name(w: &[u8], pre: &[Chunk32], out: [&mut [f32]; 4]) {
            #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
            unsafe fn body(w: &[u8], pre: &[Chunk32], out: [&mut [f32]; 4]) {
                let (q, rb) = band_shape(w, &out, 1);
                let [o0, o1, o2, o3] = out;
                for k in 0..q {
                    let row = |j: usize| &w[(j * q + k) * rb..(j * q + k + 1) * rb];
                    // SAFETY: this function has the body's target features.
                    let v: [[f32; 4]; 4] = unsafe { $body([row(0), row(1), row(2), row(3)], pre) };
                    for (j, [a, b, c, d]) in v.into_iter().enumerate() {
                        let i = j * q + k;
                        o0[i] = a;
                        // A token not wanted has an empty slice.
                        for (o, x) in [(&mut *o1, b), (&mut *o2, c), (&mut *o3, d)] {
                            if let Some(o) = o.get_mut(i) {
                                *o = x;
                            }
                        }
                    }
                }
            }
            // SAFETY: handed out only after `avx512_available()` confirmed the
            // features.
            unsafe { body(w, pre, out) }
        }
    };
}

/// [`rows4_band!`] for two groups of four tokens (six to eight sequences
/// decoding): each four weight rows go through the kernel once per group
/// while they are in L1, all in one call. `out[4g + j]` is group g's token
/// j (empty for a token not wanted; group 0's four all wanted).
macro_rules! rows4_band2 {
    ($name:ident, $body:expr) => {
        pub(crate) fn $name(w: &[u8], pre: [&[Chunk32]; 2], out: [&mut [f32]; 8]) {
            #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
            unsafe fn body(w: &[u8], pre: [&[Chunk32]; 2], mut out: [&mut [f32]; 8]) {
                let (q, rb) = band_shape(w, &out, 4);
                for k in 0..q {
                    let row = |j: usize| &w[(j * q + k) * rb..(j * q + k + 1) * rb];
                    let rows = [row(0), row(1), row(2), row(3)];
                    for (pre, out) in pre.into_iter().zip(out.chunks_exact_mut(4)) {
                        // SAFETY: this function has the body's target
                        // features.
                        let v: [[f32; 4]; 4] = unsafe { $body(rows, pre) };
                        for (j, v4) in v.into_iter().enumerate() {
                            let i = j * q + k;
                            for (o, x) in out.iter_mut().zip(v4) {
                                if let Some(o) = o.get_mut(i) {
                                    *o = x;
                                }
                            }
                        }
                    }
                }
            }
            // SAFETY: handed out only after `avx512_available()` confirmed the
            // features.
            unsafe { body(w, pre, out) }
        }
    };
}

rows4_band2!(band8x4_q4_1, q4_1_rows4_across::<4>);
rows4_band2!(band8x4_q5_0, dotw_rows4::<Q50Bw, 2>);
rows4_band2!(band8x4_q8_0, q8_0_rows4_across::<4>);

rows4_band!(band4x4_q4_1, q4_1_rows4_across::<4>);
rows4_band!(band4x4_q5_0, dotw_rows4::<Q50Bw, 2>);
rows4_band!(band4x4_q8_0, q8_0_rows4_across::<4>);
rows4_band!(band4x2_q4_1, q4_1_rows4_across::<2>);
rows4_band!(band4x2_q5_0, dotw_rows4::<Q50Bw, 1>);
rows4_band!(band4x2_q8_0, q8_0_rows4_across::<2>);

// Single-token decode of Q4_1 takes the same kernel with the group's first
// token alone, its activations prepared once per band: the rows-across
// registers leave fewer instructions per block than `dot_pairs`' two rows
// a register (one 64-byte load and two permutes per row pair of blocks,
// the scales gathered for four rows at once, where `dot_pairs` assembles
// each row's nibbles and scales on its own). Same bits (`dotw_rows4`'s
// lanes, products and fused adds, as above). One thread, SmolLM2's 576
// columns, 200 alternated runs, median GB/s of weights: rows in L1 (64)
// 9.4 -> 13.3, in L2 (256) 13.1 -> 18.1, from DRAM (400000) 10.3 -> 12.1.

thread_local! {
    /// A band's prepared token, kept from call to call.
    static PREPARED: std::cell::RefCell<Vec<Chunk32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// [`q4_1_rows4_across`] for one token: rows 0..4 against `a` (a Q8_1
/// row), prepared here (the tests' four-row entry beside [`banda_q4_1`]).
pub(crate) fn rows4a_q4_1(rows: [&[u8]; 4], a: &[u8]) -> [f32; 4] {
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn body(rows: [&[u8]; 4], pre: &[Chunk32]) -> [[f32; 4]; 4] {
        // SAFETY: this function has the kernel's features.
        unsafe { q4_1_rows4_across::<1>(rows, pre) }
    }
    PREPARED.with_borrow_mut(|pre| {
        prepare_one_q4_1(a, pre);
        // SAFETY: handed out only after `avx512_available()` confirmed the
        // features.
        unsafe { body(rows, pre) }.map(|r| r[0])
    })
}

/// The band kernel of [`rows4a_q4_1`] (see `crate::x86::band!`): rows k, q + k,
/// 2q + k and 3q + k of the band's four quarters together, the token
/// prepared once for the band.
pub(crate) fn banda_q4_1(w: &[u8], a: &[u8], out: &mut [f32]) {
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn body(w: &[u8], pre: &[Chunk32], out: &mut [f32]) {
        // SAFETY: this function has the kernel's features.
        crate::x86::band_loop!(w, out, |rows| unsafe { q4_1_rows4_across::<1>(rows, pre) }
            .map(|r| r[0]));
    }
    PREPARED.with_borrow_mut(|pre| {
        prepare_one_q4_1(a, pre);
        // SAFETY: handed out only after `avx512_available()` confirmed the
        // features.
        unsafe { body(w, pre, out) }
    })
}

/// How a format's single-token decode kernel below takes two rows' block
/// at once: the 32 quants of each as unsigned codes (the weight plus
/// `ZERO`), row a in the low 256 bits; two rows per instruction where
/// the VNNI kernel spends one per row.
pub(super) trait PairCodes: Legacy {
    /// The code of a zero weight: the lanes start at -ZERO x the
    /// activations' four-byte sums, which leaves the exact signed sums.
    const ZERO: u8;
    /// The caller passes two whole blocks and enables AVX-512 BW/VL.
    unsafe fn codes2(a: &[u8], b: &[u8]) -> __m512i;
}

/// Two rows' 16 nibble bytes (at `at`) as 64 codes: per row the low
/// nibbles (elements 0..16), then the high (16..32).
#[inline(always)]
pub(super) unsafe fn nibbles2(a: &[u8], b: &[u8], at: usize) -> __m512i {
    assert!(a.len() >= at + 16 && b.len() >= at + 16, "nibble blocks");
    // SAFETY: 16 bytes at `at` in each block (checked); AVX-512 is
    // enabled in every caller.
    unsafe {
        let lo = _mm256_broadcastsi128_si256(_mm_loadu_si128(a.as_ptr().add(at) as *const __m128i));
        let hi = _mm256_broadcastsi128_si256(_mm_loadu_si128(b.as_ptr().add(at) as *const __m128i));
        split_nibbles(_mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi))
    }
}

impl PairCodes for Q50Bw {
    const ZERO: u8 = 16;
    /// The nibbles, plus 16 where the block's fifth bit is set (one
    /// masked add, both rows' `qh` words the mask).
    #[inline(always)]
    unsafe fn codes2(a: &[u8], b: &[u8]) -> __m512i {
        let qh = u64::from(crate::x86::qh_at(a, 2)) | (u64::from(crate::x86::qh_at(b, 2)) << 32);
        // SAFETY: as the trait method's contract.
        unsafe {
            let nib = nibbles2(a, b, 6);
            _mm512_mask_add_epi8(nib, qh, nib, _mm512_set1_epi8(0x10))
        }
    }
}

/// Four weight rows of a signed format (Q5_0) against one token
/// (decode), rows 0 and 1 in one 512-bit register and rows 2 and 3 in
/// another: each half runs exactly the one-row kernel's f32 steps for its
/// row (the same exact integer lanes, the same scale products, the same
/// fused adds in block order, the same final sum), at half the
/// instructions of the VNNI kernel's row-by-row loop, which bound
/// single-token decode on this core (kbench: ~4 cycles per row and block,
/// L2-resident). (Q4_1 decodes with its rows-across kernel instead,
/// `banda_q4_1`, which needs fewer instructions still.)
#[inline(always)]
pub(super) unsafe fn dot_pairs<F: PairCodes>(rows: [&[u8]; 4], a: &[u8]) -> [f32; 4] {
    assert!(F::SIGNED, "a signed format");
    let (blocks, ab) = crate::x86::legacy_shape::<F>(&rows, a);
    // Lanes 0..8 take element 2p of the product vector below (d0..d3),
    // lanes 8..16 element 2p + 1.
    let spread = |p: i32| {
        let (x, y) = (2 * p, 2 * p + 1);
        _mm512_set_epi32(y, y, y, y, y, y, y, y, x, x, x, x, x, x, x, x)
    };
    let spread = [spread(0), spread(1)];
    let mut acc = [_mm512_setzero_ps(); 2];
    for i in 0..blocks {
        let ba = &a[i * ab..(i + 1) * ab];
        let bw: [&[u8]; 4] = std::array::from_fn(|r| &rows[r][i * F::WB..(i + 1) * F::WB]);
        // SAFETY: the blocks are whole (sliced above); AVX2, F16C and
        // AVX-512 F/BW/VL/VNNI are enabled in every caller.
        unsafe {
            // Each stream's bytes a few KiB ahead (see ROWS4_PREFETCH): a
            // hint, never dereferenced, so past a row's end is allowed.
            for r in bw {
                _mm_prefetch::<_MM_HINT_T0>(r.as_ptr().wrapping_add(ROWS4_PREFETCH) as *const i8);
            }
            let act = _mm512_broadcast_i64x4(_mm256_loadu_si256(
                ba.as_ptr().add(ab - 32) as *const __m256i
            ));
            let start = if F::ZERO != 0 {
                let s = _mm512_dpbusd_epi32(
                    _mm512_setzero_si512(),
                    _mm512_set1_epi8(F::ZERO as i8),
                    act,
                );
                _mm512_sub_epi32(_mm512_setzero_si512(), s)
            } else {
                _mm512_setzero_si512()
            };
            // Each row's d x da rounded as the one-row kernel rounds it.
            let prod = {
                let h = |r: usize| u64::from(u16::from_le_bytes([bw[r][0], bw[r][1]]));
                let bits = h(0) | h(1) << 16 | h(2) << 32 | h(3) << 48;
                let d = _mm_cvtph_ps(_mm_cvtsi64_si128(bits as i64));
                let da = crate::x86::f16_at(ba, 0);
                _mm512_castps128_ps512(_mm_mul_ps(d, _mm_set1_ps(da)))
            };
            for p in 0..2 {
                let q = F::codes2(bw[2 * p], bw[2 * p + 1]);
                let l = _mm512_dpbusd_epi32(start, q, act);
                let d = _mm512_permutexvar_ps(spread[p], prod);
                acc[p] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(l), acc[p]);
            }
        }
    }
    // Rows 0..4 take the place of tokens 0..4 (no m x s: signed).
    // SAFETY: AVX2 and AVX-512 are enabled in every caller.
    unsafe { finish::<F, 2>(acc, _mm_setzero_ps()) }
}

macro_rules! wide_pairs {
    ($f:ty, $name:ident) => {
        pub(crate) fn $name(rows: [&[u8]; 4], a: &[u8]) -> [f32; 4] {
            #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
            unsafe fn body(rows: [&[u8]; 4], a: &[u8]) -> [f32; 4] {
                unsafe { dot_pairs::<$f>(rows, a) }
            }
            // SAFETY: handed out only after `avx512_available()` confirmed the
            // features.
            unsafe { body(rows, a) }
        }
    };
}

wide_pairs!(Q50Bw, rows4z_q5_0);

crate::x86::band!(
    band_q5_0,
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    dot_pairs::<Q50Bw>
);
