//! Behavioural tests over the public API: quantize/dequantize round trips
//! with per-type error bounds, dot products against dequantized references,
//! and exact agreement with gguf-py's independent numpy dequantizers.

use kestrel_quant::{
    dequantize_row, quantize_activations, quantize_row, vec_dot, vec_dot_on, vec_dot_type, DotPath,
    GgmlType,
};

/// Tiny deterministic generator (xorshift64*), so tests need no rand crate.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in [-1, 1).
    fn signed(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
}

/// Test data: per 32-element run, uniform noise plus a random offset (to
/// exercise the minimum of affine formats) times a random power-of-two
/// magnitude (to exercise the scales).
fn data(rng: &mut Rng, n: usize) -> Vec<f32> {
    let mut x = Vec::with_capacity(n);
    while x.len() < n {
        let bias = 0.5 * rng.signed();
        let scale = 2f32.powi((rng.next_u64() % 9) as i32 - 4);
        for _ in 0..32 {
            x.push((rng.signed() + bias) * scale);
        }
    }
    x.truncate(n);
    x
}

/// Worst-case |dequantize(quantize(x)) - x| as a fraction of the max-abs of
/// the block (the 256-element super-block for K types). Derived from the
/// quantizers' construction, with a few percent of slack for half-rounded
/// scales:
/// - Q8_0/Q8_1: half a step of amax/127, plus half-rounding of d times 127.
/// - Q8_K: half a step of amax/127 (f32 scale).
/// - Q4_0/Q5_0: the largest-magnitude element maps to -8/-16, so an element
///   of the opposite sign and equal magnitude clamps at +7/+15: one full step.
/// - Q4_1/Q5_1: half a step of range/15 (range/31), range <= 2*amax.
/// - Q2_K/Q4_K/Q5_K: half a sub-block step (<= 2*amax/nmax, plus half a
///   super-block scale step), and Q2_K's coarse 4-bit scales can leave the top
///   of a sub-block clamped, which stays below that.
/// - Q3_K/Q6_K: like Q4_0: up to one sub-block step (amax/4, amax/32) plus
///   scale-quantization slack.
fn round_trip_bound(ty: GgmlType) -> f32 {
    match ty {
        GgmlType::F32 => 0.0,
        GgmlType::F16 => 1.0 / 2048.0,
        GgmlType::BF16 => 1.0 / 256.0,
        GgmlType::Q8_0 | GgmlType::Q8_1 => 0.5 / 127.0 + 1.0 / 2048.0,
        GgmlType::Q8_K => 0.5 / 127.0 + 1e-5,
        GgmlType::Q4_0 => 0.127,
        GgmlType::Q5_0 => 0.064,
        GgmlType::Q4_1 => 0.068,
        GgmlType::Q5_1 => 0.033,
        GgmlType::Q2_K => 0.35,
        GgmlType::Q3_K => 0.27,
        GgmlType::Q4_K => 0.07,
        GgmlType::Q5_K => 0.035,
        GgmlType::Q6_K => 0.036,
    }
}

fn dequant(ty: GgmlType, bytes: &[u8], n: usize) -> Vec<f32> {
    let mut out = vec![0.0; n];
    dequantize_row(ty, bytes, &mut out);
    out
}

fn quant(ty: GgmlType, x: &[f32]) -> Vec<u8> {
    let mut out = vec![0u8; ty.row_bytes(x.len() as u64).unwrap() as usize];
    quantize_row(ty, x, &mut out);
    out
}

/// Element counts: odd numbers of blocks (1, 3, 7).
fn lengths(ty: GgmlType) -> [usize; 3] {
    let bs = if ty.block_size() == 1 {
        32
    } else {
        ty.block_size()
    };
    [bs, 3 * bs, 7 * bs]
}

#[test]
fn round_trip_within_bound_for_every_type() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for ty in GgmlType::ALL {
        let bound = round_trip_bound(ty);
        for n in lengths(ty) {
            let x = data(&mut rng, n);
            let q = quant(ty, &x);
            let y = dequant(ty, &q, n);
            let group = ty.block_size().max(32);
            let mut worst = 0.0f32;
            for (xb, yb) in x.chunks(group).zip(y.chunks(group)) {
                let amax = xb.iter().fold(0.0f32, |m, v| m.max(v.abs()));
                for (a, b) in xb.iter().zip(yb) {
                    worst = worst.max((a - b).abs() / amax);
                }
            }
            assert!(
                worst <= bound,
                "{ty} n={n}: worst error {worst} of block max-abs exceeds {bound}"
            );
            // A bound that is never approached would hide a broken layout
            // behind a generous number; the round trip must also not be
            // trivially lossless for quantized types.
            if ty.block_size() > 1 {
                assert!(
                    worst > bound / 20.0,
                    "{ty} n={n}: suspiciously exact ({worst})"
                );
            }
        }
    }
}

#[test]
fn all_zero_blocks_stay_zero() {
    for ty in GgmlType::ALL {
        let n = lengths(ty)[1];
        let y = dequant(ty, &quant(ty, &vec![0.0; n]), n);
        assert!(y.iter().all(|&v| v == 0.0), "{ty}");
    }
}

/// Affine weights in ggml's `_1` formats dot against Q8_1's `s`, which is
/// half(d_f32 * sum(q)) rather than half(d) * sum(q) as the dequantized
/// activations imply. Returns the exact size of that deliberate difference,
/// sum over blocks of |m_w * (s_a - d_a * sum(q_a))|.
fn s_term_slack(ty: GgmlType, w: &[u8], a: &[u8]) -> f64 {
    if !matches!(ty, GgmlType::Q4_1 | GgmlType::Q5_1) {
        return 0.0;
    }
    let h = |b: &[u8], at: usize| {
        f64::from(kestrel_quant::f16_to_f32(u16::from_le_bytes([
            b[at],
            b[at + 1],
        ])))
    };
    w.chunks(ty.type_size())
        .zip(a.chunks(36))
        .map(|(bw, ba)| {
            let sum: i32 = ba[4..].iter().map(|&q| i32::from(q as i8)).sum();
            (h(bw, 2) * (h(ba, 2) - h(ba, 0) * f64::from(sum))).abs()
        })
        .sum()
}

#[test]
fn vec_dot_matches_dequantized_dot() {
    let mut rng = Rng(0x0123_4567_89ab_cdef);
    for ty in GgmlType::ALL {
        let at = vec_dot_type(ty);
        for n in lengths(ty) {
            let wx = data(&mut rng, n);
            let ax = data(&mut rng, n);
            let w = quant(ty, &wx);
            let a = quantize_activations(ty, &ax);
            assert_eq!(a.len() as u64, at.row_bytes(n as u64).unwrap(), "{ty}");
            let got = f64::from(vec_dot(ty, n, &w, &a));
            // Every kernel path's f32 order: the same tolerance applies.
            let paths = [DotPath::RepackGemv, DotPath::RepackGemm, DotPath::Tiled];
            let other: Vec<f64> = paths
                .iter()
                .map(|&p| f64::from(vec_dot_on(p, ty, n, &w, &a)))
                .collect();

            // Tight: the same quantities, dequantized and multiplied in f64.
            // Only f32 rounding separates the two (block scale products and
            // the running sum, a few ulps of the magnitude), plus the Q8_1
            // `s` rounding measured by s_term_slack.
            let wd = dequant(ty, &w, n);
            let ad = dequant(at, &a, n);
            let exact: f64 = wd
                .iter()
                .zip(&ad)
                .map(|(&p, &q)| f64::from(p) * f64::from(q))
                .sum();
            let mag: f64 = wd
                .iter()
                .zip(&ad)
                .map(|(&p, &q)| f64::from(p * q).abs())
                .sum();
            let tight = 2e-6 * mag + s_term_slack(ty, &w, &a);
            assert!(
                (got - exact).abs() <= tight,
                "{ty} n={n}: vec_dot {got} vs dequantized {exact} (tol {tight})"
            );
            for (p, v) in paths.iter().zip(&other) {
                assert!(
                    (v - exact).abs() <= tight,
                    "{ty} n={n} {p:?}: {v} vs dequantized {exact} (tol {tight})"
                );
            }

            // Loose: against the original f32 data. By Cauchy-Schwarz the
            // quantization error is at most |dw|*|a| + |w~|*|da|, and the
            // round-trip bounds give |dw| <= B_w * amax_w * sqrt(n).
            let plain: f64 = wx
                .iter()
                .zip(&ax)
                .map(|(&p, &q)| f64::from(p) * f64::from(q))
                .sum();
            let norm = |v: &[f32]| {
                v.iter()
                    .map(|&x| f64::from(x) * f64::from(x))
                    .sum::<f64>()
                    .sqrt()
            };
            let amax = |v: &[f32]| v.iter().fold(0.0f64, |m, &x| m.max(f64::from(x).abs()));
            let rn = (n as f64).sqrt();
            let loose = f64::from(round_trip_bound(ty)) * amax(&wx) * rn * norm(&ax)
                + f64::from(round_trip_bound(at)) * amax(&ax) * rn * norm(&wd)
                + tight;
            assert!(
                (got - plain).abs() <= loose,
                "{ty} n={n}: vec_dot {got} vs f32 dot {plain} (tol {loose})"
            );
        }
    }
}

#[test]
fn vec_dot_pairs_like_ggml() {
    use GgmlType::*;
    let pairs = [
        (F32, F32),
        (F16, F16),
        (BF16, BF16),
        (Q4_0, Q8_0),
        (Q5_0, Q8_0),
        (Q8_0, Q8_0),
        (Q4_1, Q8_1),
        (Q5_1, Q8_1),
        (Q2_K, Q8_K),
        (Q3_K, Q8_K),
        (Q4_K, Q8_K),
        (Q5_K, Q8_K),
        (Q6_K, Q8_K),
    ];
    for (w, a) in pairs {
        assert_eq!(vec_dot_type(w), a, "{w}");
    }
}

#[test]
fn f16_dot_uses_f16_activations() {
    // 1 + 2^-12 is not a half; the activation must be rounded to 1.0 first.
    let w = quant(GgmlType::F16, &[1.0; 32]);
    let a = quantize_activations(GgmlType::F16, &[1.0 + 1.0 / 4096.0; 32]);
    assert_eq!(vec_dot(GgmlType::F16, 32, &w, &a), 32.0);
}

#[test]
#[should_panic(expected = "not a whole number")]
fn dequantize_rejects_partial_blocks() {
    let mut out = vec![0.0; 40];
    dequantize_row(GgmlType::Q4_0, &[0u8; 18], &mut out);
}

#[test]
#[should_panic]
fn dequantize_rejects_wrong_byte_count() {
    let mut out = vec![0.0; 32];
    dequantize_row(GgmlType::Q4_0, &[0u8; 20], &mut out);
}

// ---------------------------------------------------------------------------
// gguf-py fixtures (see scripts/quant/gen_fixtures.py).
// ---------------------------------------------------------------------------

struct Case {
    kind: String,
    ty: GgmlType,
    n: usize,
    bytes: Vec<u8>,
    f32s: Vec<f32>,
}

fn hex_bytes(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn load_fixtures() -> Vec<Case> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/fixtures/quant/gguf_py.txt"
    );
    let text = std::fs::read_to_string(path).expect("fixture file");
    let mut cases = Vec::new();
    let mut lines = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty());
    while let Some(head) = lines.next() {
        let parts: Vec<&str> = head.split(' ').collect();
        assert_eq!(parts[0], "case", "malformed fixture line {head}");
        let ty = GgmlType::ALL
            .into_iter()
            .find(|t| t.name() == parts[2])
            .unwrap();
        let bytes = hex_bytes(lines.next().unwrap().strip_prefix("bytes ").unwrap());
        let f32s = lines
            .next()
            .unwrap()
            .strip_prefix("f32 ")
            .unwrap()
            .split(' ')
            .map(|h| f32::from_bits(u32::from_str_radix(h, 16).unwrap()))
            .collect();
        cases.push(Case {
            kind: parts[1].to_string(),
            ty,
            n: parts[3].parse().unwrap(),
            bytes,
            f32s,
        });
    }
    cases
}

#[test]
fn dequantize_matches_gguf_py_bit_for_bit() {
    let cases = load_fixtures();
    let mut seen = Vec::new();
    for c in cases.iter().filter(|c| c.kind == "dequant") {
        assert_eq!(c.f32s.len(), c.n);
        let got = dequant(c.ty, &c.bytes, c.n);
        for (i, (g, w)) in got.iter().zip(&c.f32s).enumerate() {
            assert_eq!(
                g.to_bits(),
                w.to_bits(),
                "{} element {i}: {g} vs gguf-py {w}",
                c.ty
            );
        }
        seen.push(c.ty);
    }
    use GgmlType::*;
    for ty in [
        F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K,
    ] {
        assert!(seen.contains(&ty), "no fixture for {ty}");
    }
}

/// gguf-py's Q8_0 quantizer follows ggml's portable reference: multiplier
/// 1/(amax/127) and ties rounded away from zero. Kestrel follows the x86
/// AVX2 path: multiplier 127/amax, ties to even. So the scales must agree
/// exactly and quants may differ by one only where the scaled value sits on
/// (or within float noise of) a .5 tie.
#[test]
fn q8_0_quantizer_agrees_with_gguf_py_except_ties() {
    let cases = load_fixtures();
    let c = cases
        .iter()
        .find(|c| c.kind == "quant" && c.ty == GgmlType::Q8_0)
        .unwrap();
    let ours = quant(GgmlType::Q8_0, &c.f32s);
    assert_eq!(ours.len(), c.bytes.len());
    let mut tie_diffs = 0;
    for (b, (xb, (ob, rb))) in c
        .f32s
        .chunks(32)
        .zip(ours.chunks(34).zip(c.bytes.chunks(34)))
        .enumerate()
    {
        assert_eq!(ob[..2], rb[..2], "block {b}: scale differs");
        let amax = xb.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        for j in 0..32 {
            let (o, r) = (ob[2 + j] as i8, rb[2 + j] as i8);
            if o != r {
                let v = xb[j] * (127.0 / amax);
                assert_eq!((i32::from(o) - i32::from(r)).abs(), 1, "block {b} elem {j}");
                assert!(
                    ((v.abs().fract()) - 0.5).abs() < 1e-4,
                    "block {b} elem {j}: {v} differs but is not at a tie"
                );
                // Ours is the even neighbour.
                assert_eq!(o % 2, 0, "block {b} elem {j}");
                tie_diffs += 1;
            }
        }
    }
    // The last fixture block holds 2.5, -2.5, 0.5, -0.5 (and 3.5, where both
    // rules agree on 4): exactly four deliberate differences come from it.
    assert!(
        tie_diffs >= 4,
        "expected the planted ties to differ, got {tie_diffs}"
    );
}
