//! Every kind of constraint compiles and constrains on each test model's
//! real vocabulary; end-of-generation, forcing, rollback and refusals.

mod common;

use common::{compile, models, qwen, random_walk, Rng, WalkEnd};
use kestrel_constrain::{ConstraintError, Next, Spec, Vocabulary};
use serde_json::json;

#[test]
fn vocabulary_bytes_are_the_decoded_text() {
    for model in models() {
        let v = &model.vocab;
        assert_eq!(v.n_vocab(), model.tok.vocab_size(), "{}", model.name);
        assert!(!v.eog_ids().is_empty(), "{}", model.name);
        for &e in v.eog_ids() {
            assert_eq!(
                v.token_bytes(e).first(),
                Some(&0xFF),
                "{}: EOG {e}",
                model.name
            );
        }
        // A newline token's bytes are a real newline (SPM's `<0x0A>` or
        // byte-level BPE's `Ċ` are not).
        let nl = model.tok.encode("\n", false, false);
        assert_eq!(nl.len(), 1, "{}", model.name);
        assert_eq!(v.token_bytes(nl[0]), b"\n", "{}", model.name);
        // A word with a leading space.
        for t in model.tok.encode("hello world", false, false) {
            let b = v.token_bytes(t);
            assert_eq!(b, model.tok.token_to_piece(t, false), "{}", model.name);
            assert!(std::str::from_utf8(b).is_ok(), "{}", model.name);
        }
        // Control tokens are special; none renders as text.
        for id in 0..v.n_vocab() as u32 {
            if model.tok.is_control(id) {
                let b = v.token_bytes(id);
                assert!(b.is_empty() || b[0] == 0xFF, "{}: control {id}", model.name);
            }
        }
    }
}

#[test]
fn qwen_has_two_eog_ids_and_fast_forwards() {
    let q = qwen();
    let im_end = q.tok.token_id("<|im_end|>").unwrap();
    let eot = q.tok.token_id("<|endoftext|>").unwrap();
    assert!(q.vocab.eog_ids().contains(&im_end) && q.vocab.eog_ids().contains(&eot));
    assert!(q.vocab.fast_forwards());
    let plain = Vocabulary::new(&q.tok).unwrap();
    assert!(!plain.fast_forwards());
}

/// Each kind of spec, with text it must accept and text it must refuse.
fn cases() -> Vec<(Spec, &'static str, &'static str)> {
    vec![
        (
            Spec::JsonSchema(json!({
                "type": "object",
                "properties": {"a": {"type": "integer"}},
                "required": ["a"],
                "additionalProperties": false
            })),
            r#"{"a": 12}"#,
            r#"{"a": "x"}"#,
        ),
        (Spec::JsonObject, r#"{"k": [1, true, null]}"#, "[1]"),
        (Spec::Regex("ab+c?".into()), "abbbc", "ac"),
        (
            Spec::Lark("start: \"yes\" | \"no\" | NUM\nNUM: /[0-9]{2}/".into()),
            "42",
            "maybe",
        ),
        (
            Spec::Gbnf("root ::= (\"red\" | \"green\") \" \" [0-9]+\n".into()),
            "green 7",
            "blue 7",
        ),
    ]
}

#[test]
fn every_spec_kind_constrains_on_every_vocabulary() {
    for model in models() {
        for (spec, good, bad) in cases() {
            let g = compile(model, &spec);
            assert!(
                common::accepts_text(model, &g, good),
                "{}: {spec:?} refused {good:?}",
                model.name
            );
            assert!(
                !common::accepts_text(model, &g, bad),
                "{}: {spec:?} took {bad:?}",
                model.name
            );
            // The first mask: some tokens, never an unreachable control token.
            let mut m = g.matcher();
            match m.next().unwrap() {
                Next::Allowed(mask) => {
                    assert!(mask.count() > 0);
                    assert_eq!(mask.words().len(), model.vocab.n_vocab().div_ceil(32));
                    for t in mask.iter() {
                        let b = model.vocab.token_bytes(t);
                        assert!(
                            !b.is_empty() && b[0] != 0xFF,
                            "{}: token {t} allowed",
                            model.name
                        );
                    }
                }
                Next::Forced(t) => assert!(model.vocab.token_bytes(t)[0] != 0xFF),
                Next::End => panic!("{}: {spec:?} ends at once", model.name),
            }
        }
    }
}

#[test]
fn json_schema_random_walks_give_matching_json() {
    let schema = json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 8},
            "age": {"type": "integer", "minimum": 0, "maximum": 150},
            "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3}
        },
        "required": ["name", "age"],
        "additionalProperties": false
    });
    for model in models() {
        let g = compile(model, &Spec::JsonSchema(schema.clone()));
        let mut ended = 0;
        for seed in 0..6 {
            let mut rng = Rng(seed);
            let (text, end) = random_walk(model, &mut g.matcher(), &mut rng, 300, 0.9);
            if end == WalkEnd::Cut {
                continue;
            }
            ended += 1;
            let v: serde_json::Value = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{}: {text:?}: {e}", model.name));
            assert!(
                v["name"].as_str().is_some_and(|s| s.chars().count() <= 8),
                "{text}"
            );
            assert!(v["age"].as_u64().is_some_and(|a| a <= 150), "{text}");
            if let Some(tags) = v.get("tags") {
                let tags = tags.as_array().unwrap();
                assert!(
                    tags.len() <= 3
                        && tags
                            .iter()
                            .all(|t| ["a", "b", "c"].contains(&t.as_str().unwrap()))
                );
            }
            assert_eq!(
                v.as_object()
                    .unwrap()
                    .keys()
                    .filter(|k| !["name", "age", "tags"].contains(&k.as_str()))
                    .count(),
                0
            );
        }
        assert!(ended >= 3, "{}: only {ended} of 6 walks ended", model.name);
    }
}

#[test]
fn eog_is_allowed_exactly_where_the_output_may_end() {
    for model in models() {
        let g = compile(model, &Spec::Regex("ab?".into()));
        let mut m = g.matcher();
        let eog = model.vocab.eog_ids();
        let a = model.tok.encode("a", false, false);
        for &t in &a {
            assert!(
                eog.iter().all(|&e| m.accept(e).is_err()),
                "{}: EOG before any text",
                model.name
            );
            m.accept(t).unwrap();
        }
        match m.next().unwrap() {
            Next::Allowed(mask) => assert!(eog.iter().all(|&e| mask.allows(e))),
            other => panic!("{}: after 'a': {other:?}", model.name),
        }
        assert!(!m.is_finished());
        m.accept(*eog.last().unwrap()).unwrap();
        assert!(m.is_finished());
        assert_eq!(m.next().unwrap(), Next::End);
        // Rolling the EOG back reopens the output.
        m.rollback(1).unwrap();
        assert!(!m.is_finished());
        assert!(matches!(m.next().unwrap(), Next::Allowed(_)));
    }
}

#[test]
fn the_end_of_a_fixed_string_is_end_and_forced_tokens_are_its_text() {
    let q = qwen();
    let g = compile(q, &Spec::Lark("start: \"Hello, world\"".into()));
    let mut m = g.matcher();
    let forced = m.forced();
    assert_eq!(q.tok.decode(&forced, false), "Hello, world");
    assert_eq!(forced, q.tok.encode("Hello, world", false, false));
    assert_eq!(m.next().unwrap(), Next::Forced(forced[0]));
    for &t in &forced {
        m.accept(t).unwrap();
    }
    assert_eq!(m.next().unwrap(), Next::End);
    assert!(m.is_finished());
    assert!(m.forced().is_empty());
    // Without a tokenizer nothing is fast-forwarded, and the mask allows
    // every token that fits the forced text.
    let plain = kestrel_constrain::Compiler::new(Vocabulary::new(&q.tok).unwrap()).unwrap();
    let mut m = plain
        .compile(&Spec::Lark("start: \"Hello, world\"".into()))
        .unwrap()
        .matcher();
    assert!(m.forced().is_empty());
    match m.next().unwrap() {
        Next::Allowed(mask) => {
            assert!(mask.count() > 1);
            for t in mask.iter() {
                assert!(b"Hello, world".starts_with(q.vocab.token_bytes(t)));
            }
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn rollback_restores_the_mask() {
    for model in models() {
        // A long required string: no walk here can reach the end.
        let schema = serde_json::json!({"type": "object", "required": ["a"],
            "properties": {"a": {"type": "string", "minLength": 300}}});
        let g = compile(model, &Spec::JsonSchema(schema));
        let mut m = g.matcher();
        let mut rng = Rng(7);
        // Walk 5 tokens in, note the mask, walk k more, roll them back.
        let (_, end) = random_walk(model, &mut m, &mut rng, 5, 0.0);
        assert_eq!(end, WalkEnd::Cut);
        let before = m.next().unwrap();
        for k in [1, 3, 8] {
            let (_, end) = random_walk(model, &mut m, &mut rng, k, 0.0);
            assert_eq!(end, WalkEnd::Cut);
            m.rollback(k).unwrap();
            assert_eq!(m.next().unwrap(), before, "{}: rollback {k}", model.name);
        }
        assert!(m.rollback(1000).is_err());
    }
}

#[test]
fn a_refused_token_leaves_the_matcher_as_it_was() {
    let q = qwen();
    let g = compile(q, &Spec::Regex("[0-9]+".into()));
    let mut m = g.matcher();
    let x = q.tok.encode("x", false, false)[0];
    assert!(matches!(m.accept(x), Err(ConstraintError::NotAllowed { token }) if token == x));
    assert!(matches!(
        m.accept(u32::MAX),
        Err(ConstraintError::NotAllowed { .. })
    ));
    let seven = q.tok.encode("7", false, false)[0];
    m.accept(seven).unwrap();
    m.accept(q.vocab.eog_ids()[0]).unwrap();
    assert!(m.is_finished());
    // After the end, text is refused and more EOG is fine.
    assert!(m.accept(seven).is_err());
}

#[test]
fn grammars_serve_many_matchers_across_threads() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<kestrel_constrain::Compiler>();
    send_sync::<Vocabulary>();
    send::<kestrel_constrain::Grammar>();
    send::<kestrel_constrain::Matcher>();
    let q = qwen();
    let g = compile(q, &Spec::JsonObject);
    let handles: Vec<_> = (0..4)
        .map(|seed| {
            let g = g.clone();
            std::thread::spawn(move || {
                let mut rng = Rng(seed);
                random_walk(qwen(), &mut g.matcher(), &mut rng, 40, 0.5)
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

#[test]
fn json_digit_runs_stop_at_sixteen() {
    // A number whose digits the model would run on forever: after 16
    // digits in a row only non-digit tokens are allowed.
    for model in models() {
        let g = compile(
            model,
            &Spec::JsonSchema(serde_json::json!({"type": "number"})),
        );
        let mut m = g.matcher();
        let one = model.tok.encode("1", false, false)[0];
        let mut run = 0;
        loop {
            match m.next().unwrap() {
                Next::Allowed(mask) if mask.allows(one) => {
                    m.accept(one).unwrap();
                    run += 1;
                }
                Next::Allowed(mask) => {
                    assert!(mask.iter().all(|t| !model
                        .vocab
                        .token_bytes(t)
                        .first()
                        .is_some_and(u8::is_ascii_digit)));
                    break;
                }
                other => panic!("{}: {other:?}", model.name),
            }
            assert!(run <= 16, "{}: {run} digits", model.name);
        }
        assert_eq!(run, 16, "{}", model.name);
        // Rolled back below the cap, digits are allowed again.
        m.rollback(1).unwrap();
        match m.next().unwrap() {
            Next::Allowed(mask) => assert!(mask.allows(one)),
            other => panic!("{other:?}"),
        }
    }
}
