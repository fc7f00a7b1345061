//! Constrained decoding in the one loop, with a hand-made constraint on
//! SmolLM2: only digit tokens, one forced token, then the end. Every token
//! obeys it, and a seeded constrained request gives the same tokens
//! pipelined or not, alone or among others (grammars themselves are
//! `kestrel-constrain`'s tests; the server's tests use real schemas).

use std::sync::{Arc, OnceLock};

mod common;

use common::{batched, sampled, Req};
use kestrel_engine::{
    Allowed, BackendOptions, Constraint, ConstraintSource, Device, Engine, GenerateParams,
    StopReason, TokenConstraint,
};

fn engine() -> &'static Engine {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    ENGINE.get_or_init(common::load_smollm2)
}

/// Digits only; the third token is `forced`; the sixth is the end.
#[derive(Clone)]
struct Digits {
    words: Arc<[u32]>,
    forced: u32,
}

struct DigitsState {
    rule: Digits,
    n: usize,
}

impl ConstraintSource for Digits {
    fn start(&self) -> Result<Box<dyn TokenConstraint>, String> {
        Ok(Box::new(DigitsState {
            rule: self.clone(),
            n: 0,
        }))
    }
    fn describe(&self) -> String {
        "digits".into()
    }
}

impl TokenConstraint for DigitsState {
    fn next(&mut self) -> Result<Allowed, String> {
        Ok(match self.n {
            2 => Allowed::Only(self.rule.forced),
            5 => Allowed::End,
            _ => Allowed::Mask(self.rule.words.clone()),
        })
    }
    fn accept(&mut self, token: u32) -> Result<(), String> {
        let ok = if self.n == 2 {
            token == self.rule.forced
        } else {
            kestrel_sampling::mask::allows(&self.rule.words, token)
        };
        self.n += 1;
        ok.then_some(())
            .ok_or(format!("token {token} was not allowed"))
    }
}

fn digits_rule(e: &Engine) -> Digits {
    let n = e.tokenizer.vocab_size();
    let mut words = vec![0u32; n.div_ceil(32)];
    let mut forced = None;
    for t in 0..n as u32 {
        let piece = e.tokenizer.token_to_piece(t, false);
        if !piece.is_empty() && piece.iter().all(u8::is_ascii_digit) {
            words[(t / 32) as usize] |= 1 << (t % 32);
            if piece == b"7" {
                forced = Some(t);
            }
        }
    }
    Digits {
        words: words.into(),
        forced: forced.expect("a token for 7"),
    }
}

fn constrained(seed: u64) -> GenerateParams {
    GenerateParams {
        constraint: Some(Constraint(Arc::new(digits_rule(engine())))),
        ..sampled(40, seed, 512)
    }
}

#[test]
fn every_token_obeys_the_constraint_and_the_end_stops_the_sequence() {
    let e = engine();
    let rule = digits_rule(e);
    let prompt = e.tokenize_prompt("Write a long random number:");
    for seed in [1, 2, 3] {
        let g = e
            .generate(&prompt, &constrained(seed), |_| true)
            .expect("generates");
        assert_eq!(g.tokens.len(), 5, "seed {seed}: {:?}", g.tokens);
        assert_eq!(g.tokens[2], rule.forced, "seed {seed}");
        assert!(g.text.bytes().all(|b| b.is_ascii_digit()), "{:?}", g.text);
        assert_eq!(g.stats.stop, StopReason::EndOfGeneration);
    }
}

#[test]
fn a_seeded_constrained_request_is_the_same_pipelined_or_not_alone_or_batched() {
    let e = engine();
    let prompts = [
        "Write a long random number:",
        "The year it happened was",
        "Count with me: one, two,",
    ];
    let alone: Vec<_> = prompts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let params = constrained(10 + i as u64);
            let prompt = e.tokenize_prompt(p);
            let piped = e.generate(&prompt, &params, |_| true).expect("generates");
            let unpiped = GenerateParams {
                pipelined: false,
                ..params
            };
            let plain = e.generate(&prompt, &unpiped, |_| true).expect("generates");
            assert_eq!(piped.tokens, plain.tokens, "prompt {i}: pipelined vs not");
            piped
        })
        .collect();
    // Among unconstrained neighbours, joining at different steps.
    let mut reqs: Vec<Req> = prompts
        .iter()
        .enumerate()
        .map(|(i, p)| Req {
            prompt: e.tokenize_prompt(p),
            params: constrained(10 + i as u64),
            join: i,
        })
        .collect();
    reqs.push(Req {
        prompt: e.tokenize_prompt("Once upon a time"),
        params: sampled(30, 99, 512),
        join: 0,
    });
    let opts = BackendOptions {
        device: Device::Cpu,
        n_ctx: 512,
        swa_full: false,
    };
    let mut batch = e.batch(opts, 4, 64).expect("a CPU batch");
    let (got, most) = batched(&mut batch, &reqs, false);
    assert!(most >= 3, "ran together ({most})");
    for (i, want) in alone.iter().enumerate() {
        assert_eq!(got[i].0.tokens, want.tokens, "prompt {i}: batched vs alone");
    }
}

#[test]
fn the_gpu_gives_a_constrained_request_the_cpus_tokens() {
    let e = engine();
    let prompts = [
        "Write a long random number:",
        "The year it happened was",
        "Count with me: one, two,",
    ];
    let mut reqs: Vec<Req> = prompts
        .iter()
        .enumerate()
        .map(|(i, p)| Req {
            prompt: e.tokenize_prompt(p),
            params: constrained(20 + i as u64),
            join: i,
        })
        .collect();
    reqs.push(Req {
        prompt: e.tokenize_prompt("Once upon a time"),
        params: sampled(12, 98, 512),
        join: 1,
    });
    let run = |device| {
        let opts = BackendOptions {
            device,
            n_ctx: 512,
            swa_full: false,
        };
        let mut batch = e.batch(opts, 4, 64).expect("a backend (lavapipe in CI)");
        batched(&mut batch, &reqs, false).0
    };
    let (cpu, gpu) = (run(Device::Cpu), run(Device::Gpu));
    for (i, (c, g)) in cpu.iter().zip(&gpu).enumerate() {
        assert_eq!(g.0.tokens, c.0.tokens, "request {i}: GPU vs CPU");
        assert_eq!(g.1, c.1, "request {i}: streamed text");
    }
}

/// A JSON schema compiled against SmolLM2's vocabulary.
fn schema_constraint(schema: serde_json::Value) -> Constraint {
    let grammar = engine()
        .compile(&kestrel_engine::Spec::JsonSchema(schema))
        .expect("the schema compiles");
    Constraint(Arc::new(kestrel_engine::GrammarConstraint::eager(
        grammar,
        "json schema",
    )))
}

#[test]
fn a_json_schema_holds_the_sampled_text_to_it() {
    let e = engine();
    let schema = serde_json::json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 12},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
            "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3}
        },
        "required": ["name", "age", "tags"],
        "additionalProperties": false
    });
    let prompt = e.tokenize_prompt("A person, as JSON:");
    for seed in 0..4 {
        let params = GenerateParams {
            constraint: Some(schema_constraint(schema.clone())),
            ..sampled(200, seed, 512)
        };
        let g = e.generate(&prompt, &params, |_| true).expect("generates");
        assert_eq!(g.stats.stop, StopReason::EndOfGeneration, "{:?}", g.text);
        let v: serde_json::Value = serde_json::from_str(&g.text).expect("JSON");
        let age = v["age"].as_i64().expect("an integer age");
        assert!((0..=120).contains(&age), "{v}");
        assert!(
            v["name"].as_str().is_some_and(|n| n.chars().count() <= 12),
            "{v}"
        );
        assert!(v.as_object().unwrap().len() == 3, "{v}");
    }
}

#[test]
fn a_lazy_grammar_starts_at_its_trigger() {
    let e = engine();
    let grammar = e
        .compile(&kestrel_engine::Spec::Lark(
            "start: \", 1\" /[0-9]/ \"!\"\n".into(),
        ))
        .expect("compiles");
    let lazy = kestrel_engine::GrammarConstraint::lazy(grammar, &[", 1".into()], "lazy");
    // Greedy, the model counts on: " 8, 9, 10, 11, ..."
    let prompt = e.tokenize_prompt("1, 2, 3, 4, 5, 6, 7,");
    let free = e
        .generate(&prompt, &common::greedy(12, 512), |_| true)
        .expect("generates");
    let at = free.text.find(", 1").expect("the model counts past 9");
    let params = GenerateParams {
        constraint: Some(Constraint(Arc::new(lazy))),
        ..common::greedy(40, 512)
    };
    let g = e.generate(&prompt, &params, |_| true).expect("generates");
    // Free text up to the trigger; from it on, the grammar to its end.
    assert_eq!(g.text[..at], free.text[..at]);
    let call = &g.text[at..];
    assert_eq!(call.len(), 5, "{:?}", g.text);
    assert!(
        call.starts_with(", 1") && call.ends_with('!'),
        "{:?}",
        g.text
    );
    assert_eq!(g.stats.stop, StopReason::EndOfGeneration);
}
