//! `kestrel serve`'s endpoints, one server answering them all in turn:
//! OpenAI's chat and completions (plain, streamed, logprobs, stops),
//! llama-server's `/completion`, `/tokenize`, `/apply-template`, `/props`,
//! `/slots`, `/metrics` and its 501s, and what the counters show afterwards.

use serde_json::{json, Value};

mod common;
use common::server::*;

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
