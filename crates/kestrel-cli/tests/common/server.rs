//! The `kestrel serve` test harness: starts the real binary on a free port
//! and talks raw HTTP/1.1 to it over TcpStream, so that what the tests check
//! is exactly what a client sees on the wire.
#![allow(dead_code)] // each test binary uses its own part

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

pub fn model() -> PathBuf {
    model_file("SmolLM2-135M-Instruct.Q4_1.gguf")
}

pub fn model_file(name: &str) -> PathBuf {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../models")
        .join(name);
    assert!(
        p.exists(),
        "{} is missing: run scripts/fetch-models.sh",
        p.display()
    );
    p
}

pub struct Server {
    pub child: Child,
    pub port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts `kestrel serve` with `extra` flags and waits for /health 200.
pub fn start(extra: &[&str]) -> Server {
    start_ctx("512", extra)
}

/// [`start`] with a context of `ctx` tokens.
pub fn start_ctx(ctx: &str, extra: &[&str]) -> Server {
    start_model(model(), ctx, extra)
}

/// [`start_ctx`] with another model.
pub fn start_model(model: PathBuf, ctx: &str, extra: &[&str]) -> Server {
    let port = free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_kestrel"))
        .args(["serve", "-m"])
        .arg(model)
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .args(["-t", "2", "-c", ctx])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("kestrel starts");
    let mut s = Server { child, port };
    let t0 = Instant::now();
    loop {
        if let Some(status) = s.child.try_wait().unwrap() {
            panic!("kestrel serve exited early: {status}");
        }
        if let Ok(r) = try_request(port, "GET", "/health", &[], b"") {
            if r.status == 200 {
                assert_eq!(r.json(), json!({"status": "ok"}));
                break;
            }
            assert_eq!(r.status, 503, "health while loading: {}", r.text());
            assert_eq!(r.json()["error"]["message"], "Loading model");
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "server not ready");
        std::thread::sleep(Duration::from_millis(50));
    }
    s
}

pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    /// The `data:` payloads of an SSE body.
    pub fn events(&self) -> Vec<String> {
        self.text()
            .split("\n\n")
            .filter_map(|e| e.strip_prefix("data: "))
            .map(str::to_owned)
            .collect()
    }
}

/// One request on a fresh TCP connection (`Connection: close`); the body is
/// de-chunked.
pub fn try_request(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<Reply> {
    let s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(120)))?;
    exchange(s, method, path, headers, body)
}

/// Sends one request over `s` and reads the whole reply.
pub fn exchange<S: Read + Write>(
    s: S,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<Reply> {
    let (mut r, status, headers) = send(s, method, path, headers, body)?;
    let chunked = headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    let mut body = Vec::new();
    if chunked {
        while let Some(chunk) = next_chunk(&mut r)? {
            body.extend_from_slice(&chunk);
        }
    } else {
        r.read_to_end(&mut body)?;
    }
    Ok(Reply {
        status,
        headers,
        body,
    })
}

pub type Headers = Vec<(String, String)>;
pub type Head = (u16, Headers);

/// Sends one request and reads the status line and headers.
pub fn send<S: Read + Write>(
    mut s: S,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<(BufReader<S>, u16, Headers)> {
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes())?;
    s.write_all(body)?;
    let mut r = BufReader::new(s);
    let (status, headers): Head = read_head(&mut r)?;
    Ok((r, status, headers))
}

pub fn read_head<R: BufRead>(r: &mut R) -> std::io::Result<Head> {
    let mut line = String::new();
    r.read_line(&mut line)?;
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad status line {line:?}")))?;
    let mut headers = Vec::new();
    loop {
        line.clear();
        r.read_line(&mut line)?;
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':') {
            headers.push((k.trim().to_owned(), v.trim().to_owned()));
        }
    }
    Ok((status, headers))
}

/// The next chunk of a chunked body; `None` at its end.
pub fn next_chunk<R: BufRead>(r: &mut R) -> std::io::Result<Option<Vec<u8>>> {
    let mut line = String::new();
    r.read_line(&mut line)?;
    let n = usize::from_str_radix(line.trim(), 16)
        .map_err(|_| std::io::Error::other(format!("bad chunk size {line:?}")))?;
    let mut chunk = vec![0; n + 2];
    r.read_exact(&mut chunk)?;
    chunk.truncate(n);
    Ok((n > 0).then_some(chunk))
}

pub fn request(port: u16, method: &str, path: &str, body: &str) -> Reply {
    try_request(port, method, path, &[], body.as_bytes()).expect("request")
}

pub fn post(port: u16, path: &str, body: &Value) -> Reply {
    request(port, "POST", path, &body.to_string())
}

pub fn assert_error(r: &Reply, status: u16, what: &str) {
    assert_eq!(r.status, status, "{what}: {}", r.text());
    let v = r.json();
    let e = &v["error"];
    assert_eq!(e["code"], status, "{what}: {v}");
    assert!(
        e["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{what}: {v}"
    );
    assert!(e["type"].is_string(), "{what}: {v}");
}

// Exchanges several serve test files share.

pub fn chat_body(stream: bool) -> Value {
    json!({
        "model": "anything",
        "messages": [{"role": "user", "content": "What is the capital of France?"}],
        "max_tokens": 12, "temperature": 0, "seed": 7, "stream": stream,
        "stream_options": {"include_usage": true},
    })
}

/// Checks the SSE invariants and returns the streamed text.
pub fn check_stream(r: &Reply, object: &str, text_of: impl Fn(&Value) -> Option<String>) -> String {
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

/// Opens a completion on a new connection and checks its 200 (a stream's
/// head comes before its first token, even while it waits in the queue).
pub fn open_completion(port: u16, body: &str) -> BufReader<TcpStream> {
    let c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let (r, status, _) = send(c, "POST", "/v1/completions", &[], body.as_bytes()).unwrap();
    assert_eq!(status, 200, "{body}");
    r
}

/// The value of one metric in `/metrics` text.
pub fn metric(port: u16, name: &str) -> f64 {
    let text = request(port, "GET", "/metrics", "").text();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("llamacpp:{name} ")))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {text}"))
}

/// Reads SSE events from an open stream until `[DONE]`; returns the text of
/// the completion chunks.
pub fn read_stream<R: BufRead>(r: &mut R) -> String {
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

pub fn busy_slots(port: u16) -> usize {
    let v = request(port, "GET", "/slots", "").json();
    v.as_array()
        .unwrap()
        .iter()
        .filter(|s| s["is_processing"] == true)
        .count()
}

/// Drops the client's connection `conn`, then waits until `/slots` shows
/// every slot idle, which must take less than `limit`.
pub fn leave_and_wait_for_idle_slots<C>(port: u16, conn: C, limit: Duration) {
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

/// Waits up to 15 s for the server to exit after a SIGTERM, successfully.
pub fn assert_clean_exit(s: &mut Server) {
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

/// One streamed `/v1/completions` request's text.
pub fn stream_completion(port: u16, body: &str) -> String {
    let c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    let (mut r, status, _) = send(c, "POST", "/v1/completions", &[], body.as_bytes()).unwrap();
    assert_eq!(status, 200);
    read_stream(&mut r)
}
