//! `kestrel serve` through the official `openai` Python package (and
//! `anthropic`, for the Messages API llama-server also answers): starts the
//! real binary with an API key on a free loopback port and runs
//! tests/openai/test_openai_client.py against it, which drives every endpoint
//! and request field the package reaches, streamed and not, checks the
//! streaming invariants and the exceptions errors turn into. The package
//! version is pinned in tests/openai/requirements.txt (installed by .ci/run and
//! scripts/test.sh); without the package this test fails rather than skips.

use std::fs::File;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/openai/test_openai_client.py"
);
const REQUIREMENTS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/openai/requirements.txt"
);
const API_KEY: &str = "kestrel-openai-client-test";
/// The whole script takes well under a minute; this only ends a hang.
const SCRIPT_LIMIT: Duration = Duration::from_secs(600);

const TOOLS_SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/openai/test_openai_tools.py"
);

fn model(name: &str) -> PathBuf {
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

/// The pinned requirement of `package`, `package==X`.
fn pinned(package: &str) -> String {
    std::fs::read_to_string(REQUIREMENTS)
        .unwrap_or_else(|e| panic!("reading {REQUIREMENTS}: {e}"))
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with(&format!("{package}==")))
        .unwrap_or_else(|| panic!("{REQUIREMENTS} pins no {package}==VERSION"))
        .to_owned()
}

/// Fails, naming the install command, when python3 or a package the script
/// uses (openai, and anthropic for the Messages API) is missing.
fn require_packages() {
    for package in ["openai", "anthropic", "jsonschema"] {
        let pin = pinned(package);
        let install = format!("python3 -m pip install '{pin}' (scripts/test.sh installs it)");
        let out = Command::new("python3")
            .args([
                "-c",
                &format!("import {package}; print({package}.__version__)"),
            ])
            .output()
            .unwrap_or_else(|e| {
                panic!("cannot run python3 ({e}); this test needs Python 3 and {install}")
            });
        assert!(
            out.status.success(),
            "the {package} Python package cannot be imported: {install}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let version = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        if format!("{package}=={version}") != pin {
            eprintln!("warning: {package} {version} is installed; the tests pin {pin}");
        }
    }
}

/// The server process; killed on drop. Its stderr (a line per request) goes
/// to a file that is shown only when something fails.
struct Server {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Server {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The status code of `GET path`, if the server answers at all.
fn get_status(port: u16, path: &str) -> Option<u16> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut reply = String::new();
    s.read_to_string(&mut reply).ok()?;
    reply.split_whitespace().nth(1)?.parse().ok()
}

/// Starts `kestrel serve` on `model` with an API key and waits for /health 200.
fn start(model: PathBuf, ctx: &str) -> Server {
    let port = free_port();
    let log = std::env::temp_dir().join(format!(
        "kestrel-openai-client-{}-{port}.log",
        std::process::id()
    ));
    let child = Command::new(env!("CARGO_BIN_EXE_kestrel"))
        .args(["serve", "-m"])
        .arg(model)
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .args(["-t", "2", "-c", ctx, "--api-key", API_KEY])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(File::create(&log).expect("creating the server log"))
        .spawn()
        .expect("kestrel starts");
    let mut s = Server { child, port, log };
    let t0 = Instant::now();
    loop {
        if let Some(status) = s.child.try_wait().unwrap() {
            panic!("kestrel serve exited early: {status}\n{}", s.log());
        }
        if get_status(port, "/health") == Some(200) {
            return s;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "server not ready\n{}",
            s.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Reads a child's pipe to the end on a thread.
fn drain(r: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut r = r;
        let mut buf = Vec::new();
        let _ = r.read_to_end(&mut buf);
        String::from_utf8_lossy(&buf).into_owned()
    })
}

#[test]
fn openai_python_client() {
    require_packages();
    let server = start(model("SmolLM2-135M-Instruct.Q4_1.gguf"), "512");
    run_script(&server, SCRIPT, &[]);
}

/// Tool calls with the package against Qwen2.5-Coder (a template with tool
/// support): 20 seeds of `tool_choice: "required"` (the script takes 50
/// with `--seeds 50`), streamed vs whole,
/// `auto`, a second turn.
#[test]
fn openai_python_client_tool_calls() {
    require_packages();
    let server = start(model("qwen2.5-coder-0.5b-q4_k_m.gguf"), "2048");
    run_script(&server, TOOLS_SCRIPT, &["--seeds", "20"]);
}

/// Runs a client script against `server`; fails with its output and the
/// server's log unless it exits 0.
fn run_script(server: &Server, script: &str, extra: &[&str]) {
    let mut py = Command::new("python3")
        .arg(script)
        .args(extra)
        .args([
            "--base-url",
            &format!("http://127.0.0.1:{}/v1", server.port),
        ])
        .args(["--api-key", API_KEY])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 starts");
    let stdout = drain(py.stdout.take().unwrap());
    let stderr = drain(py.stderr.take().unwrap());
    let t0 = Instant::now();
    let status = loop {
        if let Some(status) = py.try_wait().unwrap() {
            break Some(status);
        }
        if t0.elapsed() > SCRIPT_LIMIT {
            let _ = py.kill();
            let _ = py.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let (stdout, stderr) = (stdout.join().unwrap(), stderr.join().unwrap());
    println!("{stdout}{stderr}");
    let what = match status {
        Some(s) if s.success() => return,
        Some(s) => format!("{script} failed ({s})"),
        None => format!("{script} ran past {SCRIPT_LIMIT:?} and was killed"),
    };
    panic!(
        "{what}:\n{stdout}{stderr}\n--- server log ---\n{}",
        server.log()
    );
}
