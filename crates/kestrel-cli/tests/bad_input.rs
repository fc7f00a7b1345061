//! Hostile or broken model files and bad flags: `kestrel` must exit with code 1
//! and an error that names the problem — never a panic.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Little-endian GGUF bytes written by hand, so tests can lie in any field.
#[derive(Default)]
struct Raw(Vec<u8>);

impl Raw {
    fn header(version: u32, n_tensors: u64, n_kv: u64) -> Raw {
        let mut r = Raw(b"GGUF".to_vec());
        r.u32(version).u64(n_tensors).u64(n_kv);
        r
    }
    fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn str(&mut self, s: &str) -> &mut Self {
        self.u64(s.len() as u64);
        self.0.extend_from_slice(s.as_bytes());
        self
    }
    /// A string-valued metadata pair (value type 8).
    fn kv_str(&mut self, k: &str, v: &str) -> &mut Self {
        self.str(k).u32(8).str(v)
    }
    /// A u32-valued metadata pair (value type 4).
    fn kv_u32(&mut self, k: &str, v: u32) -> &mut Self {
        self.str(k).u32(4).u32(v)
    }
    fn tensor(&mut self, name: &str, dims: &[u64], ty: u32, offset: u64) -> &mut Self {
        self.str(name).u32(dims.len() as u32);
        for &d in dims {
            self.u64(d);
        }
        self.u32(ty).u64(offset)
    }
    fn pad(&mut self, align: usize) -> &mut Self {
        while !self.0.len().is_multiple_of(align) {
            self.0.push(0);
        }
        self
    }
}

fn tmpfile(name: &str, bytes: &[u8]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kestrel-bad-input-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

fn run_model(path: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kestrel"))
        .args([
            "run", "--raw", "-n", "4", "--temp", "0", "-p", "hello", "-m",
        ])
        .arg(path)
        .output()
        .expect("kestrel runs")
}

fn expect_error(out: &Output, needles: &[&str]) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "exit code; stderr: {err}");
    assert!(!err.contains("panicked"), "panic: {err}");
    assert!(err.starts_with("error:"), "stderr: {err}");
    let lower = err.to_lowercase();
    for n in needles {
        assert!(
            lower.contains(&n.to_lowercase()),
            "expected {n:?} in: {err}"
        );
    }
}

/// Metadata of a plausible llama model whose tensors are absent.
fn llama_meta(r: &mut Raw, arch: &str, pre: &str) {
    r.kv_str("general.architecture", arch)
        .kv_u32(&format!("{arch}.embedding_length"), 32)
        .kv_u32(&format!("{arch}.block_count"), 1)
        .kv_u32(&format!("{arch}.feed_forward_length"), 64)
        .kv_u32(&format!("{arch}.attention.head_count"), 2)
        .str(&format!("{arch}.attention.layer_norm_rms_epsilon"))
        .u32(6)
        .u32(1e-5f32.to_bits())
        .kv_str("tokenizer.ggml.model", "gpt2")
        .kv_str("tokenizer.ggml.pre", pre);
    // tokenizer.ggml.tokens: array (type 9) of 3 strings
    r.str("tokenizer.ggml.tokens").u32(9).u32(8).u64(3);
    r.str("a").str("b").str("ab");
    r.str("tokenizer.ggml.merges").u32(9).u32(8).u64(1);
    r.str("a b");
}

#[test]
fn missing_file() {
    let out = run_model(Path::new("/nonexistent/model.gguf"));
    expect_error(&out, &["/nonexistent/model.gguf"]);
}

#[test]
fn wrong_magic() {
    let p = tmpfile(
        "magic.gguf",
        b"GGML\x03\0\0\0 and then some bytes that are not gguf",
    );
    expect_error(&run_model(&p), &["magic"]);
}

#[test]
fn empty_and_truncated_files() {
    let p = tmpfile("empty.gguf", b"");
    expect_error(&run_model(&p), &[]);
    let mut r = Raw::header(3, 0, 2);
    llama_meta(&mut r, "llama", "gpt2");
    let full = r.0.clone();
    for cut in [5, 13, 30, full.len() / 2, full.len() - 3] {
        let p = tmpfile(&format!("trunc{cut}.gguf"), &full[..cut]);
        expect_error(&run_model(&p), &[]);
    }
}

#[test]
fn absurd_counts_and_lengths() {
    let p = tmpfile("tensors.gguf", &Raw::header(3, u64::MAX, 0).0);
    expect_error(&run_model(&p), &["tensor"]);
    let mut r = Raw::header(3, 0, u64::MAX / 2);
    r.kv_str("a", "b");
    let p = tmpfile("kvs.gguf", &r.0);
    expect_error(&run_model(&p), &[]);
    let mut r = Raw::header(3, 0, 1);
    r.u64(u64::MAX - 7).0.extend_from_slice(&[b'k'; 64]);
    let p = tmpfile("strlen.gguf", &r.0);
    expect_error(&run_model(&p), &["key", "18446744073709551608"]);
    let mut r = Raw::header(3, 0, 1);
    r.str("arr").u32(9).u32(8).u64(u64::MAX / 4);
    let p = tmpfile("arrlen.gguf", &r.0);
    expect_error(&run_model(&p), &[]);
}

#[test]
fn absurd_dimensions_offsets_and_types() {
    let cases: [(&str, &[u64], u32, u64, &str); 4] = [
        ("dims", &[1 << 40, 1 << 40], 0, 0, "t0"),
        ("zero_dim", &[0, 4], 0, 0, "t0"),
        ("offset", &[32], 0, 1 << 30, "t0"),
        ("type", &[32], 999, 0, "999"),
    ];
    for (name, dims, ty, offset, needle) in cases {
        let mut r = Raw::header(3, 1, 0);
        r.tensor("t0", dims, ty, offset).pad(32);
        r.0.extend_from_slice(&[0u8; 128]);
        let p = tmpfile(&format!("{name}.gguf"), &r.0);
        expect_error(&run_model(&p), &[needle]);
    }
}

#[test]
fn unknown_architecture() {
    let mut r = Raw::header(3, 0, 10);
    llama_meta(&mut r, "mamba9", "gpt2");
    let p = tmpfile("arch.gguf", &r.0);
    expect_error(&run_model(&p), &["architecture", "mamba9"]);
}

#[test]
fn unknown_pre_tokenizer() {
    let mut r = Raw::header(3, 0, 10);
    llama_meta(&mut r, "llama", "no-such-pre");
    let p = tmpfile("pre.gguf", &r.0);
    expect_error(&run_model(&p), &["no-such-pre"]);
}

#[test]
fn missing_tensor_is_named() {
    let mut r = Raw::header(3, 0, 10);
    llama_meta(&mut r, "llama", "gpt2");
    let p = tmpfile("notensors.gguf", &r.0);
    expect_error(&run_model(&p), &["token_embd.weight"]);
}

#[test]
fn bad_flags() {
    let out = Command::new(env!("CARGO_BIN_EXE_kestrel"))
        .args(["run", "-m", "x.gguf", "-p", "hi", "--no-such-flag"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--no-such-flag"));
    let out = Command::new(env!("CARGO_BIN_EXE_kestrel"))
        .args(["run", "-m", "x.gguf", "-p", "hi", "--top-p", "7"])
        .output()
        .unwrap();
    expect_error(&out, &["top-p"]);
}

/// `inspect` and `run` on a directory, a FIFO and an unreadable file: one
/// line that says what the path is, at once (opening a FIFO for reading
/// would wait for a writer), and the operating system's reason said once.
#[test]
fn not_a_file() {
    let dir = std::env::temp_dir().join(format!("kestrel-not-a-file-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("pipe.gguf");
    let _ = std::fs::remove_file(&fifo);
    let made = Command::new("mkfifo").arg(&fifo).status();
    let unreadable = tmpfile("unreadable.gguf", b"GGUF");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&unreadable, std::fs::Permissions::from_mode(0o000)).unwrap();
    }
    let mut cases: Vec<(&Path, &str)> = vec![(&dir, "is a directory")];
    if made.is_ok_and(|s| s.success()) {
        cases.push((&fifo, "is a FIFO"));
    }
    // root reads any file: there the mode cannot make it unreadable.
    if std::fs::File::open(&unreadable).is_err() {
        cases.push((&unreadable, "permission denied"));
    }
    for (path, what) in cases {
        for cmd in ["inspect", "run"] {
            let out = if cmd == "run" {
                run_model(path)
            } else {
                Command::new(env!("CARGO_BIN_EXE_kestrel"))
                    .arg("inspect")
                    .arg(path)
                    .output()
                    .expect("kestrel runs")
            };
            expect_error(&out, &[what]);
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(err.trim_end().lines().count(), 1, "{cmd}: one line: {err}");
            assert!(!err.contains("No such device"), "{cmd}: {err}");
            if let Some((_, reason)) = err.split_once("os error") {
                assert!(!reason.contains("os error"), "{cmd}: reason twice: {err}");
            }
        }
    }
}
