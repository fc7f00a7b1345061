//! Behaviour of the reference sampler: greedy ties, filter semantics on hand-computed cases,
//! seeding, the generator's exact output, and chi-square agreement (at p = 1e-6, with positive
//! controls) of seeded draws with the distribution the chain should produce, penalties and
//! logit bias included.

use kestrel_sampling::{
    argmax, distribution, distribution_with_history, random_seed, unit_f32, Sampler, SamplerParams,
    XorShift,
};

fn params(temperature: f32, top_k: i32, top_p: f32, min_p: f32, seed: u64) -> SamplerParams {
    SamplerParams {
        temperature,
        top_k,
        top_p,
        min_p,
        seed,
        ..SamplerParams::default()
    }
}

/// Filters off, temperature 1.
fn plain(seed: u64) -> SamplerParams {
    params(1.0, 0, 1.0, 0.0, seed)
}

fn kept(p: &SamplerParams, logits: &[f32]) -> Vec<u32> {
    distribution(p, logits)
        .into_iter()
        .map(|(id, _)| id)
        .collect()
}

/// Logits whose softmax is exactly `probs` (up to rounding).
fn logits_of(probs: &[f64]) -> Vec<f32> {
    probs.iter().map(|p| p.ln() as f32).collect()
}

#[test]
fn argmax_takes_the_first_maximum() {
    assert_eq!(argmax(&[1.0, 3.0, 3.0, 2.0]), 1);
    assert_eq!(argmax(&[5.0, 5.0]), 0);
    assert_eq!(argmax(&[-2.0, -1.0, -1.0]), 1);
    assert_eq!(argmax(&[f32::NAN, 1.0, f32::NAN]), 1);
    assert_eq!(argmax(&[0.0, f32::INFINITY, f32::INFINITY]), 1);
    assert_eq!(argmax(&[f32::NEG_INFINITY, f32::NEG_INFINITY]), 0);
    assert_eq!(argmax(&[f32::NAN, f32::NAN, f32::NAN]), 0);
    assert_eq!(argmax(&[f32::NEG_INFINITY, f32::NAN, -1e30]), 2);
}

#[test]
fn greedy_is_argmax_and_does_not_draw() {
    for t in [0.0, -1.0, f32::NAN] {
        let mut s = Sampler::new(params(t, 40, 0.95, 0.05, 7));
        let before = s.rng().state();
        assert_eq!(s.sample(&[0.5, 2.0, 2.0, 1.0]), 1);
        assert_eq!(s.sample(&[f32::NAN, 0.0, 0.0]), 1);
        assert_eq!(s.sample(&[f32::NEG_INFINITY; 4]), 0);
        assert_eq!(
            s.rng().state(),
            before,
            "greedy must not advance the generator"
        );
    }
}

#[test]
fn top_k_one_is_greedy() {
    let mut rng = XorShift::new(123);
    for round in 0..200u64 {
        let n = 1 + (rng.next_u32() % 50) as usize;
        // Coarse values so that ties are common.
        let logits: Vec<f32> = (0..n).map(|_| (rng.next_u32() % 8) as f32).collect();
        let mut s = Sampler::new(params(1.3, 1, 0.9, 0.05, round));
        assert_eq!(s.sample(&logits), argmax(&logits), "{logits:?}");
    }
}

#[test]
fn same_seed_same_sequence_different_seed_different_sequence() {
    let logits: Vec<f32> = (0..64).map(|i| ((i * 37) % 11) as f32 * 0.3).collect();
    let run = |seed: u64| -> Vec<u32> {
        let mut s = Sampler::new(params(1.0, 0, 1.0, 0.0, seed));
        (0..100).map(|_| s.sample(&logits)).collect()
    };
    assert_eq!(run(42), run(42));
    assert_eq!(run(0), run(0));
    assert_ne!(run(42), run(43));
    assert_ne!(run(0), run(1));
    // A copied sampler continues identically.
    let mut a = Sampler::new(params(1.0, 0, 1.0, 0.0, 9));
    a.sample(&logits);
    let mut b = a.clone();
    let xs: Vec<u32> = (0..20).map(|_| a.sample(&logits)).collect();
    let ys: Vec<u32> = (0..20).map(|_| b.sample(&logits)).collect();
    assert_eq!(xs, ys);
}

#[test]
fn default_params_are_llama_cpp_with_a_fresh_seed() {
    let a = SamplerParams::default();
    let b = SamplerParams::default();
    assert_eq!(
        (a.temperature, a.top_k, a.top_p, a.min_p),
        (0.8, 40, 0.95, 0.05)
    );
    assert_eq!(
        (
            a.repeat_penalty,
            a.repeat_last_n,
            a.frequency_penalty,
            a.presence_penalty
        ),
        (1.0, 64, 0.0, 0.0)
    );
    assert!(a.logit_bias.is_empty());
    assert_ne!(a.seed, b.seed, "default seeds must not be a fixed value");
    let seeds: std::collections::HashSet<u64> = (0..1000).map(|_| random_seed()).collect();
    assert_eq!(seeds.len(), 1000);
    assert_eq!(SamplerParams::greedy().temperature, 0.0);
}

#[test]
fn xorshift_known_answers() {
    // splitmix64(0) = 0xE220A8397B1DCDAF is the published first output; the state words are
    // its low and high halves, then the second output's.
    let mut g = XorShift::new(0);
    assert_eq!(
        g.state(),
        [0x7B1D_CDAF, 0xE220_A839, 0xA1B9_65F4, 0x6E78_9E6A]
    );
    let out: Vec<u32> = (0..4).map(|_| g.next_u32()).collect();
    assert_eq!(out, [0xFB9D_56BF, 0x1C1B_4895, 0x76E7_1827, 0xDCC6_535F]);
    let mut g = XorShift::new(42);
    assert_eq!(
        g.state(),
        [0x2FEB_6E95, 0xBDD7_3226, 0xB266_F103, 0x28EF_E333]
    );
    let out: Vec<u32> = (0..4).map(|_| g.next_u32()).collect();
    assert_eq!(out, [0x5C04_BF7D, 0x5846_F0D9, 0xDD2D_FC3B, 0x8A8C_6AD6]);
    // The state can be handed over and continued.
    let mut h = XorShift::from_state(g.state());
    assert_eq!(h.next_u32(), g.next_u32());
    // next_f32 is the top 24 bits of next_u32.
    let mut a = XorShift::new(5);
    let mut b = XorShift::new(5);
    for _ in 0..1000 {
        let f = a.next_f32();
        assert_eq!(f, unit_f32(b.next_u32()));
        assert!((0.0..1.0).contains(&f));
    }
}

#[test]
fn top_p_semantics() {
    let logits = logits_of(&[0.2, 0.5, 0.3]); // sorted: 1 (0.5), 2 (0.3), 0 (0.2)
    let with_p = |p: f32| kept(&params(1.0, 0, p, 0.0, 1), &logits);
    assert_eq!(with_p(0.0), [1], "top-p 0 keeps one token");
    assert_eq!(with_p(-1.0), [1]);
    assert_eq!(with_p(0.3), [1]);
    assert_eq!(with_p(0.6), [1, 2]);
    assert_eq!(with_p(0.79), [1, 2]);
    assert_eq!(with_p(0.81), [1, 2, 0]);
    assert_eq!(with_p(1.0), [1, 2, 0], "top-p 1 keeps all");
    // top-p sees probabilities renormalised over top-k's survivors, as llama.cpp does:
    // 0.4/0.3/0.2/0.1, top-k 2 leaves 4/7 and 3/7, and 4/7 >= 0.55 already.
    let logits = logits_of(&[0.4, 0.3, 0.2, 0.1]);
    assert_eq!(kept(&params(1.0, 2, 0.55, 0.0, 1), &logits), [0]);
    assert_eq!(kept(&params(1.0, 0, 0.55, 0.0, 1), &logits), [0, 1]);
}

#[test]
fn min_p_semantics() {
    let logits = logits_of(&[0.2, 0.5, 0.3]);
    let with_min_p = |m: f32| kept(&params(1.0, 0, 1.0, m, 1), &logits);
    assert_eq!(with_min_p(0.0), [1, 2, 0]);
    assert_eq!(with_min_p(0.35), [1, 2, 0]); // 0.2 >= 0.175
    assert_eq!(with_min_p(0.5), [1, 2]); // 0.3 >= 0.25 > 0.2
    assert_eq!(with_min_p(0.7), [1]); // 0.3 < 0.35
    assert_eq!(with_min_p(1.0), [1], "min-p 1 keeps the maximum");
    // ... and every one of several tied maxima, in id order.
    let tied = [1.0, 3.0, 2.0, 3.0, 3.0];
    assert_eq!(kept(&params(1.0, 0, 1.0, 1.0, 1), &tied), [1, 3, 4]);
}

#[test]
fn top_k_semantics_and_tie_order() {
    let logits = [1.0, 3.0, 2.0, 3.0, 0.0, 2.0];
    let with_k = |k: i32| kept(&params(1.0, k, 1.0, 0.0, 1), &logits);
    assert_eq!(with_k(0), [1, 3, 2, 5, 0, 4]);
    assert_eq!(with_k(-3), [1, 3, 2, 5, 0, 4]);
    assert_eq!(with_k(1), [1]);
    assert_eq!(with_k(3), [1, 3, 2]); // the tie at 2.0 goes to the lower id
    assert_eq!(with_k(100), [1, 3, 2, 5, 0, 4]);
}

#[test]
fn filters_see_untempered_logits() {
    // probs 0.5/0.3/0.2; min-p 0.5 keeps two. At temperature 10 the tempered distribution is
    // nearly flat, so a filter applied after temperature would keep all three.
    let logits = logits_of(&[0.5, 0.3, 0.2]);
    let d = distribution(&params(10.0, 0, 1.0, 0.5, 1), &logits);
    assert_eq!(d.len(), 2);
    // Among the two survivors, temperature 10 flattens 0.5:0.3.
    let expected0 = 1.0 / (1.0 + (0.6f64).powf(0.1));
    assert!((f64::from(d[0].1) - expected0).abs() < 1e-5, "{d:?}");
    // Same for top-p: 0.5 >= 0.45 keeps one token regardless of temperature.
    assert_eq!(
        distribution(&params(10.0, 0, 0.45, 0.0, 1), &logits).len(),
        1
    );
}

#[test]
fn nan_and_infinities() {
    let logits = [f32::NAN, 0.0, f32::NEG_INFINITY, 0.0, f32::NAN];
    let mut s = Sampler::new(plain(3));
    for _ in 0..1000 {
        let t = s.sample(&logits);
        assert!(t == 1 || t == 3, "sampled {t}");
    }
    assert_eq!(kept(&plain(0), &logits), [1, 3]);
    // All -inf / NaN: token 0, and the generator still advances by one draw.
    let mut s = Sampler::new(plain(3));
    let mut g = XorShift::new(3);
    assert_eq!(s.sample(&[f32::NEG_INFINITY, f32::NAN]), 0);
    g.next_u32();
    assert_eq!(s.rng().state(), g.state());
    assert!(distribution(&plain(0), &[f32::NAN]).is_empty());
    // +inf dominates everything finite.
    let mut s = Sampler::new(plain(4));
    for _ in 0..100 {
        assert_eq!(s.sample(&[100.0, f32::INFINITY, 1e30]), 1);
    }
}

#[test]
fn one_draw_per_sample() {
    let logits = [0.1, 0.2, 0.3];
    let mut s = Sampler::new(plain(77));
    let mut g = XorShift::new(77);
    for _ in 0..10 {
        s.sample(&logits);
        g.next_u32();
    }
    assert_eq!(s.rng().state(), g.state());
}

// ---------------------------------------------------------------------------------------------
// Statistics: seeded draws against the exact filtered distribution.

/// Pearson chi-square of `counts` (indexed by token id) against expected probabilities; a
/// draw of a token the expectation gives no mass makes the statistic infinite.
fn chi_square(counts: &[u64], expected: &[(u32, f64)], n: u64) -> f64 {
    let mut stat = 0.0;
    for (id, &c) in counts.iter().enumerate() {
        match expected.iter().find(|(e, _)| *e as usize == id) {
            Some(&(_, p)) => {
                let e = p * n as f64;
                stat += (c as f64 - e).powi(2) / e;
            }
            None if c > 0 => return f64::INFINITY,
            None => {}
        }
    }
    stat
}

/// `ln Γ(df / 2)` for a whole number of degrees of freedom, by `Γ(a + 1) = a Γ(a)` from
/// `Γ(1) = 1` or `Γ(1/2) = √π` (exact up to rounding; no approximation needed).
fn ln_gamma_half(df: usize) -> f64 {
    let target = df as f64 / 2.0;
    // A bit test rather than is_multiple_of, which is newer than the workspace's rust-version.
    let (mut a, mut value) = if df & 1 == 0 {
        (1.0, 0.0)
    } else {
        (0.5, 0.5 * std::f64::consts::PI.ln())
    };
    while a < target {
        value += a.ln();
        a += 1.0;
    }
    value
}

/// Upper tail `P[X >= x]` of the chi-square distribution with `df >= 1` degrees of freedom:
/// the regularized upper incomplete gamma `Q(df/2, x/2)`, by its power series below
/// `a + 1` and by Legendre's continued fraction (modified Lentz) above.
fn chi_square_p_value(x: f64, df: usize) -> f64 {
    assert!(df >= 1);
    if x.is_infinite() {
        return 0.0;
    }
    if x <= 0.0 {
        return 1.0;
    }
    let a = df as f64 / 2.0;
    let z = x / 2.0;
    // ln(z^a e^-z / Γ(a))
    let ln_front = a * z.ln() - z - ln_gamma_half(df);
    if z < a + 1.0 {
        // P(a, z) = front * Σ z^n / (a (a+1) ... (a+n))
        let mut term = 1.0 / a;
        let mut sum = term;
        let mut denom = a;
        for _ in 0..100_000 {
            denom += 1.0;
            term *= z / denom;
            sum += term;
            if term < sum * 1e-17 {
                break;
            }
        }
        (1.0 - ln_front.exp() * sum).max(0.0)
    } else {
        // Q(a, z) = front / (z + 1 - a - 1(1-a)/(z + 3 - a - 2(2-a)/(z + 5 - a - ...)))
        let tiny = 1e-300;
        let mut b = z + 1.0 - a;
        let mut c = 1.0 / tiny;
        let mut d = 1.0 / b;
        let mut h = d;
        for i in 1..100_000 {
            let i = i as f64;
            let an = -i * (i - a);
            b += 2.0;
            d = an * d + b;
            if d.abs() < tiny {
                d = tiny;
            }
            c = b + an / c;
            if c.abs() < tiny {
                c = tiny;
            }
            d = 1.0 / d;
            let delta = d * c;
            h *= delta;
            if (delta - 1.0).abs() < 1e-16 {
                break;
            }
        }
        ln_front.exp() * h
    }
}

#[test]
fn chi_square_p_value_matches_closed_forms_and_tables() {
    // df 2: Q = exp(-x/2); df 4: Q = exp(-x/2) (1 + x/2). Both branches (x < df + 2 or not).
    for x in [0.1, 1.0, 3.9, 4.1, 10.0, 27.631, 60.0] {
        let q2 = chi_square_p_value(x, 2);
        let q4 = chi_square_p_value(x, 4);
        let e2 = (-x / 2.0f64).exp();
        let e4 = e2 * (1.0 + x / 2.0);
        assert!((q2 / e2 - 1.0).abs() < 1e-10, "df 2, x {x}: {q2} vs {e2}");
        assert!((q4 / e4 - 1.0).abs() < 1e-10, "df 4, x {x}: {q4} vs {e4}");
    }
    // Published critical values (odd df exercise the √π start of ln Γ).
    for (x, df, p) in [
        (10.828, 1, 1e-3),
        (23.928, 1, 1e-6),
        (16.266, 3, 1e-3),
        (3.841, 1, 0.05),
        (11.070, 5, 0.05),
        (29.588, 10, 1e-3),
        (18.307, 10, 0.05),
    ] {
        let q = chi_square_p_value(x, df);
        assert!((q / p - 1.0).abs() < 2e-3, "df {df}, x {x}: {q} vs {p}");
    }
    assert_eq!(chi_square_p_value(f64::INFINITY, 3), 0.0);
    assert_eq!(chi_square_p_value(0.0, 3), 1.0);
}

/// Significance of every chi-square test below: a correct sampler fails one of the (fixed-seed)
/// cases with probability about 1e-6, while the positive controls show the same counts reject
/// plausible mistakes.
const ALPHA: f64 = 1e-6;

const DRAWS: u64 = 100_000;

/// Softmax of `logits[ids] / temperature` in f64 — the exact filtered distribution when `ids`
/// are the tokens the filters should keep.
fn softmax_over(logits: &[f64], ids: &[u32], temperature: f64) -> Vec<(u32, f64)> {
    let w: Vec<f64> = ids
        .iter()
        .map(|&i| (logits[i as usize] / temperature).exp())
        .collect();
    let total: f64 = w.iter().sum();
    ids.iter().zip(w).map(|(&i, w)| (i, w / total)).collect()
}

/// `dist` with `delta` of probability moved from its first entry to its second.
fn shift(dist: &[(u32, f64)], delta: f64) -> Vec<(u32, f64)> {
    let mut d = dist.to_vec();
    d[0].1 -= delta;
    d[1].1 += delta;
    d
}

fn counts_for(p: SamplerParams, logits: &[f32], history: &[u32]) -> Vec<u64> {
    let mut s = Sampler::new(p);
    let mut counts = vec![0u64; logits.len()];
    for _ in 0..DRAWS {
        counts[s.sample_with_history(logits, history) as usize] += 1;
    }
    counts
}

#[test]
fn seeded_draws_follow_the_filtered_distribution() {
    // Finite part softmax (T=1), sorted: id3 .495, id1 .182, id5 .182, id0 .067, id2 .041,
    // id6 .025, id4 .009; ids 7 (-inf) and 8 (NaN) must never come out.
    let logits = [
        1.0,
        2.0,
        0.5,
        3.0,
        -1.0,
        2.0,
        0.0,
        f32::NEG_INFINITY,
        f32::NAN,
    ];
    let raw: Vec<f64> = logits.iter().map(|&l| f64::from(l)).collect();
    let all = [3, 1, 5, 0, 2, 6, 4];

    // Penalty case. History, window of the last 6 = [4, 6, 1, 4, 3, 3]: counts 4:2, 6:1, 1:1,
    // 3:2; token 0 occurs only before the window. Repeat 1.5, frequency 0.25, presence 0.5;
    // bias +1 on 6 (before its penalty), -inf on 5 (a former co-second), +5 on id 99 (ignored).
    let history = [0, 0, 3, 4, 6, 1, 4, 3, 3];
    let penalties = |top_k: i32, seed: u64| SamplerParams {
        repeat_penalty: 1.5,
        repeat_last_n: 6,
        frequency_penalty: 0.25,
        presence_penalty: 0.5,
        logit_bias: vec![(6, 1.0), (5, f32::NEG_INFINITY), (99, 5.0)],
        ..params(1.0, top_k, 1.0, 0.0, seed)
    };
    let ninf = f64::NEG_INFINITY;
    let adjusted = [
        1.0,                      // 0: outside the window
        2.0 / 1.5 - (0.25 + 0.5), // 1: once
        0.5,                      // 2: absent
        3.0 / 1.5 - (0.5 + 0.5),  // 3: twice
        -1.5 - (0.5 + 0.5),       // 4: twice, negative: -1.0 multiplied by 1.5
        ninf,                     // 5: banned
        (0.0 + 1.0) / 1.5 - 0.75, // 6: biased, then penalised once
        ninf,
        ninf,
    ];
    // Sorted adjusted: 0 (1.0) and 3 (1.0) tie -> 0 first; then 1, 2, 6, 4.
    let adjusted_order = [0, 3, 1, 2, 6, 4];
    let whole_history = {
        let mut a = adjusted;
        a[0] = 1.0 / 1.5 - (0.5 + 0.5);
        a
    };
    let divided_negative = {
        let mut a = adjusted;
        a[4] = -1.0 / 1.5 - (0.5 + 0.5);
        a
    };
    let penalty_before_bias = {
        let mut a = adjusted;
        a[6] = 0.0 * 1.5 - 0.75 + 1.0;
        a
    };
    let bias_only = {
        let mut a = raw.clone();
        a[5] = ninf;
        a[6] = 1.0;
        a[7] = ninf;
        a[8] = ninf;
        a
    };

    struct Case {
        name: &'static str,
        params: SamplerParams,
        history: Vec<u32>,
        expected: Vec<(u32, f64)>,
        wrong: Vec<(&'static str, Vec<(u32, f64)>)>,
    }
    let no_history = Vec::new;
    let top3 = softmax_over(&raw, &[3, 1, 5], 1.0);
    let combo = softmax_over(&raw, &[3, 1, 5], 1.3);
    let penalised = softmax_over(&adjusted, &adjusted_order, 1.0);
    let cases = [
        Case {
            name: "top-k 3",
            params: params(1.0, 3, 1.0, 0.0, 99),
            history: no_history(),
            expected: top3.clone(),
            wrong: vec![
                ("unfiltered", softmax_over(&raw, &all, 1.0)),
                ("top-k 4", softmax_over(&raw, &[3, 1, 5, 0], 1.0)),
                ("shifted by 0.02", shift(&top3, 0.02)),
            ],
        },
        Case {
            // Untempered cumulative .495 .677: 0.6 keeps two, and the 2.0 tie goes to id 1.
            name: "top-p 0.6",
            params: params(1.0, 0, 0.6, 0.0, 5),
            history: no_history(),
            expected: softmax_over(&raw, &[3, 1], 1.0),
            wrong: vec![
                ("unfiltered", softmax_over(&raw, &all, 1.0)),
                ("tie to id 5", softmax_over(&raw, &[3, 5], 1.0)),
                ("one more token", top3.clone()),
            ],
        },
        Case {
            // Threshold 3 + ln 0.1 = 0.70 keeps id0 (1.0) and drops id2 (0.5).
            name: "min-p 0.1",
            params: params(1.0, 0, 1.0, 0.1, 77),
            history: no_history(),
            expected: softmax_over(&raw, &[3, 1, 5, 0], 1.0),
            wrong: vec![
                ("unfiltered", softmax_over(&raw, &all, 1.0)),
                ("keeps id2 too", softmax_over(&raw, &[3, 1, 5, 0, 2], 1.0)),
                (
                    "shifted by 0.02",
                    shift(&softmax_over(&raw, &[3, 1, 5, 0], 1.0), 0.02),
                ),
            ],
        },
        Case {
            name: "temperature 0.5",
            params: params(0.5, 0, 1.0, 0.0, 1234),
            history: no_history(),
            expected: softmax_over(&raw, &all, 0.5),
            wrong: vec![
                ("untempered", softmax_over(&raw, &all, 1.0)),
                ("T=0.52", softmax_over(&raw, &all, 0.52)),
            ],
        },
        Case {
            // Top-k 5 leaves 3,1,5,0,2; renormalised cumulative .512 .700 .888 -> top-p 0.87
            // keeps three (over the full row it would be .859 and keep four); min-p 0.05
            // (threshold 0.004) removes nothing more; then T=1.3.
            name: "top-k 5, top-p 0.87, min-p 0.05, T=1.3",
            params: params(1.3, 5, 0.87, 0.05, 2024),
            history: no_history(),
            expected: combo.clone(),
            wrong: vec![
                ("unfiltered", softmax_over(&raw, &all, 1.3)),
                (
                    "top-p without top-k renormalisation",
                    softmax_over(&raw, &[3, 1, 5, 0], 1.3),
                ),
                ("T=1", top3.clone()),
            ],
        },
        Case {
            name: "penalties over the last 6 with logit bias",
            params: penalties(0, 31337),
            history: history.to_vec(),
            expected: penalised.clone(),
            wrong: vec![
                (
                    "unpenalised",
                    softmax_over(&bias_only, &[3, 1, 0, 2, 6, 4], 1.0),
                ),
                (
                    "whole history",
                    softmax_over(&whole_history, &adjusted_order, 1.0),
                ),
                (
                    "negative logits divided",
                    softmax_over(&divided_negative, &adjusted_order, 1.0),
                ),
                (
                    "penalty before bias",
                    softmax_over(&penalty_before_bias, &adjusted_order, 1.0),
                ),
            ],
        },
        Case {
            // Penalties reorder before top-k: top-k 2 keeps 0 and 3 (without them, 3 and 1).
            name: "penalties, bias, then top-k 2",
            params: penalties(2, 8),
            history: history.to_vec(),
            expected: softmax_over(&adjusted, &[0, 3], 1.0),
            wrong: vec![
                (
                    "unpenalised top-k 2",
                    softmax_over(&bias_only, &[3, 1], 1.0),
                ),
                ("no top-k", penalised.clone()),
                (
                    "shifted by 0.02",
                    shift(&softmax_over(&adjusted, &[0, 3], 1.0), 0.02),
                ),
            ],
        },
    ];

    for case in cases {
        // The sampler's own view of the distribution agrees with the hand-derived one.
        let d = distribution_with_history(&case.params, &logits, &case.history);
        assert_eq!(d.len(), case.expected.len(), "{}: {d:?}", case.name);
        for ((id, p), (eid, ep)) in d.iter().zip(&case.expected) {
            assert_eq!(id, eid, "{}: {d:?}", case.name);
            assert!((f64::from(*p) - ep).abs() < 1e-5, "{}: {d:?}", case.name);
        }

        let counts = counts_for(case.params.clone(), &logits, &case.history);
        let df = case.expected.len() - 1;
        let stat = chi_square(&counts, &case.expected, DRAWS);
        let p = chi_square_p_value(stat, df);
        eprintln!("{}: chi2 {stat:.2} (df {df}), p {p:.3e}", case.name);
        assert!(
            p > ALPHA,
            "{}: chi2 {stat:.2} (df {df}), p {p:.3e} <= {ALPHA:e}; counts {counts:?}",
            case.name
        );
        // Positive controls: the same counts reject plausible wrong distributions.
        for (what, wrong) in &case.wrong {
            let stat = chi_square(&counts, wrong, DRAWS);
            let p = chi_square_p_value(stat, wrong.len() - 1);
            eprintln!("  control {what}: chi2 {stat:.2}, p {p:.3e}");
            assert!(
                p < ALPHA,
                "{}: the wrong distribution ({what}) was not rejected: chi2 {stat:.2}, p {p:.3e}",
                case.name
            );
        }
    }
}
