//! The one-query path's AVX-512 build: its entry point, its 512-bit
//! registers for the shared body, and the kernels only it has (the vector
//! first softmax pass, glibc's `expf` eight lanes at a time, sixteen keys'
//! dot products at once).

use std::ops::Range;

use super::x86::{heads_x86, prefetch_halves, F16Block, KV_PREFETCH};
use super::Query;

/// [`heads_avx2`](super::avx2::heads_avx2) with AVX-512: each step over 16 lanes instead of 8 (the
/// 32 registers hold four heads' accumulators); every lane's operations are
/// the same.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
pub(super) unsafe fn heads_avx512(
    x: &Query<'_>,
    h0: usize,
    dst: &mut [f32],
    stats: Option<&mut [(f32, f32)]>,
) {
    // SAFETY: AVX2, FMA, F16C and AVX-512 F/BW/VL are enabled here.
    unsafe { heads_x86::<true>(x, h0, dst, stats) }
}

#[cfg(target_arch = "x86_64")]
impl F16Block for std::arch::x86_64::__m512 {
    type Block = [Self; 4];
    const LANES: usize = 16;
    #[inline(always)]
    unsafe fn zero_block() -> Self::Block {
        // SAFETY (all methods): the caller has AVX-512 F/BW/VL; the
        // pointers cover LANES elements (the callers' contract).
        unsafe { [std::arch::x86_64::_mm512_setzero_ps(); 4] }
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> Self {
        unsafe { std::arch::x86_64::_mm512_set1_ps(x) }
    }
    #[inline(always)]
    unsafe fn load_f16(p: *const u16) -> Self {
        use std::arch::x86_64::*;
        unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i)) }
    }
    #[inline(always)]
    unsafe fn mul_round(a: Self, f: Self) -> Self {
        use std::arch::x86_64::*;
        unsafe {
            _mm512_cvtph_ps(_mm512_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm512_mul_ps(
                a, f,
            )))
        }
    }
    #[inline(always)]
    unsafe fn fma_round(x: Self, w: Self, a: Self) -> Self {
        use std::arch::x86_64::*;
        unsafe {
            _mm512_cvtph_ps(_mm512_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(
                _mm512_fmadd_ps(x, w, a),
            ))
        }
    }
    #[inline(always)]
    unsafe fn store_scaled(self, p: *mut f32, s: f32) {
        use std::arch::x86_64::*;
        unsafe { _mm512_storeu_ps(p, _mm512_mul_ps(self, _mm512_set1_ps(s))) }
    }
}

/// The softmax's first pass for one head, sixteen keys at a time: each
/// score (`dot * scale`), whether it rises above the running maximum
/// before it, and its exponent argument (`max - score` where it rises,
/// else `score - max`), exactly as the key-by-key loop: the maximum before
/// each key comes from a prefix maximum in four shift-and-max steps, the
/// earlier value kept on ties (so a -0 and a +0 keep the first, as the
/// compare does) and a NaN score never taken (it never rises).
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
pub(super) unsafe fn running_max_avx512(
    dots: &[f32],
    scale: f32,
    args: &mut [f32],
    rises: &mut [bool],
) {
    use std::arch::x86_64::*;
    let n = dots.len();
    assert!(
        args.len() == n && rises.len() == n,
        "one argument per score"
    );
    let ninf = _mm512_set1_ps(f32::NEG_INFINITY);
    let lanes = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    // Lane i takes lane i - s (lanes below s: -inf).
    let back = |s: i32| {
        (
            _mm512_sub_epi32(lanes, _mm512_set1_epi32(s)),
            !((1u16 << s) - 1),
        )
    };
    let shifts = [back(1), back(2), back(4), back(8)];
    let mut m = f32::NEG_INFINITY;
    let whole = n / 16 * 16;
    for c in (0..whole).step_by(16) {
        // SAFETY: c + 16 <= n for all three slices (asserted lengths).
        unsafe {
            let sc = _mm512_mul_ps(_mm512_loadu_ps(dots.as_ptr().add(c)), _mm512_set1_ps(scale));
            let nan = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(sc, sc);
            // `max_ps(later, earlier)` returns `earlier` on ties.
            let mut p = _mm512_mask_mov_ps(sc, nan, ninf);
            for &(idx, keep) in &shifts {
                p = _mm512_max_ps(p, _mm512_mask_permutexvar_ps(ninf, keep, idx, p));
            }
            let (idx1, keep1) = shifts[0];
            let before = _mm512_max_ps(
                _mm512_mask_permutexvar_ps(ninf, keep1, idx1, p),
                _mm512_set1_ps(m),
            );
            let rise = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(sc, before);
            let a = _mm512_mask_mov_ps(_mm512_sub_ps(sc, before), rise, _mm512_sub_ps(before, sc));
            _mm512_storeu_ps(args.as_mut_ptr().add(c), a);
            let flags = _mm_and_si128(_mm_movm_epi8(rise), _mm_set1_epi8(1));
            // A bool is one byte, 0 or 1.
            _mm_storeu_si128(rises.as_mut_ptr().add(c) as *mut __m128i, flags);
            let last = _mm512_cvtss_f32(_mm512_permutexvar_ps(_mm512_set1_epi32(15), p));
            if last > m {
                m = last;
            }
        }
    }
    running_max_from(
        m,
        &dots[whole..],
        scale,
        &mut args[whole..],
        &mut rises[whole..],
    );
}

/// The softmax's first pass key by key, from running maximum `m`: each
/// score `dot * scale`, whether it rises above the maximum before it, and
/// its exponent argument (`max - score` where it rises, else
/// `score - max`); returns the maximum after the last.
#[cfg(target_arch = "x86_64")]
fn running_max_from(
    mut m: f32,
    dots: &[f32],
    scale: f32,
    args: &mut [f32],
    rises: &mut [bool],
) -> f32 {
    for ((&dot, a), r) in dots.iter().zip(args.iter_mut()).zip(rises.iter_mut()) {
        let sc = dot * scale;
        *r = sc > m;
        if *r {
            *a = m - sc;
            m = sc;
        } else {
            *a = sc - m;
        }
    }
    m
}

/// glibc's `expf` (its FMA build, which this CPU's libm runs; the
/// algorithm of glibc 2.27+), eight lanes at a time, for arguments <= 0 or
/// NaN, as the softmax passes them: 2^(k/32) from a table times a cubic in
/// the remainder, in f64, rounded once to f32; below the smallest argument
/// with a nonzero result, 0. The same bits as the libm call for every such
/// argument (checked exhaustively when written; the tests compare a sample).
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
unsafe fn expf8_avx512(x: std::arch::x86_64::__m256) -> std::arch::x86_64::__m256 {
    use std::arch::x86_64::*;
    // 32/ln2, the shift that rounds to an integer in the low mantissa
    // bits, and the cubic's coefficients (scaled by 1/32 per power).
    let inv_ln2_n = _mm512_set1_pd(f64::from_bits(0x4047_1547_652b_82fe));
    let shift = _mm512_set1_pd(f64::from_bits(0x4338_0000_0000_0000));
    let c0 = _mm512_set1_pd(f64::from_bits(0x3ebc_6af8_4b91_2394));
    let c1 = _mm512_set1_pd(f64::from_bits(0x3f2e_bfce_50fa_c4f3));
    let c2 = _mm512_set1_pd(f64::from_bits(0x3f96_2e42_ff0c_52d6));
    let t = |i: usize| {
        // SAFETY: EXP2F_TABLE holds 32 entries; 8 are read from i <= 24.
        unsafe { _mm512_loadu_si512(EXP2F_TABLE.as_ptr().add(i) as *const __m512i) }
    };
    let xd = _mm512_cvtps_pd(x);
    let k = _mm512_fmadd_pd(inv_ln2_n, xd, shift);
    let ki = _mm512_castpd_si512(k);
    let kd = _mm512_sub_pd(k, shift);
    let r = _mm512_fmadd_pd(inv_ln2_n, xd, _mm512_sub_pd(_mm512_setzero_pd(), kd));
    // Table entry k mod 32: entries 0-15 and 16-31 by two two-register
    // permutes (four index bits each), the fifth bit choosing.
    let low = _mm512_permutex2var_epi64(t(0), ki, t(8));
    let high = _mm512_permutex2var_epi64(t(16), ki, t(24));
    let upper = _mm512_test_epi64_mask(ki, _mm512_set1_epi64(16));
    let tab = _mm512_mask_blend_epi64(upper, low, high);
    let scale = _mm512_castsi512_pd(_mm512_add_epi64(tab, _mm512_slli_epi64::<47>(ki)));
    let z = _mm512_fmadd_pd(c0, r, c1);
    let r2 = _mm512_mul_pd(r, r);
    let y = _mm512_fmadd_pd(c2, r, _mm512_set1_pd(1.0));
    let y = _mm512_mul_pd(_mm512_fmadd_pd(z, r2, y), scale);
    let out = _mm512_cvtpd_ps(y);
    // Below log(2^-150) glibc returns 0 (the argument -inf included).
    let lo = _mm256_set1_ps(f32::from_bits(0xc2cf_f1b4));
    let under = _mm256_cmp_ps_mask::<_CMP_LT_OQ>(x, lo);
    _mm256_mask_mov_ps(out, under, _mm256_setzero_ps())
}

/// 2^(i/32) for i in 0..32 as f64 bits, less i << 47 (the exponent that
/// [`expf8_avx512`] adds back with k's integer part).
#[cfg(target_arch = "x86_64")]
const EXP2F_TABLE: [u64; 32] = [
    0x3ff0000000000000,
    0x3fefd9b0d3158574,
    0x3fefb5586cf9890f,
    0x3fef9301d0125b51,
    0x3fef72b83c7d517b,
    0x3fef54873168b9aa,
    0x3fef387a6e756238,
    0x3fef1e9df51fdee1,
    0x3fef06fe0a31b715,
    0x3feef1a7373aa9cb,
    0x3feedea64c123422,
    0x3feece086061892d,
    0x3feebfdad5362a27,
    0x3feeb42b569d4f82,
    0x3feeab07dd485429,
    0x3feea47eb03a5585,
    0x3feea09e667f3bcd,
    0x3fee9f75e8ec5f74,
    0x3feea11473eb0187,
    0x3feea589994cce13,
    0x3feeace5422aa0db,
    0x3feeb737b0cdc5e5,
    0x3feec49182a3f090,
    0x3feed503b23e255d,
    0x3feee89f995ad3ad,
    0x3feeff76f2fb5e47,
    0x3fef199bdd85529c,
    0x3fef3720dcef9069,
    0x3fef5818dcfba487,
    0x3fef7c97337b9b5f,
    0x3fefa4afa2a490da,
    0x3fefd0765b6e4540,
];

/// `exps[i] = args[i].exp()` for the softmax's arguments: [`expf8_avx512`]
/// eight at a time, the libm call for the last few.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
pub(super) unsafe fn expf_rows_avx512(args: &[f32], exps: &mut [f32]) {
    use std::arch::x86_64::*;
    assert_eq!(args.len(), exps.len(), "one result per argument");
    let mut a = args.chunks_exact(8);
    let mut e = exps.chunks_exact_mut(8);
    for (a, e) in (&mut a).zip(&mut e) {
        // SAFETY: both chunks hold 8 floats; AVX-512 is enabled here.
        unsafe {
            let v = expf8_avx512(_mm256_loadu_ps(a.as_ptr()));
            _mm256_storeu_ps(e.as_mut_ptr(), v);
        }
    }
    for (e, a) in e.into_remainder().iter_mut().zip(a.remainder()) {
        *e = a.exp();
    }
}

/// [`f16_dot32`](super::avx2::f16_dot32) over 16 lanes: one accumulator holds the lanes of the
/// narrow version's first two, the other its last two, so every lane's
/// chain and the reduction are the same.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
pub(super) unsafe fn f16_dot32_avx512(a: &[u16], b: &[u16]) -> f32 {
    use std::arch::x86_64::*;
    assert!(a.len() == b.len() && a.len().is_multiple_of(32));
    let ph16 = |x: &[u16], i: usize| {
        // SAFETY: i + 16 <= len (the loop below steps within the length).
        unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(x.as_ptr().add(i) as *const __m256i)) }
    };
    let (mut lo, mut hi) = (_mm512_setzero_ps(), _mm512_setzero_ps());
    for i in (0..a.len()).step_by(32) {
        lo = _mm512_fmadd_ps(ph16(a, i), ph16(b, i), lo);
        hi = _mm512_fmadd_ps(ph16(a, i + 16), ph16(b, i + 16), hi);
    }
    // (a0 + a2) and (a1 + a3) side by side, then their sum.
    let pair = _mm512_add_ps(lo, hi);
    let x = _mm256_add_ps(
        _mm512_castps512_ps256(pair),
        _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(pair))),
    );
    let t = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps::<1>(x));
    let u = _mm_add_ps(t, _mm_movehdup_ps(t));
    _mm_cvtss_f32(_mm_add_ss(u, _mm_movehl_ps(u, u)))
}

/// The dot products of `H` heads' f16 queries (`q16`, `dk` each) with the
/// keys at rows `keys` (offset `off` in rows of `k_w`), sixteen keys at a
/// time, key i of them into `dots[h * stride + base + i]` (`stride`: the
/// dots' length per head); returns how many keys it did (a
/// multiple of 16, the rest left to the caller). Every key's lanes run
/// `f16_dot32_avx512`'s steps and its reduction's pairings (the 256-bit
/// halves, then the 128-bit quarters, then lanes 0 + 1 and 2 + 3, then
/// those two), done for sixteen keys by shuffles across registers instead
/// of within each: the same bits at a third of the instructions, with each
/// key row converted once for all the heads and the query once per call.
/// The caller has AVX-512 F/BW/VL, `dk` is a multiple of 32 and the key
/// rows are within `kc`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn dots16_avx512<const H: usize>(
    kc: &[u16],
    k_w: usize,
    off: usize,
    keys: Range<usize>,
    q16: &[u16],
    dk: usize,
    dots: &mut [f32],
    base: usize,
) -> usize {
    let (lo, nk) = (keys.start, keys.len());
    let stride = dots.len() / H;
    assert!(dk.is_multiple_of(32) && q16.len() == H * dk && base + nk <= stride);
    let blocks = nk / 16;
    if blocks == 0 {
        return 0;
    }
    assert!(
        (lo + 16 * blocks - 1) * k_w + off + dk <= kc.len(),
        "key rows"
    );
    // SAFETY: the asserts above cover every load and store; the caller has
    // AVX-512 F/BW/VL.
    unsafe {
        match dk / 32 {
            2 => dots16_body::<H, 2>(kc, k_w, off, lo, blocks, q16, dots, stride, base),
            4 => dots16_body::<H, 4>(kc, k_w, off, lo, blocks, q16, dots, stride, base),
            8 => dots16_body::<H, 8>(kc, k_w, off, lo, blocks, q16, dots, stride, base),
            // Other widths key by key (the caller's loop).
            _ => return 0,
        }
    }
    16 * blocks
}

/// [`dots16_avx512`]'s loop for `S` = dk / 32: the query's registers in a
/// fixed array and the key rows read through raw pointers, so the loop is
/// loads, conversions and multiply-adds alone (slice indexing with the
/// width known only at run time left a score of bounds checks per key).
/// The caller checked that `blocks` blocks of sixteen key rows from row
/// `lo` lie within `kc`, that `q16` holds `H * 32 * S` halves and that
/// each head's `base + 16 * blocks` dots fit in its `stride`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn dots16_body<const H: usize, const S: usize>(
    kc: &[u16],
    k_w: usize,
    off: usize,
    lo: usize,
    blocks: usize,
    q16: &[u16],
    dots: &mut [f32],
    stride: usize,
    base: usize,
) {
    use std::arch::x86_64::*;
    // SAFETY (the block): the caller's checks cover every load and store.
    unsafe {
        let qf: [[[__m512; 2]; S]; H] = std::array::from_fn(|hh| {
            std::array::from_fn(|st| {
                std::array::from_fn(|x| {
                    let at = q16.as_ptr().add(hh * 32 * S + 32 * st + 16 * x);
                    _mm512_cvtph_ps(_mm256_loadu_si256(at as *const __m256i))
                })
            })
        });
        // Lane 4c + e of the reduction holds key 4e + c.
        let order = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
        // Each head's sixteen keys, each key's two accumulators added.
        let mut pairs = [[_mm512_setzero_ps(); 16]; H];
        let kp = kc.as_ptr();
        for b in 0..blocks {
            for kk in 0..16 {
                let j = lo + 16 * b + kk;
                let key = kp.add(j * k_w + off);
                prefetch_halves(kp.wrapping_add((j + KV_PREFETCH) * k_w + off), 32 * S);
                let mut acc = [[_mm512_setzero_ps(); 2]; H];
                for st in 0..S {
                    let klo =
                        _mm512_cvtph_ps(_mm256_loadu_si256(key.add(32 * st) as *const __m256i));
                    let khi = _mm512_cvtph_ps(_mm256_loadu_si256(
                        key.add(32 * st + 16) as *const __m256i
                    ));
                    for (a, q) in acc.iter_mut().zip(&qf) {
                        a[0] = _mm512_fmadd_ps(klo, q[st][0], a[0]);
                        a[1] = _mm512_fmadd_ps(khi, q[st][1], a[1]);
                    }
                }
                for (ph, a) in pairs.iter_mut().zip(&acc) {
                    ph[kk] = _mm512_add_ps(a[0], a[1]);
                }
            }
            for (hh, p) in pairs.iter().enumerate() {
                // Halves: [key 2m's 8 | key 2m+1's 8].
                let v: [__m512; 8] = std::array::from_fn(|m| {
                    let (x, y) = (p[2 * m], p[2 * m + 1]);
                    _mm512_add_ps(
                        _mm512_shuffle_f32x4::<0b01_00_01_00>(x, y),
                        _mm512_shuffle_f32x4::<0b11_10_11_10>(x, y),
                    )
                });
                // Quarters: keys 4m .. 4m + 3, four lanes each.
                let w: [__m512; 4] = std::array::from_fn(|m| {
                    let (x, y) = (v[2 * m], v[2 * m + 1]);
                    _mm512_add_ps(
                        _mm512_shuffle_f32x4::<0b10_00_10_00>(x, y),
                        _mm512_shuffle_f32x4::<0b11_01_11_01>(x, y),
                    )
                });
                // Lanes 0 + 1 and 2 + 3, then those two.
                let z: [__m512; 2] = std::array::from_fn(|n| {
                    let (x, y) = (w[2 * n], w[2 * n + 1]);
                    _mm512_add_ps(
                        _mm512_shuffle_ps::<0b10_00_10_00>(x, y),
                        _mm512_shuffle_ps::<0b11_01_11_01>(x, y),
                    )
                });
                let r = _mm512_add_ps(
                    _mm512_shuffle_ps::<0b10_00_10_00>(z[0], z[1]),
                    _mm512_shuffle_ps::<0b11_01_11_01>(z[0], z[1]),
                );
                _mm512_storeu_ps(
                    dots.as_mut_ptr().add(hh * stride + base + 16 * b),
                    _mm512_permutexvar_ps(order, r),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The vector first softmax pass against the key-by-key loop on scores
    /// with ties of equal values and of -0/+0, NaN, infinities and every
    /// tail length: the same arguments (bits) and rises.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn running_max_avx512_equals_the_key_by_key_pass() {
        if !kestrel_quant::avx512_in_use() {
            eprintln!("no AVX-512 here: nothing to compare");
            return;
        }
        let mut st = 0x1234_5678u32;
        let specials = [
            0.0f32,
            -0.0,
            1.5,
            1.5,
            f32::NAN,
            f32::NEG_INFINITY,
            f32::INFINITY,
            -3.0,
        ];
        // Also runs of signed zeros after a negative start: the maximum is
        // a zero that ties with the other, and which one it keeps shows in
        // the sign of the next arguments.
        let zeros = [-0.0f32, 0.0];
        for (n, zero_runs) in (0..70)
            .map(|n| (n, false))
            .chain((1..40).map(|n| (n, true)))
        {
            let dots: Vec<f32> = (0..n)
                .map(|k| {
                    st ^= st << 13;
                    st ^= st >> 17;
                    st ^= st << 5;
                    if zero_runs {
                        if k == 0 {
                            -1.0
                        } else {
                            zeros[(st >> 8) as usize % 2]
                        }
                    } else if st.is_multiple_of(3) {
                        specials[(st >> 8) as usize % specials.len()]
                    } else {
                        (st % 1000) as f32 / 100.0 - 5.0
                    }
                })
                .collect();
            let scale = 0.7;
            let (mut want_a, mut want_r) = (vec![0f32; n], vec![false; n]);
            running_max_from(f32::NEG_INFINITY, &dots, scale, &mut want_a, &mut want_r);
            let (mut a, mut r) = (vec![0f32; n], vec![false; n]);
            // SAFETY: AVX-512 F/BW/VL (with AVX2) were detected above.
            unsafe { running_max_avx512(&dots, scale, &mut a, &mut r) };
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&a), bits(&want_a), "arguments, n = {n}: {dots:?}");
            assert_eq!(r, want_r, "rises, n = {n}");
        }
    }

    /// The eight-lane exp against libm's for softmax arguments: every
    /// 61st float from -0 down past the underflow bound (the rest were
    /// checked exhaustively when it was written), the bound's neighbours,
    /// -inf and NaN.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn expf8_equals_libm_expf() {
        if !kestrel_quant::avx512_in_use() {
            eprintln!("no AVX-512 here: nothing to compare");
            return;
        }
        let bound = 0xc2cf_f1b4u32;
        let mut xs: Vec<f32> = (0x8000_0000u32..bound + 1000)
            .step_by(61)
            .map(f32::from_bits)
            .collect();
        xs.extend((bound - 3..bound + 3).map(f32::from_bits));
        xs.extend([f32::NEG_INFINITY, -0.0, 0.0, -1e-30, -88.0, -87.5]);
        // The one argument where the remainder's fused multiply-add (as
        // glibc's FMA build computes it) changes the result.
        xs.push(f32::from_bits(0xc27c_65d9));
        while xs.len() % 8 != 3 {
            xs.push(-1.5);
        }
        let mut got = vec![0f32; xs.len()];
        // SAFETY: AVX-512 F/BW/VL (with AVX2) were detected above.
        unsafe { expf_rows_avx512(&xs, &mut got) };
        for (x, g) in xs.iter().zip(&got) {
            assert_eq!(g.to_bits(), x.exp().to_bits(), "exp({x:e})");
        }
        let nan = [f32::NAN; 8];
        let mut out = [0f32; 8];
        // SAFETY: as above.
        unsafe { expf_rows_avx512(&nan, &mut out) };
        assert!(out.iter().all(|v| v.is_nan()), "NaN in, NaN out");
    }

    /// The table holds 2^(i/32) rounded to f64, less i << 47.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn exp2f_table_is_two_to_the_i_over_32() {
        for (i, &bits) in EXP2F_TABLE.iter().enumerate() {
            let v = f64::from_bits(bits + ((i as u64) << 47));
            let want = (i as f64 / 32.0).exp2();
            assert!(
                (v - want).abs() <= want * f64::EPSILON / 2.0,
                "entry {i}: {v} vs {want}"
            );
        }
    }
}
