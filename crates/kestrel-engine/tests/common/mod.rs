//! What the batching tests share: SmolLM2 loaded, the request parameters
//! they use, and a driver that runs requests through one scheduler,
//! joining at given steps.

#![allow(dead_code)]

use std::cell::RefCell;
use std::path::PathBuf;
use std::rc::Rc;

use kestrel_engine::{AdmitError, Batch, Engine, GenerateParams, Generation};
use kestrel_sampling::SamplerParams;

/// SmolLM2-135M on two threads.
pub fn load_smollm2() -> Engine {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../models/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(
        path.exists(),
        "{} is missing: run scripts/fetch-models.sh",
        path.display()
    );
    Engine::load(&path, 2).expect("SmolLM2 loads")
}

pub fn greedy(n: i64, n_ctx: usize) -> GenerateParams {
    GenerateParams {
        n_predict: n,
        n_ctx,
        sampler: SamplerParams::greedy(),
        ..GenerateParams::default()
    }
}

/// Seeded sampling with every penalty on, and logprobs.
pub fn sampled(n: i64, seed: u64, n_ctx: usize) -> GenerateParams {
    GenerateParams {
        n_predict: n,
        n_ctx,
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

pub struct Req {
    pub prompt: Vec<u32>,
    pub params: GenerateParams,
    /// The step at which it joins.
    pub join: usize,
}

/// Runs the requests through one batch; returns each one's result and
/// streamed text, and the most sequences seen running at once.
pub fn batched(
    batch: &mut Batch<'_>,
    reqs: &[Req],
    cache_prompt: bool,
) -> (Vec<(Generation, String)>, usize) {
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
            match batch.admit(i as u64, r.prompt.clone(), &r.params, cache_prompt, sink) {
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
        assert!(step < 10_000, "batch never finished");
    }
    let out = results
        .into_iter()
        .zip(streams)
        .map(|(g, s)| (g.expect("finished"), s.borrow().clone()))
        .collect();
    (out, most)
}
