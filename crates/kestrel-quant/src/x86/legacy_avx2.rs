//! The legacy formats' (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) AVX2 kernels for one
//! activation row: the plain dots, the several-row decode body
//! (`legacy_rows`) with its AVX2 entry points, and ggml's AVX2 Q8_0/Q8_1
//! activation quantizers (see legacy.rs for the layouts and the lane
//! order).

use std::arch::x86_64::*;

use super::*;

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q4_0(w: &[u8], a: &[u8]) -> f32 {
    let mut acc = _mm256_setzero_ps();
    for (bw, ba) in w.chunks_exact(18).zip(a.chunks_exact(34)) {
        let d = f16_product(bw, 0, ba, 0);
        unsafe {
            let q = _mm256_sub_epi8(nibbles32(bw, 2), _mm256_set1_epi8(8));
            let s = _mm256_cvtepi32_ps(lanes_signed(q, load32(ba, 2)));
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d), s, acc);
        }
    }
    unsafe { hsum_ps(acc) }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q4_0_repacked(w: &[u8], a: &[u8]) -> f32 {
    let mut acc = 0f32;
    for (bw, ba) in w.chunks_exact(18).zip(a.chunks_exact(34)) {
        let s = unsafe {
            let q = _mm256_sub_epi8(nibbles32(bw, 2), _mm256_set1_epi8(8));
            hsum_epi32(lanes_signed(q, load32(ba, 2)))
        };
        acc = (s as f32).mul_add(f16_product(bw, 0, ba, 0), acc);
    }
    acc
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q4_1(w: &[u8], a: &[u8]) -> f32 {
    let mut acc = _mm256_setzero_ps();
    let mut summs = 0f32;
    for (bw, ba) in w.chunks_exact(20).zip(a.chunks_exact(36)) {
        let ((dw, m), (da, sa)) = (f16x2_at(bw, 0), f16x2_at(ba, 0));
        summs = m.mul_add(sa, summs);
        let d = dw * da;
        unsafe {
            let s = _mm256_cvtepi32_ps(lanes_unsigned(nibbles32(bw, 4), load32(ba, 4)));
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d), s, acc);
        }
    }
    unsafe { hsum_ps(acc) + summs }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q5_0(w: &[u8], a: &[u8]) -> f32 {
    let mut acc = _mm256_setzero_ps();
    for (bw, ba) in w.chunks_exact(22).zip(a.chunks_exact(34)) {
        let d = f16_product(bw, 0, ba, 0);
        unsafe {
            let q = q5_0_quants(bw);
            let s = _mm256_cvtepi32_ps(lanes_signed(q, load32(ba, 2)));
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d), s, acc);
        }
    }
    unsafe { hsum_ps(acc) }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q5_1(w: &[u8], a: &[u8]) -> f32 {
    let mut acc = _mm256_setzero_ps();
    let mut summs = 0f32;
    for (bw, ba) in w.chunks_exact(24).zip(a.chunks_exact(36)) {
        let ((dw, m), (da, sa)) = (f16x2_at(bw, 0), f16x2_at(ba, 0));
        summs = m.mul_add(sa, summs);
        let d = dw * da;
        unsafe {
            let q = _mm256_or_si256(nibbles32(bw, 8), fifth_bits(qh_at(bw, 4)));
            let s = _mm256_cvtepi32_ps(lanes_unsigned(q, load32(ba, 4)));
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d), s, acc);
        }
    }
    unsafe { hsum_ps(acc) + summs }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q8_0(w: &[u8], a: &[u8]) -> f32 {
    let mut acc = _mm256_setzero_ps();
    for (bw, ba) in w.chunks_exact(34).zip(a.chunks_exact(34)) {
        let d = f16_product(bw, 0, ba, 0);
        unsafe {
            let s = _mm256_cvtepi32_ps(lanes_signed(load32(bw, 2), load32(ba, 2)));
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d), s, acc);
        }
    }
    unsafe { hsum_ps(acc) }
}

/// A legacy block format as the several-row decode kernels see it.
pub(super) trait Legacy {
    /// Bytes per weight block.
    const WB: usize;
    /// Quants are signed (Q8_0 activations; else unsigned with Q8_1's m*s).
    const SIGNED: bool;
    /// The 32 quants of block `bw` as bytes.
    unsafe fn unpack(bw: &[u8]) -> __m256i;
    /// Signed formats stored as unsigned codes minus a constant (Q4_0: 8,
    /// Q5_0: 16): the constant, and the codes as bytes.
    const OFFSET: i8 = 0;
    unsafe fn unpack_codes(bw: &[u8]) -> __m256i {
        // SAFETY: as `unpack`.
        unsafe { Self::unpack(bw) }
    }
}

pub(super) struct Q40;
pub(super) struct Q41;
pub(super) struct Q50;
pub(super) struct Q51;
pub(super) struct Q80;

impl Legacy for Q40 {
    const WB: usize = 18;
    const SIGNED: bool = true;
    #[inline(always)]
    unsafe fn unpack(bw: &[u8]) -> __m256i {
        // SAFETY: AVX2 is enabled in every caller (the kernels below).
        unsafe { _mm256_sub_epi8(nibbles32(bw, 2), _mm256_set1_epi8(8)) }
    }
    const OFFSET: i8 = 8;
    #[inline(always)]
    unsafe fn unpack_codes(bw: &[u8]) -> __m256i {
        unsafe { nibbles32(bw, 2) }
    }
}

impl Legacy for Q41 {
    const WB: usize = 20;
    const SIGNED: bool = false;
    #[inline(always)]
    unsafe fn unpack(bw: &[u8]) -> __m256i {
        unsafe { nibbles32(bw, 4) }
    }
}

impl Legacy for Q50 {
    const WB: usize = 22;
    const SIGNED: bool = true;
    #[inline(always)]
    unsafe fn unpack(bw: &[u8]) -> __m256i {
        unsafe { q5_0_quants(bw) }
    }
    const OFFSET: i8 = 16;
    #[inline(always)]
    unsafe fn unpack_codes(bw: &[u8]) -> __m256i {
        unsafe { _mm256_or_si256(nibbles32(bw, 6), fifth_bits(qh_at(bw, 2))) }
    }
}

/// Q5_0 for CPUs with AVX-512 BW/VL: the fifth bits go in with one
/// masked add of 16 (the nibbles are below 16), `qh` itself the mask,
/// instead of a byte shuffle, an and, a compare and another and. Same
/// bytes.
pub(crate) struct Q50Bw;

impl Legacy for Q50Bw {
    const WB: usize = 22;
    const SIGNED: bool = true;
    #[inline(always)]
    unsafe fn unpack(bw: &[u8]) -> __m256i {
        // SAFETY: as `unpack_codes`.
        unsafe {
            let nib = nibbles32(bw, 6);
            _mm256_mask_sub_epi8(nib, !qh_at(bw, 2), nib, _mm256_set1_epi8(0x10))
        }
    }
    const OFFSET: i8 = 16;
    #[inline(always)]
    unsafe fn unpack_codes(bw: &[u8]) -> __m256i {
        // SAFETY: AVX-512 BW/VL are enabled in every caller (the entries
        // that use this format, handed out after they were detected).
        unsafe {
            let nib = nibbles32(bw, 6);
            _mm256_mask_add_epi8(nib, qh_at(bw, 2), nib, _mm256_set1_epi8(0x10))
        }
    }
}

impl Legacy for Q51 {
    const WB: usize = 24;
    const SIGNED: bool = false;
    #[inline(always)]
    unsafe fn unpack(bw: &[u8]) -> __m256i {
        unsafe { _mm256_or_si256(nibbles32(bw, 8), fifth_bits(qh_at(bw, 4))) }
    }
}

impl Legacy for Q80 {
    const WB: usize = 34;
    const SIGNED: bool = true;
    #[inline(always)]
    unsafe fn unpack(bw: &[u8]) -> __m256i {
        unsafe { load32(bw, 2) }
    }
}

/// A several-row legacy-format decode call's block count (the first row's)
/// and activation block bytes (Q8_1's 36 with the unsigned formats, else
/// Q8_0's 34), once checked against every row and the activation row: one
/// check stands for the kernel's reads.
#[inline(always)]
pub(super) fn legacy_shape<F: Legacy>(rows: &[&[u8]], a: &[u8]) -> (usize, usize) {
    let ab = if F::SIGNED { 34 } else { 36 };
    let blocks = rows[0].len() / F::WB;
    assert!(
        rows.iter().all(|r| r.len() >= blocks * F::WB),
        "weight rows"
    );
    assert!(a.len() >= blocks * ab, "activation row");
    (blocks, ab)
}

/// A legacy-format dot of `N` weight rows against one activation row
/// (decode): each row's f32 steps are its one-row kernel's, while the
/// activation block and its scale are loaded once for all rows.
/// With one-instruction lane sums (VNNI) the offset formats multiply
/// their unsigned codes and start each lane at -offset x the activations'
/// lane sums (shared by the rows): the same exact sums, fewer steps.
/// Always inlined into entries that enable AVX2 (and AVX-VNNI for
/// `VnniLanes`).
#[inline(always)]
pub(super) unsafe fn legacy_rows<F: Legacy, L: Lanes, const N: usize>(
    rows: [&[u8]; N],
    a: &[u8],
) -> [f32; N] {
    let (blocks, ab) = legacy_shape::<F>(&rows, a);
    let starts = rows.map(|r| r.as_ptr());
    let mut acc = [_mm256_setzero_ps(); N];
    let mut summs = [0f32; N];
    for i in 0..blocks {
        let ba = &a[i * ab..(i + 1) * ab];
        let act = unsafe { load32(ba, ab - 32) };
        let (da, sa) = if F::SIGNED {
            (f16_at(ba, 0), 0.0)
        } else {
            f16x2_at(ba, 0)
        };
        // Four rows of a signed format: their scales widened by one
        // conversion and multiplied by one instruction (each product
        // rounded as the one-row kernel rounds it), then each spread from
        // memory by a load. Converting and spreading row by row kept the
        // shuffle port the busiest (Q5_0, one thread, L2-resident rows:
        // 11.4 -> 15.3 GB/s). The unsigned formats' (d, m) pairs cost more
        // to gather than they save.
        let by4 = N == 4 && F::SIGNED;
        let d4 = if by4 {
            let mut bits = 0u64;
            for (r, start) in starts.iter().enumerate() {
                // SAFETY: the first two bytes of block i (i < blocks).
                let h = unsafe {
                    u16::from_le_bytes([*start.add(i * F::WB), *start.add(i * F::WB + 1)])
                };
                bits |= u64::from(h) << (16 * r);
            }
            let dw = _mm_cvtph_ps(_mm_cvtsi64_si128(bits as i64));
            let mut d = [0f32; 4];
            // SAFETY: d holds four floats.
            unsafe { _mm_storeu_ps(d.as_mut_ptr(), _mm_mul_ps(dw, _mm_set1_ps(da))) };
            // Kept in memory, so that the spreads below are loads.
            std::hint::black_box(d)
        } else {
            [0f32; 4]
        };
        let offset_form = L::FUSED_ADD && F::OFFSET != 0;
        let start = if offset_form {
            let s = unsafe { L::lanes(_mm256_set1_epi8(F::OFFSET), act) };
            _mm256_sub_epi32(_mm256_setzero_si256(), s)
        } else {
            _mm256_setzero_si256()
        };
        for r in 0..N {
            let bw = if by4 {
                // SAFETY: i < blocks and every row holds blocks * WB bytes
                // (asserted above): the slice is in bounds. (Slicing the
                // row kept two compares and branches per row and block;
                // Q4_1's loop ran slower without them, so it keeps them.)
                unsafe { std::slice::from_raw_parts(starts[r].add(i * F::WB), F::WB) }
            } else {
                &rows[r][i * F::WB..(i + 1) * F::WB]
            };
            let l = if offset_form {
                unsafe { L::lanes_plus(start, F::unpack_codes(bw), act) }
            } else if F::SIGNED {
                let q = unsafe { F::unpack(bw) };
                unsafe { L::lanes(_mm256_sign_epi8(q, q), _mm256_sign_epi8(act, q)) }
            } else {
                unsafe { L::lanes(F::unpack(bw), act) }
            };
            let d = if by4 {
                _mm256_broadcast_ss(&d4[r])
            } else if F::SIGNED {
                _mm256_set1_ps(f16_at(bw, 0) * da)
            } else {
                let (dw, m) = f16x2_at(bw, 0);
                summs[r] = m.mul_add(sa, summs[r]);
                _mm256_set1_ps(dw * da)
            };
            acc[r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(l), acc[r]);
        }
    }
    let mut out = [0f32; N];
    for r in 0..N {
        out[r] = unsafe { hsum_ps(acc[r]) } + summs[r];
    }
    out
}

entry2!(dot2_q4_0 => legacy Q40);
entry2!(dot2_q4_1 => legacy Q41);
entry2!(dot2_q5_0 => legacy Q50);
entry2!(dot2_q5_1 => legacy Q51);
entry2!(dot2_q8_0 => legacy Q80);

entry_rows4!(rows4_q4_0 => Q40);
entry_rows4!(rows4_q4_1 => Q41);
entry_rows4!(rows4_q5_0 => Q50);
entry_rows4!(rows4_q5_1 => Q51);
entry_rows4!(rows4_q8_0 => Q80);

entry!(dot_q4_0 => q4_0);
entry!(dot_q4_0_repacked => q4_0_repacked);
entry!(dot_q4_1 => q4_1);
entry!(dot_q5_0 => q5_0);
entry!(dot_q5_1 => q5_1);
entry!(dot_q8_0 => q8_0);

// ---------------------------------------------------------------------------
// Q8_0 / Q8_1 activation quantizers: ggml's AVX2 `quantize_row_q8_0/_1`,
// instruction for instruction (max-abs by `max_ps`, `127 / amax`, round to
// nearest-even, saturating packs, and for Q8_1 `d * sum` rounded once).
// ---------------------------------------------------------------------------

pub(super) fn quantize_q8_0(src: &[f32], dst: &mut [u8]) {
    // SAFETY: as `entry!`.
    unsafe { quantize_q8(src, dst, false) }
}

pub(super) fn quantize_q8_1(src: &[f32], dst: &mut [u8]) {
    // SAFETY: as `entry!`.
    unsafe { quantize_q8(src, dst, true) }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn quantize_q8(src: &[f32], dst: &mut [u8], with_sum: bool) {
    let bb = if with_sum { 36 } else { 34 };
    let qs_at = bb - 32;
    for (x, b) in src.chunks_exact(32).zip(dst.chunks_exact_mut(bb)) {
        // SAFETY: x holds 32 floats, b holds 32 quant bytes after its header.
        unsafe {
            let p = x.as_ptr();
            let v = [
                _mm256_loadu_ps(p),
                _mm256_loadu_ps(p.add(8)),
                _mm256_loadu_ps(p.add(16)),
                _mm256_loadu_ps(p.add(24)),
            ];
            let sign = _mm256_set1_ps(-0.0);
            let mut max = _mm256_andnot_ps(sign, v[0]);
            for vk in &v[1..] {
                max = _mm256_max_ps(max, _mm256_andnot_ps(sign, *vk));
            }
            let mut m4 = _mm_max_ps(_mm256_extractf128_ps::<1>(max), _mm256_castps256_ps128(max));
            m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
            m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
            let amax = _mm_cvtss_f32(m4);
            let d = amax / 127.0;
            let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
            let mul = _mm256_set1_ps(id);
            let q: [__m256i; 4] = [
                _mm256_cvtps_epi32(_mm256_round_ps::<_MM_FROUND_TO_NEAREST_INT>(_mm256_mul_ps(
                    v[0], mul,
                ))),
                _mm256_cvtps_epi32(_mm256_round_ps::<_MM_FROUND_TO_NEAREST_INT>(_mm256_mul_ps(
                    v[1], mul,
                ))),
                _mm256_cvtps_epi32(_mm256_round_ps::<_MM_FROUND_TO_NEAREST_INT>(_mm256_mul_ps(
                    v[2], mul,
                ))),
                _mm256_cvtps_epi32(_mm256_round_ps::<_MM_FROUND_TO_NEAREST_INT>(_mm256_mul_ps(
                    v[3], mul,
                ))),
            ];
            // f32 -> f16 by F16C in place: `float::f32_to_f16` (the `half`
            // crate) checks the CPU and calls out of line each time (four
            // rows of 576 values through `quantize_rows`, three alternated
            // runs: 695-947 -> 655-674 ns). Same rounding (nearest-even),
            // so the same bits.
            let f16_bits = |x: f32| {
                _mm_extract_epi16::<0>(_mm_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm_set_ss(x)))
                    as u16
            };
            b[0..2].copy_from_slice(&f16_bits(d).to_le_bytes());
            if with_sum {
                let s =
                    _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
                let sum = hsum_epi32(s);
                b[2..4].copy_from_slice(&f16_bits(d * sum as f32).to_le_bytes());
            }
            let packed = _mm256_packs_epi16(
                _mm256_packs_epi32(q[0], q[1]),
                _mm256_packs_epi32(q[2], q[3]),
            );
            let ordered =
                _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            _mm256_storeu_si256(b.as_mut_ptr().add(qs_at) as *mut __m256i, ordered);
        }
    }
}
