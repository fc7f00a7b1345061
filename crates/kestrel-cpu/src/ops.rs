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

/// RMSNorm in place.
#[inline]
pub fn rms_norm_inplace(x: &mut [f32], w: &[f32], eps: f32) {
    let scale = rms_scale(x, eps);
    for (xi, &wi) in x.iter_mut().zip(w) {
        *xi = *xi * scale * wi;
    }
}

#[inline]
fn rms_scale(x: &[f32], eps: f32) -> f32 {
    let sum: f64 = x.iter().map(|&v| (v * v) as f64).sum();
    let mean = (sum / x.len() as f64) as f32;
    1.0 / (mean + eps).sqrt()
}

/// Precomputed cos/sin for one position: `cache[2i] = cos θ_i`, `cache[2i+1] = sin θ_i`,
/// with θ_i = pos · freq_scale · base^(-2i/n_rot), the power built by repeated
/// multiplication in f32 as ggml builds it.
#[inline]
pub fn rope_cache(pos: usize, n_rot: usize, base: f32, freq_scale: f32, cache: &mut Vec<f32>) {
    cache.clear();
    let theta_scale = base.powf(-2.0 / n_rot as f32);
    let mut theta = pos as f32;
    for _ in 0..n_rot / 2 {
        let t = freq_scale * theta;
        cache.push(t.cos());
        cache.push(t.sin());
        theta *= theta_scale;
    }
}

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

/// gelu of every f16 input, as f16 (ggml's table, built the same way once).
fn gelu_table() -> &'static [u16] {
    static TABLE: std::sync::OnceLock<Vec<u16>> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| (0..=u16::MAX).map(gelu_f16).collect())
}

/// The table entry for the f16 input `h`.
fn gelu_f16(h: u16) -> u16 {
    let xh = f16_to_f32(h);
    // ggml's constant, written in full so it rounds to the same f32.
    #[allow(clippy::excessive_precision)]
    const SQRT_2_OVER_PI: f32 = 0.797_884_560_802_865_4;
    const COEF_A: f32 = 0.044715;
    // ggml's table is built by code its compiler contracts: 1 + (a·x)·x is fused.
    let inner = (COEF_A * xh).mul_add(xh, 1.0);
    let g = 0.5 * xh * (1.0 + (SQRT_2_OVER_PI * xh * inner).tanh());
    f32_to_f16(g)
}

/// y[i] = gelu(gate[i]) * up[i].
#[inline]
pub fn geglu(gate: &[f32], up: &[f32], y: &mut [f32]) {
    for i in 0..gate.len() {
        y[i] = if gate[i] >= 10.0 {
            gate[i] * up[i]
        } else {
            gelu(gate[i]) * up[i]
        };
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
