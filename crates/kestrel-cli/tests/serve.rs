//! `kestrel serve` end to end: starts the real binary on a free port with
//! SmolLM2 and talks raw HTTP/1.1 to it over TcpStream, so what is checked is
//! exactly what a client sees on the wire.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

mod common;
use common::server::*;

fn chat_body(stream: bool) -> Value {
    json!({
        "model": "anything",
        "messages": [{"role": "user", "content": "What is the capital of France?"}],
        "max_tokens": 12, "temperature": 0, "seed": 7, "stream": stream,
        "stream_options": {"include_usage": true},
    })
}

/// Checks the SSE invariants and returns the streamed text.
fn check_stream(r: &Reply, object: &str, text_of: impl Fn(&Value) -> Option<String>) -> String {
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    let events = r.events();
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    assert!(chunks.len() >= 3, "{events:?}");
    let id = chunks[0]["id"].as_str().unwrap().to_owned();
    let mut text = String::new();
    let with_choices: Vec<&Value> = chunks
        .iter()
        .filter(|c| !c["choices"].as_array().unwrap().is_empty())
        .collect();
    for (i, c) in with_choices.iter().enumerate() {
        assert_eq!(c["id"], id.as_str(), "every chunk carries the same id");
        assert_eq!(c["object"], object);
        let choice = &c["choices"][0];
        let last = i + 1 == with_choices.len();
        assert_eq!(
            choice["finish_reason"].is_string(),
            last,
            "finish_reason only on the last choice chunk: {c}"
        );
        if let Some(t) = text_of(choice) {
            text.push_str(&t);
        }
    }
    // include_usage: one final chunk with no choices carries the usage.
    let usage = chunks.last().unwrap();
    assert_eq!(usage["id"], id.as_str());
    assert_eq!(usage["choices"], json!([]));
    assert!(usage["usage"]["completion_tokens"].as_u64().unwrap() > 0);
    text
}

#[test]
fn serve_endpoints() {
    let s = start(&["--metrics", "--alias", "smol", "-np", "2"]);
    let port = s.port;

    // /v1/models
    let r = request(port, "GET", "/v1/models", "");
    assert_eq!(r.status, 200);
    let m = r.json();
    assert_eq!(m["object"], "list");
    assert_eq!(m["data"][0]["id"], "smol");

    // Chat, non-streamed.
    let r = post(port, "/v1/chat/completions", &chat_body(false));
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["object"], "chat.completion");
    assert!(v["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert_eq!(v["model"], "smol");
    let choice = &v["choices"][0];
    assert_eq!(choice["message"]["role"], "assistant");
    let chat_text = choice["message"]["content"].as_str().unwrap().to_owned();
    assert!(!chat_text.is_empty());
    let reason = choice["finish_reason"].as_str().unwrap();
    assert!(reason == "stop" || reason == "length", "{reason}");
    let u = &v["usage"];
    assert_eq!(
        u["total_tokens"].as_u64().unwrap(),
        u["prompt_tokens"].as_u64().unwrap() + u["completion_tokens"].as_u64().unwrap()
    );
    assert!(u["completion_tokens"].as_u64().unwrap() <= 12);
    for k in [
        "cache_n",
        "prompt_n",
        "prompt_ms",
        "prompt_per_token_ms",
        "prompt_per_second",
        "predicted_n",
        "predicted_ms",
        "predicted_per_token_ms",
        "predicted_per_second",
    ] {
        assert!(v["timings"][k].is_number(), "timings.{k}: {v}");
    }

    // Chat, streamed: the same text, with the SSE invariants.
    let r = post(port, "/v1/chat/completions", &chat_body(true));
    let events = r.events();
    let first: Value = serde_json::from_str(&events[0]).unwrap();
    assert_eq!(first["choices"][0]["delta"]["role"], "assistant");
    let streamed = check_stream(&r, "chat.completion.chunk", |c| {
        c["delta"]["content"].as_str().map(str::to_owned)
    });
    assert_eq!(
        streamed, chat_text,
        "streamed text equals non-streamed text"
    );

    // A last assistant turn is continued (llama-server's prefill): the
    // prompt is the conversation before it, the assistant's opening and its
    // text, written here in SmolLM2's ChatML; the answer starts with it.
    let mut prefill = chat_body(false);
    prefill["messages"] = json!([{"role": "user", "content": "Tell me a secret."},
        {"role": "assistant", "content": "ZEBRA QUOKKA"}]);
    let v = post(port, "/v1/chat/completions", &prefill).json();
    let raw = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by \
        Hugging Face<|im_end|>\n<|im_start|>user\nTell me a secret.<|im_end|>\n\
        <|im_start|>assistant\nZEBRA QUOKKA";
    let plain = post(
        port,
        "/completion",
        &json!({"prompt": raw, "n_predict": 12, "temperature": 0, "seed": 7}),
    )
    .json();
    assert_eq!(
        v["choices"][0]["message"]["content"].as_str().unwrap(),
        format!("ZEBRA QUOKKA{}", plain["content"].as_str().unwrap()),
        "{v}"
    );
    assert_eq!(
        v["usage"]["prompt_tokens"], plain["tokens_evaluated"],
        "{v}"
    );
    prefill["stream"] = json!(true);
    let r = post(port, "/v1/chat/completions", &prefill);
    let streamed = check_stream(&r, "chat.completion.chunk", |c| {
        c["delta"]["content"].as_str().map(str::to_owned)
    });
    assert_eq!(
        streamed,
        v["choices"][0]["message"]["content"].as_str().unwrap()
    );
    prefill["messages"] = json!([{"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "A"}, {"role": "assistant", "content": "B"}]);
    assert_error(
        &post(port, "/v1/chat/completions", &prefill),
        400,
        "two assistant turns at the end",
    );

    // Completions: non-streamed and streamed agree; a length stop.
    let body = json!({"prompt": "The capital of France is", "max_tokens": 8,
        "temperature": 0, "ignore_eos": true});
    let r = post(port, "/v1/completions", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["object"], "text_completion");
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert_eq!(v["usage"]["completion_tokens"], 8);
    let text = v["choices"][0]["text"].as_str().unwrap().to_owned();
    let mut sbody = body.clone();
    sbody["stream"] = json!(true);
    sbody["stream_options"] = json!({"include_usage": true});
    let r = post(port, "/v1/completions", &sbody);
    let streamed = check_stream(&r, "text_completion", |c| {
        c["text"].as_str().map(str::to_owned)
    });
    assert_eq!(streamed, text);
    assert_eq!(r.header("x-accel-buffering"), Some("no"));
    // text_offset: where each token's text starts, streamed or not, also
    // while a possible stop string holds text back.
    let mut lp_body = body.clone();
    lp_body["logprobs"] = json!(1);
    lp_body["stop"] = json!([format!(
        "{}. X",
        text.trim_start().split('.').next().unwrap()
    )]);
    let plain = post(port, "/v1/completions", &lp_body).json();
    let offsets = plain["choices"][0]["logprobs"]["text_offset"].clone();
    let tokens = plain["choices"][0]["logprobs"]["tokens"].clone();
    let mut at = 0;
    for (o, t) in offsets
        .as_array()
        .unwrap()
        .iter()
        .zip(tokens.as_array().unwrap())
    {
        assert_eq!(o.as_u64(), Some(at), "{plain}");
        at += t.as_str().unwrap().chars().count() as u64;
    }
    lp_body["stream"] = json!(true);
    let streamed: Vec<Value> = post(port, "/v1/completions", &lp_body)
        .events()
        .iter()
        .filter(|e| e.as_str() != "[DONE]")
        .map(|e| serde_json::from_str::<Value>(e).unwrap())
        .filter_map(|c| {
            c["choices"][0]["logprobs"]["text_offset"]
                .as_array()
                .cloned()
        })
        .flatten()
        .collect();
    assert_eq!(Value::from(streamed), offsets, "{plain}");
    // Fields in OpenAI's order, and each top_logprobs map from the most
    // likely token down, as OpenAI writes them (the workspace's serde_json
    // keeps maps in document order, so `r.json()` sees the server's order).
    lp_body["stream"] = json!(false);
    lp_body["logprobs"] = json!(4);
    let r = post(port, "/v1/completions", &lp_body);
    assert!(r.text().starts_with(r#"{"id":"cmpl-"#), "{}", r.text());
    let tops = r.json()["choices"][0]["logprobs"]["top_logprobs"].clone();
    for top in tops.as_array().unwrap() {
        let lps: Vec<f64> = top
            .as_object()
            .unwrap()
            .values()
            .map(|v| v.as_f64().unwrap())
            .collect();
        assert_eq!(lps.len(), 4, "{tops}");
        assert!(lps.windows(2).all(|w| w[0] >= w[1]), "{tops}");
    }
    // llama-server's /apply-template and input token count: the prompt a
    // chat request becomes (its template's markers around each turn, a
    // trailing assistant turn continued) and its length, which is what the
    // request itself reports as prompt_tokens.
    let chat = json!({"messages": [{"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi there"}, {"role": "assistant", "content": "Hello"}],
        "max_tokens": 1});
    let prompt = post(port, "/apply-template", &chat).json()["prompt"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        prompt.contains("Be brief.") && prompt.contains("Hi there") && prompt.ends_with("Hello"),
        "{prompt:?}"
    );
    let used = post(port, "/v1/chat/completions", &chat).json()["usage"]["prompt_tokens"].clone();
    for path in [
        "/v1/chat/completions/input_tokens",
        "/chat/completions/input_tokens",
    ] {
        let n = post(port, path, &chat).json();
        assert_eq!(n["object"], "response.input_tokens", "{n}");
        assert_eq!(n["input_tokens"], used, "{path}: {n}");
    }
    let tokenized = post(
        port,
        "/tokenize",
        &json!({"content": prompt, "parse_special": true}),
    );
    assert_eq!(
        tokenized.json()["tokens"]
            .as_array()
            .map(|t| t.len() as u64),
        used.as_u64()
    );
    // With pieces: the same ids, each with its text, or its bytes where
    // they are no UTF-8 alone (the emoji's), which together spell the text.
    let emoji_text = "Hi 😀 there";
    let plain = post(port, "/tokenize", &json!({ "content": emoji_text })).json();
    let pieces = post(
        port,
        "/tokenize",
        &json!({"content": emoji_text, "with_pieces": true}),
    )
    .json();
    let pieces = pieces["tokens"].as_array().unwrap();
    let ids: Vec<Value> = pieces.iter().map(|p| p["id"].clone()).collect();
    assert_eq!(Value::from(ids), plain["tokens"], "{pieces:?}");
    let mut spelled = Vec::new();
    for p in pieces {
        match &p["piece"] {
            Value::String(s) => spelled.extend_from_slice(s.as_bytes()),
            Value::Array(b) => spelled.extend(b.iter().map(|x| x.as_u64().unwrap() as u8)),
            other => panic!("piece {other}"),
        }
    }
    assert_eq!(String::from_utf8(spelled).unwrap(), emoji_text);
    assert!(pieces.iter().any(|p| p["piece"].is_array()), "{pieces:?}");
    assert_error(
        &post(port, "/apply-template", &json!({"messages": []})),
        400,
        "apply-template without messages",
    );
    // Infill needs a model's FIM tokens: SmolLM2 has none, and llama-server
    // says so with a 501.
    let r = post(
        port,
        "/infill",
        &json!({"input_prefix": "a", "input_suffix": "b"}),
    );
    assert_error(&r, 501, "infill without FIM tokens");
    assert!(r.text().contains("prefix token is missing"), "{}", r.text());
    // Embeddings: a 501 that says so, as llama-server without --embeddings.
    let r = post(port, "/v1/embeddings", &json!({"input": "hi"}));
    assert_error(&r, 501, "embeddings");
    // What llama-server answers without --props, --slot-save-path and
    // --reranking (flags Kestrel does not have): 501 not_supported_error
    // naming the flag, where these were a 405 and 404s.
    for (path, body, flag) in [
        ("/props", json!({}), "--props"),
        (
            "/slots/0?action=save",
            json!({"filename": "a.bin"}),
            "--slot-save-path",
        ),
        ("/slots/0?action=erase", json!({}), "--slot-save-path"),
        (
            "/rerank",
            json!({"query": "q", "documents": ["d"]}),
            "--reranking",
        ),
        (
            "/v1/rerank",
            json!({"query": "q", "documents": ["d"]}),
            "--reranking",
        ),
        (
            "/v1/reranking",
            json!({"query": "q", "documents": ["d"]}),
            "--reranking",
        ),
    ] {
        let r = post(port, path, &body);
        assert_error(&r, 501, path);
        assert_eq!(r.json()["error"]["type"], "not_supported_error", "{path}");
        assert!(r.text().contains(flag), "{path}: {}", r.text());
    }
    // LoRA adapters: none loaded, so the list is empty, an empty update
    // applies, and one naming an adapter (or not a list) is a 400.
    let r = request(port, "GET", "/lora-adapters", "");
    assert_eq!((r.status, r.json()), (200, json!([])), "{}", r.text());
    let r = post(port, "/lora-adapters", &json!([]));
    assert_eq!(
        (r.status, r.json()),
        (200, json!({"success": true})),
        "{}",
        r.text()
    );
    let r = post(port, "/lora-adapters", &json!([{"id": 0, "scale": 1.0}]));
    assert_error(&r, 400, "an unknown adapter");
    assert!(r.text().contains("id 0"), "{}", r.text());
    assert_error(
        &post(port, "/lora-adapters", &json!({"id": 0})),
        400,
        "an adapter update that is not a list",
    );
    // A request's own `lora` likewise: empty applies, an adapter is a 400.
    let r = post(
        port,
        "/completion",
        &json!({"prompt": "Hi", "n_predict": 1, "lora": []}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    for lora in [json!([{"id": 0, "scale": 0.5}]), json!({"id": 0})] {
        let body = json!({"messages": [{"role": "user", "content": "Hi"}], "lora": lora});
        assert_error(
            &post(port, "/v1/chat/completions", &body),
            400,
            "a request's lora",
        );
    }

    // Sampled (not greedy): the same seed gives the same text, streamed or not.
    let sampled = json!({"prompt": "My favourite animal is", "max_tokens": 12,
        "temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "seed": 1234});
    let r = post(port, "/v1/completions", &sampled);
    let text_sampled = r.json()["choices"][0]["text"].as_str().unwrap().to_owned();
    let mut ss = sampled.clone();
    ss["stream"] = json!(true);
    ss["stream_options"] = json!({"include_usage": true});
    let r = post(port, "/v1/completions", &ss);
    let streamed = check_stream(&r, "text_completion", |c| {
        c["text"].as_str().map(str::to_owned)
    });
    assert_eq!(streamed, text_sampled);
    // top_k below 0 is off as 0 is (vLLM's clients send -1); reported as 0.
    let mut neg = sampled.clone();
    neg["top_k"] = json!(-1);
    let r = post(port, "/completion", &neg);
    assert_eq!(r.json()["content"], text_sampled.as_str(), "{}", r.text());
    assert_eq!(r.json()["generation_settings"]["top_k"], 0);

    // Token-id prompts give the same answer as the text they encode.
    let r = post(
        port,
        "/tokenize",
        &json!({"content": "The capital of France is", "add_special": true}),
    );
    assert_eq!(r.status, 200);
    let ids = r.json()["tokens"].clone();
    let mut ibody = body.clone();
    ibody["prompt"] = ids.clone();
    let r = post(port, "/v1/completions", &ibody);
    assert_eq!(r.json()["choices"][0]["text"], text.as_str());
    let r = post(port, "/detokenize", &json!({ "tokens": ids }));
    assert_eq!(r.status, 200);
    assert!(r.json()["content"]
        .as_str()
        .unwrap()
        .ends_with("The capital of France is"));

    // Chat logprobs.
    let mut lbody = chat_body(false);
    lbody["logprobs"] = json!(true);
    lbody["top_logprobs"] = json!(3);
    let r = post(port, "/v1/chat/completions", &lbody);
    let v = r.json();
    let content = v["choices"][0]["logprobs"]["content"].as_array().unwrap();
    assert!(!content.is_empty());
    assert_eq!(content[0]["top_logprobs"].as_array().unwrap().len(), 3);
    assert!(content[0]["logprob"].as_f64().unwrap() <= 0.0);

    // A stop string ends generation with finish_reason "stop".
    let mut stop_body = body.clone();
    stop_body["stop"] = json!([text.chars().nth(2).unwrap().to_string()]);
    let r = post(port, "/v1/completions", &stop_body);
    assert_eq!(r.json()["choices"][0]["finish_reason"], "stop");

    // ... and /completion names the stop string.
    let stop_word = stop_body["stop"][0].as_str().unwrap().to_owned();
    let r = post(
        port,
        "/completion",
        &json!({"prompt": "The capital of France is", "n_predict": 8,
            "temperature": 0, "ignore_eos": true, "stop": [stop_word]}),
    );
    let v = r.json();
    assert_eq!(v["stop_type"], "word", "{v}");
    assert_eq!(v["stopping_word"], stop_word.as_str(), "{v}");

    // llama-server's /completion, plain and streamed.
    let lbody = json!({"prompt": "The capital of France is", "n_predict": 8,
        "temperature": 0, "ignore_eos": true});
    // ... also at /completions, as llama-server routes it.
    let native = post(port, "/completions", &lbody).json();
    assert_eq!(native["content"], text.as_str(), "{native}");
    let r = post(port, "/completion", &lbody);
    let v = r.json();
    assert_eq!(v["content"], text.as_str());
    assert_eq!(v["stop"], true);
    assert_eq!(v["stop_type"], "limit");
    assert_eq!(v["tokens_predicted"], 8);
    // An answer that the model ends counts its end token among the
    // predicted ones (not among the text's tokens), as llama-server.
    let hi = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by \
        Hugging Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n";
    let e = post(
        port,
        "/completion",
        &json!({"prompt": hi, "n_predict": 64, "temperature": 0}),
    )
    .json();
    assert_eq!(e["stop_type"], "eos", "{e}");
    let n = e["tokens"].as_array().unwrap().len() as u64;
    assert_eq!(e["tokens_predicted"].as_u64(), Some(n + 1), "{e}");
    assert_eq!(e["timings"]["predicted_n"].as_u64(), Some(n + 1), "{e}");
    // A logit_bias pair may name text instead of a token id (llama-server's
    // form): banning the greedy answer's first word changes the answer.
    let word = text.split_whitespace().next().unwrap().to_owned();
    let mut banned = lbody.clone();
    banned["logit_bias"] = json!([[format!(" {word}"), false]]);
    let other = post(port, "/completion", &banned).json();
    let other = other["content"].as_str().unwrap();
    assert!(
        !other.starts_with(&format!(" {word}")),
        "{other:?} vs {text:?}"
    );
    // llama-server's echo of the request: its prompt and sampling.
    assert_eq!(v["prompt"], "The capital of France is", "{v}");
    let gs = &v["generation_settings"];
    assert_eq!(
        (gs["n_predict"].as_i64(), gs["temperature"].as_f64()),
        (Some(8), Some(0.0)),
        "{gs}"
    );
    assert_eq!(gs["ignore_eos"], true, "{gs}");
    // A seed drawn for the request is reported, and sending it back repeats
    // the answer.
    let sampled = json!({"prompt": "Once upon a time", "n_predict": 12, "temperature": 1.5,
        "top_k": 0, "top_p": 1.0, "min_p": 0.0, "ignore_eos": true});
    let first = post(port, "/completion", &sampled).json();
    let seed = &first["generation_settings"]["seed"];
    assert!(
        seed.as_u64().is_some_and(|s| s < 1 << 53),
        "{}",
        first["generation_settings"]
    );
    let mut again = sampled.clone();
    again["seed"] = seed.clone();
    let second = post(port, "/completion", &again).json();
    assert_eq!(first["content"], second["content"], "seed {seed}");
    let mut sl = lbody.clone();
    sl["stream"] = json!(true);
    let r = post(port, "/completion", &sl);
    let events: Vec<Value> = r
        .events()
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    let last = events.last().unwrap();
    assert_eq!(last["stop"], true);
    assert!(last["timings"]["predicted_n"].is_number());
    let joined: String = events
        .iter()
        .map(|e| e["content"].as_str().unwrap())
        .collect();
    assert_eq!(joined, text);

    // A stop string that starts with the first token's text holds that
    // text back (it may be the stop's start) until the next token shows
    // otherwise; the stream still carries every token, as the plain answer.
    let ids = v["tokens"].clone();
    let first = post(port, "/detokenize", &json!({"tokens": [ids[0]]})).json()["content"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut held = sl.clone();
    held["stop"] = json!([format!("{first}\u{7}never")]);
    let events: Vec<Value> = post(port, "/completion", &held)
        .events()
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    assert_eq!(events[0]["content"], "", "{:?}", events[0]);
    let streamed: Vec<Value> = events
        .iter()
        .flat_map(|e| e["tokens"].as_array().unwrap().clone())
        .collect();
    assert_eq!(Value::from(streamed), ids);
    let joined: String = events
        .iter()
        .map(|e| e["content"].as_str().unwrap())
        .collect();
    assert_eq!(joined, text);

    // /props, /slots, /metrics.
    let v = request(port, "GET", "/props", "").json();
    // -c 512 shared by two slots.
    assert_eq!(v["default_generation_settings"]["n_ctx"], 256);
    assert_eq!(v["total_slots"], 2);
    assert_eq!(v["endpoint_metrics"], true);
    // The special tokens' text is each one token, as llama-server gives it.
    for name in ["bos_token", "eos_token"] {
        let text = v[name].as_str().unwrap_or_else(|| panic!("{name}: {v}"));
        let ids = post(port, "/tokenize", &json!({"content": text})).json()["tokens"].clone();
        assert_eq!(
            ids.as_array().map(Vec::len),
            Some(1),
            "{name} {text:?}: {ids}"
        );
    }
    let v = request(port, "GET", "/slots", "").json();
    assert_eq!(v.as_array().unwrap().len(), 2);
    assert_eq!(v[0]["id"], 0);
    let r = request(port, "GET", "/metrics", "");
    assert_eq!(r.status, 200);
    assert!(r.text().contains("llamacpp:tokens_predicted_total"));
    // llama-server's batch counters: the requests above ran one at a time
    // on two slots, the streamed ones reusing the plain ones' prompts.
    let decodes = metric(port, "n_decode_total");
    let per_decode = metric(port, "n_busy_slots_per_decode");
    assert!(
        decodes >= metric(port, "tokens_predicted_total") / 2.0,
        "{decodes}"
    );
    assert!((1.0..=2.0).contains(&per_decode), "{per_decode}");
    assert!(metric(port, "prompt_tokens_cached_total") >= 1.0);
    assert!(metric(port, "n_tokens_max") >= 12.0);
}

#[test]
fn serve_rejects_malformed_requests_and_survives() {
    let s = start(&[]);
    let port = s.port;
    let chat = "/v1/chat/completions";
    let cmpl = "/v1/completions";
    let resp = "/v1/responses";
    let msgs = "/v1/messages";
    let long_prompt = "hello ".repeat(600);
    let cases: Vec<(&str, &str, String, u16)> = vec![
        ("POST", chat, "{".into(), 400),
        ("POST", chat, "not json".into(), 400),
        ("POST", chat, "[]".into(), 400),
        ("POST", chat, "42".into(), 400),
        ("POST", chat, "".into(), 400),
        ("POST", chat, "{}".into(), 400),
        ("POST", chat, r#"{"messages":[]}"#.into(), 400),
        ("POST", chat, r#"{"messages":"hi"}"#.into(), 400),
        ("POST", chat, r#"{"messages":[1]}"#.into(), 400),
        ("POST", chat, r#"{"messages":[{"content":"x"}]}"#.into(), 400),
        ("POST", chat, r#"{"messages":[{"role":"wizard","content":"x"}]}"#.into(), 400),
        ("POST", chat, r#"{"messages":[{"role":"user"}]}"#.into(), 400),
        ("POST", chat, r#"{"messages":[{"role":"user","content":5}]}"#.into(), 400),
        ("POST", chat, r#"{"messages":[{"role":"user","content":[{"type":"image_url"}]}]}"#.into(), 400),
        ("POST", chat, r#"{"messages":[{"role":"user","content":"x"}],"temperature":"hot"}"#.into(), 400),
        ("POST", chat, r#"{"messages":[{"role":"user","content":"x"}],"temperature":-1}"#.into(), 400),
        ("POST", chat, r#"{"messages":[{"role":"user","content":"x"}],"top_p":1.5}"#.into(), 400),
        ("POST", chat, r#"{"messages":[{"role":"user","content":"x"}],"max_tokens":-5}"#.into(), 400),
        ("POST", chat, r#"{"messages":[{"role":"user","content":"x"}],"max_tokens":1.5}"#.into(), 400),
        ("POST", chat, r#"{"messages":[{"role":"user","content":"x"}],"n":2}"#.into(), 400),
        ("POST", chat, r#"{"messages":[{"role":"user","content":"x"}],"stream":"yes"}"#.into(), 400),
        ("POST", chat, r#"{"messages":[{"role":"user","content":"x"}],"stop":[1]}"#.into(), 400),
        ("POST", chat, r#"{"messages":[{"role":"user","content":"x"}],"logit_bias":{"999999":1}}"#.into(), 400),
        ("POST", chat, r#"{"messages":[{"role":"user","content":"x"}],"logit_bias":{"abc":"x"}}"#.into(), 400),
        ("POST", chat, r#"{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_object"}}"#.into(), 400),
        ("POST", chat, r#"{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function"}]}"#.into(), 400),
        ("POST", chat, r#"{"messages":[{"role":"user","content":"x"}],"top_logprobs":50,"logprobs":true}"#.into(), 400),
        ("POST", chat, r#"{"messages":[{"role":"user","content":"x"}],"seed":-7}"#.into(), 400),
        ("POST", chat, r#"{"messages":[{"role":"user","content":"x"}],"model":3}"#.into(), 400),
        ("POST", cmpl, r#"{}"#.into(), 400),
        ("POST", cmpl, r#"{"prompt":null}"#.into(), 400),
        ("POST", cmpl, r#"{"prompt":{"a":1}}"#.into(), 400),
        ("POST", cmpl, r#"{"prompt":[1,-2]}"#.into(), 400),
        ("POST", cmpl, r#"{"prompt":[99999999]}"#.into(), 400),
        ("POST", cmpl, r#"{"prompt":["a","b"]}"#.into(), 400),
        ("POST", cmpl, r#"{"prompt":[]}"#.into(), 400),
        ("POST", cmpl, format!(r#"{{"prompt":"{long_prompt}"}}"#), 400),
        ("POST", resp, "{}".into(), 400),
        ("POST", resp, r#"{"input":5}"#.into(), 400),
        ("POST", resp, r#"{"input":[5]}"#.into(), 400),
        ("POST", resp, r#"{"input":[{"content":"x"}]}"#.into(), 400),
        ("POST", resp, r#"{"input":[{"role":"user"}]}"#.into(), 400),
        ("POST", resp, r#"{"input":[{"role":"user","content":[{"text":"x"}]}]}"#.into(), 400),
        ("POST", resp, r#"{"input":[{"role":"wizard","content":"x"}]}"#.into(), 400),
        ("POST", resp, r#"{"input":"x","instructions":7}"#.into(), 400),
        ("POST", resp, r#"{"input":"x","max_output_tokens":-2}"#.into(), 400),
        ("POST", resp, r#"{"input":"x","text":"plain"}"#.into(), 400),
        ("POST", resp, r#"{"input":"x","background":true}"#.into(), 400),
        ("POST", resp, format!(r#"{{"input":"{long_prompt}"}}"#), 400),
        ("POST", msgs, r#"{"max_tokens":4}"#.into(), 400),
        ("POST", msgs, r#"{"messages":"hi"}"#.into(), 400),
        ("POST", msgs, r#"{"messages":[{"role":"user"}]}"#.into(), 400),
        ("POST", msgs, r#"{"messages":[{"role":"system","content":"x"}]}"#.into(), 400),
        ("POST", msgs, r#"{"messages":[{"role":"user","content":[{"type":"tool_result"}]}]}"#.into(), 400),
        ("POST", msgs, r#"{"messages":[{"role":"user","content":"x"}],"system":5}"#.into(), 400),
        ("POST", msgs, r#"{"messages":[{"role":"user","content":"x"}],"stop_sequences":"x"}"#.into(), 400),
        ("POST", msgs, r#"{"messages":[{"role":"user","content":"x"}],"thinking":{"type":"enabled"}}"#.into(), 400),
        ("POST", "/completion", r#"{"prompt":"x","n_probs":"many"}"#.into(), 400),
        ("POST", "/tokenize", r#"{"content":5}"#.into(), 400),
        ("POST", "/detokenize", r#"{"tokens":[-1]}"#.into(), 400),
        ("POST", "/detokenize", r#"{"tokens":"abc"}"#.into(), 400),
        ("GET", chat, "".into(), 405),
        ("GET", "/nowhere", "".into(), 404),
        ("POST", "/v1/nothing", "{}".into(), 404),
        ("GET", "/metrics", "".into(), 501),
    ];
    assert!(cases.len() >= 30);
    // A stream runs while the barrage comes in, and must come through whole.
    let bystander = std::thread::spawn(move || {
        post(
            port,
            "/v1/completions",
            &json!({"prompt": "Once upon a time", "max_tokens": 48, "stream": true,
                "ignore_eos": true, "temperature": 0}),
        )
    });
    for (method, path, body, status) in &cases {
        let r = request(port, method, path, body);
        assert_error(&r, *status, &format!("{method} {path} {body:.80}"));
    }
    // Bodies that are not JSON text whatever their declared type (a JSON
    // body under another type is read, as llama-server and `curl -d` do),
    // numbers past every range, and a body over the 8 MiB cap.
    let msg = |extra: &str| format!(r#"{{"messages":[{{"role":"user","content":"x"}}]{extra}}}"#);
    let ten_mb = format!(r#"{{"prompt":"{}"}}"#, "a".repeat(10 << 20));
    let mut raw: Vec<(&str, Vec<u8>, &str, u16)> = vec![
        (
            chat,
            b"prompt=hi&max_tokens=3".to_vec(),
            "application/x-www-form-urlencoded",
            400,
        ),
        (
            chat,
            b"--x\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n1\r\n--x--\r\n".to_vec(),
            "multipart/form-data; boundary=x",
            400,
        ),
        (
            chat,
            b"<messages><m>hi</m></messages>".to_vec(),
            "text/xml",
            400,
        ),
        (
            cmpl,
            b"{\"prompt\":\"\xff\xfe\xfd\"}".to_vec(),
            "application/json",
            400,
        ),
        (
            chat,
            b"{\"messages\":[{\"role\":\"user\",\"content\":\"\xc3\x28\"}]}".to_vec(),
            "application/json",
            400,
        ),
    ];
    // Numbers past every range.
    for extra in [
        r#","max_tokens":1e300"#,
        r#","max_tokens":18446744073709551616"#,
        r#","temperature":1e400"#,
        r#","seed":-1e20"#,
        r#","top_k":99999999999999999999999"#,
    ] {
        raw.push((chat, msg(extra).into_bytes(), "application/json", 400));
    }
    for (path, body, content_type, status) in &raw {
        let r = try_request(port, "POST", path, &[("Content-Type", content_type)], body)
            .unwrap_or_else(|e| panic!("{content_type} {path}: {e}"));
        let shown = String::from_utf8_lossy(&body[..body.len().min(80)]).into_owned();
        assert_error(&r, *status, &format!("{content_type} {path} {shown}"));
    }
    // The server answers once 8 MiB are in and may close before the rest
    // is sent, so the body goes from its own thread, its errors ignored.
    let c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut w = c.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        let head = format!(
            "POST {cmpl} HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
            ten_mb.len()
        );
        let _ = w.write_all(head.as_bytes());
        let _ = w.write_all(ten_mb.as_bytes());
    });
    let mut r = BufReader::new(c);
    let (status, headers) = read_head(&mut r).unwrap();
    let len: usize = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap();
    let mut body = vec![0; len];
    r.read_exact(&mut body).unwrap();
    let big = Reply {
        status,
        headers,
        body,
    };
    assert_error(&big, 413, "a 10 MB body");
    // Unblocks the writer if the server neither reads nor closes.
    let _ = r.get_ref().shutdown(std::net::Shutdown::Both);
    writer.join().unwrap();
    let r = bystander.join().unwrap();
    assert_eq!(r.status, 200);
    let events = r.events();
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let last: Value = serde_json::from_str(&events[events.len() - 2]).unwrap();
    assert_eq!(last["choices"][0]["finish_reason"], "length", "{last}");

    // Concurrent requests wait their turn and each gets its own answer.
    let handles: Vec<_> = (0..4)
        .map(|_| {
            std::thread::spawn(move || {
                post(
                    port,
                    "/v1/chat/completions",
                    &json!({"messages": [{"role": "user", "content": "Name a colour."}],
                        "max_tokens": 6, "temperature": 0}),
                )
            })
        })
        .collect();
    let answers: Vec<Value> = handles
        .into_iter()
        .map(|h| {
            let r = h.join().unwrap();
            assert_eq!(r.status, 200, "{}", r.text());
            r.json()["choices"][0]["message"]["content"].clone()
        })
        .collect();
    assert!(answers.iter().all(|a| a == &answers[0]), "{answers:?}");

    // A prompt longer than the context names both numbers.
    let r = request(
        port,
        "POST",
        cmpl,
        &format!(r#"{{"prompt":"{long_prompt}"}}"#),
    );
    let msg = r.json()["error"]["message"].as_str().unwrap().to_owned();
    assert!(msg.contains("601") && msg.contains("128"), "{msg}");
    // ... and is typed and sized as llama-server's.
    let e = &r.json()["error"];
    assert_eq!(e["type"], "exceed_context_size_error", "{e}");
    assert_eq!(
        (e["n_prompt_tokens"].as_u64(), e["n_ctx"].as_u64()),
        (Some(601), Some(128))
    );

    // Requests hyper cannot parse get its status with the same JSON error
    // body (it writes them with none; `parse_errors` adds it), and do not
    // take the server down either.
    let many_headers: String = (0..200).map(|i| format!("X-H{i}: v\r\n")).collect();
    let bad_http: Vec<(Vec<u8>, u16, &str)> = vec![
        (b"\x00\x01\x02garbage\r\n\r\n".to_vec(), 400, "garbage"),
        (
            b"POST / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n".to_vec(),
            400,
            "content-length past u64",
        ),
        (
            b"POST /v1/completions HTTP/1.1\r\nContent-Length: abc\r\n\r\n{}".to_vec(),
            400,
            "content-length not a number",
        ),
        (
            b"POST /v1/completions HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}"
                .to_vec(),
            400,
            "two content-lengths",
        ),
        (b"GET /health HTTP/9.9\r\n\r\n".to_vec(), 400, "HTTP/9.9"),
        (
            format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(100_000)).into_bytes(),
            414,
            "100 kB URI",
        ),
        (
            format!("GET /health HTTP/1.1\r\n{many_headers}\r\n").into_bytes(),
            431,
            "200 headers",
        ),
        (
            b"POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nZZ\r\n".to_vec(),
            400,
            "bad chunk size",
        ),
    ];
    for (junk, status, what) in bad_http {
        let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        c.write_all(&junk).unwrap();
        let mut r = BufReader::new(c);
        let (got, headers) = read_head(&mut r).unwrap_or_else(|e| panic!("{what}: {e}"));
        let len: usize = headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or_else(|| panic!("{what}: no content-length in {headers:?}"));
        let mut body = vec![0; len];
        r.read_exact(&mut body).unwrap();
        let reply = Reply {
            status: got,
            headers,
            body,
        };
        assert_error(&reply, status, what);
        if what == "bad chunk size" {
            let m = reply.json()["error"]["message"].to_string();
            assert!(m.contains("chunk size"), "{m}");
        }
    }
    // A client that disconnects mid-stream cancels its generation.
    {
        let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let body = json!({"prompt": "Once upon a time", "max_tokens": 200, "stream": true,
            "ignore_eos": true})
        .to_string();
        write!(
            c,
            "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut first = [0u8; 64];
        let _ = c.read(&mut first);
    }

    // The server still answers a normal request correctly.
    let r = post(
        port,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "temperature": 0}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.json()["choices"][0]["message"]["content"].is_string());
}

#[test]
fn serve_api_key_and_shutdown() {
    let mut s = start(&["--api-key", "sekrit"]);
    let port = s.port;
    let body = r#"{"prompt":"Hi","max_tokens":2}"#;
    // /health and /v1/models (and a model's card) stay public.
    assert_eq!(request(port, "GET", "/v1/models", "").status, 200);
    let id = request(port, "GET", "/v1/models", "").json()["data"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        request(port, "GET", &format!("/v1/models/{id}"), "").status,
        200
    );
    let r = request(port, "GET", "/v1/models/x/y", "");
    assert_error(&r, 401, "below a model's card");

    // A web page's preflight needs no key; its answers name the page.
    let origin = ("Origin", "http://localhost:5173");
    let r = try_request(
        port,
        "OPTIONS",
        "/v1/chat/completions",
        &[
            origin,
            ("Access-Control-Request-Method", "POST"),
            (
                "Access-Control-Request-Headers",
                "authorization, content-type",
            ),
        ],
        b"",
    )
    .unwrap();
    assert!(r.status == 200 || r.status == 204, "{}", r.status);
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("http://localhost:5173")
    );
    assert_eq!(r.header("access-control-allow-credentials"), Some("true"));
    assert!(r
        .header("access-control-allow-methods")
        .is_some_and(|m| m.contains("POST")));
    assert!(r
        .header("access-control-allow-headers")
        .is_some_and(|h| h.to_ascii_lowercase().contains("authorization")));
    let r = try_request(port, "POST", "/v1/completions", &[origin], body.as_bytes()).unwrap();
    assert_error(&r, 401, "no key, from a page");
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("http://localhost:5173")
    );
    let r = request(port, "POST", "/v1/completions", body);
    assert_error(&r, 401, "no key");
    let r = try_request(
        port,
        "POST",
        "/v1/completions",
        &[("Authorization", "Bearer wrong")],
        body.as_bytes(),
    )
    .unwrap();
    assert_error(&r, 401, "wrong key");
    let r = try_request(
        port,
        "POST",
        "/v1/completions",
        &[("Authorization", "Bearer sekrit")],
        body.as_bytes(),
    )
    .unwrap();
    assert_eq!(r.status, 200, "{}", r.text());

    // SIGTERM: exit 0, promptly.
    let pid = s.child.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let t0 = Instant::now();
    loop {
        if let Some(status) = s.child.try_wait().unwrap() {
            assert!(status.success(), "exit status after SIGTERM: {status}");
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(15),
            "no exit after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn serve_unknown_flag_is_named() {
    let out = Command::new(env!("CARGO_BIN_EXE_kestrel"))
        .args(["serve", "-m"])
        .arg(model())
        .arg("--frobnicate")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--frobnicate"), "{err}");
}

/// Reads `c` until the server closes it; how long that took.
fn time_to_close(c: &mut TcpStream) -> (Duration, Vec<u8>) {
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let t0 = Instant::now();
    let mut got = Vec::new();
    let _ = c.read_to_end(&mut got);
    (t0.elapsed(), got)
}

#[test]
fn serve_closes_connections_of_slow_clients() {
    let out = Command::new(env!("CARGO_BIN_EXE_kestrel"))
        .args(["serve", "-m"])
        .arg(model())
        .args(["--timeout", "0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--timeout"), "{err}");

    let s = start(&["--timeout", "1"]);
    let port = s.port;
    let connect = || TcpStream::connect(("127.0.0.1", port)).unwrap();
    // Half a request head: closed once the timeout passes.
    let mut half = connect();
    half.write_all(b"POST /completion HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    // A body announced and never finished: a 408 that says why.
    let mut slow = connect();
    slow.write_all(b"POST /completion HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"pro")
        .unwrap();
    // A kept-alive connection that goes quiet after one request.
    let mut idle = connect();
    let tokenize = br#"{"content":"hi"}"#;
    let (_, status, _) = {
        let c = idle.try_clone().unwrap();
        let mut head = format!(
            "POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
            tokenize.len()
        )
        .into_bytes();
        head.extend_from_slice(tokenize);
        idle.write_all(&head).unwrap();
        let mut r = BufReader::new(c);
        let h = read_head(&mut r).unwrap();
        (r, h.0, h.1)
    };
    assert_eq!(status, 200);

    let (waited, got) = time_to_close(&mut half);
    assert!(got.is_empty(), "{}", String::from_utf8_lossy(&got));
    assert!(
        waited < Duration::from_secs(10),
        "half head kept {waited:?}"
    );
    let (waited, got) = time_to_close(&mut slow);
    assert!(
        waited < Duration::from_secs(10),
        "slow body kept {waited:?}"
    );
    let mut r = BufReader::new(&got[..]);
    let (status, _) = read_head(&mut r).unwrap();
    let mut body = String::new();
    r.read_to_string(&mut body).unwrap();
    assert_eq!(status, 408, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["error"]["code"], 408, "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("1 s"),
        "{v}"
    );
    let (waited, _) = time_to_close(&mut idle);
    assert!(
        waited < Duration::from_secs(10),
        "idle connection kept {waited:?}"
    );

    // A response that takes longer than the timeout is not cut.
    let r = post(
        port,
        "/v1/completions",
        &json!({"prompt": "Once", "max_tokens": 400, "ignore_eos": true, "stream": true}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.text().ends_with("data: [DONE]\n\n"), "{}", r.text());
}

/// Opens a completion on a new connection and checks its 200 (a stream's
/// head comes before its first token, even while it waits in the queue).
fn open_completion(port: u16, body: &str) -> BufReader<TcpStream> {
    let c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let (r, status, _) = send(c, "POST", "/v1/completions", &[], body.as_bytes()).unwrap();
    assert_eq!(status, 200, "{body}");
    r
}

/// The value of one metric in `/metrics` text.
fn metric(port: u16, name: &str) -> f64 {
    let text = request(port, "GET", "/metrics", "").text();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("llamacpp:{name} ")))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {text}"))
}

#[test]
fn serve_queue_full_and_shutdown_mid_stream() {
    let mut s = start(&["--max-queue", "1", "--metrics", "-np", "1"]);
    let port = s.port;
    let long = json!({"prompt": "Once upon a time", "max_tokens": 400, "stream": true,
        "ignore_eos": true, "temperature": 0})
    .to_string();
    let open = || open_completion(port, &long);
    // A generates (its first token has arrived), B waits in the queue ...
    let mut a = open();
    let first = next_chunk(&mut a).unwrap().unwrap();
    assert!(first.starts_with(b"data: "));
    let mut b = open();
    let t0 = Instant::now();
    while metric(port, "requests_deferred") < 1.0 {
        assert!(t0.elapsed() < Duration::from_secs(30), "B never queued");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(metric(port, "requests_processing"), 1.0);
    // ... so a third request finds the queue full.
    let r = request(
        port,
        "POST",
        "/v1/completions",
        r#"{"prompt":"Hi","max_tokens":1}"#,
    );
    assert_error(&r, 503, "queue full");

    // SIGTERM: A's stream is cut short and says so (an error event, not a
    // finish_reason that passes for a whole answer), then closes properly;
    // B is told the server is going away; the process exits 0.
    let pid = s.child.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let mut rest = Vec::new();
    while let Some(c) = next_chunk(&mut a).unwrap() {
        rest.extend(c);
    }
    let rest = String::from_utf8(rest).unwrap();
    assert!(rest.ends_with("data: [DONE]\n\n"), "{rest}");
    assert!(rest.contains("cut short"), "{rest}");
    assert!(!rest.contains("\"finish_reason\":\"stop\""), "{rest}");
    let mut rest = Vec::new();
    while let Some(c) = next_chunk(&mut b).unwrap() {
        rest.extend(c);
    }
    let rest = String::from_utf8(rest).unwrap();
    assert!(rest.contains("shutting down"), "{rest}");
    let t0 = Instant::now();
    loop {
        if let Some(status) = s.child.try_wait().unwrap() {
            assert!(status.success(), "exit status after SIGTERM: {status}");
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(15),
            "no exit after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A request whose client leaves while it waits in the queue gives its
/// place back at the next step, not when a slot comes free: the queue
/// full of such requests answered every live client 503 while the slots
/// stayed busy.
#[test]
fn serve_queued_requests_of_departed_clients_free_their_places() {
    let s = start_ctx("4096", &["--max-queue", "2", "--metrics", "-np", "1"]);
    let port = s.port;
    // A holds the only slot for far longer than the test waits.
    let long = json!({"prompt": "Once upon a time", "max_tokens": 3000, "stream": true,
        "ignore_eos": true, "temperature": 0})
    .to_string();
    let mut a = open_completion(port, &long);
    assert!(next_chunk(&mut a).unwrap().unwrap().starts_with(b"data: "));
    // Two more fill the queue (no reply yet: they wait for the slot) ...
    let body = br#"{"prompt":"Hi","max_tokens":1}"#;
    let queued: Vec<TcpStream> = (0..2)
        .map(|_| {
            let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
            let head = format!(
                "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\n\r\n",
                body.len()
            );
            c.write_all(head.as_bytes()).unwrap();
            c.write_all(body).unwrap();
            c
        })
        .collect();
    let wait_for = |want: f64, what: &str| {
        let t0 = Instant::now();
        while metric(port, "requests_deferred") != want {
            assert!(t0.elapsed() < Duration::from_secs(20), "{what}");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    wait_for(2.0, "the two requests never queued");
    // ... and leave: their places come back while A still runs, and a new
    // client is queued (its stream opens) instead of turned away.
    drop(queued);
    wait_for(0.0, "the departed clients' requests still hold the queue");
    assert_eq!(metric(port, "requests_processing"), 1.0, "A still runs");
    // (A live client after the departed ones.)
    open_completion(port, &long);
}

#[test]
fn serve_unix_socket() {
    let path = std::env::temp_dir().join(format!("kestrel-serve-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&path);
    // A socket file left behind by a dead server does not block binding.
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    let mut child = Command::new(env!("CARGO_BIN_EXE_kestrel"))
        .args(["serve", "-m"])
        .arg(model())
        .arg("--host")
        .arg(&path)
        .args(["-t", "2", "-c", "256"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let ask = |method: &str, url: &str, body: &str| {
        let c = std::os::unix::net::UnixStream::connect(&path)?;
        c.set_read_timeout(Some(Duration::from_secs(60)))?;
        exchange(c, method, url, &[], body.as_bytes())
    };
    let t0 = Instant::now();
    while !ask("GET", "/health", "").is_ok_and(|r| r.status == 200) {
        assert!(
            child.try_wait().unwrap().is_none(),
            "kestrel serve exited early"
        );
        assert!(t0.elapsed() < Duration::from_secs(60), "server not ready");
        std::thread::sleep(Duration::from_millis(50));
    }
    let r = ask(
        "POST",
        "/v1/completions",
        r#"{"prompt":"Hi","max_tokens":2,"temperature":0}"#,
    )
    .unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["usage"]["completion_tokens"], 2);
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_file(&path);
}

#[test]
fn serve_bad_model_exits_1() {
    let dir = std::env::temp_dir().join(format!("kestrel-serve-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("not-a-model.gguf");
    std::fs::write(&bad, b"this is not a GGUF file").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_kestrel"))
        .args(["serve", "-m"])
        .arg(&bad)
        .args(["--port", &free_port().to_string()])
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("error:") && err.contains("not-a-model.gguf"),
        "{err}"
    );
}

/// Reads SSE events from an open stream until `[DONE]`; returns the text of
/// the completion chunks.
fn read_stream<R: BufRead>(r: &mut R) -> String {
    let mut body = Vec::new();
    while let Some(c) = next_chunk(r).unwrap() {
        body.extend(c);
    }
    let body = String::from_utf8(body).unwrap();
    assert!(body.ends_with("data: [DONE]\n\n"), "{body}");
    body.split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .filter(|e| *e != "[DONE]")
        .filter_map(|e| {
            let v: Value = serde_json::from_str(e).unwrap();
            v["choices"][0]["text"].as_str().map(str::to_owned)
        })
        .collect()
}

fn busy_slots(port: u16) -> usize {
    let v = request(port, "GET", "/slots", "").json();
    v.as_array()
        .unwrap()
        .iter()
        .filter(|s| s["is_processing"] == true)
        .count()
}

/// Drops the client's connection `conn`, then waits until `/slots` shows
/// every slot idle, which must take less than `limit`.
fn leave_and_wait_for_idle_slots<C>(port: u16, conn: C, limit: Duration) {
    let t0 = Instant::now();
    drop(conn);
    while busy_slots(port) > 0 {
        assert!(
            t0.elapsed() < limit,
            "the slot is still busy {:?} after the client left",
            t0.elapsed()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Eight seeded streams at once decode together (the slots show them
/// running side by side) and each streams exactly what it streams alone.
#[test]
fn serve_concurrent_streams_equal_each_alone() {
    let s = start(&["-np", "8"]);
    let port = s.port;
    let topics = [
        "the sea",
        "a mountain",
        "bread",
        "a robot",
        "the moon",
        "winter",
        "a river",
        "music",
    ];
    let bodies: Vec<String> = topics
        .iter()
        .enumerate()
        .map(|(i, t)| {
            json!({"prompt": format!("A short story about {t}:"), "max_tokens": 32,
                "temperature": 0.9, "seed": 100 + i, "top_k": 40, "stream": true,
                "ignore_eos": true})
            .to_string()
        })
        .collect();
    let stream = move |body: &str| {
        let c = TcpStream::connect(("127.0.0.1", port)).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
        let (mut r, status, _) = send(c, "POST", "/v1/completions", &[], body.as_bytes()).unwrap();
        assert_eq!(status, 200);
        read_stream(&mut r)
    };
    let alone: Vec<String> = bodies.iter().map(|b| stream(b)).collect();
    assert!(alone.iter().all(|t| !t.is_empty()));
    assert!(alone.windows(2).any(|w| w[0] != w[1]), "different requests");

    let watcher = std::thread::spawn(move || {
        let mut most = 0;
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(20) {
            most = most.max(busy_slots(port));
            if most == 8 {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        most
    });
    let together: Vec<String> = std::thread::scope(|sc| {
        let handles: Vec<_> = bodies.iter().map(|b| sc.spawn(move || stream(b))).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let most = watcher.join().unwrap();
    assert!(most >= 4, "at most {most} requests ran at once");
    for (i, (a, b)) in alone.iter().zip(&together).enumerate() {
        assert_eq!(a, b, "request {i}: concurrent output differs from alone");
    }
}

/// Long prompts (310 and 655 tokens) go in llama.cpp's 512-token
/// micro-batches, so greedy text equals llama-completion's (the long greedy
/// fixtures, which `kestrel run` matches in greedy_parity.rs): with
/// 256-token chunks the 310-token prompt's last 54 rows took other kernels,
/// and the text parted at the fifth token.
#[test]
fn serve_long_prompts_match_llama_cpp_greedy() {
    let s = start_ctx("4096", &["-np", "1"]);
    let fixture = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/greedy/long/SmolLM2-135M-Instruct.Q4_1.jsonl"),
    )
    .expect("the long greedy fixture");
    let mut cases = 0;
    for line in fixture.lines().filter(|l| !l.trim().is_empty()) {
        let case: Value = serde_json::from_str(line).expect("fixture line is JSON");
        let r = post(
            s.port,
            "/completion",
            &json!({"prompt": case["prompt"], "n_predict": case["n_predict"],
                "temperature": 0, "cache_prompt": false}),
        );
        assert_eq!(r.status, 200, "{}", r.text());
        let v = r.json();
        assert_eq!(
            v["content"], case["output"],
            "prompt of {} tokens",
            v["tokens_evaluated"]
        );
        cases += 1;
    }
    assert_eq!(cases, 2, "two long prompts");
}

/// A client that drops its stream frees the slot within a second; a
/// repeated prompt reuses the cached prefix (`cache_n`) and answers the same.
#[test]
fn serve_cancel_frees_slot_and_prompt_cache_is_reused() {
    let s = start(&["-np", "2", "--metrics"]);
    let port = s.port;
    let body = json!({"prompt": "Count slowly: one, two,", "max_tokens": 200, "stream": true,
        "ignore_eos": true, "temperature": 0})
    .to_string();
    let mut r = open_completion(port, &body);
    for _ in 0..3 {
        assert!(next_chunk(&mut r).unwrap().is_some());
    }
    assert_eq!(busy_slots(port), 1);
    // llama-server's view of the running slot: what is left of its 200.
    let slots = request(port, "GET", "/slots", "").json();
    let busy = slots
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["is_processing"] == true)
        .unwrap();
    let next = &busy["next_token"][0];
    assert_eq!(next["has_next_token"], true, "{busy}");
    let (remain, decoded) = (next["n_remain"].as_i64(), next["n_decoded"].as_i64());
    assert_eq!(remain.zip(decoded).map(|(r, d)| r + d), Some(200), "{busy}");
    // (Published after each step: it may lag the stream by a token.)
    assert!(decoded >= Some(1), "{busy}");
    leave_and_wait_for_idle_slots(port, r, Duration::from_secs(1));
    assert_eq!(metric(port, "requests_processing"), 0.0);

    let ask = json!({"prompt": "The three primary colors are red, yellow and", "max_tokens": 8,
        "temperature": 0});
    let first = post(port, "/v1/completions", &ask).json();
    let second = post(port, "/v1/completions", &ask).json();
    assert_eq!(first["choices"][0]["text"], second["choices"][0]["text"]);
    let (t1, t2) = (&first["timings"], &second["timings"]);
    assert_eq!(t1["cache_n"], 0, "{t1}");
    let n_prompt = first["usage"]["prompt_tokens"].as_u64().unwrap();
    let cached = t2["cache_n"].as_u64().unwrap();
    assert!(cached > 0 && cached < n_prompt, "{t2}");
    let details = &second["usage"]["prompt_tokens_details"];
    assert_eq!(details["cached_tokens"].as_u64(), Some(cached), "{second}");
    assert_eq!(t2["prompt_n"].as_u64().unwrap(), n_prompt - cached, "{t2}");
    // cache_prompt: false computes the whole prompt again.
    let mut fresh = ask.clone();
    fresh["cache_prompt"] = json!(false);
    let third = post(port, "/v1/completions", &fresh).json();
    assert_eq!(third["timings"]["cache_n"], 0);
    assert_eq!(third["choices"][0]["text"], first["choices"][0]["text"]);
}

/// A client that leaves while its long prompt is still being prefilled
/// (nothing streamed yet, so the loop, not a failed token send, notices)
/// frees the slot too, and `/slots` says so: the loop once went to sleep
/// on the empty queue without publishing the freed slot. The metrics
/// count only the prompt chunks computed.
#[test]
fn serve_leaving_during_prefill_frees_the_slot() {
    let s = start_ctx("4096", &["-np", "1", "--metrics"]);
    let port = s.port;
    let prompt = "The quick brown fox jumps over the lazy dog. ".repeat(300);
    let body = json!({"prompt": prompt, "max_tokens": 4, "stream": true}).to_string();
    let c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let (r, status, _) = send(c, "POST", "/v1/completions", &[], body.as_bytes()).unwrap();
    assert_eq!(status, 200);
    // Leave once the first 512-token chunk is in (of about 3000).
    let t0 = Instant::now();
    loop {
        let slots = request(port, "GET", "/slots", "").json();
        let n_past = slots[0]["n_past"].as_u64().unwrap_or(0);
        if n_past > 0 {
            assert!(n_past < 2048, "{slots}");
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "{slots}");
        std::thread::sleep(Duration::from_millis(5));
    }
    // The loop notices between steps, so the chunk in flight finishes
    // first: well under a second alone, but one CI run saw it outlast 5 s
    // with the other serve tests' servers sharing the two cores. A missed
    // cancel shows in the count below (the whole prompt, not whole chunks),
    // so a generous bound costs the test nothing.
    leave_and_wait_for_idle_slots(port, r, Duration::from_secs(30));
    let computed = metric(port, "prompt_tokens_total");
    assert!(
        (512.0..3000.0).contains(&computed) && computed % 512.0 == 0.0,
        "{computed} prompt tokens counted: whole 512-token chunks, not the whole prompt"
    );
    let again = json!({"prompt": "Hello", "max_tokens": 2, "temperature": 0});
    assert_eq!(post(port, "/v1/completions", &again).status, 200);
}

/// `--device gpu` (lavapipe in CI): streamed text equals the reply's,
/// seeded streams running together each give what they give alone, a
/// repeated prompt reuses its cached prefix, and logprobs come back.
#[test]
fn serve_on_the_gpu() {
    let s = start(&["-np", "2", "--device", "gpu"]);
    let port = s.port;
    let mut chat = chat_body(false);
    chat["max_tokens"] = json!(6);
    let full = post(port, "/v1/chat/completions", &chat).json();
    let text = full["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(!text.is_empty(), "{full}");
    assert_eq!(full["usage"]["completion_tokens"], 6, "{full}");
    chat["stream"] = json!(true);
    let streamed = check_stream(
        &post(port, "/v1/chat/completions", &chat),
        "chat.completion.chunk",
        |c| c["delta"]["content"].as_str().map(str::to_owned),
    );
    assert_eq!(streamed, text);
    // The same conversation again: its prompt is in a slot's cache.
    let again = post(port, "/v1/chat/completions", &chat_body(false)).json();
    let cached = again["timings"]["cache_n"].as_u64().unwrap();
    let n_prompt = again["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!(cached > 0 && cached < n_prompt, "{again}");
    assert!(again["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .starts_with(&text));

    let bodies: Vec<String> = ["the sea", "a robot"]
        .iter()
        .enumerate()
        .map(|(i, t)| {
            json!({"prompt": format!("A short story about {t}:"), "max_tokens": 5,
                "temperature": 0.9, "seed": 40 + i, "stream": true, "ignore_eos": true})
            .to_string()
        })
        .collect();
    let stream = move |body: &str| {
        let c = TcpStream::connect(("127.0.0.1", port)).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
        let (mut r, status, _) = send(c, "POST", "/v1/completions", &[], body.as_bytes()).unwrap();
        assert_eq!(status, 200);
        read_stream(&mut r)
    };
    let alone: Vec<String> = bodies.iter().map(|b| stream(b)).collect();
    assert!(alone.iter().all(|t| !t.is_empty()), "{alone:?}");
    let together: Vec<String> = std::thread::scope(|sc| {
        let handles: Vec<_> = bodies.iter().map(|b| sc.spawn(move || stream(b))).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(alone, together, "concurrent output differs from alone");

    let lp = post(
        port,
        "/v1/completions",
        &json!({"prompt": "The sky is", "max_tokens": 3, "temperature": 0, "logprobs": 2}),
    )
    .json();
    let l = &lp["choices"][0]["logprobs"];
    assert_eq!(l["tokens"].as_array().map(Vec::len), Some(3), "{lp}");
    for (top, p) in l["top_logprobs"]
        .as_array()
        .unwrap()
        .iter()
        .zip(l["token_logprobs"].as_array().unwrap())
    {
        // Greedy: the chosen token is the most likely one.
        let best = top
            .as_object()
            .unwrap()
            .values()
            .map(|v| v.as_f64().unwrap())
            .fold(f64::MIN, f64::max);
        assert_eq!(p.as_f64().unwrap(), best, "{lp}");
    }
}

/// llama-server's `/infill` on a code model: the FIM prompt laid out as
/// llama-server lays it out (the expected texts are what llama-server's
/// `prompt` showed for these requests, side by side), its answer the same
/// as `/completion` of that text, and a long prefix cut to its budget.
#[test]
fn serve_infill_lays_out_fim_prompts_as_llama_server() {
    let s = start_model(
        model_file("qwen2.5-coder-0.5b-q4_k_m.gguf"),
        "4096",
        &["-np", "1"],
    );
    let port = s.port;
    let cases = [
        (
            json!({"input_prefix": "def fibonacci(n):\n    ", "input_suffix": "\n    return a\n"}),
            "<|repo_name|>myproject\n<|file_sep|>filename\n<|fim_prefix|>def fibonacci(n):\n    \
             <|fim_suffix|>\n    return a\n<|fim_middle|>",
            20,
        ),
        (
            json!({"input_prefix": "import os\n", "input_suffix": "", "prompt": "def ",
                "input_extra": [{"filename": "util.py", "text": "def helper():\n    return 1\n"},
                    {"text": "x = 2\n"}]}),
            "<|repo_name|>myproject\n<|file_sep|>util.py\ndef helper():\n    return 1\n\
             <|file_sep|>tmp\nx = 2\n<|file_sep|>filename\n<|fim_prefix|>import os\ndef \
             <|fim_suffix|><|fim_middle|>",
            35,
        ),
    ];
    for (mut body, prompt, n) in cases {
        body["n_predict"] = json!(8);
        body["temperature"] = json!(0);
        let r = post(port, "/infill", &body);
        assert_eq!(r.status, 200, "{}", r.text());
        let v = r.json();
        assert_eq!(v["prompt"], prompt, "{v}");
        assert_eq!(v["tokens_evaluated"], n, "{v}");
        let plain = post(
            port,
            "/completion",
            &json!({"prompt": prompt, "n_predict": 8, "temperature": 0}),
        )
        .json();
        assert_eq!(plain["tokens_evaluated"], n, "{plain}");
        assert_eq!(v["content"], plain["content"], "{v}\n{plain}");
    }
    // A prefix past three quarters of llama-server's 2048-token batch keeps
    // its last 1536 tokens; the suffix keeps what is left of a quarter.
    let line = "x = 1\n";
    let count = |text: &str| {
        post(port, "/tokenize", &json!({"content": text})).json()["tokens"]
            .as_array()
            .unwrap()
            .len()
    };
    let per_line = count(&line.repeat(10)) / 10;
    assert_eq!(count(&line.repeat(1000)), 1000 * per_line);
    let around = 2 + count("myproject\n") + count("filename\n");
    let v = post(
        port,
        "/infill",
        &json!({"input_prefix": line.repeat(1000), "input_suffix": line.repeat(1000),
            "n_predict": 1, "temperature": 0}),
    )
    .json();
    assert_eq!(
        v["tokens_evaluated"].as_u64(),
        Some((around + 3 + 1536 + (512 - 2)) as u64),
        "{}",
        v["tokens_evaluated"]
    );
    let shown = v["prompt"].as_str().unwrap();
    // (llama-server's prompt for this request, its 2056 tokens the same.)
    assert!(
        shown.starts_with("<|repo_name|>myproject\n<|file_sep|>filename\n<|fim_prefix|>\nx = 1\n")
            && shown.ends_with("x = 1\n<|fim_middle|>"),
        "{shown:?}"
    );
}

/// The mutated-request test's seeded draws (the sampler's own xorshift).
struct Rng(kestrel_sampling::XorShift);

impl Rng {
    fn next(&mut self) -> u64 {
        (u64::from(self.0.next_u32()) << 32) | u64::from(self.0.next_u32())
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }
}

/// Field names the request readers look at (and a few they do not).
const FIELDS: &[&str] = &[
    "model",
    "messages",
    "prompt",
    "max_tokens",
    "max_completion_tokens",
    "n_predict",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "repeat_penalty",
    "repeat_last_n",
    "frequency_penalty",
    "presence_penalty",
    "logit_bias",
    "seed",
    "stop",
    "stream",
    "stream_options",
    "logprobs",
    "top_logprobs",
    "ignore_eos",
    "n",
    "cache_prompt",
    "response_format",
    "tools",
    "tool_choice",
    "n_probs",
    "id_slot",
    "input",
    "instructions",
    "max_output_tokens",
    "text",
    "system",
    "stop_sequences",
    "content",
    "tokens",
    "add_special",
    "with_pieces",
    "input_prefix",
    "input_suffix",
    "input_extra",
    "lora",
    "samplers",
    "echo",
    "best_of",
    "suffix",
    "user",
    "chat_template_kwargs",
    "reasoning_format",
    "typical_p",
    "dry_multiplier",
    "mirostat",
    "grammar",
    "json_schema",
    "t_max_predict_ms",
    "n_keep",
    "n_discard",
    "post_sampling_probs",
    "return_tokens",
    "timings_per_token",
    "",
];

/// A random JSON value, `depth` levels deep at most: the edges of each kind
/// (huge, negative, fractional, empty, long, control characters, nesting).
fn random_value(rng: &mut Rng, depth: usize) -> Value {
    let kinds = if depth == 0 { 14 } else { 18 };
    match rng.below(kinds) {
        0 => Value::Null,
        1 => json!(rng.below(2) == 1),
        2 => json!(*rng.pick(&[0i64, 1, -1, 2, 7, 63, 64, 255, 49151, 49152, 65535])),
        3 => json!(*rng.pick(&[
            i64::MAX,
            i64::MIN,
            i32::MAX as i64,
            i32::MIN as i64,
            1 << 53
        ])),
        4 => json!(u64::MAX),
        5 => json!(*rng.pick(&[0.5f64, -0.5, 1e-30, 1e30, -1e300, 1e308, 2.5, 100.0])),
        6 => json!(""),
        7 => json!(*rng.pick(&["x", "user", "system", "assistant", "text", "json_object"])),
        8 => json!(*rng.pick(&[
            "\u{0}",
            "\u{7f}\u{1}",
            "é🙂",
            "<|im_end|>",
            "</s>",
            "\\u0000"
        ])),
        9 => json!("hello ".repeat(rng.below(700))),
        10 => json!(rng.next().to_string()),
        11 => json!((rng.below(3000) as f64) / 7.0 - 100.0),
        12 => json!(*rng.pick(&["-1", "1e400", "NaN", "inf", "0x10", "12abc"])),
        13 => json!([]),
        14 => Value::Array(
            (0..rng.below(5))
                .map(|_| random_value(rng, depth - 1))
                .collect(),
        ),
        15 => {
            let mut o = serde_json::Map::new();
            for _ in 0..rng.below(4) {
                let k = rng.pick(FIELDS).to_string();
                o.insert(k, random_value(rng, depth - 1));
            }
            Value::Object(o)
        }
        16 => json!({"role": rng.pick(&["user", "system", "assistant", "tool", "developer", "x"]),
                     "content": random_value(rng, depth - 1)}),
        _ => json!({"type": rng.pick(&["text", "image_url", "input_text", "output_text",
                                       "function", "json_schema", "tool_use"]),
                    "text": random_value(rng, depth - 1)}),
    }
}

/// One to three changes to `body`: a field set to a random value, a field
/// removed, a message or part of one replaced, or the whole body replaced.
fn mutate(rng: &mut Rng, body: &mut Value) {
    for _ in 0..1 + rng.below(3) {
        match rng.below(10) {
            0 => *body = random_value(rng, 3),
            1 | 2 => {
                if let Some(o) = body.as_object_mut() {
                    let keys: Vec<String> = o.keys().cloned().collect();
                    if !keys.is_empty() {
                        o.remove(&keys[rng.below(keys.len())]);
                    }
                }
            }
            3 | 4 => {
                if let Some(m) = body.get_mut("messages").and_then(Value::as_array_mut) {
                    if !m.is_empty() {
                        let i = rng.below(m.len());
                        let field = rng.pick(&["role", "content", "name", "type"]).to_string();
                        let v = random_value(rng, 2);
                        match m[i].as_object_mut() {
                            Some(o) if rng.below(3) > 0 => {
                                o.insert(field, v);
                            }
                            _ => m[i] = v,
                        }
                    }
                }
            }
            _ => {
                if let Some(o) = body.as_object_mut() {
                    let k = rng.pick(FIELDS).to_string();
                    o.insert(k, random_value(rng, 3));
                }
            }
        }
    }
}

/// Checks what a mutated request got: an answer (200, its body whole JSON,
/// or for a stream every event JSON) or a 4xx with an error message; never
/// a 5xx, a dropped connection or a body that is not JSON.
fn check_mutated_reply(reply: std::io::Result<Reply>, what: &str) {
    let r = reply.unwrap_or_else(|e| panic!("{what}: no reply ({e})"));
    assert!(
        r.status == 200 || (400..500).contains(&r.status),
        "{what}: status {}: {}",
        r.status,
        r.text()
    );
    if r.header("content-type") == Some("text/event-stream") {
        assert_eq!(r.status, 200, "{what}");
        let text = r.text();
        let events: Vec<&str> = text
            .split("\n\n")
            .filter_map(|e| e.lines().find_map(|l| l.strip_prefix("data: ")))
            .collect();
        assert!(!events.is_empty(), "{what}: an empty stream");
        for e in events.iter().filter(|&&e| e != "[DONE]") {
            let v: Value = serde_json::from_str(e)
                .unwrap_or_else(|err| panic!("{what}: event not JSON ({err}): {e}"));
            assert!(v.get("error").is_none(), "{what}: error in a stream: {v}");
        }
        return;
    }
    let v: Value = serde_json::from_slice(&r.body)
        .unwrap_or_else(|e| panic!("{what}: body not JSON ({e}): {}", r.text()));
    if r.status != 200 {
        assert!(
            v["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{what}: error without a message: {v}"
        );
    }
}

/// The mutated-request test's bodies: a valid request to each JSON
/// endpoint that answers on SmolLM2 (infill and embeddings are 501 there).
fn mutation_bases() -> Vec<(&'static str, Value)> {
    let hi = json!([{"role": "user", "content": "Hi"}]);
    vec![
        (
            "/v1/chat/completions",
            json!({"model": "m", "messages": hi, "max_tokens": 3, "seed": 1}),
        ),
        (
            "/v1/completions",
            json!({"model": "m", "prompt": "Hi", "max_tokens": 3}),
        ),
        ("/completion", json!({"prompt": "Hi", "n_predict": 3})),
        (
            "/v1/responses",
            json!({"model": "m", "input": "Hi", "max_output_tokens": 3}),
        ),
        (
            "/v1/messages",
            json!({"model": "m", "max_tokens": 3, "messages": hi}),
        ),
        (
            "/v1/messages/count_tokens",
            json!({"model": "m", "messages": hi}),
        ),
        ("/v1/chat/completions/input_tokens", json!({"messages": hi})),
        ("/apply-template", json!({"messages": hi})),
        ("/tokenize", json!({"content": "Hi", "with_pieces": true})),
        ("/detokenize", json!({"tokens": [1, 2, 3]})),
    ]
}

/// Sends `n` mutated requests from the series `seed` names, one at a time,
/// checking each reply; with `alone` (no other client), also that the
/// request's slot reads idle once its answer is in. Returns the count of
/// each status.
fn mutated_series(port: u16, seed: u64, n: usize, alone: bool) -> BTreeMap<u16, usize> {
    let bases = mutation_bases();
    let mut rng = Rng(kestrel_sampling::XorShift::new(seed));
    let mut statuses = BTreeMap::new();
    for i in 0..n {
        let (path, base) = &bases[i % bases.len()];
        let mut body = base.clone();
        mutate(&mut rng, &mut body);
        // With other clients about, one request in eight streams and its
        // client leaves after the first chunk (which frees the slot at the
        // next step; checked once all are done).
        if !alone && rng.below(8) == 0 {
            if let Some(o) = body.as_object_mut() {
                o.insert("stream".into(), json!(true));
                let s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
                s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
                let sent = send(s, "POST", path, &[], body.to_string().as_bytes());
                let (mut r, status, _) = sent.expect("a reply head");
                assert!(
                    status == 200 || (400..500).contains(&status),
                    "{body}: {status}"
                );
                let _ = next_chunk(&mut r);
                *statuses.entry(status).or_insert(0) += 1;
                continue;
            }
        }
        let text = body.to_string();
        let what = format!("series {seed}, request {i} to {path}: {text}");
        let reply = try_request(port, "POST", path, &[], text.as_bytes());
        if let Ok(r) = &reply {
            *statuses.entry(r.status).or_insert(0) += 1;
        }
        check_mutated_reply(reply, &what);
        // Its slot reads idle by the time the answer is in.
        if alone {
            let slots = request(port, "GET", "/slots", "").json();
            let busy = slots.as_array().unwrap().iter();
            assert!(
                busy.filter(|s| s["is_processing"] == true).count() == 0,
                "{what}: its slot is still busy: {slots}"
            );
        }
    }
    statuses
}

/// Hundreds of valid requests to every JSON endpoint, each changed in one
/// to three random places (seeded, so a failure names a request that fails
/// again), first one at a time, then from four clients at once (their
/// sequences decoding together with unlike settings, some clients leaving
/// mid-stream): the server answers each with its answer or a 4xx that says
/// why, frees its slot, and afterwards still answers a plain request as
/// before. MUTATED_SEED and
/// MUTATED_REQUESTS run other and longer series.
#[test]
fn serve_survives_randomly_mutated_requests() {
    let s = start(&["-n", "4", "-np", "2"]);
    let port = s.port;
    let plain = |port: u16| {
        let body = json!({"messages": [{"role": "user", "content": "Hi"}],
                          "max_tokens": 3, "temperature": 0});
        let r = post(port, "/v1/chat/completions", &body);
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let before = plain(port);
    let env = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
    let seed = env("MUTATED_SEED").unwrap_or(1);
    let n = env("MUTATED_REQUESTS").unwrap_or(240) as usize;
    let mut statuses = mutated_series(port, seed, n, true);
    let clients: Vec<_> = (1..=4)
        .map(|c| std::thread::spawn(move || mutated_series(port, seed + 1000 * c, n / 4, false)))
        .collect();
    for c in clients {
        for (status, k) in c.join().expect("a client's checks hold") {
            *statuses.entry(status).or_insert(0) += k;
        }
    }
    // Both kinds of outcome happened (a mutation that never broke a request,
    // or one that always did, would test little).
    let ok = statuses.get(&200).copied().unwrap_or(0);
    let all: usize = statuses.values().sum();
    assert!(
        ok >= all / 10 && ok <= all * 9 / 10,
        "statuses: {statuses:?}"
    );
    assert_eq!(plain(port), before, "the same answer after the barrage");
}

/// `-c 0` is the model's training context shared by the slots, as
/// llama-server reads it (SmolLM2: 8192 tokens, two slots of 4096; without
/// `-c` each slot gets min(4096, that)).
#[test]
fn serve_ctx_size_zero_is_the_training_context() {
    let s = start_ctx("0", &["-np", "2"]);
    let slots = request(s.port, "GET", "/slots", "").json();
    let n_ctx: Vec<&Value> = slots
        .as_array()
        .unwrap()
        .iter()
        .map(|s| &s["n_ctx"])
        .collect();
    assert_eq!(n_ctx, [&json!(4096), &json!(4096)], "{slots}");
    let long = "hello ".repeat(5000);
    let r = post(
        s.port,
        "/completion",
        &json!({"prompt": long, "n_predict": 1}),
    );
    assert_error(&r, 400, "a prompt past a slot's share");
    assert!(r.text().contains("4096"), "{}", r.text());
}
