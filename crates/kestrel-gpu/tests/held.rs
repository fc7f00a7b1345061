//! Held steps on SmolLM2 (`GpuModel::step_batch_held`, then
//! `GpuModel::finish_held`): a token masked on the device is the one the
//! CPU sampler chooses from the same logits with every disallowed logit set
//! to `-inf` (dense, sparse and single-token masks, masks allowing only
//! tokens outside the top-k, nothing allowed), greedy and seeded at several
//! settings, with the generator states equal afterwards; a forced token
//! leaves the generator alone; sampling through a held step is
//! `step_batch` bit for bit; and a batch mixes the three choices.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use kestrel_gguf::GgufFile;
use kestrel_gpu::model::{GpuModel, GpuSeq, TokenChoice};
use kestrel_gpu::Gpu;
use kestrel_model::ModelSpec;
use kestrel_sampling::{Sampler, SamplerParams, XorShift};

fn model() -> &'static GpuModel {
    static MODEL: OnceLock<GpuModel> = OnceLock::new();
    MODEL.get_or_init(|| {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../models/SmolLM2-135M-Instruct.Q4_1.gguf");
        let file =
            Arc::new(GgufFile::open(&path).unwrap_or_else(|e| {
                panic!("{}: {e} (run scripts/fetch-models.sh)", path.display())
            }));
        let spec = ModelSpec::from_gguf(&file).expect("spec");
        GpuModel::load(Gpu::new().expect("gpu"), file, spec, 64).expect("gpu load")
    })
}

/// Steps record into the device's one encoder, and a held step's logits
/// must not be overwritten before it finishes: tests take turns.
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
}

fn nv() -> usize {
    model().spec.hparams.n_vocab
}

/// A prompt of `n` ids below the vocabulary, from `seed`.
fn prompt(n: usize, seed: u64) -> Vec<u32> {
    let mut r = Rng(seed);
    (0..n).map(|_| r.below(nv()) as u32).collect()
}

/// A sequence with `prompt` run through (its last token not yet) and its
/// generator seeded with `seed`.
fn start(prompt: &[u32], seed: u64) -> GpuSeq {
    let m = model();
    let seq = m.new_seq();
    m.set_rng(&seq, XorShift::new(seed).state());
    m.write_tokens(&seq, 0, prompt).unwrap();
    m.prefill(&seq, 0, prompt.len() - 1).unwrap();
    seq
}

fn rng_state(seq: &GpuSeq) -> [u32; 4] {
    let s = model().gpu.read_u32(&seq.rng, 4).unwrap();
    [s[0], s[1], s[2], s[3]]
}

/// Which tokens a mask allows.
#[derive(Clone, Copy, Debug)]
enum Kind {
    /// About nine in ten, at random.
    Dense,
    /// About one in a hundred, at random.
    Sparse,
    /// One token, at random.
    Single,
    /// Every token but the `n` of highest logit.
    OutsideTop(usize),
    /// None.
    Nothing,
}

fn mask(kind: Kind, logits: &[f32], r: &mut Rng) -> Vec<bool> {
    let n = logits.len();
    match kind {
        Kind::Dense => (0..n).map(|_| r.below(10) != 0).collect(),
        Kind::Sparse => (0..n).map(|_| r.below(100) == 0).collect(),
        Kind::Single => {
            let t = r.below(n);
            (0..n).map(|i| i == t).collect()
        }
        Kind::OutsideTop(k) => {
            let mut order: Vec<usize> = (0..n).collect();
            order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
            let mut allowed = vec![true; n];
            for &i in &order[..k] {
                allowed[i] = false;
            }
            allowed
        }
        Kind::Nothing => vec![false; n],
    }
}

/// The mask's words: bit `t % 32` of word `t / 32` for token `t`.
fn words(allowed: &[bool]) -> Vec<u32> {
    let mut w = vec![0u32; allowed.len().div_ceil(32)];
    for (t, _) in allowed.iter().enumerate().filter(|(_, &a)| a) {
        w[t / 32] |= 1 << (t % 32);
    }
    w
}

/// What the CPU sees: the disallowed logits at `-inf`.
fn masked_row(logits: &[f32], allowed: &[bool]) -> Vec<f32> {
    logits
        .iter()
        .zip(allowed)
        .map(|(&l, &a)| if a { l } else { f32::NEG_INFINITY })
        .collect()
}

fn settings() -> Vec<SamplerParams> {
    let p = |temperature, top_k, top_p, min_p, seed| SamplerParams {
        temperature,
        top_k,
        top_p,
        min_p,
        seed,
        ..SamplerParams::default()
    };
    vec![
        SamplerParams {
            repeat_penalty: 1.2,
            ..SamplerParams::greedy()
        },
        p(0.8, 40, 0.95, 0.05, 7),
        SamplerParams {
            repeat_penalty: 1.3,
            frequency_penalty: 0.2,
            presence_penalty: 0.1,
            logit_bias: vec![(17, 2.0), (260, f32::NEG_INFINITY)],
            ..p(1.0, 0, 1.0, 0.0, 99)
        },
        p(1.5, 5, 0.8, 0.0, 12345),
        // A pool past the rank sort (radix sort on the device).
        p(0.4, 3000, 1.0, 0.0, 4242),
    ]
}

/// For every setting, a run of held steps with each kind of mask: the
/// device's token is the CPU sampler's over the masked logits, and the
/// generators end in the same state.
#[test]
fn masked_tokens_are_the_cpu_samplers_over_masked_logits() {
    let _s = serial();
    let m = model();
    let kinds = [
        Kind::Dense,
        Kind::Sparse,
        Kind::Single,
        Kind::OutsideTop(40),
        Kind::OutsideTop(3000),
        Kind::Nothing,
    ];
    for (si, params) in settings().into_iter().enumerate() {
        let prompt = prompt(6, 10 + si as u64);
        let seq = start(&prompt, params.seed);
        let mut cpu = Sampler::new(params.clone());
        let mut history = prompt.clone();
        let mut r = Rng(77 + si as u64);
        for (t, &kind) in kinds.iter().enumerate() {
            let pos = prompt.len() - 1 + t;
            let held = m
                .step_batch_held(&[(&seq, pos)], std::slice::from_ref(&params))
                .unwrap();
            let logits = m.read_batch_logits(1).unwrap();
            let allowed = mask(kind, &logits, &mut r);
            let w = words(&allowed);
            let got = m.finish_held(held, &[TokenChoice::Masked(&w)]).unwrap();
            let got = got.into_iter().next().unwrap().wait(&m.gpu).unwrap();
            let want = cpu.sample_with_history(&masked_row(&logits, &allowed), &history);
            assert_eq!(got, want, "setting {si}, {kind:?}");
            assert_eq!(m.read_token(&seq, pos + 1).unwrap(), got);
            match kind {
                Kind::Nothing => assert_eq!(got, 0, "nothing allowed: token 0"),
                _ => assert!(allowed[got as usize], "setting {si}, {kind:?}: {got}"),
            }
            history.push(got);
        }
        assert_eq!(rng_state(&seq), cpu.rng().state(), "setting {si}");
    }
}

/// A forced token goes into the history and comes back, and the generator
/// does not move: the next sampled step still draws the CPU's token.
#[test]
fn forced_tokens_leave_the_generator_alone() {
    let _s = serial();
    let m = model();
    let params = SamplerParams {
        temperature: 1.0,
        seed: 31,
        ..SamplerParams::default()
    };
    let prompt = prompt(5, 3);
    let seq = start(&prompt, params.seed);
    let mut cpu = Sampler::new(params.clone());
    let mut history = prompt.clone();
    for (t, forced) in [Some(123u32), Some(4567), None, Some(9), None]
        .iter()
        .enumerate()
    {
        let pos = prompt.len() - 1 + t;
        let before = rng_state(&seq);
        let held = m
            .step_batch_held(&[(&seq, pos)], std::slice::from_ref(&params))
            .unwrap();
        let logits = m.read_batch_logits(1).unwrap();
        let choice = forced.map_or(TokenChoice::Sample, TokenChoice::Forced);
        let got = m.finish_held(held, &[choice]).unwrap();
        let got = got.into_iter().next().unwrap().wait(&m.gpu).unwrap();
        match forced {
            Some(f) => {
                assert_eq!(got, *f);
                assert_eq!(rng_state(&seq), before, "step {t}: forced, no draw");
            }
            None => {
                assert_eq!(got, cpu.sample_with_history(&logits, &history), "step {t}");
                assert_ne!(rng_state(&seq), before, "step {t}: one draw");
            }
        }
        assert_eq!(m.read_token(&seq, pos + 1).unwrap(), got);
        history.push(got);
    }
    assert_eq!(rng_state(&seq), cpu.rng().state());
}

/// Sampling through a held step is `step_batch`: the same logits, tokens
/// and generator states bit for bit, step after step.
#[test]
fn held_sampling_equals_step_batch() {
    let _s = serial();
    let m = model();
    let params = vec![
        SamplerParams {
            repeat_penalty: 1.1,
            ..SamplerParams::greedy()
        },
        SamplerParams {
            temperature: 0.9,
            seed: 5,
            ..SamplerParams::default()
        },
    ];
    let prompts = [prompt(4, 21), prompt(7, 22)];
    let seqs = || -> Vec<GpuSeq> { (0..2).map(|k| start(&prompts[k], params[k].seed)).collect() };
    let (plain, held) = (seqs(), seqs());
    for t in 0..4 {
        let b_plain: Vec<(&GpuSeq, usize)> = (0..2)
            .map(|k| (&plain[k], prompts[k].len() - 1 + t))
            .collect();
        let b_held: Vec<(&GpuSeq, usize)> = (0..2)
            .map(|k| (&held[k], prompts[k].len() - 1 + t))
            .collect();
        let want: Vec<u32> = m
            .step_batch(&b_plain, &params)
            .unwrap()
            .into_iter()
            .map(|p| p.wait(&m.gpu).unwrap())
            .collect();
        let want_logits = m.read_batch_logits(2).unwrap();
        let h = m.step_batch_held(&b_held, &params).unwrap();
        let got: Vec<u32> = m
            .finish_held(h, &[TokenChoice::Sample, TokenChoice::Sample])
            .unwrap()
            .into_iter()
            .map(|p| p.wait(&m.gpu).unwrap())
            .collect();
        let got_logits = m.read_batch_logits(2).unwrap();
        assert_eq!(got, want, "step {t}");
        let same = got_logits
            .iter()
            .zip(&want_logits)
            .all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same, "step {t}: logits differ");
        for k in 0..2 {
            assert_eq!(
                rng_state(&held[k]),
                rng_state(&plain[k]),
                "step {t} seq {k}"
            );
        }
    }
}

/// Three sequences in one held step with mixed choices (masked, forced,
/// plain), rotating over the steps: each gets the CPU's token from its own
/// row, and its generator advances once per sampled non-greedy step only.
#[test]
fn a_batch_mixes_masked_forced_and_sampled_sequences() {
    let _s = serial();
    let m = model();
    let params = vec![
        SamplerParams::greedy(),
        SamplerParams {
            temperature: 0.7,
            top_k: 20,
            seed: 8,
            ..SamplerParams::default()
        },
        SamplerParams {
            temperature: 1.2,
            top_k: 0,
            top_p: 0.9,
            min_p: 0.0,
            repeat_penalty: 1.15,
            seed: 9,
            ..SamplerParams::default()
        },
    ];
    let prompts = [prompt(3, 41), prompt(6, 42), prompt(5, 43)];
    let seqs: Vec<GpuSeq> = (0..3).map(|k| start(&prompts[k], params[k].seed)).collect();
    let mut cpus: Vec<Sampler> = params.iter().cloned().map(Sampler::new).collect();
    let mut histories: Vec<Vec<u32>> = prompts.to_vec();
    let mut r = Rng(5);
    let nv = nv();
    for t in 0..6 {
        let batch: Vec<(&GpuSeq, usize)> = (0..3)
            .map(|k| (&seqs[k], prompts[k].len() - 1 + t))
            .collect();
        let held = m.step_batch_held(&batch, &params).unwrap();
        let logits = m.read_batch_logits(3).unwrap();
        let allowed: Vec<Vec<bool>> = (0..3)
            .map(|k| mask(Kind::Sparse, &logits[k * nv..(k + 1) * nv], &mut r))
            .collect();
        let w: Vec<Vec<u32>> = allowed.iter().map(|a| words(a)).collect();
        let forced = r.below(nv) as u32;
        let choice = |k: usize| match (k + t) % 3 {
            0 => TokenChoice::Masked(&w[k]),
            1 => TokenChoice::Forced(forced),
            _ => TokenChoice::Sample,
        };
        let choices: Vec<TokenChoice<'_>> = (0..3).map(choice).collect();
        let got: Vec<u32> = m
            .finish_held(held, &choices)
            .unwrap()
            .into_iter()
            .map(|p| p.wait(&m.gpu).unwrap())
            .collect();
        for k in 0..3 {
            let row = &logits[k * nv..(k + 1) * nv];
            let want = match choices[k] {
                TokenChoice::Masked(_) => {
                    cpus[k].sample_with_history(&masked_row(row, &allowed[k]), &histories[k])
                }
                TokenChoice::Forced(f) => f,
                TokenChoice::Sample => cpus[k].sample_with_history(row, &histories[k]),
            };
            let what = match choices[k] {
                TokenChoice::Masked(_) => "masked",
                TokenChoice::Forced(_) => "forced",
                TokenChoice::Sample => "sampled",
            };
            assert_eq!(got[k], want, "step {t} sequence {k} ({what})");
            histories[k].push(got[k]);
        }
    }
    for k in 0..3 {
        assert_eq!(rng_state(&seqs[k]), cpus[k].rng().state(), "sequence {k}");
    }
}

/// Finishing refuses a choice per sequence that does not add up, a mask of
/// the wrong length, a forced token outside the vocabulary, and a held
/// step whose logits another step has overwritten.
#[test]
fn finishing_refuses_what_does_not_fit() {
    let _s = serial();
    let m = model();
    let params = [SamplerParams::greedy()];
    let prompt = prompt(3, 61);
    let seq = start(&prompt, 1);
    let pos = prompt.len() - 1;
    let short = vec![u32::MAX; nv().div_ceil(32) - 1];
    let bad: [&[TokenChoice<'_>]; 4] = [
        &[],
        &[TokenChoice::Sample, TokenChoice::Sample],
        &[TokenChoice::Masked(&short)],
        &[TokenChoice::Forced(nv() as u32)],
    ];
    for choices in bad {
        let held = m.step_batch_held(&[(&seq, pos)], &params).unwrap();
        assert!(m.finish_held(held, choices).is_err(), "{choices:?}");
    }
    let held = m.step_batch_held(&[(&seq, pos)], &params).unwrap();
    m.step_logits(&seq, pos).unwrap();
    assert!(m.finish_held(held, &[TokenChoice::Sample]).is_err());
    // A prefill leaves the logits alone.
    let held = m.step_batch_held(&[(&seq, pos)], &params).unwrap();
    let other = start(&[1, 2, 3, 4], 2);
    m.prefill(&other, 0, 3).unwrap();
    assert!(m.finish_held(held, &[TokenChoice::Sample]).is_ok());
}
