//! Element-wise and row operations of the forward pass, written to compute
//! what ggml's CPU backend computes on x86-64 AVX2 (same rounding points and,
//! where it is cheap to follow, the same summation order), because greedy
//! parity with llama.cpp depends on it.

use kestrel_quant::{f16_to_f32, f32_to_f16};

/// RMSNorm with weight: y = (x * (1/sqrt(mean(x²) + eps))) * w.
/// The sum of squares is accumulated in f64, as ggml does.
#[inline]
pub fn rms_norm(x: &[f32], w: &[f32], eps: f32, y: &mut [f32]) {
    let scale = rms_scale(x, eps);
    for ((yi, &xi), &wi) in y.iter_mut().zip(x).zip(w) {
        *yi = xi * scale * wi;
    }
}

#[inline]
fn rms_scale(x: &[f32], eps: f32) -> f32 {
    let sum: f64 = x.iter().map(|&v| (v * v) as f64).sum();
    scale_of(sum, x.len(), eps)
}

#[inline]
fn scale_of(sum: f64, n: usize, eps: f32) -> f32 {
    let mean = (sum / n as f64) as f32;
    1.0 / (mean + eps).sqrt()
}

/// [`rms_scale`] of `N` rows at once: each row's sum is the same
/// sequential f64 sum (same bits), but the rows' sums advance side by
/// side. One row alone waits out the latency of each of its 576-896
/// dependent adds (~0.6-0.9 us a row), which a batch of decoding
/// sequences paid once per row, serially, twice a layer.
#[inline]
fn rms_scales<const N: usize>(rows: [&[f32]; N], eps: f32) -> [f32; N] {
    let n = rows[0].len();
    assert!(rows.iter().all(|r| r.len() == n), "rows of one width");
    let mut sums = [0f64; N];
    for i in 0..n {
        for (sum, row) in sums.iter_mut().zip(&rows) {
            *sum += (row[i] * row[i]) as f64;
        }
    }
    sums.map(|s| scale_of(s, n, eps))
}

/// The scales of up to four `e`-wide rows (`x`, one after another): four
/// rows' sums side by side, fewer one row at a time.
fn scales4(x: &[f32], e: usize, eps: f32) -> [f32; 4] {
    if x.len() == 4 * e {
        let r = |k: usize| &x[k * e..(k + 1) * e];
        return rms_scales([r(0), r(1), r(2), r(3)], eps);
    }
    let mut scales = [0f32; 4];
    for (s, row) in scales.iter_mut().zip(x.chunks_exact(e)) {
        *s = rms_scale(row, eps);
    }
    scales
}

/// [`rms_norm`] of each `w.len()`-wide row of `x` into `y` (the same bits
/// row by row), the sums of squares of four rows at a time side by side.
pub fn rms_norm_rows(x: &[f32], w: &[f32], eps: f32, y: &mut [f32]) {
    let e = w.len();
    assert!(
        e > 0 && x.len() == y.len() && x.len().is_multiple_of(e),
        "rows of the weight's width"
    );
    for (x4, y4) in x.chunks(4 * e).zip(y.chunks_mut(4 * e)) {
        let scales = scales4(x4, e, eps);
        for ((xr, yr), scale) in x4.chunks_exact(e).zip(y4.chunks_exact_mut(e)).zip(scales) {
            for ((yi, &xi), &wi) in yr.iter_mut().zip(xr).zip(w) {
                *yi = xi * scale * wi;
            }
        }
    }
}

/// [`rms_norm_rows`] in place (the same bits).
pub fn rms_norm_rows_inplace(x: &mut [f32], w: &[f32], eps: f32) {
    let e = w.len();
    assert!(
        e > 0 && x.len().is_multiple_of(e),
        "rows of the weight's width"
    );
    for x4 in x.chunks_mut(4 * e) {
        let scales = scales4(x4, e, eps);
        for (row, scale) in x4.chunks_exact_mut(e).zip(scales) {
            for (xi, &wi) in row.iter_mut().zip(w) {
                *xi = *xi * scale * wi;
            }
        }
    }
}

pub use kestrel_model::rope::rope_cache;

/// Rotates the first `n_rot` dims of one head. `neox` pairs (i, i + n_rot/2);
/// otherwise adjacent pairs (2i, 2i+1).
#[inline]
pub fn rope_apply(head: &mut [f32], cache: &[f32], n_rot: usize, neox: bool) {
    let half = n_rot / 2;
    for i in 0..half {
        let (c, s) = (cache[2 * i], cache[2 * i + 1]);
        let (a, b) = if neox {
            (i, i + half)
        } else {
            (2 * i, 2 * i + 1)
        };
        let x0 = head[a];
        let x1 = head[b];
        // ggml's compiler contracts these into fused multiply-adds (first
        // product fused, second rounded); doing the same keeps K bit-identical.
        head[a] = x0.mul_add(c, -(x1 * s));
        head[b] = x0.mul_add(s, x1 * c);
    }
}

/// exp(x) by ggml's AVX2 polynomial (`ggml_v_expf`), lane for lane, so that
/// SiLU matches llama.cpp bit for bit.
#[inline]
pub(crate) fn ggml_v_expf(x: f32) -> f32 {
    let r = f32::from_bits(0x4B40_0000); // 0x1.8p23
    let z = x.mul_add(f32::from_bits(0x3FB8_AA3B), r); // log2(e)
    let n = z - r;
    let b = (-n).mul_add(
        f32::from_bits(0x35BF_BE8E),                  // 0x1.7f7d1cp-20
        (-n).mul_add(f32::from_bits(0x3F31_7200), x), // 0x1.62e4p-1
    );
    let e = z.to_bits().wrapping_shl(23);
    let k = f32::from_bits(e.wrapping_add(1.0f32.to_bits()));
    let c = n.abs() > 126.0;
    let u = b * b;
    let j = f32::from_bits(0x3C07_2010)
        .mul_add(b, f32::from_bits(0x3D2B_9F17))
        .mul_add(
            u,
            f32::from_bits(0x3E2A_AF33).mul_add(b, f32::from_bits(0x3EFF_FEDB)),
        )
        .mul_add(u, f32::from_bits(0x3F7F_FFF6) * b);
    if !c {
        return j.mul_add(k, k);
    }
    let g: u32 = if n <= 0.0 { 0x8200_0000 } else { 0 };
    let s1 = f32::from_bits(g.wrapping_add(0x7F00_0000));
    let s2 = f32::from_bits(e.wrapping_sub(g));
    if n.abs() > 192.0 {
        s1 * s1
    } else {
        s2.mul_add(j, s2) * s1
    }
}

/// x[i] = ggml_v_expf(x[i] - m) for eight lanes (attention weights).
#[inline]
pub(crate) fn exp_minus8(x: &mut [f32; 8], m: f32) {
    #[cfg(target_arch = "x86_64")]
    if kestrel_quant::avx2_in_use() {
        // SAFETY: AVX2, FMA and F16C were detected.
        return unsafe { x86::exp_minus8(x, m) };
    }
    x.iter_mut().for_each(|v| *v = ggml_v_expf(*v - m));
}

/// SiLU as ggml's vectorised path computes it: x / (1 + exp(-x)).
#[inline]
pub fn silu(x: f32) -> f32 {
    x / (1.0 + ggml_v_expf(-x))
}

/// ggml's scalar SiLU for the tail of a row that is not a multiple of 8 lanes.
#[inline]
fn silu_scalar(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// y[i] = silu(gate[i]) * up[i], with ggml's split between 8-lane SIMD and scalar tail.
#[inline]
pub fn swiglu(gate: &[f32], up: &[f32], y: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if kestrel_quant::avx512_in_use() {
        // SAFETY: AVX-512 F (and AVX2, FMA, F16C) were detected.
        return unsafe { x86::swiglu_avx512(gate, up, y) };
    }
    #[cfg(target_arch = "x86_64")]
    if kestrel_quant::avx2_in_use() {
        // SAFETY: AVX2, FMA and F16C were detected.
        return unsafe { x86::swiglu(gate, up, y) };
    }
    swiglu_portable(gate, up, y)
}

/// [`swiglu`] one element at a time (the reference the AVX2 path matches).
#[inline]
pub fn swiglu_portable(gate: &[f32], up: &[f32], y: &mut [f32]) {
    let simd = gate.len() / 8 * 8;
    for i in 0..gate.len() {
        let s = if i < simd {
            silu(gate[i])
        } else {
            silu_scalar(gate[i])
        };
        y[i] = s * up[i];
    }
}

/// GELU (tanh form) as ggml computes it on the CPU: through a table indexed by
/// the f16 rounding of x, whose entries are f16-rounded.
#[inline]
pub fn gelu(x: f32) -> f32 {
    if x <= -10.0 {
        return 0.0;
    }
    if x >= 10.0 {
        return x;
    }
    f16_to_f32(gelu_table()[usize::from(f32_to_f16(x))])
}

/// ggml's GELU table (shared with the GPU backend).
fn gelu_table() -> &'static [u16] {
    kestrel_quant::gelu_f16_table()
}

/// y[i] = gelu(gate[i]) * up[i].
#[inline]
pub fn geglu(gate: &[f32], up: &[f32], y: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if kestrel_quant::avx2_in_use() {
        // SAFETY: AVX2, FMA and F16C were detected.
        return unsafe { x86::geglu(gate, up, y, gelu_table()) };
    }
    geglu_portable(gate, up, y)
}

/// [`geglu`] one element at a time (the reference the AVX2 path matches).
#[inline]
pub fn geglu_portable(gate: &[f32], up: &[f32], y: &mut [f32]) {
    for i in 0..gate.len() {
        y[i] = if gate[i] >= 10.0 {
            gate[i] * up[i]
        } else {
            gelu(gate[i]) * up[i]
        };
    }
}

/// Eight (or sixteen) lanes at a time: the same operations per element as
/// the portable functions above (ggml's vector expf and the f16 GELU
/// table), so results are bit-identical (tested below).
#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// `ggml_v_expf` on eight lanes, step for step as the scalar version.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn v_expf(x: __m256) -> __m256 {
        let f = |bits: u32| _mm256_set1_ps(f32::from_bits(bits));
        let r = f(0x4B40_0000);
        let z = _mm256_fmadd_ps(x, f(0x3FB8_AA3B), r);
        let n = _mm256_sub_ps(z, r);
        let b = _mm256_fnmadd_ps(n, f(0x35BF_BE8E), _mm256_fnmadd_ps(n, f(0x3F31_7200), x));
        let e = _mm256_slli_epi32::<23>(_mm256_castps_si256(z));
        let k = _mm256_castsi256_ps(_mm256_add_epi32(e, _mm256_set1_epi32(0x3F80_0000)));
        let abs_n = _mm256_andnot_ps(f(0x8000_0000), n);
        let c = _mm256_cmp_ps::<_CMP_GT_OQ>(abs_n, _mm256_set1_ps(126.0));
        let u = _mm256_mul_ps(b, b);
        let j = _mm256_fmadd_ps(
            _mm256_fmadd_ps(
                _mm256_fmadd_ps(f(0x3C07_2010), b, f(0x3D2B_9F17)),
                u,
                _mm256_fmadd_ps(f(0x3E2A_AF33), b, f(0x3EFF_FEDB)),
            ),
            u,
            _mm256_mul_ps(f(0x3F7F_FFF6), b),
        );
        let plain = _mm256_fmadd_ps(j, k, k);
        if _mm256_movemask_ps(c) == 0 {
            return plain;
        }
        let g = _mm256_and_si256(
            _mm256_castps_si256(_mm256_cmp_ps::<_CMP_LE_OQ>(n, _mm256_setzero_ps())),
            _mm256_set1_epi32(0x8200_0000u32 as i32),
        );
        let s1 = _mm256_castsi256_ps(_mm256_add_epi32(g, _mm256_set1_epi32(0x7F00_0000)));
        let s2 = _mm256_castsi256_ps(_mm256_sub_epi32(e, g));
        let huge = _mm256_cmp_ps::<_CMP_GT_OQ>(abs_n, _mm256_set1_ps(192.0));
        let wide = _mm256_blendv_ps(
            _mm256_mul_ps(_mm256_fmadd_ps(s2, j, s2), s1),
            _mm256_mul_ps(s1, s1),
            huge,
        );
        _mm256_blendv_ps(plain, wide, c)
    }

    /// See `super::exp_minus8`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn exp_minus8(x: &mut [f32; 8], m: f32) {
        // SAFETY: x holds 8 floats.
        unsafe {
            let v = _mm256_sub_ps(_mm256_loadu_ps(x.as_ptr()), _mm256_set1_ps(m));
            _mm256_storeu_ps(x.as_mut_ptr(), v_expf(v));
        }
    }

    /// See `super::swiglu`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn swiglu(gate: &[f32], up: &[f32], y: &mut [f32]) {
        let n = gate.len().min(up.len()).min(y.len());
        let simd = n / 8 * 8;
        let sign = _mm256_set1_ps(-0.0);
        for i in (0..simd).step_by(8) {
            // SAFETY: i + 8 <= n for all three slices.
            unsafe {
                let x = _mm256_loadu_ps(gate.as_ptr().add(i));
                let e = v_expf(_mm256_xor_ps(x, sign));
                let s = _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0), e));
                let u = _mm256_loadu_ps(up.as_ptr().add(i));
                _mm256_storeu_ps(y.as_mut_ptr().add(i), _mm256_mul_ps(s, u));
            }
        }
        super::swiglu_portable(&gate[simd..n], &up[simd..n], &mut y[simd..n]);
        // The portable tail treats its slice as all-tail (shorter than 8).
    }

    /// [`v_expf`] on sixteen lanes: every lane's operations are the eight-
    /// lane version's (compares into masks, blends by mask), so the same
    /// bits.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c,avx512f")]
    fn v_expf16(x: __m512) -> __m512 {
        let f = |bits: u32| _mm512_set1_ps(f32::from_bits(bits));
        let r = f(0x4B40_0000);
        let z = _mm512_fmadd_ps(x, f(0x3FB8_AA3B), r);
        let n = _mm512_sub_ps(z, r);
        let b = _mm512_fnmadd_ps(n, f(0x35BF_BE8E), _mm512_fnmadd_ps(n, f(0x3F31_7200), x));
        let e = _mm512_slli_epi32::<23>(_mm512_castps_si512(z));
        let k = _mm512_castsi512_ps(_mm512_add_epi32(e, _mm512_set1_epi32(0x3F80_0000)));
        let abs_n = _mm512_castsi512_ps(_mm512_andnot_si512(
            _mm512_set1_epi32(0x8000_0000u32 as i32),
            _mm512_castps_si512(n),
        ));
        let c = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(abs_n, _mm512_set1_ps(126.0));
        let u = _mm512_mul_ps(b, b);
        let j = _mm512_fmadd_ps(
            _mm512_fmadd_ps(
                _mm512_fmadd_ps(f(0x3C07_2010), b, f(0x3D2B_9F17)),
                u,
                _mm512_fmadd_ps(f(0x3E2A_AF33), b, f(0x3EFF_FEDB)),
            ),
            u,
            _mm512_mul_ps(f(0x3F7F_FFF6), b),
        );
        let plain = _mm512_fmadd_ps(j, k, k);
        if c == 0 {
            return plain;
        }
        let g = _mm512_maskz_mov_epi32(
            _mm512_cmp_ps_mask::<_CMP_LE_OQ>(n, _mm512_setzero_ps()),
            _mm512_set1_epi32(0x8200_0000u32 as i32),
        );
        let s1 = _mm512_castsi512_ps(_mm512_add_epi32(g, _mm512_set1_epi32(0x7F00_0000)));
        let s2 = _mm512_castsi512_ps(_mm512_sub_epi32(e, g));
        let huge = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(abs_n, _mm512_set1_ps(192.0));
        let wide = _mm512_mask_blend_ps(
            huge,
            _mm512_mul_ps(_mm512_fmadd_ps(s2, j, s2), s1),
            _mm512_mul_ps(s1, s1),
        );
        _mm512_mask_blend_ps(c, plain, wide)
    }

    /// [`swiglu`] sixteen lanes at a time (a SmolLM2 step's activations
    /// at four sequences: 6 us a layer with eight, on the leading worker
    /// while the others wait); a last group of eight goes as before.
    #[target_feature(enable = "avx2,fma,f16c,avx512f")]
    pub(super) unsafe fn swiglu_avx512(gate: &[f32], up: &[f32], y: &mut [f32]) {
        let n = gate.len().min(up.len()).min(y.len());
        let wide = n / 16 * 16;
        let sign = _mm512_set1_epi32(0x8000_0000u32 as i32);
        for i in (0..wide).step_by(16) {
            // SAFETY: i + 16 <= n for all three slices.
            unsafe {
                let x = _mm512_loadu_ps(gate.as_ptr().add(i));
                let neg = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(x), sign));
                let e = v_expf16(neg);
                let s = _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0), e));
                let u = _mm512_loadu_ps(up.as_ptr().add(i));
                _mm512_storeu_ps(y.as_mut_ptr().add(i), _mm512_mul_ps(s, u));
            }
        }
        // SAFETY: AVX2, FMA and F16C are enabled here.
        unsafe { swiglu(&gate[wide..n], &up[wide..n], &mut y[wide..n]) };
    }

    /// See `super::geglu`: the f16 rounding of eight inputs in one
    /// conversion, the table read per lane, the clamps as blends.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn geglu(gate: &[f32], up: &[f32], y: &mut [f32], table: &[u16]) {
        assert_eq!(table.len(), 1 << 16, "one entry per f16");
        let n = gate.len().min(up.len()).min(y.len());
        let simd = n / 8 * 8;
        for i in (0..simd).step_by(8) {
            // SAFETY: i + 8 <= n for all three slices.
            unsafe {
                let x = _mm256_loadu_ps(gate.as_ptr().add(i));
                let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(x);
                let mut idx = [0u16; 8];
                _mm_storeu_si128(idx.as_mut_ptr() as *mut __m128i, h);
                let looked = idx.map(|k| table[usize::from(k)]);
                let g = _mm256_cvtph_ps(_mm_loadu_si128(looked.as_ptr() as *const __m128i));
                let low = _mm256_cmp_ps::<_CMP_LE_OQ>(x, _mm256_set1_ps(-10.0));
                let high = _mm256_cmp_ps::<_CMP_GE_OQ>(x, _mm256_set1_ps(10.0));
                let g = _mm256_blendv_ps(_mm256_blendv_ps(g, _mm256_setzero_ps(), low), x, high);
                let u = _mm256_loadu_ps(up.as_ptr().add(i));
                _mm256_storeu_ps(y.as_mut_ptr().add(i), _mm256_mul_ps(g, u));
            }
        }
        super::geglu_portable(&gate[simd..n], &up[simd..n], &mut y[simd..n]);
    }
}

/// Softcapping: c · tanh(x / c).
#[inline]
pub fn softcap(x: &mut [f32], cap: f32) {
    for v in x {
        *v = (*v * (1.0 / cap)).tanh() * cap;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ggml_exp_is_close_to_exp() {
        let mut x = -80.0f32;
        while x < 80.0 {
            let want = x.exp();
            let got = ggml_v_expf(x);
            assert!(
                ((got - want) / want).abs() < 1e-6,
                "exp({x}): {got} vs {want}"
            );
            x += 0.37;
        }
        assert_eq!(ggml_v_expf(-200.0), 0.0);
        assert!(ggml_v_expf(200.0).is_infinite());
    }

    /// The SIMD GLUs (AVX2, and SwiGLU's AVX-512 where the CPU has it)
    /// against their portable twins, bit for bit, on random rows of odd
    /// lengths with values across exp's and the table's ranges (including
    /// the clamps at +-10 and the wide-exponent branch).
    #[test]
    fn simd_glus_equal_portable_bit_for_bit() {
        if !kestrel_quant::avx2_in_use() {
            eprintln!("no AVX2 here: nothing to compare");
            return;
        }
        let mut s = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        for n in [1usize, 7, 8, 9, 24, 64, 203, 1536] {
            for scale in [0.5f32, 4.0, 30.0, 200.0] {
                let mut gate: Vec<f32> = (0..n)
                    .map(|_| ((next() % 200_001) as f32 / 100_000.0 - 1.0) * scale)
                    .collect();
                if n > 3 {
                    gate[0] = 10.0;
                    gate[1] = -10.0;
                    gate[2] = -0.0;
                }
                let up: Vec<f32> = (0..n)
                    .map(|_| (next() % 20_001) as f32 / 1000.0 - 10.0)
                    .collect();
                let (mut a, mut b) = (vec![0f32; n], vec![0f32; n]);
                swiglu(&gate, &up, &mut a);
                swiglu_portable(&gate, &up, &mut b);
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&a), bits(&b), "swiglu n={n} scale={scale}");
                geglu(&gate, &up, &mut a);
                geglu_portable(&gate, &up, &mut b);
                assert_eq!(bits(&a), bits(&b), "geglu n={n} scale={scale}");
            }
        }
        for m in [0.0f32, 3.5, -200.0, f32::NEG_INFINITY.max(-1e30)] {
            for _ in 0..50 {
                let mut x: [f32; 8] =
                    std::array::from_fn(|_| (next() % 400_001) as f32 / 1000.0 - 200.0);
                x[7] = f32::NEG_INFINITY;
                let want = x.map(|v| ggml_v_expf(v - m));
                exp_minus8(&mut x, m);
                assert_eq!(
                    x.map(f32::to_bits),
                    want.map(f32::to_bits),
                    "exp_minus8 m={m}"
                );
            }
        }
    }

    #[test]
    fn silu_and_gelu_match_their_formulas() {
        for i in -50..50 {
            let x = i as f32 * 0.173;
            let s = x / (1.0 + (-x).exp());
            assert!((silu(x) - s).abs() < 1e-5, "silu({x})");
            let g = 0.5 * x * (1.0 + (0.797_884_6 * x * (1.0 + 0.044715 * x * x)).tanh());
            assert!((gelu(x) - g).abs() < 2e-2 * g.abs().max(0.05), "gelu({x})");
        }
    }

    #[test]
    fn dot_f16_matches_f64_dot() {
        let mut s = 1u32;
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s as f32 / u32::MAX as f32) * 2.0 - 1.0
        };
        for n in [1usize, 31, 32, 64, 100, 256] {
            let a: Vec<u16> = (0..n).map(|_| f32_to_f16(next())).collect();
            let b: Vec<u16> = (0..n).map(|_| f32_to_f16(next())).collect();
            let want: f64 = a
                .iter()
                .zip(&b)
                .map(|(&x, &y)| f16_to_f32(x) as f64 * f16_to_f32(y) as f64)
                .sum();
            let got = kestrel_quant::f16_dot(&a, &b) as f64;
            assert!(
                (got - want).abs() < 1e-5 * n as f64,
                "n={n}: {got} vs {want}"
            );
        }
    }

    /// Four rows' sums side by side give every row the bits of its own
    /// `rms_norm`, for batches that end in a partial group, rows of very
    /// different scales (where a mixed-up accumulator would show) and the
    /// in-place build.
    #[test]
    fn rms_norm_rows_equal_row_by_row_bits() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
        };
        for width in [3usize, 64, 576] {
            let w: Vec<f32> = (0..width).map(|_| next() + 1.0).collect();
            for rows in 1..=9usize {
                let x: Vec<f32> = (0..rows * width)
                    .map(|i| next() * 10f32.powi((i / width) as i32 % 4 - 2))
                    .collect();
                let mut want = vec![0f32; x.len()];
                for (xr, yr) in x.chunks_exact(width).zip(want.chunks_exact_mut(width)) {
                    rms_norm(xr, &w, 1e-6, yr);
                }
                let mut got = vec![0f32; x.len()];
                rms_norm_rows(&x, &w, 1e-6, &mut got);
                let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&got), bits(&want), "{rows} rows of {width}");
                let mut inplace = x.clone();
                rms_norm_rows_inplace(&mut inplace, &w, 1e-6);
                assert_eq!(
                    bits(&inplace),
                    bits(&want),
                    "in place, {rows} rows of {width}"
                );
            }
        }
    }

    #[test]
    fn rms_norm_unit_rms() {
        let x: Vec<f32> = (0..64).map(|i| (i as f32 - 30.0) * 0.1).collect();
        let w = vec![1.0; 64];
        let mut y = vec![0.0; 64];
        rms_norm(&x, &w, 0.0, &mut y);
        let ms: f32 = y.iter().map(|v| v * v).sum::<f32>() / 64.0;
        assert!((ms - 1.0).abs() < 1e-5);
    }

    #[test]
    fn rope_preserves_norm_and_position_zero_is_identity() {
        let mut cache = Vec::new();
        rope_cache(0, 8, 10000.0, 1.0, &mut cache);
        let mut h = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0];
        let orig = h;
        rope_apply(&mut h, &cache, 8, true);
        assert_eq!(h, orig);
        rope_cache(17, 8, 10000.0, 1.0, &mut cache);
        for neox in [false, true] {
            let mut h = orig;
            rope_apply(&mut h, &cache, 8, neox);
            let n0: f32 = orig.iter().map(|v| v * v).sum();
            let n1: f32 = h.iter().map(|v| v * v).sum();
            assert!((n0 - n1).abs() < 1e-3);
            assert_ne!(h, orig);
        }
    }
}
