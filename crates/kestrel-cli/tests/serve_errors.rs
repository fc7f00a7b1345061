//! `kestrel serve` refusing what it cannot answer: malformed bodies and
//! requests (a 4xx that says why, the server still up), an unknown flag,
//! a model that does not load.

use std::io::{BufReader, Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};

mod common;
use common::server::*;

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
        ("POST", chat, r#"{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"xml"}}"#.into(), 400),
        ("POST", chat, r#"{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"schema":{"type":7}}}}"#.into(), 400),
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
