//! The device sampler over a token mask (`Sampler::run_masked`) against
//! the CPU sampler over the same row with every disallowed logit set to
//! `-inf`: random rows (with ties, NaN and infinities) of vocabularies that
//! do and do not fill their last mask word, dense, sparse, single-token,
//! empty and outside-the-top-k masks, greedy and seeded at several
//! settings; each call's token and the generator state afterwards match.

use kestrel_gpu::sample::Sampler as GpuSampler;
use kestrel_gpu::Gpu;
use kestrel_sampling::{Sampler, SamplerParams, XorShift};
use std::sync::{Mutex, OnceLock};

fn gpu() -> &'static Gpu {
    static GPU: OnceLock<Gpu> = OnceLock::new();
    GPU.get_or_init(|| Gpu::new().unwrap_or_else(|e| panic!("{e}")))
}

/// A step records into the device's one encoder: tests take turns.
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
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    /// Logits on a coarse grid (many ties), with some NaN and infinities.
    fn logit(&mut self) -> f32 {
        match self.below(200) {
            0 => f32::NAN,
            1 => f32::NEG_INFINITY,
            2 => f32::INFINITY,
            _ => (self.below(64) as f32 - 32.0) / 8.0,
        }
    }
}

fn masks(logits: &[f32], r: &mut Rng) -> Vec<(&'static str, Vec<bool>)> {
    let n = logits.len();
    let single = r.below(n);
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| {
        let key = |i: usize| {
            if logits[i].is_nan() {
                f32::NEG_INFINITY
            } else {
                logits[i]
            }
        };
        key(b).total_cmp(&key(a)).then(a.cmp(&b))
    });
    let mut outside = vec![true; n];
    for &i in &order[..40] {
        outside[i] = false;
    }
    vec![
        ("dense", (0..n).map(|_| r.below(10) != 0).collect()),
        ("sparse", (0..n).map(|_| r.below(100) == 0).collect()),
        ("single", (0..n).map(|i| i == single).collect()),
        ("outside the top 40", outside),
        ("the last token only", (0..n).map(|i| i == n - 1).collect()),
        ("nothing", vec![false; n]),
    ]
}

fn words(allowed: &[bool]) -> Vec<u32> {
    let mut w = vec![0u32; allowed.len().div_ceil(32)];
    for (t, _) in allowed.iter().enumerate().filter(|(_, &a)| a) {
        w[t / 32] |= 1 << (t % 32);
    }
    w
}

#[test]
fn masked_device_draws_are_the_cpu_samplers_over_masked_rows() {
    let _s = serial();
    let g = gpu();
    let settings = [
        SamplerParams {
            repeat_penalty: 1.3,
            logit_bias: vec![(3, 1.0), (5, f32::INFINITY)],
            ..SamplerParams::greedy()
        },
        SamplerParams {
            temperature: 0.8,
            seed: 1,
            ..SamplerParams::default()
        },
        SamplerParams {
            temperature: 1.3,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            frequency_penalty: 0.3,
            presence_penalty: 0.2,
            seed: 2,
            ..SamplerParams::default()
        },
        SamplerParams {
            temperature: 0.5,
            top_k: 3,
            top_p: 0.7,
            min_p: 0.1,
            seed: 3,
            ..SamplerParams::default()
        },
    ];
    let mut r = Rng(0x5eed);
    for vocab in [1000usize, 1007, 5003] {
        let logits: Vec<f32> = (0..vocab).map(|_| r.logit()).collect();
        let history: Vec<u32> = (0..30).map(|_| r.below(vocab) as u32).collect();
        let lb = g.upload_f32("logits", &logits).unwrap();
        for p in &settings {
            let cases = masks(&logits, &mut r);
            let mut hist = history.clone();
            hist.resize(history.len() + cases.len() + 1, 7);
            let hb = g.upload_u32("history", &hist).unwrap();
            let rng = GpuSampler::rng_buffer(g, XorShift::new(p.seed).state()).unwrap();
            let mut gpu_s = GpuSampler::new(g);
            let bufs: Vec<wgpu::Buffer> = cases
                .iter()
                .map(|(_, a)| g.upload_u32("mask", &words(a)).unwrap())
                .collect();
            g.begin_step();
            for (i, m) in bufs.iter().enumerate() {
                gpu_s
                    .run_masked(g, (&lb, &hb, &rng), vocab, history.len() + i, p, Some(m))
                    .unwrap();
            }
            g.finish_step();
            let got = g.read_u32(&hb, hist.len()).unwrap();
            let mut cpu = Sampler::new(p.clone());
            let mut seen = history.clone();
            for (i, (what, allowed)) in cases.iter().enumerate() {
                let row: Vec<f32> = logits
                    .iter()
                    .zip(allowed)
                    .map(|(&l, &a)| if a { l } else { f32::NEG_INFINITY })
                    .collect();
                let want = cpu.sample_with_history(&row, &seen);
                let tok = got[history.len() + i];
                assert_eq!(tok, want, "vocab {vocab}, {p:?}, {what}");
                seen.push(tok);
            }
            let state = g.read_u32(&rng, 4).unwrap();
            assert_eq!(state, cpu.rng().state(), "vocab {vocab}, {p:?}");
        }
    }
}

/// A mask shorter than the vocabulary's words is refused.
#[test]
fn a_short_mask_is_refused() {
    let _s = serial();
    let g = gpu();
    let lb = g.upload_f32("logits", &[0.0; 33]).unwrap();
    let hb = g.upload_u32("history", &[0; 2]).unwrap();
    let rng = GpuSampler::rng_buffer(g, [1, 2, 3, 4]).unwrap();
    let short = g.upload_u32("mask", &[u32::MAX]).unwrap();
    let fits = g.upload_u32("mask", &[u32::MAX, 1]).unwrap();
    let mut s = GpuSampler::new(g);
    let p = SamplerParams::greedy();
    assert!(s
        .run_masked(g, (&lb, &hb, &rng), 33, 0, &p, Some(&short))
        .is_err());
    assert!(s
        .run_masked(g, (&lb, &hb, &rng), 33, 0, &p, Some(&fits))
        .is_ok());
}
