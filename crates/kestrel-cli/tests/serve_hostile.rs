//! `kestrel serve` against large and pathological bodies: every body up to
//! the documented 8 MiB is read and parsed and gets Kestrel's own answer
//! (an over-long prompt its 400 with both token counts), one past it a 413
//! in Kestrel's error shape, and a burst of heavy bodies at once leaves the
//! server answering, with the same seeded text as before. The memory and
//! latency figures of such bursts are measured by `scripts/soak.py`.

use std::time::Duration;

use serde_json::{json, Value};

mod common;
use common::server::*;

/// The documented body limit (README, `/props`).
const MAX_BODY: usize = 8 << 20;

/// A 400 `exceed_context_size_error` naming the context and a prompt
/// length past it.
fn assert_exceeds(r: &Reply, n_ctx: u64, what: &str) {
    assert_error(r, 400, what);
    let v = r.json();
    let e = &v["error"];
    assert_eq!(e["type"], "exceed_context_size_error", "{what}: {e}");
    assert_eq!(e["n_ctx"], n_ctx, "{what}: {e}");
    let n = e["n_prompt_tokens"].as_u64().unwrap_or(0);
    assert!(n >= n_ctx, "{what}: {n} prompt tokens: {e}");
}

fn seeded(port: u16) -> String {
    let r = post(
        port,
        "/completion",
        &json!({"prompt": "Once upon a time", "n_predict": 12, "seed": 5,
                "temperature": 0.8}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["content"].as_str().unwrap().to_owned()
}

#[test]
fn serve_reads_every_body_up_to_the_limit() {
    let s = start_ctx("2048", &["-np", "2"]);
    let port = s.port;
    let n_ctx = 1024; // a slot's share
    let before = seeded(port);

    let words = "the quick brown fox jumps over the lazy dog ".repeat(70_000);
    let emoji = "👨‍👩‍👧‍👦🙂".repeat(100_000);
    let cases: Vec<(&str, &str, Value)> = vec![
        (
            "3 MB of words",
            "/v1/completions",
            json!({"prompt": words, "max_tokens": 4}),
        ),
        (
            "3 MB of emoji",
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": emoji}], "max_tokens": 4}),
        ),
        (
            "100k messages",
            "/v1/chat/completions",
            json!({"messages": (0..100_000)
                .map(|i| json!({"role": if i % 2 == 0 { "user" } else { "assistant" },
                                "content": "hi"}))
                .collect::<Vec<_>>(), "max_tokens": 4}),
        ),
        (
            "1M token ids",
            "/completion",
            json!({"prompt": vec![42u32; 1_000_000], "n_predict": 4}),
        ),
        (
            "2 MB one word",
            "/completion",
            json!({"prompt": "a".repeat(2_000_000)}),
        ),
        (
            "2 MB of digits",
            "/v1/completions",
            json!({"prompt": "7".repeat(2_000_000), "max_tokens": 4}),
        ),
        (
            "2 MB without spaces",
            "/v1/completions",
            json!({"prompt": "ab1-Жя中😀".repeat(130_000), "max_tokens": 4}),
        ),
    ];
    for (what, path, body) in &cases {
        let text = body.to_string();
        assert!(
            text.len() > 2 << 20 || what.contains("2 MB"),
            "{what}: {} bytes",
            text.len()
        );
        assert!(text.len() < MAX_BODY, "{what}: {} bytes", text.len());
        let r = request(port, "POST", path, &text);
        assert_exceeds(&r, n_ctx, what);
    }

    // A body just under the limit is parsed: its prompt is short, the rest
    // a field that is read and ignored.
    let filler = "x".repeat(MAX_BODY - 200);
    let body = json!({"prompt": "Hello", "n_predict": 3, "user": filler}).to_string();
    assert!(body.len() <= MAX_BODY, "{}", body.len());
    let r = request(port, "POST", "/completion", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    // One byte past it: 413 in Kestrel's shape.
    let body = format!("{{\"prompt\": \"{}\"}}", "x".repeat(MAX_BODY));
    let r = try_request(port, "POST", "/completion", &[], body.as_bytes());
    if let Ok(r) = r {
        // The server may close before the whole body is sent; when the
        // answer arrives, it is this.
        assert_error(&r, 413, "a body past 8 MiB");
    }

    // Sixteen heavy bodies at once, beside a normal request: each gets its
    // answer, and the server still gives the same seeded text.
    let heavy: Vec<_> = (0..16)
        .map(|i| {
            let body = json!({"prompt": "ab".repeat(1_000_000 + i)}).to_string();
            std::thread::spawn(move || request(port, "POST", "/completion", &body))
        })
        .collect();
    std::thread::sleep(Duration::from_millis(50));
    let r = post(
        port,
        "/completion",
        &json!({"prompt": "Hi", "n_predict": 2}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    for h in heavy {
        assert_exceeds(&h.join().unwrap(), n_ctx, "a 2 MB word in a burst");
    }
    assert_eq!(seeded(port), before, "the seeded answer after the burst");

    // /props states the limit.
    let props = request(port, "GET", "/props", "").json();
    assert_eq!(props["max_body_bytes"], MAX_BODY, "{props}");
}
