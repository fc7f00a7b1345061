//! A byte-level GGUF builder for tests that need files the writer would not
//! produce: other versions, hostile counts, broken fields.
#![allow(dead_code)]

/// Appends little-endian GGUF fields to a buffer.
#[derive(Default, Clone)]
pub struct Raw(pub Vec<u8>);

impl Raw {
    /// Magic, version, tensor count, metadata count.
    pub fn header(version: u32, n_tensors: u64, n_kv: u64) -> Raw {
        Raw::default()
            .bytes(b"GGUF")
            .u32(version)
            .u64(n_tensors)
            .u64(n_kv)
    }
    pub fn bytes(mut self, b: &[u8]) -> Raw {
        self.0.extend_from_slice(b);
        self
    }
    pub fn u8(self, v: u8) -> Raw {
        self.bytes(&[v])
    }
    pub fn u32(self, v: u32) -> Raw {
        self.bytes(&v.to_le_bytes())
    }
    pub fn u64(self, v: u64) -> Raw {
        self.bytes(&v.to_le_bytes())
    }
    /// A u64-length-prefixed string.
    pub fn str(self, s: &str) -> Raw {
        self.u64(s.len() as u64).bytes(s.as_bytes())
    }
    /// A key with a u32 value.
    pub fn kv_u32(self, key: &str, v: u32) -> Raw {
        self.str(key).u32(4).u32(v)
    }
    /// A key with a string value.
    pub fn kv_str(self, key: &str, v: &str) -> Raw {
        self.str(key).u32(8).str(v)
    }
    /// A tensor-table entry.
    pub fn tensor(self, name: &str, dims: &[u64], type_id: u32, offset: u64) -> Raw {
        let mut r = self.str(name).u32(dims.len() as u32);
        for &d in dims {
            r = r.u64(d);
        }
        r.u32(type_id).u64(offset)
    }
    /// Zero padding up to a multiple of `align`.
    pub fn pad(mut self, align: usize) -> Raw {
        self.0.resize(self.0.len().next_multiple_of(align), 0);
        self
    }
    pub fn zeros(mut self, n: usize) -> Raw {
        self.0.resize(self.0.len() + n, 0);
        self
    }
    pub fn build(self) -> Vec<u8> {
        self.0
    }
}

/// The error message for `bytes`, panicking if they parse.
pub fn err_of(bytes: Vec<u8>) -> String {
    match kestrel_gguf::GgufFile::from_bytes(bytes) {
        Ok(f) => panic!("expected an error, parsed {f:?}"),
        Err(e) => e.to_string(),
    }
}

/// Asserts `msg` contains every one of `parts`.
#[track_caller]
pub fn assert_mentions(msg: &str, parts: &[&str]) {
    for p in parts {
        assert!(msg.contains(p), "error {msg:?} does not mention {p:?}");
    }
}
