//! Continuous batching on the GPU (lavapipe in CI) with SmolLM2-135M: each
//! sequence of a batch — joining at different steps, waiting for a slot,
//! prefilling its prompt over several steps, reusing a cached prefix —
//! gets the tokens (and logprobs) the device gives it when it is driven
//! alone, one unpipelined step at a time; stop strings cut the text as they
//! do alone.

use std::cell::RefCell;
use std::path::PathBuf;
use std::rc::Rc;

use kestrel_engine::{AdmitError, Batch, Engine, GenerateParams, Generation, StopReason};
use kestrel_gpu::model::GpuModel;
use kestrel_sampling::{logprobs, SamplerParams, XorShift};

const N_CTX: usize = 256;

fn engine() -> Engine {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../models/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(
        path.exists(),
        "{} is missing: run scripts/fetch-models.sh",
        path.display()
    );
    Engine::load(&path, 2).expect("SmolLM2 loads")
}

fn gpu_model(e: &Engine) -> GpuModel {
    let gpu = kestrel_gpu::Gpu::new().expect("a GPU adapter (lavapipe in CI)");
    GpuModel::load(gpu, e.file.clone(), e.model.spec.clone(), N_CTX).expect("uploads")
}

fn greedy(n: i64) -> GenerateParams {
    GenerateParams {
        n_predict: n,
        n_ctx: N_CTX,
        sampler: SamplerParams::greedy(),
        ..GenerateParams::default()
    }
}

fn sampled(n: i64, seed: u64) -> GenerateParams {
    GenerateParams {
        n_predict: n,
        n_ctx: N_CTX,
        sampler: SamplerParams {
            temperature: 0.9,
            seed,
            repeat_penalty: 1.2,
            repeat_last_n: 32,
            frequency_penalty: 0.3,
            presence_penalty: 0.2,
            ..SamplerParams::default()
        },
        n_probs: 3,
        ..GenerateParams::default()
    }
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
    let sample = e.device_sampling(params);
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

struct Req {
    prompt: Vec<u32>,
    params: GenerateParams,
    /// The step at which it joins.
    join: usize,
}

/// Runs the requests through one batch; returns each one's result and
/// streamed text, and the most sequences seen running at once.
fn batched(batch: &mut Batch<'_>, reqs: &[Req]) -> (Vec<(Generation, String)>, usize) {
    let streams: Vec<Rc<RefCell<String>>> = reqs.iter().map(|_| Rc::default()).collect();
    let mut results: Vec<Option<Generation>> = reqs.iter().map(|_| None).collect();
    let (mut step, mut most) = (0, 0);
    let mut waiting: Vec<usize> = (0..reqs.len()).collect();
    while results.iter().any(Option::is_none) {
        waiting.retain(|&i| {
            if reqs[i].join > step {
                return true;
            }
            let out = streams[i].clone();
            let sink = Box::new(move |ev: &kestrel_engine::TokenEvent<'_>| {
                out.borrow_mut().push_str(ev.text);
                true
            });
            let r = &reqs[i];
            match batch.admit(i as u64, r.prompt.clone(), &r.params, true, sink) {
                Ok(_) => false,
                Err(AdmitError::Busy) => true,
                Err(AdmitError::Invalid(e)) => panic!("request {i}: {e}"),
            }
        });
        most = most.max(batch.running());
        for (id, g) in batch.step() {
            results[id as usize] = Some(g.expect("generation runs"));
        }
        step += 1;
        assert!(step < 1000, "batch never finished");
    }
    let out = results
        .into_iter()
        .zip(streams)
        .map(|(g, s)| (g.expect("finished"), s.borrow().clone()))
        .collect();
    (out, most)
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
            params: with_eos_ignored(greedy(6)),
            join: 0,
        },
        Req {
            prompt: t("Once upon a time, in a small village,"),
            params: with_eos_ignored(sampled(6, 7)),
            join: 0,
        },
        // Prefilled over several steps (chunk 8) while the others decode.
        Req {
            prompt: t(
                "Notes on rivers: the Nile, the Amazon, the Danube, the Rhine, \
                 the Mekong and the Volga all flow into seas. Summary:",
            ),
            params: with_eos_ignored(greedy(4)),
            join: 1,
        },
        // Waits for a slot (three slots, four requests).
        Req {
            prompt: t("List three colors:"),
            params: with_eos_ignored(sampled(5, 3)),
            join: 0,
        },
    ];
    assert!(reqs[2].prompt.len() > 16, "the long prompt spans chunks");
    let want: Vec<_> = reqs
        .iter()
        .map(|r| device_alone(&e, &model, &r.prompt, &r.params))
        .collect();
    let mut batch = Batch::on_gpu(&e, &model, 3, N_CTX, 8).expect("slots fit");
    let (got, most) = batched(&mut batch, &reqs);
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
    let (again, _) = batched(&mut batch, &reqs);
    let mut reused = 0;
    for (i, ((g, _), (tokens, _))) in again.iter().zip(&want).enumerate() {
        assert_eq!(&g.tokens, tokens, "request {i}, cached: tokens");
        reused += g.stats.cache_n;
    }
    assert!(reused > 10, "cached prefixes were reused ({reused} tokens)");

    // A stop string cuts the text where it cuts it alone; EOS and the
    // length limit end sequences one step behind without changing them.
    let free = greedy(12);
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
    let (cut, _) = batched(&mut batch, std::slice::from_ref(&stop));
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
    let model = gpu_model(&e);
    let mut batch = Batch::on_gpu(&e, &model, 2, N_CTX, 64).expect("slots fit");
    let prompt = e.tokenize_prompt("Count: one, two,");
    batch
        .admit(0, prompt.clone(), &greedy(0), false, Box::new(|_| true))
        .unwrap();
    batch
        .admit(1, prompt, &greedy(-1), false, Box::new(|_| true))
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
