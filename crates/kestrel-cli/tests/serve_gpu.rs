//! `kestrel serve --device gpu`: the same answers as on the CPU, streamed,
//! batched and cached.

use serde_json::json;

mod common;
use common::server::*;

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
    let stream = move |body: &str| stream_completion(port, body);
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

/// A seeded JSON-schema request gives the GPU server the CPU server's text.
#[test]
fn constrained_answers_match_the_cpus() {
    let body = json!({
        "messages": [{"role": "user", "content": "Describe a city as JSON."}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "city", "schema": {
            "type": "object",
            "properties": {"name": {"type": "string", "maxLength": 16},
                "population": {"type": "integer", "minimum": 0}},
            "required": ["name", "population"], "additionalProperties": false}}},
        "max_tokens": 60, "temperature": 0.8, "seed": 11,
    });
    let answer = |device: &str| {
        let s = start(&["--device", device]);
        let v = post(s.port, "/v1/chat/completions", &body).json();
        v["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let cpu = answer("cpu");
    serde_json::from_str::<serde_json::Value>(&cpu).unwrap_or_else(|e| panic!("{e}: {cpu}"));
    assert_eq!(answer("gpu"), cpu);
}
