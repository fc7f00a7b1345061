//! Structured output through `kestrel serve`: `response_format` (JSON
//! object, JSON schema), llama-server's `json_schema` and `grammar`, the
//! same seeded text streamed or not, alone or among concurrent requests,
//! and every bad schema or grammar a 400 that names it while the server
//! keeps serving. (The schema corpus across all models is
//! `scripts/check-structured.py`; tool calls are `serve_tools.rs`.)

mod common;

use common::server::*;
use serde_json::{json, Value};

fn person_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 20},
            "age": {"type": "integer", "minimum": 0, "maximum": 130},
            "pets": {"type": "array", "items": {"enum": ["cat", "dog", "fish"]},
                "minItems": 1, "maxItems": 3}
        },
        "required": ["name", "age", "pets"],
        "additionalProperties": false
    })
}

fn schema_chat(seed: u64, stream: bool) -> Value {
    json!({
        "messages": [{"role": "user", "content": "Describe a person as JSON."}],
        "response_format": {"type": "json_schema",
            "json_schema": {"name": "person", "schema": person_schema(), "strict": true}},
        "max_tokens": 200, "temperature": 0.8, "seed": seed, "stream": stream,
    })
}

/// The answer holds to the person schema.
fn check_person(text: &str) {
    let v: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text:?}"));
    let o = v.as_object().expect("an object");
    assert_eq!(o.len(), 3, "{v}");
    assert!(
        v["name"].as_str().is_some_and(|n| n.chars().count() <= 20),
        "{v}"
    );
    assert!(
        v["age"].as_i64().is_some_and(|a| (0..=130).contains(&a)),
        "{v}"
    );
    let pets = v["pets"].as_array().expect("pets");
    assert!((1..=3).contains(&pets.len()), "{v}");
    assert!(pets
        .iter()
        .all(|p| ["cat", "dog", "fish"].contains(&p.as_str().unwrap())));
}

fn streamed_content(r: &Reply) -> String {
    check_stream(r, "chat.completion.chunk", |c| {
        c["delta"]["content"].as_str().map(str::to_owned)
    })
}

#[test]
fn json_schema_answers_hold_to_it_streamed_or_not() {
    let s = start(&[]);
    for seed in 1..=3 {
        let whole = post(s.port, "/v1/chat/completions", &schema_chat(seed, false));
        assert_eq!(whole.status, 200, "{}", whole.text());
        let v = whole.json();
        assert_eq!(v["choices"][0]["finish_reason"], "stop", "{v}");
        let text = v["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .to_owned();
        check_person(&text);
        let mut streamed = schema_chat(seed, true);
        streamed["stream_options"] = json!({"include_usage": true});
        let r = post(s.port, "/v1/chat/completions", &streamed);
        assert_eq!(streamed_content(&r), text, "seed {seed}: streamed vs whole");
    }
}

#[test]
fn a_constrained_request_among_concurrent_ones_gets_its_own_text() {
    let s = start(&["-np", "4"]);
    let alone = post(s.port, "/v1/chat/completions", &schema_chat(5, false)).json();
    let port = s.port;
    let threads: Vec<_> = (0..4)
        .map(|i| {
            std::thread::spawn(move || {
                let body = if i == 0 {
                    schema_chat(5, false)
                } else {
                    json!({"messages": [{"role": "user", "content": format!("Count to {}", 5 + i)}],
                        "max_tokens": 40, "temperature": 0.7, "seed": i})
                };
                post(port, "/v1/chat/completions", &body).json()
            })
        })
        .collect();
    let answers: Vec<Value> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    assert_eq!(
        answers[0]["choices"][0]["message"]["content"],
        alone["choices"][0]["message"]["content"]
    );
}

#[test]
fn json_object_and_llama_server_fields() {
    let s = start(&[]);
    let r = post(
        s.port,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "Give me a JSON object about cats."}],
            "response_format": {"type": "json_object"}, "max_tokens": 150, "seed": 3,
            "temperature": 0.8}),
    );
    let text = r.json()["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    if r.json()["choices"][0]["finish_reason"] == "stop" {
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text:?}"));
        assert!(v.is_object(), "{v}");
    } else {
        assert!(text.starts_with('{'), "{text:?}");
    }
    // llama-server's grammar (GBNF) and json_schema on /completion.
    for seed in 0..3 {
        let r = post(
            s.port,
            "/completion",
            &json!({"prompt": "Is the sky blue? Answer:", "grammar": "root ::= \" \" (\"yes\" | \"no\")",
                "n_predict": 10, "seed": seed, "temperature": 1.0}),
        );
        let v = r.json();
        assert!(
            [" yes", " no"].contains(&v["content"].as_str().unwrap()),
            "{v}"
        );
        assert_eq!(v["stop_type"], "eos", "{v}");
    }
    let r = post(
        s.port,
        "/completion",
        &json!({"prompt": "A person as JSON:", "json_schema": person_schema(),
            "n_predict": 200, "seed": 9, "temperature": 0.8}),
    );
    check_person(r.json()["content"].as_str().unwrap());
    // The Responses API's text.format.
    let r = post(
        s.port,
        "/v1/responses",
        &json!({"input": "Describe a person as JSON.", "max_output_tokens": 200,
            "text": {"format": {"type": "json_schema", "name": "person",
                "schema": person_schema(), "strict": true}}}),
    );
    let v = r.json();
    check_person(v["output"][0]["content"][0]["text"].as_str().unwrap());
}

#[test]
fn bad_schemas_and_grammars_are_400s_that_name_the_problem() {
    let s = start(&[]);
    let chat = |rf: Value| {
        json!({"messages": [{"role": "user", "content": "x"}], "max_tokens": 5,
            "response_format": rf})
    };
    let schema = |sc: Value| {
        chat(json!({"type": "json_schema", "json_schema": {"name": "x", "schema": sc}}))
    };
    let huge: Vec<Value> = (0..100_000).map(|i| json!(format!("value-{i}"))).collect();
    let cases: Vec<(&str, Value, &str)> = vec![
        ("/v1/chat/completions", schema(json!({"type": 5})), "schema"),
        (
            "/v1/chat/completions",
            schema(json!({"type": "string", "format": "no-such-format"})),
            "format",
        ),
        (
            "/v1/chat/completions",
            schema(json!({"type": "array", "items": {"type": "integer"}, "uniqueItems": true})),
            "uniqueItems",
        ),
        (
            "/v1/chat/completions",
            schema(json!({"enum": huge})),
            "limit",
        ),
        (
            "/completion",
            json!({"prompt": "x", "grammar": "root ::= \"a\" (\n  \"b\" |"}),
            "GBNF 2:",
        ),
        (
            "/completion",
            json!({"prompt": "x", "grammar": "root ::= undefined-rule"}),
            "undefined",
        ),
        (
            "/completion",
            json!({"prompt": "x", "grammar": "root ::= [^\\x00-\\U0010FFFF]"}),
            "grammar",
        ),
        (
            "/completion",
            json!({"prompt": "x", "grammar": "root ::= \"a\"", "json_schema": {}}),
            "at most one",
        ),
    ];
    for (path, body, want) in cases {
        let r = post(s.port, path, &body);
        assert_error(&r, 400, want);
        let msg = r.json()["error"]["message"].as_str().unwrap().to_owned();
        assert!(msg.contains(want), "{want}: {msg}");
    }
    // Still serving.
    let r = post(s.port, "/v1/chat/completions", &chat_body(false));
    assert_eq!(r.status, 200);
}
