//! Behaviour of the reference sampler: greedy ties, filter semantics on hand-computed cases,
//! seeding, the generator's exact output, and chi-square agreement of seeded draws with the
//! distribution the chain should produce.

use kestrel_sampling::{
    argmax, distribution, random_seed, unit_f32, Sampler, SamplerParams, XorShift,
};

fn params(temperature: f32, top_k: i32, top_p: f32, min_p: f32, seed: u64) -> SamplerParams {
    SamplerParams {
        temperature,
        top_k,
        top_p,
        min_p,
        seed,
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

/// Softmax of `logits[ids] / temperature` in f64 — the exact filtered distribution when `ids`
/// are the tokens the filters should keep.
fn softmax_over(logits: &[f32], ids: &[u32], temperature: f64) -> Vec<(u32, f64)> {
    let w: Vec<f64> = ids
        .iter()
        .map(|&i| (f64::from(logits[i as usize]) / temperature).exp())
        .collect();
    let total: f64 = w.iter().sum();
    ids.iter().zip(w).map(|(&i, w)| (i, w / total)).collect()
}

const DRAWS: u64 = 100_000;

fn counts_for(p: SamplerParams, logits: &[f32]) -> Vec<u64> {
    let mut s = Sampler::new(p);
    let mut counts = vec![0u64; logits.len()];
    for _ in 0..DRAWS {
        counts[s.sample(logits) as usize] += 1;
    }
    counts
}

/// Critical values of the chi-square distribution at significance 0.001, by degrees of freedom.
fn critical_001(df: usize) -> f64 {
    [
        f64::NAN,
        10.828,
        13.816,
        16.266,
        18.467,
        20.515,
        22.458,
        24.322,
    ][df]
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

    struct Case {
        name: &'static str,
        params: SamplerParams,
        expected: Vec<(u32, f64)>,
        wrong: Vec<(&'static str, Vec<(u32, f64)>)>,
    }
    let cases = [
        Case {
            name: "no filters, T=1",
            params: params(1.0, 0, 1.0, 0.0, 1234),
            expected: softmax_over(&logits, &[3, 1, 5, 0, 2, 6, 4], 1.0),
            wrong: vec![("T=1.1", softmax_over(&logits, &[3, 1, 5, 0, 2, 6, 4], 1.1))],
        },
        Case {
            // top-k 3 keeps 3, 1, 5 (the 2.0 tie fits entirely).
            name: "top-k 3, T=0.7",
            params: params(0.7, 3, 1.0, 0.0, 99),
            expected: softmax_over(&logits, &[3, 1, 5], 0.7),
            wrong: vec![("top-k 4", softmax_over(&logits, &[3, 1, 5, 0], 0.7))],
        },
        Case {
            // Untempered cumulative: .495 .677 .859 .926 .966 -> top-p 0.95 keeps 3,1,5,0,2;
            // min-p 0.1: threshold 3 + ln 0.1 = 0.70 drops id2 (0.5), keeps id0 (1.0).
            name: "top-p 0.95, min-p 0.1, T=1.5",
            params: params(1.5, 0, 0.95, 0.1, 2024),
            expected: softmax_over(&logits, &[3, 1, 5, 0], 1.5),
            wrong: vec![
                ("T=1.4", softmax_over(&logits, &[3, 1, 5, 0], 1.4)),
                (
                    "temperature before filters",
                    softmax_over(&logits, &[3, 1, 5, 0, 2, 6], 1.5),
                ),
            ],
        },
    ];

    for case in cases {
        // The sampler's own view of the distribution agrees with the hand-derived one.
        let d = distribution(&case.params, &logits);
        assert_eq!(d.len(), case.expected.len(), "{}", case.name);
        for ((id, p), (eid, ep)) in d.iter().zip(&case.expected) {
            assert_eq!(id, eid, "{}", case.name);
            assert!((f64::from(*p) - ep).abs() < 1e-5, "{}: {d:?}", case.name);
        }

        let counts = counts_for(case.params.clone(), &logits);
        let df = case.expected.len() - 1;
        let stat = chi_square(&counts, &case.expected, DRAWS);
        eprintln!("{}: chi2 {stat:.2} (df {df})", case.name);
        assert!(
            stat < critical_001(df),
            "{}: chi2 {stat:.2} >= {} (df {df}), counts {counts:?}",
            case.name,
            critical_001(df)
        );
        // Positive controls: the same counts reject plausible wrong distributions.
        for (what, wrong) in &case.wrong {
            let stat = chi_square(&counts, wrong, DRAWS);
            eprintln!("  control {what}: chi2 {stat:.2}");
            assert!(
                stat > critical_001(wrong.len() - 1),
                "{}: the wrong distribution ({what}) was not rejected: chi2 {stat:.2}",
                case.name
            );
        }
    }
}
