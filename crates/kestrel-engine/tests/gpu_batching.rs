//! Continuous batching on the GPU (lavapipe in CI) with SmolLM2-135M: each
//! sequence of a batch — joining at different steps, waiting for a slot,
//! prefilling its prompt over several steps, reusing a cached prefix —
//! gets the tokens (and logprobs) the device gives it when it is driven
//! alone, one unpipelined step at a time; stop strings cut the text as they
//! do alone.

mod common;

use common::{batched, greedy, sampled, Req};
use kestrel_engine::{BackendOptions, Batch, Device, Engine, GenerateParams, StopReason};
use kestrel_gpu::model::GpuModel;
use kestrel_sampling::{logprobs, XorShift};

const N_CTX: usize = 256;

fn engine() -> Engine {
    common::load_smollm2()
}

/// `slots` slots of `N_CTX` tokens on the GPU backend.
fn gpu_batch(e: &Engine, slots: usize, chunk: usize) -> Batch<'_> {
    let opts = BackendOptions {
        device: Device::Gpu,
        n_ctx: N_CTX,
        swa_full: false,
    };
    e.batch(opts, slots, chunk)
        .expect("a GPU adapter (lavapipe in CI)")
}

/// The model uploaded on its own, for driving the device directly.
fn gpu_model(e: &Engine) -> GpuModel {
    let gpu = kestrel_gpu::Gpu::new().expect("a GPU adapter (lavapipe in CI)");
    GpuModel::load(gpu, e.file.clone(), e.model.spec.clone(), N_CTX).expect("uploads")
}

/// The device driven directly, without the batch: prefill, then one step
/// at a time, each waited for; returns the tokens and each step's logprobs.
/// EOS is not special here, so requests use `ignore_eos`.
fn device_alone(
    e: &Engine,
    model: &GpuModel,
    prompt: &[u32],
    params: &GenerateParams,
) -> (Vec<u32>, Vec<String>) {
    let seq = model.new_seq();
    model.set_rng(&seq, XorShift::new(params.sampler.seed).state());
    model.write_tokens(&seq, 0, prompt).unwrap();
    model.prefill(&seq, 0, prompt.len() - 1).unwrap();
    let sample = e.sampler_params(params);
    let (mut tokens, mut lps) = (Vec::new(), Vec::new());
    for k in 0..params.n_predict as usize {
        let pos = prompt.len() - 1 + k;
        model.step(&seq, pos, Some(&sample)).unwrap();
        let token = model.read_token(&seq, pos + 1).unwrap();
        if params.n_probs > 0 {
            let logits = model.read_logits().unwrap();
            lps.push(format!("{:?}", logprobs(&logits, token, params.n_probs)));
        }
        tokens.push(token);
    }
    (tokens, lps)
}

#[test]
fn gpu_batch_gives_each_sequence_its_tokens_alone() {
    let e = engine();
    let model = gpu_model(&e);
    let t = |s: &str| e.tokenize_prompt(s);
    let with_eos_ignored = |p: GenerateParams| GenerateParams {
        ignore_eos: true,
        ..p
    };
    let reqs = vec![
        Req {
            prompt: t("The capital of France is"),
            params: with_eos_ignored(greedy(6, N_CTX)),
            join: 0,
        },
        Req {
            prompt: t("Once upon a time, in a small village,"),
            params: with_eos_ignored(sampled(6, 7, N_CTX)),
            join: 0,
        },
        // Prefilled over several steps (chunk 8) while the others decode.
        Req {
            prompt: t(
                "Notes on rivers: the Nile, the Amazon, the Danube, the Rhine, \
                 the Mekong and the Volga all flow into seas. Summary:",
            ),
            params: with_eos_ignored(greedy(4, N_CTX)),
            join: 1,
        },
        // Waits for a slot (three slots, four requests).
        Req {
            prompt: t("List three colors:"),
            params: with_eos_ignored(sampled(5, 3, N_CTX)),
            join: 0,
        },
    ];
    assert!(reqs[2].prompt.len() > 16, "the long prompt spans chunks");
    let want: Vec<_> = reqs
        .iter()
        .map(|r| device_alone(&e, &model, &r.prompt, &r.params))
        .collect();
    let mut batch = gpu_batch(&e, 3, 8);
    let (got, most) = batched(&mut batch, &reqs, true);
    assert_eq!(most, 3, "three sequences ran at once");
    for (i, ((g, streamed), (tokens, lps))) in got.iter().zip(&want).enumerate() {
        assert_eq!(&g.tokens, tokens, "request {i}: tokens");
        assert_eq!(g.stats.stop, StopReason::Length, "request {i}");
        assert_eq!(&g.text, streamed, "request {i}: streamed text");
        assert_eq!(
            g.text,
            e.tokenizer.decode(tokens, false),
            "request {i}: text"
        );
        let got_lps: Vec<String> = g.logprobs.iter().map(|l| format!("{l:?}")).collect();
        assert_eq!(&got_lps, lps, "request {i}: logprobs");
    }

    // Again: each slot now holds a prompt, so a repeated one reuses its
    // cached prefix, and gives the same tokens.
    let (again, _) = batched(&mut batch, &reqs, true);
    let mut reused = 0;
    for (i, ((g, _), (tokens, _))) in again.iter().zip(&want).enumerate() {
        assert_eq!(&g.tokens, tokens, "request {i}, cached: tokens");
        reused += g.stats.cache_n;
    }
    assert!(reused > 10, "cached prefixes were reused ({reused} tokens)");

    // A stop string cuts the text where it cuts it alone; EOS and the
    // length limit end sequences one step behind without changing them.
    let free = greedy(12, N_CTX);
    let (plain, _) = device_alone(&e, &model, &reqs[0].prompt, &with_eos_ignored(free.clone()));
    let text = e.tokenizer.decode(&plain, false);
    let word = text
        .split_whitespace()
        .nth(3)
        .expect("twelve tokens make four words")
        .to_owned();
    let stop = Req {
        prompt: reqs[0].prompt.clone(),
        params: GenerateParams {
            stop: vec![word.clone()],
            ..with_eos_ignored(free)
        },
        join: 0,
    };
    let (cut, _) = batched(&mut batch, std::slice::from_ref(&stop), true);
    let (g, streamed) = &cut[0];
    assert_eq!(g.stats.stop, StopReason::StopString);
    assert_eq!(&g.text, streamed);
    assert_eq!(
        g.text,
        text[..text.find(&word).unwrap()],
        "cut before '{word}'"
    );
}

#[test]
fn gpu_batch_zero_tokens_and_cancel() {
    let e = engine();
    let mut batch = gpu_batch(&e, 2, 64);
    let prompt = e.tokenize_prompt("Count: one, two,");
    batch
        .admit(
            0,
            prompt.clone(),
            &greedy(0, N_CTX),
            false,
            Box::new(|_| true),
        )
        .unwrap();
    batch
        .admit(1, prompt, &greedy(-1, N_CTX), false, Box::new(|_| true))
        .unwrap();
    let mut ended = Vec::new();
    for _ in 0..4 {
        ended.extend(batch.step());
    }
    let (id, g) = ended.pop().expect("the zero-token request ended");
    assert!(ended.is_empty());
    let g = g.unwrap();
    assert_eq!(
        (id, g.tokens.len(), g.stats.stop),
        (0, 0, StopReason::Length)
    );
    let g = batch.cancel(1).expect("running");
    assert_eq!(g.stats.stop, StopReason::Cancelled);
    // Four steps submitted, read one behind: three tokens came back.
    assert_eq!(g.tokens.len(), 3);
    assert!(batch.is_idle());
}
