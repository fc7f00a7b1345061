//! The chain's edge cases and the steps before the filters: logit bias, repetition /
//! frequency / presence penalties and their window, degenerate rows (one token, all `-inf`
//! but one, NaN and infinities), top-N log-probabilities, and determinism with a history.

use kestrel_sampling::{
    adjusted_logits, argmax, distribution, distribution_with_history, logprobs,
    logprobs_with_history, Sampler, SamplerParams, XorShift,
};

const NINF: f32 = f32::NEG_INFINITY;

/// No filters, temperature 1, penalties and bias off.
fn plain(seed: u64) -> SamplerParams {
    SamplerParams {
        temperature: 1.0,
        top_k: 0,
        top_p: 1.0,
        min_p: 0.0,
        seed,
        ..SamplerParams::default()
    }
}

fn repeat(penalty: f32, last_n: i32) -> SamplerParams {
    SamplerParams {
        repeat_penalty: penalty,
        repeat_last_n: last_n,
        ..plain(1)
    }
}

fn greedy_of(p: &SamplerParams) -> SamplerParams {
    SamplerParams {
        temperature: 0.0,
        ..p.clone()
    }
}

fn ids(d: &[(u32, f32)]) -> Vec<u32> {
    d.iter().map(|&(id, _)| id).collect()
}

#[test]
fn ties_first_maximum_in_greedy_and_id_order_when_sampling() {
    let logits = [1.0, 3.0, 3.0, 3.0, 2.0];
    let mut g = Sampler::new(SamplerParams::greedy());
    assert_eq!(g.sample(&logits), 1);
    let d = distribution(&plain(1), &logits);
    assert_eq!(ids(&d), [1, 2, 3, 4, 0]);
    assert_eq!(d[0].1, d[1].1, "tied logits get the same probability");
    assert_eq!(d[1].1, d[2].1);
    // Ties created by the penalties resolve the same way: 4.0 / 2 = 2.0 ties with id 0.
    let p = greedy_of(&repeat(2.0, 64));
    assert_eq!(
        Sampler::new(p.clone()).sample_with_history(&[2.0, 4.0], &[1]),
        0
    );
    assert_eq!(Sampler::new(p).sample_with_history(&[2.0, 4.0], &[]), 1);
}

#[test]
fn vocabulary_of_one() {
    let all_on = SamplerParams {
        temperature: 1.7,
        top_k: 5,
        top_p: 0.5,
        min_p: 0.9,
        repeat_penalty: 1.3,
        frequency_penalty: 0.5,
        presence_penalty: 0.5,
        ..plain(3)
    };
    for x in [-3.0, 0.0, 7.5, f32::INFINITY] {
        for p in [all_on.clone(), greedy_of(&all_on)] {
            let mut s = Sampler::new(p.clone());
            for _ in 0..10 {
                assert_eq!(s.sample_with_history(&[x], &[0, 0]), 0);
            }
            assert_eq!(distribution_with_history(&p, &[x], &[0]), [(0, 1.0)]);
        }
        let lp = logprobs(&[x], 0, 5);
        assert_eq!((lp.token, lp.logprob), (0, 0.0));
        assert_eq!(lp.top, [(0, 0.0)]);
    }
    // No finite logit: token 0, and no distribution.
    for x in [NINF, f32::NAN] {
        assert_eq!(Sampler::new(all_on.clone()).sample(&[x]), 0);
        assert!(distribution(&all_on, &[x]).is_empty());
        assert_eq!(logprobs(&[x], 0, 3).logprob, NINF);
    }
}

#[test]
fn all_neg_inf_but_one() {
    let mut logits = vec![NINF; 50];
    logits[3] = f32::NAN;
    logits[17] = -100.0;
    let settings = [
        plain(1),
        SamplerParams {
            temperature: 5.0,
            ..plain(2)
        },
        SamplerParams {
            top_k: 3,
            top_p: 0.1,
            min_p: 0.9,
            ..plain(3)
        },
        SamplerParams::greedy(),
    ];
    for p in settings {
        let mut s = Sampler::new(p.clone());
        for _ in 0..500 {
            assert_eq!(s.sample(&logits), 17, "{p:?}");
        }
        assert_eq!(distribution(&p, &logits), [(17, 1.0)], "{p:?}");
    }
    // The same through bans: every other token biased to -inf.
    let row: Vec<f32> = (0..20).map(|i| i as f32).collect();
    let bans = SamplerParams {
        logit_bias: (0..20).filter(|&i| i != 4).map(|i| (i, NINF)).collect(),
        ..plain(4)
    };
    let mut s = Sampler::new(bans.clone());
    for _ in 0..500 {
        assert_eq!(s.sample(&row), 4);
    }
    assert_eq!(Sampler::new(greedy_of(&bans)).sample(&row), 4);
}

#[test]
fn nan_and_infinite_logits() {
    // NaN counts as -inf, +inf as f32::MAX: the two +inf tokens split the mass evenly.
    let logits = [f32::INFINITY, f32::INFINITY, 5.0, f32::NAN, NINF];
    assert_eq!(
        adjusted_logits(&plain(0), &logits, &[]),
        [f32::MAX, f32::MAX, 5.0, NINF, NINF]
    );
    assert_eq!(Sampler::new(SamplerParams::greedy()).sample(&logits), 0);
    // 5.0 survives the filters, but its weight exp(5 - f32::MAX) underflows to 0.
    assert_eq!(
        distribution(&plain(0), &logits),
        [(0, 0.5), (1, 0.5), (2, 0.0)]
    );
    let mut s = Sampler::new(plain(11));
    let mut seen = [0u32; 5];
    for _ in 0..1000 {
        seen[s.sample(&logits) as usize] += 1;
    }
    assert!(seen[0] > 400 && seen[1] > 400, "{seen:?}");
    assert_eq!(seen[2] + seen[3] + seen[4], 0, "{seen:?}");
    // A -inf bias bans even a +inf logit; a +inf bias lifts a token to f32::MAX.
    let p = SamplerParams {
        logit_bias: vec![(0, NINF), (2, f32::INFINITY)],
        ..plain(0)
    };
    assert_eq!(
        adjusted_logits(&p, &logits, &[]),
        [NINF, f32::MAX, f32::MAX, NINF, NINF]
    );
    assert_eq!(Sampler::new(greedy_of(&p)).sample(&logits), 1);
    // A penalised +inf becomes a large finite logit; NaN and -inf stay out.
    let p = repeat(2.0, -1);
    assert_eq!(
        adjusted_logits(&p, &logits, &[0, 3, 4]),
        [f32::MAX / 2.0, f32::MAX, 5.0, NINF, NINF]
    );
    let lp = logprobs(&logits, 1, 5);
    assert_eq!(lp.logprob, 0.5f32.ln());
    assert_eq!(ids(&lp.top), [0, 1, 2]);
    assert_eq!((lp.top[0].1, lp.top[1].1), (0.5f32.ln(), 0.5f32.ln()));
    // 5.0 against f32::MAX: finite in f64, so about -f32::MAX rather than -inf.
    assert!(lp.top[2].1 < -1e38, "{lp:?}");
}

#[test]
fn top_k_larger_than_the_vocabulary_keeps_everything() {
    let logits = [0.3, -1.0, 2.0, 2.0, 0.0];
    let all = distribution(&plain(0), &logits);
    assert_eq!(ids(&all), [2, 3, 0, 4, 1]);
    for k in [5, 6, 1000, i32::MAX] {
        let p = SamplerParams {
            top_k: k,
            ..plain(0)
        };
        assert_eq!(distribution(&p, &logits), all, "top-k {k}");
    }
    let p = SamplerParams {
        top_k: 4,
        ..plain(0)
    };
    assert_eq!(ids(&distribution(&p, &logits)), [2, 3, 0, 4]);
}

#[test]
fn filter_extremes() {
    let logits = [0.3, -1.0, 2.0, 2.0, 0.0];
    let all = distribution(&plain(0), &logits);
    let with = |top_p: f32, min_p: f32| {
        distribution(
            &SamplerParams {
                top_p,
                min_p,
                ..plain(0)
            },
            &logits,
        )
    };
    assert_eq!(with(1.0, 0.0), all, "top-p 1 and min-p 0 filter nothing");
    assert_eq!(with(f32::NAN, f32::NAN), all, "NaN turns the filters off");
    assert_eq!(
        with(0.0, 0.0),
        [(2, 1.0)],
        "top-p 0 keeps the first maximum"
    );
    // min-p 1 keeps every tied maximum, in id order.
    assert_eq!(with(1.0, 1.0), [(2, 0.5), (3, 0.5)]);
}

#[test]
fn repeat_penalty_divides_positive_and_multiplies_negative_logits() {
    let logits = [2.0, -2.0, 0.0, 1.5, 4.0];
    // Applied once per distinct token, however often it occurs.
    assert_eq!(
        adjusted_logits(&repeat(2.0, 64), &logits, &[0, 1, 2, 0, 0]),
        [1.0, -4.0, 0.0, 1.5, 4.0]
    );
    // A penalty below 1 rewards repetition the same way round.
    assert_eq!(
        adjusted_logits(&repeat(0.5, 64), &logits, &[0, 1]),
        [4.0, -1.0, 0.0, 1.5, 4.0]
    );
    // The penalty changes what greedy picks; without a history nothing changes.
    let p = greedy_of(&repeat(2.0, 64));
    assert_eq!(
        Sampler::new(p.clone()).sample_with_history(&logits[..4], &[0]),
        3
    );
    assert_eq!(Sampler::new(p.clone()).sample(&logits[..4]), 0);
    assert_eq!(
        distribution_with_history(&p, &logits[..4], &[0]),
        [(3, 1.0)]
    );
}

#[test]
fn frequency_and_presence_penalties_count_occurrences() {
    let logits = [2.0, -2.0, 0.0, 1.0];
    let p = SamplerParams {
        frequency_penalty: 0.5,
        presence_penalty: 0.25,
        ..plain(0)
    };
    assert_eq!(
        adjusted_logits(&p, &logits, &[0, 0, 0, 1, 3, 3]),
        [
            2.0 - (1.5 + 0.25),
            -2.0 - (0.5 + 0.25),
            0.0,
            1.0 - (1.0 + 0.25)
        ]
    );
    // Negative penalties raise the logits of recent tokens.
    let p = SamplerParams {
        frequency_penalty: -1.0,
        presence_penalty: -0.5,
        ..plain(0)
    };
    assert_eq!(adjusted_logits(&p, &logits, &[2, 2]), [2.0, -2.0, 2.5, 1.0]);
    // All three together, in llama.cpp's order: repeat penalty, then the subtraction.
    let p = SamplerParams {
        repeat_penalty: 2.0,
        frequency_penalty: 0.5,
        presence_penalty: 0.25,
        ..plain(0)
    };
    assert_eq!(
        adjusted_logits(&p, &logits, &[0, 0, 1]),
        [1.0 - 1.25, -4.0 - 0.75, 0.0, 1.0]
    );
}

#[test]
fn repeat_last_n_window() {
    let logits = [4.0, 4.0, 4.0, 4.0, 4.0];
    let history = [0, 1, 2, 3];
    let penalised = |n: i32| {
        let p = SamplerParams {
            frequency_penalty: 1.0,
            presence_penalty: 1.0,
            ..repeat(2.0, n)
        };
        adjusted_logits(&p, &logits, &history)
    };
    assert_eq!(penalised(0), logits, "0 turns every penalty off");
    assert_eq!(
        penalised(-1),
        [0.0, 0.0, 0.0, 0.0, 4.0],
        "-1: the whole history"
    );
    assert_eq!(penalised(-7), penalised(-1));
    assert_eq!(penalised(100), penalised(-1), "longer than the history");
    assert_eq!(penalised(4), penalised(-1));
    assert_eq!(
        penalised(2),
        [4.0, 4.0, 0.0, 0.0, 4.0],
        "the most recent two"
    );
    assert_eq!(penalised(1), [4.0, 4.0, 4.0, 0.0, 4.0]);
    // The default window is 64: a token 65 positions back is not penalised.
    let mut long = vec![0u32];
    long.extend(std::iter::repeat_n(1, 64));
    let p = SamplerParams {
        repeat_penalty: 2.0,
        ..plain(0)
    };
    assert_eq!(p.repeat_last_n, 64);
    assert_eq!(
        adjusted_logits(&p, &logits, &long),
        [4.0, 2.0, 4.0, 4.0, 4.0]
    );
}

#[test]
fn logit_bias_bans_boosts_and_ignores_bad_entries() {
    let logits = [1.0, 3.0, 2.0, 0.5];
    // -inf on the argmax: greedy and sampling both avoid it.
    let ban = SamplerParams {
        logit_bias: vec![(1, NINF)],
        ..plain(21)
    };
    assert_eq!(Sampler::new(greedy_of(&ban)).sample(&logits), 2);
    let mut s = Sampler::new(ban.clone());
    let mut seen = [0u32; 4];
    for _ in 0..2000 {
        seen[s.sample(&logits) as usize] += 1;
    }
    assert_eq!(seen[1], 0, "{seen:?}");
    assert!(seen[0] > 0 && seen[2] > 0 && seen[3] > 0, "{seen:?}");
    assert_eq!(ids(&distribution(&ban, &logits)), [2, 0, 3]);
    // A positive bias promotes a token; several entries for one id add up.
    let boost = SamplerParams {
        logit_bias: vec![(3, 1.5), (3, 1.5)],
        ..plain(0)
    };
    assert_eq!(adjusted_logits(&boost, &logits, &[]), [1.0, 3.0, 2.0, 3.5]);
    assert_eq!(Sampler::new(greedy_of(&boost)).sample(&logits), 3);
    // Out-of-range ids and NaN biases change nothing: same row, same draws.
    let ignored = SamplerParams {
        logit_bias: vec![(4, NINF), (u32::MAX, 10.0), (0, f32::NAN)],
        ..plain(21)
    };
    assert_eq!(adjusted_logits(&ignored, &logits, &[]), logits);
    let mut a = Sampler::new(ignored);
    let mut b = Sampler::new(plain(21));
    let xs: Vec<u32> = (0..200).map(|_| a.sample(&logits)).collect();
    let ys: Vec<u32> = (0..200).map(|_| b.sample(&logits)).collect();
    assert_eq!(xs, ys);
}

#[test]
fn bias_applies_before_penalties() {
    // 1.0 + bias -2 = -1.0, then (non-positive) times 2 = -2.0. Penalty first would give
    // 1.0 / 2 - 2 = -1.5.
    let p = SamplerParams {
        logit_bias: vec![(0, -2.0)],
        ..repeat(2.0, 64)
    };
    assert_eq!(adjusted_logits(&p, &[1.0, 0.0], &[0]), [-2.0, 0.0]);
}

#[test]
fn penalties_never_revive_banned_tokens() {
    let logits = [NINF, f32::NAN, 1.0, 2.0];
    let p = SamplerParams {
        repeat_penalty: 0.0,
        frequency_penalty: -100.0,
        presence_penalty: -100.0,
        logit_bias: vec![(3, NINF)],
        ..plain(5)
    };
    let history = [0, 1, 3, 3];
    assert_eq!(
        adjusted_logits(&p, &logits, &history),
        [NINF, NINF, 1.0, NINF]
    );
    let mut s = Sampler::new(p.clone());
    for _ in 0..200 {
        assert_eq!(s.sample_with_history(&logits, &history), 2);
    }
    assert_eq!(
        Sampler::new(greedy_of(&p)).sample_with_history(&logits, &history),
        2
    );
    // Even a negative repeat penalty, which would turn -inf * penalty into +inf.
    let p = SamplerParams {
        repeat_penalty: -1.0,
        ..p
    };
    assert_eq!(
        adjusted_logits(&p, &logits, &history),
        [NINF, NINF, 1.0, NINF]
    );
}

#[test]
fn history_ids_outside_the_vocabulary_are_ignored() {
    let logits = [1.0, -1.0, 0.5];
    let p = SamplerParams {
        presence_penalty: 1.0,
        ..repeat(2.0, -1)
    };
    assert_eq!(
        adjusted_logits(&p, &logits, &[3, 1000, u32::MAX, 2]),
        [1.0, -1.0, 0.25 - 1.0]
    );
}

/// ln softmax in f64, the reference for the log-probabilities.
fn log_softmax(logits: &[f64]) -> Vec<f64> {
    let max = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let lse = logits.iter().map(|l| (l - max).exp()).sum::<f64>().ln() + max;
    logits.iter().map(|l| l - lse).collect()
}

#[test]
fn top_n_logprobs() {
    let logits = [1.0, 3.0, 3.0, 2.0, NINF, f32::NAN, -1.0];
    let finite: Vec<f64> = [1.0, 3.0, 3.0, 2.0, -1.0].to_vec();
    let reference = log_softmax(&finite); // ids 0, 1, 2, 3, 6
    let close = |a: f32, b: f64| (f64::from(a) - b).abs() < 1e-6;

    let lp = logprobs(&logits, 3, 3);
    assert_eq!(lp.token, 3);
    assert!(close(lp.logprob, reference[3]), "{lp:?}");
    // Sorted descending, the tie at 3.0 by lower id.
    assert_eq!(ids(&lp.top), [1, 2, 3]);
    assert_eq!(lp.top[0].1, lp.top[1].1);
    assert!(close(lp.top[0].1, reference[1]) && close(lp.top[2].1, reference[3]));

    // N beyond the finite tokens lists them all; zero-probability tokens are left out.
    let lp = logprobs(&logits, 6, 100);
    assert_eq!(ids(&lp.top), [1, 2, 3, 0, 6]);
    let total: f64 = lp.top.iter().map(|&(_, l)| f64::from(l).exp()).sum();
    assert!((total - 1.0).abs() < 1e-6, "{total}");
    assert!(close(lp.logprob, reference[4]));
    assert!(logprobs(&logits, 1, 0).top.is_empty());
    // A token of probability 0 is still reported, at -inf.
    assert_eq!(logprobs(&logits, 4, 1).logprob, NINF);
    assert_eq!(logprobs(&logits, 5, 1).logprob, NINF);
}

#[test]
fn logprobs_with_history_see_bias_and_penalties_but_not_filters() {
    let logits = [1.0, 3.0, 2.0, 0.0];
    let p = SamplerParams {
        temperature: 0.1,
        top_k: 1,
        top_p: 0.2,
        min_p: 0.9,
        repeat_penalty: 2.0,
        logit_bias: vec![(1, NINF)],
        ..plain(0)
    };
    let history = [2];
    let lp = logprobs_with_history(&p, &logits, &history, 0, 10);
    // Adjusted row: [1.0, -inf, 1.0, 0.0]; temperature 1, nothing filtered.
    let reference = log_softmax(&[1.0, 1.0, 0.0]);
    assert_eq!(ids(&lp.top), [0, 2, 3]);
    for ((_, got), want) in lp.top.iter().zip(&reference) {
        assert!((f64::from(*got) - want).abs() < 1e-6, "{lp:?}");
    }
    assert_eq!(lp, logprobs(&adjusted_logits(&p, &logits, &history), 0, 10));
    // The raw row gives different numbers: bias and penalty are really in.
    assert_ne!(lp.top, logprobs(&logits, 0, 10).top);
}

#[test]
fn same_seed_same_draws_with_a_growing_history() {
    let logits: Vec<f32> = (0..32).map(|i| ((i * 7) % 5) as f32 * 0.4).collect();
    let p = |seed: u64| SamplerParams {
        repeat_penalty: 1.2,
        frequency_penalty: 0.1,
        presence_penalty: 0.2,
        repeat_last_n: 8,
        temperature: 0.9,
        top_k: 20,
        ..plain(seed)
    };
    let run = |seed: u64| -> Vec<u32> {
        let mut s = Sampler::new(p(seed));
        let mut history = vec![1, 2, 3];
        for _ in 0..200 {
            let t = s.sample_with_history(&logits, &history);
            history.push(t);
        }
        history
    };
    assert_eq!(run(42), run(42));
    assert_ne!(run(42), run(43));
    assert_ne!(run(0), run(1));
    // One draw per call with a history too.
    let mut s = Sampler::new(p(9));
    let mut g = XorShift::new(9);
    for _ in 0..10 {
        s.sample_with_history(&logits, &[0, 1, 1]);
        g.next_u32();
    }
    assert_eq!(s.rng().state(), g.state());
    // `sample` is `sample_with_history` with an empty history.
    let mut a = Sampler::new(p(5));
    let mut b = Sampler::new(p(5));
    for _ in 0..50 {
        assert_eq!(a.sample(&logits), b.sample_with_history(&logits, &[]));
    }
}

#[test]
fn top_k_one_equals_greedy_with_penalties_and_bias() {
    let mut rng = XorShift::new(2718);
    for round in 0..300u64 {
        let n = 1 + (rng.next_u32() % 40) as usize;
        // Coarse values so that ties are common; some of them negative for the penalty.
        let logits: Vec<f32> = (0..n)
            .map(|_| (rng.next_u32() % 9) as f32 * 0.5 - 2.0)
            .collect();
        let history: Vec<u32> = (0..rng.next_u32() % 12)
            .map(|_| rng.next_u32() % (n as u32 + 2))
            .collect();
        let p = SamplerParams {
            temperature: 1.3,
            top_k: 1,
            top_p: 0.9,
            min_p: 0.05,
            repeat_penalty: 1.5,
            repeat_last_n: 6,
            frequency_penalty: 0.3,
            presence_penalty: 0.2,
            logit_bias: vec![(rng.next_u32() % n as u32, 0.5)],
            ..plain(round)
        };
        let sampled = Sampler::new(p.clone()).sample_with_history(&logits, &history);
        let greedy = Sampler::new(greedy_of(&p)).sample_with_history(&logits, &history);
        assert_eq!(sampled, greedy, "{logits:?} {history:?}");
        assert_eq!(greedy, argmax(&adjusted_logits(&p, &logits, &history)));
    }
}
