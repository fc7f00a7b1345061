//! Bad and hostile constraints: each is an error that names the problem
//! (or compiles), never a panic or a stall.

mod common;

use std::time::{Duration, Instant};

use common::qwen;
use kestrel_constrain::{ConstraintError, Spec, MAX_SPEC_BYTES};
use serde_json::{json, Map, Value};

/// Compiles `spec` on Qwen's vocabulary, checking it takes under `limit`.
fn compile_within(spec: &Spec, limit: Duration) -> Result<(), ConstraintError> {
    let t0 = Instant::now();
    let r = qwen().compiler.compile(spec).map(|_| ());
    let took = t0.elapsed();
    assert!(
        took < limit,
        "{took:?} compiling {:.200}",
        format!("{spec:?}")
    );
    r
}

fn err(spec: Spec) -> ConstraintError {
    compile_within(&spec, Duration::from_secs(10)).expect_err("should not compile")
}

/// `{"anyOf": [inner, {"type": "integer"}]}` nested `depth` times, built by
/// moving (json! would copy the inner value at every level).
fn nested_any_of(depth: usize) -> Value {
    let mut v = json!({"type": "string"});
    for i in 0..depth {
        let mut m = Map::new();
        m.insert(
            "anyOf".into(),
            Value::Array(vec![v, json!({"type": "integer", "minimum": i})]),
        );
        v = Value::Object(m);
    }
    v
}

#[test]
fn invalid_schemas_say_what_is_wrong() {
    let cases = [
        (json!({"type": 5}), "type"),
        (json!({"type": "strin"}), "strin"),
        (json!(42), "schema must be"),
        (json!({"$ref": "#/defs/nope"}), "defs"),
        (json!(false), "Unsatisfiable"),
    ];
    for (schema, word) in cases {
        match err(Spec::JsonSchema(schema.clone())) {
            ConstraintError::Schema(m) => assert!(m.contains(word), "{schema}: {m}"),
            other => panic!("{schema}: {other:?}"),
        }
    }
}

#[test]
fn unsupported_keywords_are_errors_naming_them() {
    let cases = [
        (
            json!({"type": "object", "dependentSchemas": {"a": {}}}),
            "dependentSchemas",
        ),
        (
            json!({"type": "object", "properties": {"x": {"type": "array", "uniqueItems": true}}}),
            "uniqueItems",
        ),
        (json!({"type": "string", "format": "bogus"}), "bogus"),
        // llguidance's own override cannot switch leniency on.
        (
            json!({"x-guidance": {"lenient": true}, "type": "object", "dependentSchemas": {"a": {}}}),
            "dependentSchemas",
        ),
    ];
    for (schema, word) in cases {
        match err(Spec::JsonSchema(schema.clone())) {
            ConstraintError::Schema(m) => assert!(m.contains(word), "{schema}: {m}"),
            other => panic!("{schema}: {other:?}"),
        }
    }
}

#[test]
fn syntax_errors_give_line_and_column() {
    match err(Spec::Lark("start: \"a\"\nfoo: ( \"b\"\n".into())) {
        ConstraintError::Grammar(m) => assert!(m.starts_with("2(11)"), "{m}"),
        other => panic!("{other:?}"),
    }
    match err(Spec::Gbnf("root ::= \"a\"\n  x ::= ( \"b\"\n".into())) {
        ConstraintError::Gbnf {
            line: 3, column: 1, ..
        } => {}
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        err(Spec::Regex("(ab".into())),
        ConstraintError::Regex(_)
    ));
    assert!(
        matches!(err(Spec::Lark("start: foo".into())), ConstraintError::Grammar(m) if m.contains("foo"))
    );
}

#[test]
fn constraints_that_accept_nothing_are_errors() {
    for spec in [
        Spec::Gbnf("root ::= [^\\x00-\\U0010FFFF]\n".into()),
        Spec::Gbnf(
            "root ::= [^\\x00-\\U0010FFFF] \"a\" | [^\\x00-\\U0010FFFF]*[^\\x00-\\U0010FFFF]\n"
                .into(),
        ),
        Spec::Lark("start: /[^\\x{0}-\\x{10FFFF}]/".into()),
    ] {
        let e = err(spec.clone());
        assert!(
            matches!(e, ConstraintError::AcceptsNothing),
            "{spec:?}: {e:?}"
        );
    }
    // Lark's `/[]/` is not even a regex.
    assert!(matches!(
        err(Spec::Lark("start: /[]/".into())),
        ConstraintError::Grammar(_)
    ));
    // The empty output alone is fine: only end-of-generation is allowed.
    let g = qwen()
        .compiler
        .compile(&Spec::Lark("start: \"\"".into()))
        .unwrap();
    assert_eq!(g.matcher().next().unwrap(), kestrel_constrain::Next::End);
}

#[test]
fn oversized_input_is_refused_before_compiling() {
    let big = "a".repeat(MAX_SPEC_BYTES + 1);
    for spec in [
        Spec::Regex(big.clone()),
        Spec::Lark(format!("start: \"{big}\"")),
        Spec::Gbnf(format!("root ::= \"{big}\"")),
        Spec::JsonSchema(json!({"const": big})),
    ] {
        let t0 = Instant::now();
        let e = err(spec);
        assert!(matches!(e, ConstraintError::TooLarge { .. }), "{e:?}");
        assert!(t0.elapsed() < Duration::from_secs(1));
    }
    // Just under the limit is fine.
    let values: Vec<String> = (0..60_000).map(|i| format!("value-{i}")).collect();
    let spec = Spec::JsonSchema(json!({"enum": values}));
    compile_within(&spec, Duration::from_secs(10)).unwrap();
}

#[test]
fn explosive_schemas_fail_or_compile_quickly() {
    // Too deep: refused before llguidance recurses into it.
    let e = err(Spec::JsonSchema(nested_any_of(200)));
    assert!(matches!(e, ConstraintError::TooComplex(_)), "{e:?}");
    let limit = Duration::from_secs(10);
    let nasty = [
        nested_any_of(30),
        json!({"type": "string", "pattern": "^(a|aa)*c$"}),
        json!({"type": "string", "pattern": "^(.*a.{20}b)*$"}),
        json!({"type": "string", "pattern": "^((a{1,100}){1,100}){1,100}$"}),
        json!({"type": "array", "items": {"anyOf": (0..2000).map(|i| json!({"const": i})).collect::<Vec<_>>()}}),
    ];
    for schema in nasty {
        // Either outcome is fine; a stall or a panic is not.
        let _ = compile_within(&Spec::JsonSchema(schema), limit);
    }
    let _ = compile_within(&Spec::Regex("[ab]*a[ab]{25}".into()), limit);
    let deep_gbnf = format!(
        "root ::= {}\"a\"{}\n",
        "(".repeat(10_000),
        ")".repeat(10_000)
    );
    assert!(matches!(
        err(Spec::Gbnf(deep_gbnf)),
        ConstraintError::Gbnf { .. }
    ));
    let deep_lark = format!("start: {}\"a\"{}\n", "(".repeat(10_000), ")".repeat(10_000));
    assert!(matches!(
        err(Spec::Lark(deep_lark)),
        ConstraintError::TooComplex(_)
    ));
}

#[test]
fn masks_under_an_explosive_regex_stay_bounded() {
    // A regex whose DFA is exponential: masks run out of fuel (an error)
    // rather than stall.
    let q = qwen();
    let Ok(g) = q.compiler.compile(&Spec::Regex("[ab]*a[ab]{40}".into())) else {
        return;
    };
    let mut m = g.matcher();
    let a = q.tok.encode("a", false, false)[0];
    for _ in 0..60 {
        let t0 = Instant::now();
        let r = m.next();
        assert!(t0.elapsed() < Duration::from_secs(2));
        if r.is_err() || m.accept(a).is_err() {
            break;
        }
    }
}
