//! Tool calls through `kestrel serve` in the Responses (`/v1/responses`)
//! and Anthropic (`/v1/messages`) dialects, with Qwen2.5-Coder's template:
//! a forced call (`required`, `any`) is valid for its function's schema;
//! the stream's argument fragments (`function_call_arguments.delta`,
//! `input_json_delta`) add up to the whole answer's; a second turn with the
//! call's result is answered and its prompt is the equivalent chat
//! conversation's (same token count); bad tool shapes are 400s.

mod common;

use common::server::*;
use serde_json::{json, Value};

fn qwen() -> Server {
    start_model(model_file("qwen2.5-coder-0.5b-q4_k_m.gguf"), "2048", &[])
}

const QUESTIONS: [&str; 2] = ["What is the weather in Paris?", "How much is 17 times 23?"];

/// The functions, as each dialect declares them.
fn schemas() -> [(&'static str, &'static str, Value); 2] {
    [
        (
            "get_weather",
            "Current weather in a city.",
            json!({"type": "object", "properties": {
                "city": {"type": "string"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                "required": ["city", "unit"], "additionalProperties": false}),
        ),
        (
            "calculate",
            "Evaluate an arithmetic expression.",
            json!({"type": "object", "properties": {"expression": {"type": "string"}},
                "required": ["expression"], "additionalProperties": false}),
        ),
    ]
}

fn chat_tools() -> Value {
    schemas()
        .into_iter()
        .map(|(name, description, parameters)| {
            json!({"type": "function", "function": {"name": name,
                "description": description, "parameters": parameters}})
        })
        .collect()
}

fn responses_tools() -> Value {
    schemas()
        .into_iter()
        .map(|(name, description, parameters)| {
            json!({"type": "function", "name": name, "description": description,
                "parameters": parameters})
        })
        .collect()
}

fn anthropic_tools() -> Value {
    schemas()
        .into_iter()
        .map(|(name, description, schema)| {
            json!({"name": name, "description": description, "input_schema": schema})
        })
        .collect()
}

/// A call's arguments hold to its function's schema.
fn check_args(name: &str, args: &Value) {
    match name {
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

/// The JSON events of a named-event stream (`event:` then `data:`), each
/// named by its type.
fn events(r: &Reply) -> Vec<Value> {
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    let text = r.text();
    let events: Vec<Value> = text
        .split("\n\n")
        .filter(|frame| !frame.is_empty())
        .map(|frame| {
            let (name, data) = frame
                .strip_prefix("event: ")
                .and_then(|f| f.split_once("\ndata: "))
                .unwrap_or_else(|| panic!("not a named event: {frame}"));
            let v: Value = serde_json::from_str(data).unwrap();
            assert_eq!(v["type"], name, "{frame}");
            v
        })
        .collect();
    assert!(!events.is_empty(), "{text}");
    events
}

fn responses_ask(question: &str, seed: u64, stream: bool) -> Value {
    json!({"input": question, "tools": responses_tools(), "tool_choice": "required",
        "max_output_tokens": 120, "temperature": 0.8, "seed": seed, "stream": stream})
}

/// The output items of a streamed response, checked as they grow: each
/// opens (`output_item.added`), grows by text or argument deltas, and its
/// `.done` events carry what the deltas added up to; and the last event's
/// response.
fn responses_streamed(r: &Reply) -> (Vec<Value>, Value) {
    let mut calls: Vec<Value> = Vec::new();
    let mut args = String::new();
    let mut text = String::new();
    let mut last = Value::Null;
    for e in events(r) {
        let index = e["output_index"].as_u64().unwrap_or(0) as usize;
        match e["type"].as_str().unwrap() {
            "response.output_item.added" if e["item"]["type"] == "message" => {
                assert_eq!(index, calls.len(), "items follow each other: {e}");
                calls.push(e["item"].clone());
                text.clear();
            }
            "response.output_text.delta" => text.push_str(e["delta"].as_str().unwrap()),
            "response.output_item.done" if e["item"]["type"] == "message" => {
                assert_eq!(e["item"]["content"][0]["text"], text.as_str(), "{e}");
                calls[index] = e["item"].clone();
            }
            "response.output_item.added" if e["item"]["type"] == "function_call" => {
                assert_eq!(e["item"]["status"], "in_progress", "{e}");
                assert_eq!(e["item"]["arguments"], "", "{e}");
                assert_eq!(index, calls.len(), "calls follow each other: {e}");
                calls.push(e["item"].clone());
                args.clear();
            }
            "response.function_call_arguments.delta" => {
                assert_eq!(e["item_id"], calls[index]["id"], "{e}");
                args.push_str(e["delta"].as_str().unwrap());
            }
            "response.function_call_arguments.done" => {
                assert_eq!(e["item_id"], calls[index]["id"], "{e}");
                assert_eq!(e["arguments"], args.as_str(), "{e}");
            }
            "response.output_item.done" if e["item"]["type"] == "function_call" => {
                assert_eq!(e["item"]["arguments"], args.as_str(), "{e}");
                assert_eq!(e["item"]["id"], calls[index]["id"], "{e}");
                calls[index] = e["item"].clone();
            }
            "response.completed" | "response.incomplete" => last = e["response"].clone(),
            _ => {}
        }
    }
    (calls, last)
}

#[test]
fn responses_calls_are_valid_and_stream_as_they_answer() {
    let s = qwen();
    for (i, q) in QUESTIONS.iter().enumerate() {
        let seed = 50 + i as u64;
        let v = post(s.port, "/v1/responses", &responses_ask(q, seed, false)).json();
        assert_eq!(v["status"], "completed", "{v}");
        let items = v["output"].as_array().unwrap();
        let calls: Vec<Value> = items
            .iter()
            .filter(|it| it["type"] == "function_call")
            .cloned()
            .collect();
        assert!(!calls.is_empty(), "{v}");
        for c in &calls {
            assert!(c["id"].as_str().unwrap().starts_with("fc_"), "{c}");
            assert!(c["call_id"].as_str().unwrap().starts_with("call_"), "{c}");
            assert_eq!(c["status"], "completed", "{c}");
            let args: Value = serde_json::from_str(c["arguments"].as_str().unwrap()).unwrap();
            check_args(c["name"].as_str().unwrap(), &args);
        }
        let streamed = post(s.port, "/v1/responses", &responses_ask(q, seed, true));
        let (scalls, last) = responses_streamed(&streamed);
        assert_eq!(scalls, calls, "streamed calls equal the whole answer's");
        assert_eq!(last["output"], v["output"], "the last event's response");
    }
}

fn anthropic_ask(question: &str, seed: u64, stream: bool) -> Value {
    json!({"messages": [{"role": "user", "content": question}], "tools": anthropic_tools(),
        "tool_choice": {"type": "any"}, "max_tokens": 120, "temperature": 0.8, "seed": seed,
        "stream": stream})
}

/// The content blocks of a streamed message (text and `tool_use` input
/// assembled from the deltas), and its stop reason.
fn anthropic_streamed(r: &Reply) -> (Vec<Value>, String) {
    let mut blocks: Vec<Value> = Vec::new();
    let mut partial: Vec<String> = Vec::new();
    let mut open = None;
    let mut reason = String::new();
    for e in events(r) {
        match e["type"].as_str().unwrap() {
            "content_block_start" => {
                assert_eq!(open, None, "one block open at a time: {e}");
                let index = e["index"].as_u64().unwrap() as usize;
                assert_eq!(index, blocks.len(), "{e}");
                open = Some(index);
                let b = e["content_block"].clone();
                if b["type"] == "tool_use" {
                    assert_eq!(b["input"], json!({}), "{e}");
                }
                blocks.push(b);
                partial.push(String::new());
            }
            "content_block_delta" => {
                let index = e["index"].as_u64().unwrap() as usize;
                assert_eq!(open, Some(index), "{e}");
                match e["delta"]["type"].as_str().unwrap() {
                    "input_json_delta" => {
                        partial[index].push_str(e["delta"]["partial_json"].as_str().unwrap())
                    }
                    "text_delta" => {
                        let text = blocks[index]["text"].as_str().unwrap().to_owned();
                        blocks[index]["text"] = json!(text + e["delta"]["text"].as_str().unwrap());
                    }
                    other => panic!("unknown delta {other}"),
                }
            }
            "content_block_stop" => {
                let index = e["index"].as_u64().unwrap() as usize;
                assert_eq!(open.take(), Some(index), "{e}");
                if blocks[index]["type"] == "tool_use" {
                    blocks[index]["input"] = serde_json::from_str(&partial[index]).unwrap();
                }
            }
            "message_delta" => reason = e["delta"]["stop_reason"].as_str().unwrap().into(),
            _ => {}
        }
    }
    assert_eq!(open, None);
    (blocks, reason)
}

#[test]
fn anthropic_tool_uses_are_valid_and_stream_as_they_answer() {
    let s = qwen();
    for (i, q) in QUESTIONS.iter().enumerate() {
        let seed = 60 + i as u64;
        let v = post(s.port, "/v1/messages", &anthropic_ask(q, seed, false)).json();
        assert_eq!(v["stop_reason"], "tool_use", "{v}");
        let calls: Vec<Value> = v["content"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|b| b["type"] == "tool_use")
            .cloned()
            .collect();
        assert!(!calls.is_empty(), "{v}");
        for c in &calls {
            assert!(c["id"].as_str().unwrap().starts_with("toolu_"), "{c}");
            check_args(c["name"].as_str().unwrap(), &c["input"]);
        }
        let streamed = post(s.port, "/v1/messages", &anthropic_ask(q, seed, true));
        let (blocks, reason) = anthropic_streamed(&streamed);
        assert_eq!(reason, "tool_use");
        assert_eq!(
            blocks, calls,
            "streamed tool_use blocks equal the whole answer's"
        );
    }
}

#[test]
fn auto_answers_stream_as_they_answer_whole() {
    let s = qwen();
    for (seed, q) in [(0, "Weather in Berlin?"), (1, "Tell me a joke.")] {
        let mut ask = responses_ask(q, seed, false);
        ask["tool_choice"] = json!("auto");
        ask["max_output_tokens"] = json!(60);
        let v = post(s.port, "/v1/responses", &ask).json();
        ask["stream"] = json!(true);
        let (items, last) = responses_streamed(&post(s.port, "/v1/responses", &ask));
        // (A message item's id follows the response's, which differs.)
        let no_ids = |items: &[Value]| -> Vec<Value> {
            let mut items = items.to_vec();
            for it in items.iter_mut().filter(|it| it["type"] == "message") {
                it["id"] = Value::Null;
            }
            items
        };
        let whole = v["output"].as_array().unwrap();
        assert_eq!(no_ids(&items), no_ids(whole), "{v}");
        assert_eq!(last["output"].as_array().unwrap(), &items);

        let mut ask = anthropic_ask(q, seed, false);
        ask["tool_choice"] = json!({"type": "auto"});
        ask["max_tokens"] = json!(60);
        let v = post(s.port, "/v1/messages", &ask).json();
        ask["stream"] = json!(true);
        let (blocks, reason) = anthropic_streamed(&post(s.port, "/v1/messages", &ask));
        assert_eq!(Value::from(blocks), v["content"]);
        assert_eq!(reason, v["stop_reason"].as_str().unwrap());
        for b in v["content"].as_array().unwrap() {
            if b["type"] == "tool_use" {
                check_args(b["name"].as_str().unwrap(), &b["input"]);
            }
        }
    }
}

/// The token count of a chat conversation's prompt.
fn chat_count(port: u16, body: &Value) -> u64 {
    let r = post(port, "/v1/chat/completions/input_tokens", body);
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["input_tokens"].as_u64().unwrap()
}

#[test]
fn a_second_turn_with_the_result_reads_as_its_chat() {
    let s = qwen();
    let q = QUESTIONS[0];
    // Responses: the call item and its output go back in `input`.
    let v = post(s.port, "/v1/responses", &responses_ask(q, 50, false)).json();
    let call = v["output"]
        .as_array()
        .unwrap()
        .iter()
        .find(|it| it["type"] == "function_call")
        .expect("a call")
        .clone();
    let call_id = call["call_id"].as_str().unwrap();
    let second = json!({"tools": responses_tools(), "max_output_tokens": 16, "temperature": 0,
        "input": [{"role": "user", "content": q}, call,
            {"type": "function_call_output", "call_id": call_id, "output": "18 degrees, sunny"}]});
    let chat = json!({"tools": chat_tools(), "messages": [
        {"role": "user", "content": q},
        {"role": "assistant", "content": null, "tool_calls": [{"id": call_id, "type": "function",
            "function": {"name": call["name"], "arguments": call["arguments"]}}]},
        {"role": "tool", "tool_call_id": call_id, "content": "18 degrees, sunny"}]});
    let r = post(s.port, "/v1/responses/input_tokens", &second);
    assert_eq!(r.status, 200, "{}", r.text());
    let n = r.json()["input_tokens"].as_u64().unwrap();
    assert_eq!(n, chat_count(s.port, &chat));
    // (The result is in the prompt: without it, fewer tokens.)
    let mut no_result = chat.clone();
    no_result["messages"].as_array_mut().unwrap().pop();
    assert!(chat_count(s.port, &no_result) < n);
    let r = post(s.port, "/v1/responses", &second);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["object"], "response");

    // Anthropic: the tool_use block goes back in the assistant turn, the
    // result in a user turn's tool_result block.
    let v = post(s.port, "/v1/messages", &anthropic_ask(q, 60, false)).json();
    let call = v["content"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["type"] == "tool_use")
        .expect("a call")
        .clone();
    let id = call["id"].as_str().unwrap();
    let second = json!({"tools": anthropic_tools(), "max_tokens": 16, "temperature": 0,
        "messages": [{"role": "user", "content": q},
            {"role": "assistant", "content": [call]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": id,
                "content": [{"type": "text", "text": "18 degrees, sunny"}]}]}]});
    let chat = json!({"tools": chat_tools(), "messages": [
        {"role": "user", "content": q},
        {"role": "assistant", "content": null, "tool_calls": [{"id": id, "type": "function",
            "function": {"name": call["name"], "arguments": call["input"].to_string()}}]},
        {"role": "tool", "tool_call_id": id, "content": "18 degrees, sunny"}]});
    let r = post(s.port, "/v1/messages/count_tokens", &second);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.json()["input_tokens"].as_u64().unwrap(),
        chat_count(s.port, &chat)
    );
    let r = post(s.port, "/v1/messages", &second);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["type"], "message");
}

#[test]
fn bad_tool_shapes_are_400s_that_name_the_problem() {
    let s = start(&[]);
    let responses = [
        (json!({"tools": [{"type": "web_search"}]}), "web_search"),
        (json!({"tools": [{"type": "file_search"}]}), "file_search"),
        (json!({"tools": [{"name": "f"}]}), "type"),
        (json!({"tools": [{"type": "function"}]}), "name"),
        (
            json!({"tools": [{"type": "function", "name": "f", "parameters": "x"}]}),
            "parameters",
        ),
        (
            json!({"tools": responses_tools(), "tool_choice": {"type": "function", "name": "nope"}}),
            "nope",
        ),
        (
            json!({"tools": responses_tools(), "tool_choice": {"type": "web_search_preview"}}),
            "web_search_preview",
        ),
        (json!({"tool_choice": "required"}), "tool"),
        (
            json!({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}),
            "call_id",
        ),
        (
            json!({"input": [{"type": "function_call_output", "call_id": "c", "output": 3}]}),
            "output",
        ),
    ];
    for (extra, want) in responses {
        let mut body = json!({"input": "x", "max_output_tokens": 4});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        let r = post(s.port, "/v1/responses", &body);
        assert_error(&r, 400, want);
        let m = r.json()["error"]["message"].as_str().unwrap().to_owned();
        assert!(m.contains(want), "{want}: {m}");
    }
    let anthropic = [
        (
            json!({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}),
            "web_search_20250305",
        ),
        (json!({"tools": [{"description": "d"}]}), "name"),
        (
            json!({"tools": [{"name": "f", "input_schema": {"type": "string"}}]}),
            "input_schema",
        ),
        (
            json!({"tools": anthropic_tools(), "tool_choice": {"type": "tool", "name": "nope"}}),
            "nope",
        ),
        (
            json!({"tools": anthropic_tools(), "tool_choice": "any"}),
            "tool_choice",
        ),
        (json!({"tool_choice": {"type": "any"}}), "tool"),
        (
            json!({"messages": [{"role": "user", "content": [{"type": "tool_result"}]}]}),
            "tool_use_id",
        ),
        (
            json!({"messages": [{"role": "user", "content": [{"type": "tool_use",
                "id": "t", "name": "f", "input": {}}]}]}),
            "assistant",
        ),
        (
            json!({"messages": [{"role": "user", "content": "x"}, {"role": "assistant",
                "content": [{"type": "tool_use", "id": "t", "name": "f", "input": "{}"}]}]}),
            "input",
        ),
    ];
    for (extra, want) in anthropic {
        let mut body = json!({"messages": [{"role": "user", "content": "x"}], "max_tokens": 4});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        let r = post(s.port, "/v1/messages", &body);
        assert_error(&r, 400, want);
        let m = r.json()["error"]["message"].as_str().unwrap().to_owned();
        assert!(m.contains(want), "{want}: {m}");
    }
    // Without tools both still answer.
    for (path, body) in [
        (
            "/v1/responses",
            json!({"input": "Hi", "max_output_tokens": 4}),
        ),
        (
            "/v1/messages",
            json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}),
        ),
    ] {
        assert_eq!(post(s.port, path, &body).status, 200, "{path}");
    }
}
