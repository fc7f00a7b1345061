//! Tool calls through `kestrel serve`: Qwen2.5-Coder's template (Hermes
//! `<tool_call>` blocks) and SmolLM2's, which knows no tools (the generic
//! JSON form). `tool_choice` "required" gives valid calls whose arguments
//! hold to the function's schema; streamed argument fragments add up to
//! the whole answer's arguments; a conversation with calls and results
//! renders as Hugging Face's template conventions render it (the fixture
//! of `scripts/tool-template-fixture.py`); bad tool requests are 400s.

mod common;

use common::server::*;
use serde_json::{json, Value};

fn qwen() -> Server {
    start_model(model_file("qwen2.5-coder-0.5b-q4_k_m.gguf"), "2048", &[])
}

fn tools() -> Value {
    json!([
        {"type": "function", "function": {"name": "get_weather",
            "description": "Current weather in a city.",
            "parameters": {"type": "object", "properties": {
                "city": {"type": "string"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                "required": ["city", "unit"], "additionalProperties": false}}},
        {"type": "function", "function": {"name": "calculate",
            "description": "Evaluate an arithmetic expression.",
            "parameters": {"type": "object", "properties": {"expression": {"type": "string"}},
                "required": ["expression"], "additionalProperties": false}}}
    ])
}

fn ask(question: &str, choice: Value, seed: u64, stream: bool) -> Value {
    json!({"messages": [{"role": "user", "content": question}], "tools": tools(),
        "tool_choice": choice, "max_tokens": 120, "temperature": 0.8, "seed": seed,
        "stream": stream})
}

/// A call's arguments hold to its function's schema.
fn check_call(call: &Value) {
    assert_eq!(call["type"], "function", "{call}");
    assert!(
        call["id"].as_str().is_some_and(|id| !id.is_empty()),
        "{call}"
    );
    let args: Value = serde_json::from_str(call["function"]["arguments"].as_str().unwrap())
        .unwrap_or_else(|e| panic!("{e}: {call}"));
    match call["function"]["name"].as_str().unwrap() {
        "get_weather" => {
            assert!(args["city"].is_string(), "{args}");
            assert!(["celsius", "fahrenheit"].contains(&args["unit"].as_str().unwrap()));
            assert_eq!(args.as_object().unwrap().len(), 2, "{args}");
        }
        "calculate" => {
            assert!(args["expression"].is_string(), "{args}");
            assert_eq!(args.as_object().unwrap().len(), 1, "{args}");
        }
        other => panic!("unknown function {other}"),
    }
}

/// The tool calls of a stream, assembled from its deltas.
fn streamed_calls(r: &Reply) -> (Vec<Value>, String) {
    assert_eq!(r.status, 200, "{}", r.text());
    let mut calls: Vec<Value> = Vec::new();
    let mut reason = String::new();
    for e in r.events() {
        if e == "[DONE]" {
            continue;
        }
        let c: Value = serde_json::from_str(&e).unwrap();
        let Some(choice) = c["choices"].get(0) else {
            continue;
        };
        if let Some(r) = choice["finish_reason"].as_str() {
            reason = r.to_owned();
        }
        for d in choice["delta"]["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let i = d["index"].as_u64().unwrap() as usize;
            if i == calls.len() {
                // The first delta of a call: index, id, type and name.
                assert!(
                    d["id"].is_string() && d["function"]["name"].is_string(),
                    "{d}"
                );
                calls.push(json!({"id": d["id"], "type": "function",
                    "function": {"name": d["function"]["name"], "arguments": ""}}));
            }
            let frag = d["function"]["arguments"].as_str().unwrap_or("");
            let args = calls[i]["function"]["arguments"]
                .as_str()
                .unwrap()
                .to_owned()
                + frag;
            calls[i]["function"]["arguments"] = json!(args);
        }
    }
    (calls, reason)
}

#[test]
fn required_calls_are_valid_and_stream_as_they_answer() {
    let s = qwen();
    let questions = [
        "What is the weather in Paris?",
        "How much is 17 times 23?",
        "Is it raining in Tokyo right now?",
    ];
    for (i, q) in questions.iter().enumerate() {
        let seed = 40 + i as u64;
        let r = post(
            s.port,
            "/v1/chat/completions",
            &ask(q, json!("required"), seed, false),
        );
        let v = r.json();
        let choice = &v["choices"][0];
        assert_eq!(choice["finish_reason"], "tool_calls", "{v}");
        let calls = choice["message"]["tool_calls"]
            .as_array()
            .expect("tool_calls");
        assert!(!calls.is_empty());
        calls.iter().for_each(check_call);
        let streamed = post(
            s.port,
            "/v1/chat/completions",
            &ask(q, json!("required"), seed, true),
        );
        let (scalls, reason) = streamed_calls(&streamed);
        assert_eq!(reason, "tool_calls");
        assert_eq!(&scalls, calls, "streamed calls equal the whole answer's");
    }
    // A named function: only it.
    let named = json!({"type": "function", "function": {"name": "calculate"}});
    let v = post(
        s.port,
        "/v1/chat/completions",
        &ask("Weather in Rome?", named, 3, false),
    )
    .json();
    let calls = v["choices"][0]["message"]["tool_calls"]
        .as_array()
        .expect("calls")
        .clone();
    assert!(
        calls.iter().all(|c| c["function"]["name"] == "calculate"),
        "{v}"
    );
    calls.iter().for_each(check_call);
}

#[test]
fn auto_never_yields_a_malformed_call() {
    let s = qwen();
    for seed in 0..4 {
        let q = if seed % 2 == 0 {
            "Weather in Berlin?"
        } else {
            "Tell me a joke."
        };
        let v = post(
            s.port,
            "/v1/chat/completions",
            &ask(q, json!("auto"), seed, false),
        )
        .json();
        let choice = &v["choices"][0];
        match choice["message"]["tool_calls"].as_array() {
            Some(calls) => {
                assert_eq!(choice["finish_reason"], "tool_calls", "{v}");
                calls.iter().for_each(check_call);
            }
            None => assert!(choice["message"]["content"].is_string(), "{v}"),
        }
    }
}

#[test]
fn a_conversation_with_calls_and_results_renders_as_the_fixture() {
    let s = qwen();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../kestrel-tokenizer/tests/fixtures/tools");
    let conv: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("conversations.json")).unwrap())
            .unwrap();
    let name = "system_call_results_answer";
    let want = std::fs::read_to_string(dir.join(format!("qwen2.5-coder.{name}.txt"))).unwrap();
    let r = post(
        s.port,
        "/apply-template",
        &json!({"messages": conv["conversations"][name], "tools": conv["tools"]}),
    );
    assert_eq!(r.json()["prompt"].as_str().unwrap(), want);
}

#[test]
fn a_template_without_tools_calls_through_the_generic_form() {
    let s = start_ctx("2048", &[]);
    for seed in 0..3 {
        let v = post(
            s.port,
            "/v1/chat/completions",
            &ask(
                "What is the weather in Paris?",
                json!("required"),
                seed,
                false,
            ),
        )
        .json();
        let choice = &v["choices"][0];
        assert_eq!(choice["finish_reason"], "tool_calls", "{v}");
        choice["message"]["tool_calls"]
            .as_array()
            .expect("calls")
            .iter()
            .for_each(check_call);
    }
}

#[test]
fn bad_tool_requests_are_400s_that_name_the_problem() {
    let s = start(&[]);
    let msg = json!([{"role": "user", "content": "x"}]);
    let many: Vec<Value> = (0..1000)
        .map(|i| json!({"type": "function", "function": {"name": format!("f{i}")}}))
        .collect();
    let cases = [
        (
            json!({"tools": tools(), "tool_choice": {"type": "function", "function": {"name": "nope"}}}),
            "nope",
        ),
        (
            json!({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": 3}}}]}),
            "f",
        ),
        (
            json!({"tools": [{"type": "function", "function": {"name": "f", "parameters": "x"}}]}),
            "parameters",
        ),
        (json!({"tools": many}), "512"),
        (json!({"tools": [{"type": "function"}]}), "function"),
        (json!({"tool_choice": "required"}), "tool"),
    ];
    for (extra, want) in cases {
        let mut body = json!({"messages": msg, "max_tokens": 4});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        let r = post(s.port, "/v1/chat/completions", &body);
        assert_error(&r, 400, want);
        let m = r.json()["error"]["message"].as_str().unwrap().to_owned();
        assert!(m.contains(want), "{want}: {m}");
    }
    assert_eq!(
        post(s.port, "/v1/chat/completions", &chat_body(false)).status,
        200
    );
}
