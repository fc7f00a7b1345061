//! Continuous batching on a real model (SmolLM2-135M): sequences that run
//! together — joining at different steps, prefilling long prompts in chunks
//! while others decode, reusing a slot's cached prefix — each get exactly
//! what `Engine::generate` gives them alone (tokens, text, logprobs, stop
//! reason), and cancelling frees the slot.

use std::sync::OnceLock;

mod common;

use common::{batched, greedy, sampled, Req};
use kestrel_engine::{
    AdmitError, BackendOptions, Batch, Device, Engine, GenerateParams, Generation, StopReason,
};

fn engine() -> &'static Engine {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    ENGINE.get_or_init(common::load_smollm2)
}

const N_CTX: usize = 1024;

/// `slots` slots of `N_CTX` tokens on the CPU backend.
fn cpu_batch(e: &'static Engine, slots: usize, chunk: usize) -> Batch<'static> {
    let opts = BackendOptions {
        device: Device::Cpu,
        n_ctx: N_CTX,
        swa_full: false,
    };
    e.batch(opts, slots, chunk).expect("a CPU backend")
}

/// A prompt of about `words` words (long ones cross several chunks).
fn long_prompt(words: usize, topic: &str) -> String {
    let mut s = format!("Notes on {topic}:");
    for i in 0..words {
        s.push_str(&format!(" item{} {topic}", i % 37));
    }
    s.push_str("\nSummary:");
    s
}

fn alone(r: &Req) -> (Generation, String) {
    let mut streamed = String::new();
    let g = engine()
        .generate(&r.prompt, &r.params, |ev| {
            streamed.push_str(ev.text);
            true
        })
        .expect("generates");
    (g, streamed)
}

fn assert_same(tag: &str, got: &(Generation, String), want: &(Generation, String)) {
    let (g, gs) = got;
    let (w, ws) = want;
    assert_eq!(g.tokens, w.tokens, "{tag}: tokens");
    assert_eq!(g.text, w.text, "{tag}: text");
    assert_eq!(gs, ws, "{tag}: streamed text");
    assert_eq!(g.stats.stop, w.stats.stop, "{tag}: stop reason");
    assert_eq!(g.logprobs.len(), w.logprobs.len(), "{tag}: logprobs");
    for (a, b) in g.logprobs.iter().zip(&w.logprobs) {
        assert_eq!(format!("{a:?}"), format!("{b:?}"), "{tag}: logprobs");
    }
}

#[test]
fn batched_sequences_generate_what_they_generate_alone() {
    let e = engine();
    let t = |s: &str| e.tokenize_prompt(s);
    let reqs = vec![
        Req {
            prompt: t("The capital of France is"),
            params: greedy(24, N_CTX),
            join: 0,
        },
        Req {
            prompt: t("Once upon a time, in a small village,"),
            params: sampled(20, 7, N_CTX),
            join: 0,
        },
        // Over 256 tokens: prefilled in chunks while the others decode.
        Req {
            prompt: t(&long_prompt(200, "rivers")),
            params: greedy(12, N_CTX),
            join: 3,
        },
        Req {
            prompt: t("def fibonacci(n):"),
            params: GenerateParams {
                stop: vec!["\n\n".into(), "return".into()],
                ..sampled(30, 11, N_CTX)
            },
            join: 5,
        },
        // Joins when a slot frees up (four slots, five requests).
        Req {
            prompt: t("List three colors:"),
            params: sampled(16, 3, N_CTX),
            join: 1,
        },
    ];
    assert!(reqs[2].prompt.len() > 300, "the long prompt spans chunks");
    let want: Vec<_> = reqs.iter().map(alone).collect();
    let mut batch = cpu_batch(e, 4, 256);
    let (got, most) = batched(&mut batch, &reqs, true);
    assert_eq!(most, 4, "four sequences ran at once");
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_same(&format!("request {i}"), g, w);
        assert!(!g.0.tokens.is_empty(), "request {i} generated nothing");
    }

    // Again in the same batch: the slots now hold these prompts, so each
    // reuses a cached prefix, and still generates the same.
    let (again, _) = batched(&mut batch, &reqs, true);
    let mut reused = 0;
    for (i, (g, w)) in again.iter().zip(&want).enumerate() {
        assert_same(&format!("request {i}, cached"), g, w);
        assert!(g.0.stats.cache_n < reqs[i].prompt.len());
        reused += g.0.stats.cache_n;
    }
    assert!(
        reused > 300,
        "cached prefixes were reused ({reused} tokens)"
    );
}

#[test]
fn cancel_frees_the_slot_and_returns_what_was_generated() {
    let e = engine();
    let mut batch = cpu_batch(e, 2, 256);
    for id in 0..2 {
        let ok = batch.admit(
            id,
            e.tokenize_prompt("Count: one, two,"),
            &greedy(-1, N_CTX),
            false,
            Box::new(|_| true),
        );
        assert!(ok.is_ok());
    }
    assert!(!batch.has_free_slot());
    assert!(matches!(
        batch.admit(9, vec![1, 2], &greedy(4, N_CTX), false, Box::new(|_| true)),
        Err(AdmitError::Busy)
    ));
    for _ in 0..5 {
        assert!(batch.step().is_empty());
    }
    let g = batch.cancel(1).expect("running");
    assert_eq!(g.stats.stop, StopReason::Cancelled);
    // Read one step behind: the fifth step's token is still on its way.
    assert_eq!(g.tokens.len(), 4);
    assert!(batch.cancel(1).is_none(), "already gone");
    assert!(batch.has_free_slot());
    assert_eq!(batch.running(), 1);

    // A sink that returns false cancels at its next token.
    let mut calls = 0;
    batch
        .admit(
            2,
            e.tokenize_prompt("Hello"),
            &greedy(-1, N_CTX),
            false,
            Box::new(move |_| {
                calls += 1;
                calls < 3
            }),
        )
        .expect("a slot is free");
    let mut ended = Vec::new();
    for _ in 0..5 {
        ended.extend(batch.step());
    }
    assert_eq!(ended.len(), 1);
    let (id, g) = ended.pop().unwrap();
    let g = g.unwrap();
    assert_eq!(
        (id, g.stats.stop, g.tokens.len()),
        (2, StopReason::Cancelled, 3)
    );

    // Bad requests are refused by name, and take no slot.
    let too_long = vec![1u32; N_CTX];
    match batch.admit(3, too_long, &greedy(4, N_CTX), false, Box::new(|_| true)) {
        Err(AdmitError::Invalid(err)) => {
            let msg = err.to_string();
            assert!(msg.contains("1024"), "{msg}");
        }
        _ => panic!("a prompt as long as the slot's context must be refused"),
    }
    assert!(batch.has_free_slot());
}

/// A slot's cached prefix is reused only where its keys and values are what
/// a fresh run of the new prompt computes: the first tokens of a 90-token
/// prompt went through tiled attention (one chunk of 64 or more queries),
/// while a 40-token prompt starting with them computes them one query at
/// a time, so none of them is reused; a prompt whose own first chunk is
/// long again reuses them.
#[test]
fn reuse_only_what_a_fresh_run_of_the_new_prompt_computes() {
    let e = engine();
    let long = e.tokenize_prompt(&long_prompt(30, "rivers"));
    assert!((64..256).contains(&long.len()), "{}", long.len());
    let params = GenerateParams {
        n_probs: 3,
        ..greedy(8, N_CTX)
    };
    let req = |prompt: Vec<u32>| Req {
        prompt,
        params: params.clone(),
        join: 0,
    };
    let mut short = long[..30].to_vec();
    short.extend(e.tokenize_prompt("\nSummary:").iter().skip(1));
    assert!(short.len() < 64);
    let mut longer = long[..long.len() - 4].to_vec();
    longer.extend(e.tokenize_prompt(" and lakes.\nSummary:").iter().skip(1));
    assert!(longer.len() >= 64);

    let mut batch = cpu_batch(e, 1, 256);
    batched(&mut batch, &[req(long.clone())], false);
    let (got, _) = batched(&mut batch, &[req(short.clone())], true);
    assert_same("short after long", &got[0], &alone(&req(short)));
    assert_eq!(
        got[0].0.stats.cache_n, 0,
        "tiled positions reused one-query"
    );

    batched(&mut batch, &[req(long.clone())], false);
    let (got, _) = batched(&mut batch, &[req(longer.clone())], true);
    assert_same("longer after long", &got[0], &alone(&req(longer)));
    assert!(got[0].0.stats.cache_n > 30, "{}", got[0].0.stats.cache_n);
}
