//! `kestrel serve`'s request queue: full is a 503, a shutdown ends the
//! waiting and running requests, and departed clients give their places back.

use std::io::Write;
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;

mod common;
use common::server::*;

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
    assert_clean_exit(&mut s);
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
