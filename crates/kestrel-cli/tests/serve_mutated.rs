//! `kestrel serve` under randomly mutated requests to every JSON endpoint:
//! each gets its answer or a 4xx that says why, never a 5xx or a dropped
//! connection.

use std::collections::BTreeMap;
use std::net::TcpStream;
use std::time::Duration;

use serde_json::{json, Value};

mod common;
use common::server::*;

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
