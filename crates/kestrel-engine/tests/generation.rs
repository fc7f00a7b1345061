//! Generation semantics on a real model (SmolLM2-135M): the pipelined decode
//! loop produces exactly what the unpipelined one and a plain reference loop
//! produce; the sampler sees the full history; stop strings split across
//! tokens stop generation and are not emitted; streamed text is never
//! retracted; `ignore_eos`, `n_probs` and cancelling behave.

use std::sync::OnceLock;

mod common;

use kestrel_engine::{Engine, GenerateParams, Generation, Logits, StopReason};
use kestrel_sampling::{Sampler, SamplerParams};

fn engine() -> &'static Engine {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    ENGINE.get_or_init(common::load_smollm2)
}

/// Generates, also collecting what the callback saw.
fn run(prompt: &str, params: &GenerateParams) -> (Generation, Vec<String>, Vec<Option<u32>>) {
    let e = engine();
    let tokens = e.tokenize_prompt(prompt);
    let mut pieces = Vec::new();
    let mut ids = Vec::new();
    let g = e
        .generate(&tokens, params, |ev| {
            pieces.push(ev.text.to_string());
            ids.push(ev.token);
            true
        })
        .expect("generation runs");
    (g, pieces, ids)
}

fn greedy(n: i64) -> GenerateParams {
    GenerateParams {
        n_predict: n,
        n_ctx: 512,
        sampler: SamplerParams::greedy(),
        ..GenerateParams::default()
    }
}

/// Sampling at temperature 1 with every penalty on: a stale or missing
/// history would change the tokens.
fn penalized(n: i64, seed: u64) -> GenerateParams {
    GenerateParams {
        n_predict: n,
        n_ctx: 512,
        sampler: SamplerParams {
            temperature: 1.0,
            seed,
            repeat_penalty: 1.3,
            repeat_last_n: 64,
            frequency_penalty: 0.4,
            presence_penalty: 0.3,
            ..SamplerParams::default()
        },
        ..GenerateParams::default()
    }
}

const PROMPT: &str = "Once upon a time, in a small village by the sea,";

/// The loop spelled out: forward, sample with the whole history, repeat.
fn reference_tokens(prompt: &str, params: &GenerateParams) -> Vec<u32> {
    let e = engine();
    let mut history = e.tokenize_prompt(prompt);
    let n_prompt = history.len();
    let mut cache = e.model.new_cache(params.n_ctx);
    let mut sampler = Sampler::new(params.sampler.clone());
    let mut logits = e.model.forward(&history, 0, &mut cache, Logits::Last);
    loop {
        let tok = sampler.sample_with_history(&logits, &history);
        if e.tokenizer.is_eog(tok) {
            break;
        }
        history.push(tok);
        if history.len() - n_prompt == params.n_predict as usize {
            break;
        }
        logits = e
            .model
            .forward(&[tok], history.len() - 1, &mut cache, Logits::Last);
    }
    history.split_off(n_prompt)
}

#[test]
fn pipelined_equals_unpipelined_and_the_reference_loop() {
    for (what, params) in [
        ("greedy", greedy(40)),
        ("seeded, penalties", penalized(40, 7)),
        ("seeded, penalties", penalized(40, 12345)),
    ] {
        let want = reference_tokens(PROMPT, &params);
        let (piped, piped_pieces, _) = run(
            PROMPT,
            &GenerateParams {
                pipelined: true,
                ..params.clone()
            },
        );
        let (plain, plain_pieces, _) = run(
            PROMPT,
            &GenerateParams {
                pipelined: false,
                ..params.clone()
            },
        );
        assert_eq!(piped.tokens, want, "{what}: pipelined vs reference loop");
        assert_eq!(plain.tokens, want, "{what}: unpipelined vs reference loop");
        assert_eq!(piped.text, plain.text, "{what}: text");
        assert_eq!(piped_pieces, plain_pieces, "{what}: streamed pieces");
        assert_eq!(piped.stats.stop, plain.stats.stop, "{what}: stop reason");
        assert_eq!(
            piped.text,
            engine().tokenizer.decode(&piped.tokens, false),
            "{what}: text is the detokenized tokens"
        );
    }
}

#[test]
fn penalties_see_the_generated_tokens() {
    // Without penalties this prompt's greedy continuation repeats itself; a
    // strong presence penalty over the whole history must change it, which it
    // can only do if the generated tokens reach the sampler.
    let plain = run(PROMPT, &greedy(40)).0;
    let params = GenerateParams {
        sampler: SamplerParams {
            presence_penalty: 100.0,
            repeat_last_n: -1,
            ..SamplerParams::greedy()
        },
        ..greedy(40)
    };
    let (g, _, _) = run(PROMPT, &params);
    assert_ne!(g.tokens, plain.tokens);
    // A presence penalty of 100 (logits are far smaller) forbids repeats of any
    // token already generated.
    let mut seen = std::collections::HashSet::new();
    for t in &g.tokens {
        assert!(seen.insert(*t), "token {t} repeated: {:?}", g.tokens);
    }
}

/// Streams are never retracted: the pieces concatenate to the final text.
fn assert_stream_is_text(g: &Generation, pieces: &[String]) {
    assert_eq!(pieces.concat(), g.text);
}

#[test]
fn stop_string_across_tokens_cuts_the_output() {
    let (full, _, _) = run(PROMPT, &greedy(48));
    let e = engine();
    let text = &full.text;
    // Find a boundary between two tokens whose pieces are at least two chars
    // long, and take the last two chars of one and the first two of the next.
    let mut offset = 0;
    let mut chosen = None;
    for w in full.tokens.windows(2) {
        let a = e.tokenizer.decode(&w[..1], false);
        let b = e.tokenizer.decode(&w[1..], false);
        offset += a.len();
        let (ac, bc): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
        if ac.len() >= 3 && bc.len() >= 3 && !a.contains('\n') && !b.contains('\n') {
            let stop: String = ac[ac.len() - 2..].iter().chain(&bc[..2]).collect();
            chosen = Some((stop, offset));
            break;
        }
    }
    let (stop, boundary) = chosen.expect("two adjacent multi-char tokens in the output");
    // Generation stops at the first occurrence, which may come earlier.
    let cut = text.find(&stop).expect("stop string is in the text");
    assert!(cut < boundary);
    let want = &text[..cut];

    for pipelined in [true, false] {
        let params = GenerateParams {
            stop: vec![stop.clone()],
            pipelined,
            ..greedy(48)
        };
        let (g, pieces, ids) = run(PROMPT, &params);
        assert_eq!(g.stats.stop, StopReason::StopString, "stop {stop:?}");
        assert_eq!(g.text, want, "stop {stop:?}");
        assert!(!g.text.contains(&stop));
        assert_stream_is_text(&g, &pieces);
        // Generation ended at the token that completed the stop string.
        assert_eq!(g.tokens[..], full.tokens[..g.tokens.len()]);
        let done = e.tokenizer.decode(&g.tokens, false);
        assert!(done.contains(&stop), "{done:?}");
        let before = e.tokenizer.decode(&g.tokens[..g.tokens.len() - 1], false);
        assert!(!before.contains(&stop), "{before:?}");
        assert!(ids.iter().all(Option::is_some), "no flush after a stop");
    }
}

#[test]
fn partial_stop_match_is_held_then_flushed() {
    let (full, full_pieces, _) = run(PROMPT, &greedy(32));
    // A stop string that starts like the text's second word but never completes:
    // its start is held back while streaming, then released.
    let word = full
        .text
        .split_whitespace()
        .nth(1)
        .expect("two words of output");
    let stop = format!("{word}\u{7}never");
    let params = GenerateParams {
        stop: vec![stop],
        ..greedy(32)
    };
    let (g, pieces, _) = run(PROMPT, &params);
    assert_eq!(g.text, full.text);
    assert_eq!(g.tokens, full.tokens);
    assert_eq!(g.stats.stop, full.stats.stop);
    assert_stream_is_text(&g, &pieces);
    assert_ne!(pieces, full_pieces, "the partial match was held back");
}

#[test]
fn ignore_eos_generates_past_the_end_token() {
    let e = engine();
    let chat = e
        .render_chat(&[kestrel_tokenizer::chat::ChatMessage {
            role: "user".into(),
            content: "Say hi.".into(),
        }])
        .unwrap();
    let (ended, _, _) = run(&chat, &greedy(64));
    assert_eq!(ended.stats.stop, StopReason::EndOfGeneration);
    let n = ended.tokens.len() as i64 + 8;
    let params = GenerateParams {
        ignore_eos: true,
        ..greedy(n)
    };
    let (g, _, _) = run(&chat, &params);
    assert_eq!(g.stats.stop, StopReason::Length);
    assert_eq!(g.tokens.len() as i64, n);
    assert_eq!(g.tokens[..ended.tokens.len()], ended.tokens[..]);
    assert!(g.tokens.iter().all(|&t| !e.tokenizer.is_eog(t)));
}

#[test]
fn n_probs_reports_each_token() {
    let params = GenerateParams {
        n_probs: 5,
        ..greedy(12)
    };
    let (g, _, _) = run(PROMPT, &params);
    assert_eq!(g.logprobs.len(), g.tokens.len());
    for (lp, &tok) in g.logprobs.iter().zip(&g.tokens) {
        assert_eq!(lp.token, tok);
        assert_eq!(lp.top.len(), 5);
        // Greedy picks the most likely token.
        assert_eq!(lp.top[0].0, tok);
        assert!(lp.logprob <= 0.0 && lp.logprob == lp.top[0].1);
        assert!(lp.top.windows(2).all(|w| w[0].1 >= w[1].1));
    }
    let (plain, _, _) = run(PROMPT, &greedy(12));
    assert!(plain.logprobs.is_empty());
    assert_eq!(plain.tokens, g.tokens);
}

#[test]
fn cancelling_stops_and_leaves_later_calls_intact() {
    let e = engine();
    let tokens = e.tokenize_prompt(PROMPT);
    let params = greedy(24);
    let mut seen = 0;
    let g = e
        .generate(&tokens, &params, |ev| {
            seen += ev.token.is_some() as usize;
            seen < 5
        })
        .unwrap();
    assert_eq!(g.stats.stop, StopReason::Cancelled);
    assert_eq!(g.tokens.len(), 5);
    let (full, _, _) = run(PROMPT, &params);
    assert_eq!(full.tokens[..5], g.tokens[..]);
    assert_eq!(full.tokens.len(), 24);
    assert_eq!(full.stats.stop, StopReason::Length);
}

#[test]
fn logit_bias_outside_the_vocabulary_is_an_error() {
    let e = engine();
    let tokens = e.tokenize_prompt(PROMPT);
    let params = GenerateParams {
        sampler: SamplerParams {
            logit_bias: vec![(10_000_000, 1.0)],
            ..SamplerParams::greedy()
        },
        ..greedy(4)
    };
    let err = e.generate(&tokens, &params, |_| true).unwrap_err();
    assert!(err.to_string().contains("10000000"), "{err}");
}
