//! `kestrel serve`'s connections: the API key, shutdown, slow or idle
//! clients timed out, and a Unix socket instead of TCP.

use std::io::{BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

mod common;
use common::server::*;

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
    assert_clean_exit(&mut s);
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
