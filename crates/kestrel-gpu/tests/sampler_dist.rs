//! The device sampler's draws follow the distribution the CPU chain
//! defines (`kestrel_sampling::distribution_with_history`): a chi-square
//! test at p = 1e-6 on draws made on the device, for four settings, each
//! with a positive control (the same counts against a plausibly wrong
//! distribution must be rejected), and the draws are the CPU sampler's,
//! token for token.

use kestrel_gpu::sample::Sampler;
use kestrel_gpu::Gpu;
use kestrel_sampling::{distribution_with_history, SamplerParams, XorShift};
use std::sync::{Mutex, OnceLock};

fn gpu() -> &'static Gpu {
    static GPU: OnceLock<Gpu> = OnceLock::new();
    GPU.get_or_init(|| Gpu::new().unwrap_or_else(|e| panic!("{e}")))
}

/// A step records into the device's one encoder, so tests that record
/// steps must not run at the same time.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

const ALPHA: f64 = 1e-6;
const DRAWS: usize = 2000;

fn logits() -> Vec<f32> {
    vec![
        2.0,
        1.5,
        1.5,
        1.0,
        0.5,
        0.3,
        0.0,
        -0.5,
        -1.0,
        f32::NAN,
        f32::NEG_INFINITY,
        1.2,
    ]
}

/// `DRAWS` tokens from the device with one generator and the same history
/// each time: every draw gets its own copy of the history in one buffer.
fn gpu_draws(logits: &[f32], history: &[u32], p: &SamplerParams) -> Vec<u32> {
    let g = gpu();
    let lb = g.upload_f32("logits", logits).unwrap();
    let stride = history.len() + 1;
    let mut hist = Vec::with_capacity(DRAWS * stride);
    for _ in 0..DRAWS {
        hist.extend_from_slice(history);
        hist.push(u32::MAX);
    }
    let hb = g.upload_u32("history", &hist).unwrap();
    let rng = Sampler::rng_buffer(g, XorShift::new(p.seed).state()).unwrap();
    let mut s = Sampler::new(g);
    for chunk in 0..DRAWS / 500 {
        g.begin_step();
        for i in chunk * 500..(chunk + 1) * 500 {
            let pos = i * stride + history.len();
            s.run(g, (&lb, &hb, &rng), logits.len(), pos, p).unwrap();
        }
        g.finish_step();
    }
    let out = g.read_u32(&hb, hist.len()).unwrap();
    (0..DRAWS)
        .map(|i| out[i * stride + history.len()])
        .collect()
}

fn ln_gamma_half(df: usize) -> f64 {
    // Γ(df/2) from Γ(1) = 1 or Γ(1/2) = √π, by Γ(a + 1) = a Γ(a).
    let (mut a, mut v) = if df.is_multiple_of(2) {
        (1.0, 0.0)
    } else {
        (0.5, std::f64::consts::PI.sqrt().ln())
    };
    while a < df as f64 / 2.0 {
        v += a.ln();
        a += 1.0;
    }
    v
}

/// Upper tail of the chi-square distribution: Q(df/2, x/2) by the series
/// (x/2 < df/2 + 1) or Lentz's continued fraction.
fn chi_square_p(x: f64, df: usize) -> f64 {
    if x <= 0.0 {
        return 1.0;
    }
    if !x.is_finite() {
        return 0.0;
    }
    let a = df as f64 / 2.0;
    let z = x / 2.0;
    let front = (a * z.ln() - z - ln_gamma_half(df)).exp();
    if z < a + 1.0 {
        let (mut term, mut sum, mut d) = (1.0 / a, 1.0 / a, a);
        for _ in 0..100_000 {
            d += 1.0;
            term *= z / d;
            sum += term;
            if term < sum * 1e-17 {
                break;
            }
        }
        (1.0 - front * sum).max(0.0)
    } else {
        let tiny = 1e-300;
        let mut b = z + 1.0 - a;
        let mut c = 1.0 / tiny;
        let mut d = 1.0 / b;
        let mut h = d;
        for i in 1..100_000 {
            let an = -(i as f64) * (i as f64 - a);
            b += 2.0;
            d = an * d + b;
            d = if d.abs() < tiny { tiny } else { d };
            c = b + an / c;
            c = if c.abs() < tiny { tiny } else { c };
            d = 1.0 / d;
            h *= d * c;
            if (d * c - 1.0).abs() < 1e-16 {
                break;
            }
        }
        front * h
    }
}

/// p-value of `draws` under `dist`: tokens expected at least 5 times get
/// a bin each, the rest share one; a token outside the distribution gives 0.
fn p_value(draws: &[u32], dist: &[(u32, f32)]) -> f64 {
    let n = draws.len() as f64;
    let mut bins: Vec<(Vec<u32>, f64)> = Vec::new();
    let mut rest = (Vec::new(), 0.0);
    for &(id, prob) in dist {
        if f64::from(prob) * n >= 5.0 {
            bins.push((vec![id], f64::from(prob) * n));
        } else {
            rest.0.push(id);
            rest.1 += f64::from(prob) * n;
        }
    }
    if rest.1 > 0.0 {
        bins.push(rest);
    }
    let mut stat = 0.0;
    let mut seen = 0usize;
    for (ids, expected) in &bins {
        let obs = draws.iter().filter(|t| ids.contains(t)).count();
        seen += obs;
        stat += (obs as f64 - expected).powi(2) / expected;
    }
    if seen != draws.len() {
        return 0.0;
    }
    chi_square_p(stat, bins.len().saturating_sub(1).max(1))
}

/// The device's draws: identical to the CPU sampler's, accepted against
/// the chain's distribution, and rejected against `wrong`.
fn check(
    tag: &str,
    history: &[u32],
    p: SamplerParams,
    wrong: SamplerParams,
    wrong_history: &[u32],
) {
    let _serial = serial();
    let logits = logits();
    let t = std::time::Instant::now();
    let draws = gpu_draws(&logits, history, &p);
    eprintln!("{tag}: {DRAWS} draws in {:?}", t.elapsed());
    let mut cpu = kestrel_sampling::Sampler::new(p.clone());
    let want: Vec<u32> = (0..DRAWS)
        .map(|_| cpu.sample_with_history(&logits, history))
        .collect();
    if let Some(i) = (0..DRAWS).find(|&i| draws[i] != want[i]) {
        panic!(
            "{tag}: draw {i} differs from the CPU sampler's: {} vs {}",
            draws[i], want[i]
        );
    }
    let dist = distribution_with_history(&p, &logits, history);
    assert!(
        dist.len() >= 3,
        "{tag}: a distribution worth testing: {dist:?}"
    );
    let pv = p_value(&draws, &dist);
    assert!(pv > ALPHA, "{tag}: p = {pv:e} against {dist:?}");
    let wrong = distribution_with_history(&wrong, &logits, wrong_history);
    let pw = p_value(&draws, &wrong);
    assert!(
        pw < ALPHA,
        "{tag}: the control must reject, p = {pw:e} against {wrong:?}"
    );
}

fn base(seed: u64) -> SamplerParams {
    SamplerParams {
        temperature: 1.0,
        top_k: 0,
        top_p: 1.0,
        min_p: 0.0,
        seed,
        ..SamplerParams::default()
    }
}

#[test]
fn chi_square_self_test() {
    // df 2: Q = exp(-x/2).
    for x in [0.5, 3.0, 9.0, 40.0] {
        assert!((chi_square_p(x, 2) / (-x / 2.0f64).exp() - 1.0).abs() < 1e-9);
    }
    // Published critical value: df 1, x 23.928 -> 1e-6.
    assert!((chi_square_p(23.928, 1) / 1e-6 - 1.0).abs() < 2e-3);
}

#[test]
fn temperature_only() {
    let p = SamplerParams {
        temperature: 0.7,
        ..base(101)
    };
    let wrong = SamplerParams {
        temperature: 1.0,
        ..p.clone()
    };
    check("temperature", &[], p, wrong, &[]);
}

#[test]
fn top_k() {
    let p = SamplerParams {
        top_k: 5,
        ..base(102)
    };
    let wrong = SamplerParams {
        top_k: 6,
        ..p.clone()
    };
    check("top-k", &[], p, wrong, &[]);
}

#[test]
fn top_p_and_temperature() {
    let p = SamplerParams {
        top_p: 0.8,
        temperature: 1.5,
        ..base(103)
    };
    let wrong = SamplerParams {
        top_p: 1.0,
        ..p.clone()
    };
    check("top-p", &[], p, wrong, &[]);
}

#[test]
fn min_p_penalties_and_bias() {
    let p = SamplerParams {
        min_p: 0.1,
        repeat_penalty: 1.3,
        repeat_last_n: 8,
        frequency_penalty: 0.2,
        presence_penalty: 0.1,
        logit_bias: vec![(0, -1.0), (7, 2.0), (10, 1.0)],
        ..base(104)
    };
    // The history's first entries fall outside the window of 8.
    let history = [4, 4, 4, 1, 1, 3, 11, 5, 2, 1, 6];
    check("min-p + penalties + bias", &history, p.clone(), p, &[]);
}
