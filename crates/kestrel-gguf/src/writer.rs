//! Building GGUF v3 files (little-endian), mainly so tests can make fixtures.
//!
//! The writer lays data out the way llama.cpp expects: tensor data follows
//! the tensor table at the next alignment boundary, and every tensor's data
//! is padded to the alignment.

use std::path::Path;

use crate::reader::DEFAULT_ALIGNMENT;
use crate::value::{Array, Value};
use crate::GgmlType;

/// Accumulates metadata and tensors, then serializes them as GGUF v3.
#[derive(Clone, Debug, Default)]
pub struct GgufWriter {
    metadata: Vec<(String, Value)>,
    tensors: Vec<PendingTensor>,
}

#[derive(Clone, Debug)]
struct PendingTensor {
    name: String,
    dims: Vec<u64>,
    ty: GgmlType,
    data: Vec<u8>,
}

impl GgufWriter {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a metadata entry; adding an existing key replaces its value in
    /// place. The writer does not validate values, so tests can also build
    /// files the reader must reject (e.g. a bad general.alignment).
    pub fn add(&mut self, key: &str, value: Value) {
        match self.metadata.iter_mut().find(|(k, _)| k == key) {
            Some((_, v)) => *v = value,
            None => self.metadata.push((key.to_owned(), value)),
        }
    }

    /// Adds a tensor; `dims` are in ggml order (`dims[0]` is the row length).
    ///
    /// # Panics
    /// If the name is already used, the shape is not valid for `ty`, or
    /// `data.len()` is not the tensor's exact byte size.
    pub fn add_tensor(&mut self, name: &str, dims: &[u64], ty: GgmlType, data: Vec<u8>) {
        assert!(
            !self.tensors.iter().any(|t| t.name == name),
            "tensor '{name}' added twice"
        );
        assert!(
            !dims.is_empty() && dims.len() <= 4,
            "tensor '{name}' needs 1 to 4 dims, got {dims:?}"
        );
        let expected = ty
            .row_bytes(dims[0])
            .and_then(|row| dims[1..].iter().try_fold(row, |acc, &d| acc.checked_mul(d)))
            .unwrap_or_else(|| panic!("tensor '{name}' shape {dims:?} is invalid for {ty}"));
        assert_eq!(
            data.len() as u64,
            expected,
            "tensor '{name}' ({ty}, {dims:?}) needs {expected} bytes of data, got {}",
            data.len()
        );
        self.tensors.push(PendingTensor {
            name: name.to_owned(),
            dims: dims.to_vec(),
            ty,
            data,
        });
    }

    /// The alignment used for layout: general.alignment when it is a valid
    /// U32, otherwise the default of 32.
    fn alignment(&self) -> u64 {
        match self.metadata.iter().find(|(k, _)| k == "general.alignment") {
            Some((_, Value::U32(a))) if a.is_power_of_two() => u64::from(*a),
            _ => DEFAULT_ALIGNMENT,
        }
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let align = self.alignment() as usize;
        let mut out = Vec::new();
        out.extend_from_slice(b"GGUF");
        out.extend_from_slice(&3u32.to_le_bytes());
        put_u64(&mut out, self.tensors.len() as u64);
        put_u64(&mut out, self.metadata.len() as u64);
        for (key, value) in &self.metadata {
            put_str(&mut out, key);
            out.extend_from_slice(&value.type_id().to_le_bytes());
            put_value(&mut out, value);
        }
        let mut rel = 0u64;
        for t in &self.tensors {
            put_str(&mut out, &t.name);
            out.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            for &d in &t.dims {
                put_u64(&mut out, d);
            }
            out.extend_from_slice(&t.ty.id().to_le_bytes());
            put_u64(&mut out, rel);
            rel += (t.data.len() as u64).next_multiple_of(align as u64);
        }
        pad_to(&mut out, align);
        for t in &self.tensors {
            out.extend_from_slice(&t.data);
            pad_to(&mut out, align);
        }
        out
    }

    pub fn write(&self, path: impl AsRef<Path>) -> std::io::Result<()> {
        std::fs::write(path, self.to_bytes())
    }
}

fn pad_to(out: &mut Vec<u8>, align: usize) {
    out.resize(out.len().next_multiple_of(align), 0);
}

fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_u64(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

/// The value's payload (its type id is written by the caller).
fn put_value(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::U8(v) => out.push(*v),
        Value::I8(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::U16(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::I16(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::U32(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::I32(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::U64(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::I64(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::F32(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::F64(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::Bool(v) => out.push(u8::from(*v)),
        Value::String(s) => put_str(out, s),
        Value::Array(a) => put_array(out, a),
    }
}

/// An array: element type id, length, elements.
fn put_array(out: &mut Vec<u8>, a: &Array) {
    out.extend_from_slice(&a.elem_type_id().to_le_bytes());
    put_u64(out, a.len() as u64);
    macro_rules! each {
        ($v:expr) => {
            for x in $v {
                out.extend_from_slice(&x.to_le_bytes());
            }
        };
    }
    match a {
        Array::U8(v) => out.extend_from_slice(v),
        Array::I8(v) => each!(v),
        Array::U16(v) => each!(v),
        Array::I16(v) => each!(v),
        Array::U32(v) => each!(v),
        Array::I32(v) => each!(v),
        Array::U64(v) => each!(v),
        Array::I64(v) => each!(v),
        Array::F32(v) => each!(v),
        Array::F64(v) => each!(v),
        Array::Bool(v) => out.extend(v.iter().map(|&b| u8::from(b))),
        Array::String(v) => v.iter().for_each(|s| put_str(out, s)),
        Array::Array(v) => v.iter().for_each(|inner| put_array(out, inner)),
    }
}
