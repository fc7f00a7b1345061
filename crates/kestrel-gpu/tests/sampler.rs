//! The greedy sampler on the device against the CPU sampler
//! (`kestrel_sampling`, temperature 0): the same token for random rows,
//! ties (first maximum), non-finite logits, tiny and 262k vocabularies,
//! logit bias and every penalty over the history window, written into the
//! history buffer at the next position with the rest of the history
//! untouched.

use kestrel_gpu::sample::GreedySampler;
use kestrel_gpu::Gpu;
use kestrel_sampling::{Sampler, SamplerParams};
use std::sync::{Mutex, OnceLock};

fn gpu() -> &'static Gpu {
    static GPU: OnceLock<Gpu> = OnceLock::new();
    GPU.get_or_init(|| Gpu::new().unwrap_or_else(|e| panic!("{e}")))
}

/// A step records every dispatch into the device's one encoder, so tests
/// (which run on threads of their own) take turns on the device.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn f(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32 * 8.0 - 4.0
    }
    fn below(&mut self, n: usize) -> u32 {
        (self.next() % n as u64) as u32
    }
}

/// The GPU's pick (and a check that only `history[pos]` changed).
fn gpu_pick(logits: &[f32], history: &[u32], params: &SamplerParams) -> u32 {
    let g = gpu();
    let lb = g.upload_f32("logits", logits).unwrap();
    let mut hist = history.to_vec();
    hist.push(u32::MAX);
    hist.push(7);
    let hb = g.upload_u32("history", &hist).unwrap();
    let pos = history.len();
    GreedySampler::new(g)
        .run(g, (&lb, &hb), logits.len(), pos, params)
        .expect("sampler runs");
    let after = g.read_u32(&hb, hist.len()).unwrap();
    assert_eq!(&after[..pos], history, "history before pos unchanged");
    assert_eq!(after[pos + 1], 7, "history after pos unchanged");
    after[pos]
}

fn cpu_pick(logits: &[f32], history: &[u32], params: &SamplerParams) -> u32 {
    Sampler::new(params.clone()).sample_with_history(logits, history)
}

fn check(tag: &str, logits: &[f32], history: &[u32], params: &SamplerParams) -> u32 {
    let want = cpu_pick(logits, history, params);
    let got = gpu_pick(logits, history, params);
    assert_eq!(got, want, "{tag}: gpu {got}, cpu {want}");
    want
}

/// Greedy, no bias, penalties off.
fn plain() -> SamplerParams {
    SamplerParams {
        temperature: 0.0,
        repeat_penalty: 1.0,
        ..SamplerParams::default()
    }
}

#[test]
fn greedy_matches_cpu_on_random_rows_and_ties() {
    let _serial = serial();
    let mut rng = Rng(42);
    for (i, vocab) in [1usize, 3, 255, 256, 257, 1000, 49_152, 262_144]
        .into_iter()
        .enumerate()
    {
        let logits: Vec<f32> = (0..vocab).map(|_| rng.f()).collect();
        check(&format!("random {vocab}"), &logits, &[], &plain());
        // Ties: the same maximum at several ids, the first must win.
        let mut tied = logits.clone();
        let top = 100.0;
        let ids: Vec<usize> = (0..3).map(|_| rng.below(vocab) as usize).collect();
        for &id in &ids {
            tied[id] = top;
        }
        let got = check(&format!("ties {vocab} #{i}"), &tied, &[], &plain());
        assert_eq!(got as usize, *ids.iter().min().unwrap());
    }
}

#[test]
fn greedy_matches_cpu_on_non_finite_logits() {
    let _serial = serial();
    let mut rng = Rng(7);
    let base: Vec<f32> = (0..700).map(|_| rng.f()).collect();
    // NaN counts as -inf: never chosen even where it sits "highest".
    let mut l = base.clone();
    l[3] = f32::NAN;
    l[650] = f32::NAN;
    check("nan", &l, &[], &plain());
    // Two +inf tie: the first wins.
    let mut l = base.clone();
    l[600] = f32::INFINITY;
    l[20] = f32::INFINITY;
    assert_eq!(check("+inf", &l, &[], &plain()), 20);
    // +inf ties with f32::MAX (it counts as f32::MAX).
    let mut l = base.clone();
    l[9] = f32::MAX;
    l[600] = f32::INFINITY;
    assert_eq!(check("+inf vs max", &l, &[], &plain()), 9);
    // All -inf or NaN: token 0.
    let l: Vec<f32> = (0..300)
        .map(|i| {
            if i % 2 == 0 {
                f32::NEG_INFINITY
            } else {
                f32::NAN
            }
        })
        .collect();
    assert_eq!(check("all banned", &l, &[], &plain()), 0);
}

#[test]
fn greedy_matches_cpu_with_bias_and_penalties() {
    let _serial = serial();
    let mut rng = Rng(99);
    let vocab = 500;
    let mut cases = 0;
    let mut changed = 0;
    for case in 0..40 {
        let logits: Vec<f32> = (0..vocab).map(|_| rng.f()).collect();
        // A history that repeats a few ids, including the row's best.
        let best = kestrel_sampling::argmax(&logits);
        let mut history: Vec<u32> = (0..30 + case).map(|_| rng.below(40)).collect();
        for k in 0..(case % 4) {
            history.push(best);
            history.push(k as u32);
        }
        let params = SamplerParams {
            logit_bias: match case % 5 {
                0 => vec![],
                1 => vec![(best, f32::NEG_INFINITY)],
                2 => vec![(3, 1.5), (3, 0.25), (9999, 5.0), (4, f32::NAN)],
                3 => vec![(rng.below(vocab), 6.0)],
                _ => vec![(best, -0.5), (1, f32::INFINITY)],
            },
            repeat_last_n: [0, 1, 8, 64, 1000][case % 5],
            repeat_penalty: [1.0f32, 1.3, 1.1, 2.0][case % 4],
            frequency_penalty: [0.0f32, 0.2, 0.7][case % 3],
            presence_penalty: [0.0f32, 0.1, 0.45][(case / 3) % 3],
            ..plain()
        };
        let got = check(
            &format!("penalties case {case}"),
            &logits,
            &history,
            &params,
        );
        cases += 1;
        changed += usize::from(got != best);
    }
    // The cases must exercise the adjustments, not just the argmax.
    assert!(
        changed >= 10,
        "only {changed} of {cases} cases moved off the argmax"
    );
}

#[test]
fn greedy_refuses_bad_shapes() {
    let _serial = serial();
    let g = gpu();
    let lb = g.upload_f32("l", &[0.0; 4]).unwrap();
    let hb = g.upload_u32("h", &[0; 2]).unwrap();
    let s = GreedySampler::new(g);
    assert!(s.run(g, (&lb, &hb), 8, 0, &plain()).is_err());
    assert!(s.run(g, (&lb, &hb), 4, 5, &plain()).is_err());
    assert!(s.run(g, (&lb, &hb), 0, 0, &plain()).is_err());
}

// ---- The full sampler (temperature, filters, the seeded draw) ----

use kestrel_gpu::sample::Sampler as GpuSampler;
use kestrel_sampling::XorShift;

/// `calls` tokens drawn one after another on the device, all recorded in
/// one step (one submission, nothing read back until the end), each
/// appended to the history the next one penalises; the generator state
/// after them.
fn gpu_sequence(
    logits: &[f32],
    history: &[u32],
    p: &SamplerParams,
    calls: usize,
) -> (Vec<u32>, [u32; 4]) {
    let g = gpu();
    let lb = g.upload_f32("logits", logits).unwrap();
    let mut hist = history.to_vec();
    hist.resize(history.len() + calls + 1, 7);
    let hb = g.upload_u32("history", &hist).unwrap();
    let rng = GpuSampler::rng_buffer(g, XorShift::new(p.seed).state()).unwrap();
    let mut s = GpuSampler::new(g);
    let before = g.submissions();
    g.begin_step();
    for i in 0..calls {
        s.run(g, (&lb, &hb, &rng), logits.len(), history.len() + i, p)
            .expect("sampler runs");
    }
    g.finish_step();
    assert_eq!(g.submissions(), before + 1, "one submission for the step");
    let after = g.read_u32(&hb, hist.len()).unwrap();
    assert_eq!(
        &after[..history.len()],
        history,
        "history before pos unchanged"
    );
    assert_eq!(
        after[history.len() + calls],
        7,
        "history after the last pos unchanged"
    );
    assert_eq!(
        g.read_f32(&lb, logits.len())
            .unwrap()
            .iter()
            .map(|f| f.to_bits())
            .collect::<Vec<_>>(),
        logits.iter().map(|f| f.to_bits()).collect::<Vec<_>>(),
        "logits unmodified"
    );
    let state = g.read_u32(&rng, 4).unwrap();
    (
        after[history.len()..history.len() + calls].to_vec(),
        [state[0], state[1], state[2], state[3]],
    )
}

/// The CPU sampler's tokens for the same growing history, and its state.
fn cpu_sequence(
    logits: &[f32],
    history: &[u32],
    p: &SamplerParams,
    calls: usize,
) -> (Vec<u32>, [u32; 4]) {
    let mut s = Sampler::new(p.clone());
    let mut hist = history.to_vec();
    let mut out = Vec::new();
    for _ in 0..calls {
        let t = s.sample_with_history(logits, &hist);
        hist.push(t);
        out.push(t);
    }
    (out, s.rng().state())
}

fn check_sequence(
    tag: &str,
    logits: &[f32],
    history: &[u32],
    p: &SamplerParams,
    calls: usize,
) -> Vec<u32> {
    let want = cpu_sequence(logits, history, p, calls);
    let got = gpu_sequence(logits, history, p, calls);
    if let Some(i) = (0..calls).find(|&i| got.0[i] != want.0[i]) {
        panic!(
            "{tag}: call {i} drew {} on the device, {} on the CPU",
            got.0[i], want.0[i]
        );
    }
    assert_eq!(got.1, want.1, "{tag}: generator state after {calls} calls");
    want.0
}

fn sampling(seed: u64) -> SamplerParams {
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
fn seeded_draws_identical_to_cpu() {
    let _serial = serial();
    let mut rng = Rng(5);
    let vocab = 300;
    // A peaked row with ties, so that draws spread over a few tokens.
    let mut logits: Vec<f32> = (0..vocab).map(|_| rng.f() * 0.75).collect();
    logits[17] = 3.0;
    logits[230] = 3.0;
    logits[5] = 2.5;
    let settings = [
        (
            "temperature",
            SamplerParams {
                temperature: 0.7,
                ..sampling(1)
            },
        ),
        (
            "hot",
            SamplerParams {
                temperature: 2.5,
                ..sampling(2)
            },
        ),
        (
            "top-k",
            SamplerParams {
                top_k: 12,
                ..sampling(3)
            },
        ),
        (
            "top-p",
            SamplerParams {
                top_p: 0.6,
                temperature: 0.9,
                ..sampling(4)
            },
        ),
        (
            "min-p",
            SamplerParams {
                min_p: 0.1,
                temperature: 1.3,
                ..sampling(5)
            },
        ),
        (
            "defaults",
            SamplerParams {
                seed: 6,
                ..SamplerParams::default()
            },
        ),
        (
            "all",
            SamplerParams {
                top_k: 50,
                top_p: 0.9,
                min_p: 0.02,
                temperature: 1.1,
                repeat_penalty: 1.3,
                repeat_last_n: 16,
                frequency_penalty: 0.2,
                presence_penalty: 0.3,
                logit_bias: vec![(17, -1.0), (40, 2.5), (41, f32::NEG_INFINITY)],
                ..sampling(7)
            },
        ),
    ];
    let history: Vec<u32> = (0..20).map(|_| rng.below(40)).collect();
    for (tag, p) in &settings {
        let toks = check_sequence(tag, &logits, &history, p, 40);
        let distinct = toks.iter().collect::<std::collections::BTreeSet<_>>().len();
        assert!(distinct >= 3, "{tag}: the draws must vary ({toks:?})");
    }
}

#[test]
fn tiny_vocabularies_and_non_finite_logits() {
    let _serial = serial();
    let all = SamplerParams {
        top_k: 2,
        top_p: 0.8,
        min_p: 0.05,
        ..sampling(11)
    };
    for p in [sampling(10), all.clone()] {
        for x in [0.0, -3.0, f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let toks = check_sequence(&format!("vocab 1, {x}"), &[x], &[0], &p, 3);
            assert_eq!(toks, [0, 0, 0]);
        }
        check_sequence("vocab 3", &[0.5, 0.2, 0.4], &[], &p, 30);
        check_sequence("vocab 3 tie", &[1.0, 1.0, 1.0], &[], &p, 30);
        // NaN and -inf never come out; +inf ties with f32::MAX and beats
        // everything finite.
        let toks = check_sequence(
            "vocab 3 nan",
            &[f32::NAN, 0.3, f32::NEG_INFINITY],
            &[],
            &p,
            10,
        );
        assert_eq!(toks, [1; 10]);
        let toks = check_sequence(
            "+inf",
            &[1.0, f32::INFINITY, f32::MAX, f32::INFINITY],
            &[],
            &p,
            30,
        );
        assert!(toks.iter().all(|&t| t != 0), "{toks:?}");
        // All banned: token 0, and the generator still advances once per
        // call (checked by check_sequence's state comparison).
        let toks = check_sequence(
            "all banned",
            &[f32::NAN, f32::NEG_INFINITY, f32::NAN],
            &[],
            &p,
            4,
        );
        assert_eq!(toks, [0; 4]);
        // Extreme logits: differences overflow to -inf (weight 0).
        check_sequence(
            "extremes",
            &[-f32::MAX, f32::MAX, 0.0, f32::MAX, -0.0],
            &[],
            &p,
            20,
        );
    }
    // Tiny and huge temperatures (the reciprocal clamps).
    for t in [1e-40, 1e-3, 1e30, f32::INFINITY] {
        let p = SamplerParams {
            temperature: t,
            ..sampling(12)
        };
        check_sequence(
            &format!("temperature {t}"),
            &[0.1, 0.2, 0.2, -0.0, 0.0],
            &[],
            &p,
            30,
        );
    }
}

#[test]
fn greedy_through_the_full_sampler_draws_nothing() {
    let _serial = serial();
    let mut rng = Rng(21);
    let mut logits: Vec<f32> = (0..2000).map(|_| rng.f()).collect();
    logits[1500] = 9.0;
    logits[20] = 9.0;
    logits[7] = f32::NAN;
    for t in [0.0, -1.0, f32::NAN] {
        let p = SamplerParams {
            temperature: t,
            logit_bias: vec![(3, 20.0), (3, -20.0)],
            repeat_penalty: 1.5,
            ..sampling(13)
        };
        let (toks, state) = gpu_sequence(&logits, &[20, 20], &p, 3);
        let want = cpu_sequence(&logits, &[20, 20], &p, 3);
        assert_eq!(toks, want.0);
        // 1500 first (20 is penalised twice), then both at 6: 20 wins the tie.
        assert_eq!(toks, [1500, 20, 20]);
        assert_eq!(
            state,
            XorShift::new(13).state(),
            "greedy must not advance the generator"
        );
    }
}

#[test]
fn large_pools_sort_exactly() {
    let _serial = serial();
    let mut rng = Rng(31);
    let vocab = 5000;
    // Coarse values: many ties, which must come out in id order.
    let mut logits: Vec<f32> = (0..vocab).map(|_| (rng.f() * 2.0).round() * 0.5).collect();
    for i in (0..vocab).step_by(97) {
        logits[i] = f32::NAN;
    }
    logits[4000] = f32::NEG_INFINITY;
    // The draw reaches deep into the pool only when the row is nearly flat
    // at a high temperature.
    let cases = [
        (
            "top-k 1500",
            SamplerParams {
                top_k: 1500,
                temperature: 50.0,
                ..sampling(41)
            },
        ),
        (
            "top-k 4999",
            SamplerParams {
                top_k: 4999,
                temperature: 50.0,
                ..sampling(42)
            },
        ),
        (
            "unbounded",
            SamplerParams {
                temperature: 50.0,
                ..sampling(43)
            },
        ),
        (
            "top-p",
            SamplerParams {
                top_p: 0.999,
                temperature: 20.0,
                ..sampling(44)
            },
        ),
        (
            "min-p",
            SamplerParams {
                min_p: 0.5,
                temperature: 3.0,
                ..sampling(45)
            },
        ),
        (
            "top-k 1025 + top-p",
            SamplerParams {
                top_k: 1025,
                top_p: 0.97,
                temperature: 30.0,
                ..sampling(46)
            },
        ),
    ];
    for (tag, p) in &cases {
        let toks = check_sequence(tag, &logits, &[], p, 30);
        let distinct = toks.iter().collect::<std::collections::BTreeSet<_>>().len();
        assert!(distinct >= 10, "{tag}: {toks:?}");
    }
}

#[test]
fn full_vocabulary_of_262144() {
    let _serial = serial();
    let mut rng = Rng(51);
    let logits: Vec<f32> = (0..262_144).map(|_| rng.f()).collect();
    for (tag, p) in [
        (
            "defaults",
            SamplerParams {
                seed: 52,
                ..SamplerParams::default()
            },
        ),
        (
            "unbounded",
            SamplerParams {
                temperature: 4.0,
                ..sampling(53)
            },
        ),
        (
            "top-p",
            SamplerParams {
                top_p: 0.5,
                ..sampling(54)
            },
        ),
    ] {
        let t = std::time::Instant::now();
        check_sequence(tag, &logits, &[1, 2, 3], &p, 3);
        eprintln!("{tag}: {:?}", t.elapsed());
    }
}

#[test]
fn full_sampler_refuses_bad_shapes() {
    let _serial = serial();
    let g = gpu();
    let lb = g.upload_f32("l", &[0.0; 4]).unwrap();
    let hb = g.upload_u32("h", &[0; 2]).unwrap();
    let rng = GpuSampler::rng_buffer(g, [1, 2, 3, 4]).unwrap();
    let short = g.upload_u32("r", &[1, 2]).unwrap();
    let mut s = GpuSampler::new(g);
    let p = SamplerParams::default();
    assert!(s.run(g, (&lb, &hb, &rng), 8, 0, &p).is_err());
    assert!(s.run(g, (&lb, &hb, &rng), 4, 2, &p).is_err());
    assert!(s.run(g, (&lb, &hb, &rng), 0, 0, &p).is_err());
    assert!(s.run(g, (&lb, &hb, &short), 4, 0, &p).is_err());
    assert!(s.run(g, (&lb, &hb, &rng), 4, 1, &p).is_ok());
}

#[test]
fn weights_identical_to_cpu() {
    let _serial = serial();
    use kestrel_sampling::{inverse_temperature, weight};
    let mut rng = Rng(61);
    // Differences across the whole range of the exp, with every rounding
    // case of the fixed point, plus the edges.
    let mut xs: Vec<f32> = (0..200_000).map(|_| rng.f() * 25.0).collect();
    xs.extend([
        0.0,
        -0.0,
        1e-30,
        -1e-30,
        1e-39,
        -87.0,
        -86.99,
        -87.01,
        88.0,
        f32::MAX,
        -f32::MAX,
    ]);
    for (max, t) in [
        (0.0f32, 1.0f32),
        (4.0, 0.7),
        (100.0, 1.0),
        (100.0, 0.05),
        (f32::MAX, 1.0),
        (1e-38, 3.0),
        (3.0, f32::INFINITY),
    ] {
        let inv_t = inverse_temperature(t);
        let row: Vec<f32> = xs.iter().map(|x| (max - x.abs()).max(-f32::MAX)).collect();
        let got = kestrel_gpu::sample::weights_on_device(gpu(), &row, max, inv_t).unwrap();
        let mut nonzero = 0;
        for (l, g) in row.iter().zip(&got) {
            let want = weight(*l, max, inv_t);
            assert_eq!(
                g.to_bits(),
                want.to_bits(),
                "weight({l}, {max}, {inv_t}): device {g}, cpu {want}"
            );
            nonzero += usize::from(want > 0.0);
        }
        assert!(
            nonzero > 10,
            "max {max}, t {t}: the weights must not all vanish"
        );
    }
}

#[test]
fn top_p_boundary_is_inclusive() {
    let _serial = serial();
    // Weights 1 and 1: the first reaches exactly half of the total, so
    // top-p 0.5 keeps it alone.
    let p = SamplerParams {
        top_p: 0.5,
        ..sampling(71)
    };
    assert_eq!(
        check_sequence("top-p 0.5", &[1.0, 1.0, f32::NEG_INFINITY], &[], &p, 20),
        [0; 20]
    );
    let p = SamplerParams {
        top_p: 0.51,
        ..sampling(72)
    };
    let toks = check_sequence("top-p 0.51", &[1.0, 1.0, f32::NEG_INFINITY], &[], &p, 20);
    assert!(toks.contains(&1), "{toks:?}");
}

#[test]
fn long_penalty_windows() {
    let _serial = serial();
    let mut rng = Rng(81);
    let vocab = 3000;
    let logits: Vec<f32> = (0..vocab).map(|_| rng.f()).collect();
    // 6000 tokens over 2000 ids (most repeat, some many times), and the
    // row's best id early on, so that only a long window sees it.
    let best = kestrel_sampling::argmax(&logits);
    let mut history: Vec<u32> = (0..6000)
        .map(|i| rng.below(if i % 3 == 0 { 50 } else { 2000 }))
        .collect();
    history[10] = best;
    history[700] = best;
    for (tag, last_n, t) in [
        ("whole history", -1, 1.0),
        ("last 5000", 5000, 0.8),
        ("greedy, whole history", -1, 0.0),
    ] {
        let p = SamplerParams {
            temperature: t,
            repeat_penalty: 1.4,
            repeat_last_n: last_n,
            frequency_penalty: 0.05,
            presence_penalty: 0.3,
            top_k: 100,
            ..sampling(82)
        };
        // The window must matter: only the whole history penalises the
        // best id (at positions 10 and 700), moving the argmax.
        let adjusted = kestrel_sampling::adjusted_logits(&p, &logits, &history);
        let moved = kestrel_sampling::argmax(&adjusted) != best;
        assert_eq!(moved, last_n < 0, "{tag}");
        check_sequence(tag, &logits, &history, &p, 8);
    }
}

#[test]
fn greedy_with_a_long_penalty_window() {
    let _serial = serial();
    let mut rng = Rng(91);
    let logits: Vec<f32> = (0..3000).map(|_| rng.f()).collect();
    let best = kestrel_sampling::argmax(&logits);
    let mut history: Vec<u32> = (0..6000)
        .map(|i| rng.below(if i % 3 == 0 { 50 } else { 2000 }))
        .collect();
    history[700] = best;
    let params = SamplerParams {
        repeat_last_n: 6000,
        repeat_penalty: 1.4,
        frequency_penalty: 0.05,
        presence_penalty: 0.3,
        ..plain()
    };
    let got = check("window 6000", &logits, &history, &params);
    assert_ne!(got, best, "the penalties must move the argmax");
    // The adjusted row itself, bit for bit (the greedy sampler adjusts in
    // place).
    let g = gpu();
    let lb = g.upload_f32("logits", &logits).unwrap();
    let mut hist = history.clone();
    hist.push(0);
    let hb = g.upload_u32("history", &hist).unwrap();
    GreedySampler::new(g)
        .run(g, (&lb, &hb), logits.len(), history.len(), &params)
        .unwrap();
    let adjusted = g.read_f32(&lb, logits.len()).unwrap();
    let want = kestrel_sampling::adjusted_logits(&params, &logits, &history);
    for (i, (a, w)) in adjusted.iter().zip(&want).enumerate() {
        assert_eq!(a.to_bits(), w.to_bits(), "logit {i}: device {a}, cpu {w}");
    }
}

#[test]
fn penalty_division_is_ieee_division() {
    let _serial = serial();
    let mut rng = Rng(101);
    let mut pairs: Vec<(f32, f32)> = Vec::new();
    // Typical: positive logits over repeat penalties.
    for _ in 0..50_000 {
        let a = (rng.f() + 4.0) * 4.0 + 1e-3;
        let b = (rng.f() + 4.0) * 0.5 + 0.01;
        pairs.push((a, b));
    }
    // Any bits: positive finite a (subnormals too), any b (subnormal,
    // negative, zero, infinite, NaN), results overflowing and underflowing.
    for _ in 0..100_000 {
        let a = f32::from_bits((rng.next() as u32 % 0x7f80_0000).max(1));
        let b = f32::from_bits(rng.next() as u32);
        pairs.push((a, b));
    }
    for a in [1e-45, 1e-40, 1.0, 3e38, f32::MAX] {
        for b in [0.0, -0.0, 1e-45, 1e-39, 0.5, 3.0, 1e38, f32::INFINITY, -2.5] {
            pairs.push((a, b));
        }
    }
    let got = kestrel_gpu::sample::divide_on_device(gpu(), &pairs).unwrap();
    for (&(a, b), g) in pairs.iter().zip(&got) {
        let want = a / b;
        if want.is_nan() {
            assert!(g.is_nan(), "{a:e} / {b:e}: device {g:e}, cpu NaN");
        } else {
            assert_eq!(
                g.to_bits(),
                want.to_bits(),
                "{a:e} / {b:e}: device {g:e}, cpu {want:e}"
            );
        }
    }
}
