//! The greedy sampler on the device against the CPU sampler
//! (`kestrel_sampling`, temperature 0): the same token for random rows,
//! ties (first maximum), non-finite logits, tiny and 262k vocabularies,
//! logit bias and every penalty over the history window, written into the
//! history buffer at the next position with the rest of the history
//! untouched.

use kestrel_gpu::sample::{GreedyParams, GreedySampler};
use kestrel_gpu::Gpu;
use kestrel_sampling::{Sampler, SamplerParams};
use std::sync::OnceLock;

fn gpu() -> &'static Gpu {
    static GPU: OnceLock<Gpu> = OnceLock::new();
    GPU.get_or_init(|| Gpu::new().unwrap_or_else(|e| panic!("{e}")))
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

fn cpu_params(g: &GreedyParams) -> SamplerParams {
    SamplerParams {
        temperature: 0.0,
        logit_bias: g.logit_bias.clone(),
        repeat_last_n: g.repeat_last_n as i32,
        repeat_penalty: g.repeat_penalty,
        frequency_penalty: g.frequency_penalty,
        presence_penalty: g.presence_penalty,
        ..SamplerParams::default()
    }
}

/// The GPU's pick (and a check that only `history[pos]` changed).
fn gpu_pick(logits: &[f32], history: &[u32], params: &GreedyParams) -> u32 {
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

fn cpu_pick(logits: &[f32], history: &[u32], params: &GreedyParams) -> u32 {
    Sampler::new(cpu_params(params)).sample_with_history(logits, history)
}

fn check(tag: &str, logits: &[f32], history: &[u32], params: &GreedyParams) -> u32 {
    let want = cpu_pick(logits, history, params);
    let got = gpu_pick(logits, history, params);
    assert_eq!(got, want, "{tag}: gpu {got}, cpu {want}");
    want
}

fn plain() -> GreedyParams {
    GreedyParams {
        repeat_penalty: 1.0,
        ..GreedyParams::default()
    }
}

#[test]
fn greedy_matches_cpu_on_random_rows_and_ties() {
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
        let params = GreedyParams {
            logit_bias: match case % 5 {
                0 => vec![],
                1 => vec![(best, f32::NEG_INFINITY)],
                2 => vec![(3, 1.5), (3, 0.25), (9999, 5.0), (4, f32::NAN)],
                3 => vec![(rng.below(vocab), 6.0)],
                _ => vec![(best, -0.5), (1, f32::INFINITY)],
            },
            repeat_last_n: [0usize, 1, 8, 64, 1000][case % 5],
            repeat_penalty: [1.0f32, 1.3, 1.1, 2.0][case % 4],
            frequency_penalty: [0.0f32, 0.2, 0.7][case % 3],
            presence_penalty: [0.0f32, 0.1, 0.45][(case / 3) % 3],
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
    let g = gpu();
    let lb = g.upload_f32("l", &[0.0; 4]).unwrap();
    let hb = g.upload_u32("h", &[0; 2]).unwrap();
    let s = GreedySampler::new(g);
    assert!(s.run(g, (&lb, &hb), 8, 0, &plain()).is_err());
    assert!(s.run(g, (&lb, &hb), 4, 5, &plain()).is_err());
    assert!(s.run(g, (&lb, &hb), 0, 0, &plain()).is_err());
}
