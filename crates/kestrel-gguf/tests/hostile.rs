//! Truncated, corrupted and hostile files: each must give an error that
//! names the problem, never a panic or a huge allocation.

mod common;

use common::{assert_mentions, err_of, Raw};
use kestrel_gguf::{Array, GgmlType, GgufError, GgufFile, GgufWriter, Value};

/// A small valid file exercising strings, arrays, nested arrays and two
/// tensors; the last tensor's data ends exactly at end of file.
fn small_valid_file() -> Vec<u8> {
    let mut w = GgufWriter::new();
    w.add("general.architecture", Value::String("llama".into()));
    w.add("llama.block_count", Value::U32(1));
    w.add("b", Value::Bool(true));
    w.add(
        "toks",
        Value::Array(Array::String(vec!["ab".into(), "c".into()])),
    );
    w.add(
        "nest",
        Value::Array(Array::Array(vec![
            Array::I16(vec![1, 2]),
            Array::Bool(vec![false]),
        ])),
    );
    w.add_tensor("a", &[32], GgmlType::Q8_0, vec![7; 34]);
    w.add_tensor("b", &[8], GgmlType::F32, vec![9; 32]);
    w.to_bytes()
}

#[test]
fn every_prefix_of_a_valid_file_is_an_error() {
    let full = small_valid_file();
    GgufFile::from_bytes(full.clone()).expect("the full file is valid");
    for cut in 0..full.len() {
        if let Ok(f) = GgufFile::from_bytes(full[..cut].to_vec()) {
            panic!("prefix of {cut}/{} bytes parsed: {f:?}", full.len());
        }
    }
    // Cutting inside the header says "truncated" and where.
    let msg = err_of(full[..6].to_vec());
    assert_mentions(&msg, &["truncated", "version", "offset 4", "6 bytes"]);
    let msg = err_of(full[..10].to_vec());
    assert_mentions(&msg, &["truncated", "tensor count", "offset 8"]);
    let msg = err_of(full[..full.len() - 1].to_vec());
    assert_mentions(&msg, &["'b'", "past the end"]);
}

#[test]
fn corrupting_any_byte_never_panics() {
    let full = small_valid_file();
    for pos in 0..full.len() {
        for flip in [0x01, 0x80, 0xff] {
            let mut b = full.clone();
            b[pos] ^= flip;
            let _ = GgufFile::from_bytes(b).map(|f| kestrel_gguf::inspect_report(&f));
        }
    }
}

#[test]
fn wrong_magic_names_what_was_found() {
    let msg = err_of(b"GGML\x03\x00\x00\x00".to_vec());
    assert_mentions(&msg, &["not a GGUF file", "GGML"]);
    assert_mentions(&err_of(Vec::new()), &["truncated", "magic"]);
    assert_mentions(&err_of(b"PK".to_vec()), &["not a GGUF file", "PK"]);
}

#[test]
fn versions_other_than_2_and_3_are_rejected() {
    let v1 = err_of(Raw::header(1, 0, 0).build());
    assert_mentions(&v1, &["version 1", "not supported"]);
    let v99 = err_of(Raw::header(99, 0, 0).build());
    assert_mentions(&v99, &["unsupported GGUF version 99", "2 and 3"]);
    let v0 = err_of(Raw::header(0, 0, 0).build());
    assert_mentions(&v0, &["version 0"]);
}

#[test]
fn big_endian_file_gets_its_own_error() {
    let mut bytes = Raw::header(3, 0, 0).build();
    bytes[4..8].copy_from_slice(&3u32.to_be_bytes());
    let e = GgufFile::from_bytes(bytes).unwrap_err();
    assert!(
        matches!(e, GgufError::BigEndian { swapped: 3, .. }),
        "{e:?}"
    );
    assert_mentions(&e.to_string(), &["big-endian", "version 3"]);
}

#[test]
fn absurd_counts_are_rejected_before_allocating() {
    let msg = err_of(Raw::header(3, u64::MAX, 0).build());
    assert_mentions(&msg, &["tensor count", &u64::MAX.to_string(), "impossible"]);
    let msg = err_of(Raw::header(3, 0, u64::MAX).build());
    assert_mentions(&msg, &["metadata entry count", "impossible"]);
    // 1000 tensors cannot fit in the few bytes that follow.
    let msg = err_of(Raw::header(3, 1000, 0).zeros(100).build());
    assert_mentions(&msg, &["tensor count is 1000", "100 bytes remain"]);
}

#[test]
fn absurd_string_lengths_are_rejected() {
    let msg = err_of(Raw::header(3, 0, 1).u64(u64::MAX).zeros(16).build());
    assert_mentions(
        &msg,
        &[
            "truncated",
            "key of metadata entry #0",
            &u64::MAX.to_string(),
        ],
    );
    let msg = err_of(
        Raw::header(3, 0, 1)
            .str("k")
            .u32(8)
            .u64(1 << 40)
            .bytes(b"abc")
            .build(),
    );
    assert_mentions(
        &msg,
        &["truncated", "metadata key 'k'", &(1u64 << 40).to_string()],
    );
    let msg = err_of(Raw::header(3, 1, 0).u64(u64::MAX - 3).zeros(40).build());
    assert_mentions(&msg, &["name of tensor #0"]);
}

#[test]
fn absurd_array_lengths_are_rejected() {
    for (elem_ty, name) in [
        (4u32, "u32"),
        (8, "string"),
        (9, "array"),
        (0, "u8"),
        (7, "bool"),
    ] {
        let bytes = Raw::header(3, 0, 1)
            .str("arr")
            .u32(9)
            .u32(elem_ty)
            .u64(u64::MAX / 2)
            .zeros(64)
            .build();
        let msg = err_of(bytes);
        assert_mentions(
            &msg,
            &[&format!("length of {name} array 'arr'"), "impossible"],
        );
    }
    // 10 strings need at least 80 bytes; only 79 follow.
    let msg = err_of(
        Raw::header(3, 0, 1)
            .str("s")
            .u32(9)
            .u32(8)
            .u64(10)
            .zeros(79)
            .build(),
    );
    assert_mentions(&msg, &["is 10", "80 bytes", "79 bytes remain"]);
}

#[test]
fn deeply_nested_arrays_are_rejected_without_recursing_forever() {
    let mut r = Raw::header(3, 0, 1).str("deep").u32(9);
    for _ in 0..100_000 {
        r = r.u32(9).u64(1);
    }
    let msg = err_of(r.u32(0).u64(0).build());
    assert_mentions(&msg, &["'deep'", "nests arrays deeper than 16"]);
}

#[test]
fn unknown_value_types_are_rejected() {
    let msg = err_of(Raw::header(3, 0, 1).str("weird").u32(13).zeros(8).build());
    assert_mentions(&msg, &["'weird'", "unknown value type id 13"]);
    let msg = err_of(
        Raw::header(3, 0, 1)
            .str("arr")
            .u32(9)
            .u32(77)
            .u64(1)
            .zeros(8)
            .build(),
    );
    assert_mentions(&msg, &["'arr'", "unknown value type id 77"]);
}

#[test]
fn bad_bools_keys_and_utf8_are_rejected() {
    let msg = err_of(Raw::header(3, 0, 1).str("flag").u32(7).u8(2).build());
    assert_mentions(&msg, &["'flag'", "bool byte of 2"]);
    let msg = err_of(Raw::header(3, 0, 1).str("").u32(4).u32(1).build());
    assert_mentions(&msg, &["key #0", "empty"]);
    let msg = err_of(
        Raw::header(3, 0, 1)
            .u64(3)
            .bytes(b"a\xffb")
            .u32(4)
            .u32(1)
            .build(),
    );
    assert_mentions(
        &msg,
        &["invalid UTF-8", "key of metadata entry #0", "offset 33"],
    );
    let msg = err_of(
        Raw::header(3, 0, 1)
            .str("name")
            .u32(8)
            .u64(2)
            .bytes(b"\xc3(")
            .build(),
    );
    assert_mentions(&msg, &["invalid UTF-8", "'name'"]);
    let msg = err_of(
        Raw::header(3, 1, 0)
            .u64(2)
            .bytes(b"\xe2\x82")
            .zeros(40)
            .build(),
    );
    assert_mentions(&msg, &["invalid UTF-8", "name of tensor #0"]);
}

#[test]
fn duplicate_keys_and_tensor_names_are_rejected() {
    let msg = err_of(
        Raw::header(3, 0, 2)
            .kv_u32("dup.key", 1)
            .kv_u32("dup.key", 2)
            .build(),
    );
    assert_mentions(&msg, &["duplicate metadata key 'dup.key'", "#1"]);
    let bytes = Raw::header(3, 2, 0)
        .tensor("w", &[8], 0, 0)
        .tensor("w", &[8], 0, 32)
        .pad(32)
        .zeros(64)
        .build();
    assert_mentions(&err_of(bytes), &["duplicate tensor name 'w'"]);
}

#[test]
fn alignment_must_be_a_u32_power_of_two() {
    for bad in [0u32, 48, 3] {
        let msg = err_of(
            Raw::header(3, 0, 1)
                .kv_u32("general.alignment", bad)
                .build(),
        );
        assert_mentions(
            &msg,
            &["general.alignment", &bad.to_string(), "power of two"],
        );
    }
    let msg = err_of(
        Raw::header(3, 0, 1)
            .str("general.alignment")
            .u32(10)
            .u64(32)
            .build(),
    );
    assert_mentions(&msg, &["general.alignment must be a u32", "u64"]);
}

/// One tensor, its data at relative offset 0 unless given, `data` bytes of data.
fn one_tensor(dims: &[u64], type_id: u32, offset: u64, data: usize) -> Vec<u8> {
    Raw::header(3, 1, 0)
        .tensor("blk.0.w", dims, type_id, offset)
        .pad(32)
        .zeros(data)
        .build()
}

#[test]
fn bad_dimension_counts_and_sizes_are_rejected() {
    let msg = err_of(one_tensor(&[1, 1, 1, 1, 1], 0, 0, 32));
    assert_mentions(&msg, &["'blk.0.w'", "5 dimensions"]);
    let msg = err_of(one_tensor(&[], 0, 0, 32));
    assert_mentions(&msg, &["'blk.0.w'", "0 dimensions"]);
    let msg = err_of(one_tensor(&[8, 0], 0, 0, 32));
    assert_mentions(&msg, &["'blk.0.w'", "dimension 1 is 0"]);
    let msg = err_of(one_tensor(&[u64::MAX], 0, 0, 32));
    assert_mentions(&msg, &["'blk.0.w'", "dimension 0 is 18446744073709551615"]);
    // n_dims itself absurd: rejected before reading dims.
    let msg = err_of(
        Raw::header(3, 1, 0)
            .str("t")
            .u32(u32::MAX)
            .zeros(64)
            .build(),
    );
    assert_mentions(&msg, &["'t'", "4294967295 dimensions"]);
}

#[test]
fn overflowing_shapes_are_rejected() {
    let msg = err_of(one_tensor(&[1 << 32, 1 << 32, 1 << 32], 0, 0, 32));
    assert_mentions(&msg, &["'blk.0.w'", "more elements than fit"]);
    // 2^62 elements fit in i64, but 2^64 bytes of f32 do not.
    let msg = err_of(one_tensor(&[1 << 31, 1 << 31], 0, 0, 32));
    assert_mentions(&msg, &["'blk.0.w'", "too large"]);
}

#[test]
fn unknown_tensor_types_are_rejected() {
    for id in [4u32, 5, 99, u32::MAX] {
        let msg = err_of(one_tensor(&[32], id, 0, 1024));
        assert_mentions(&msg, &["'blk.0.w'", &format!("type id {id}")]);
    }
}

#[test]
fn rows_must_be_whole_blocks() {
    let msg = err_of(one_tensor(&[33, 2], GgmlType::Q4_0.id(), 0, 1024));
    assert_mentions(&msg, &["'blk.0.w'", "q4_0", "33 elements", "block size 32"]);
    let msg = err_of(one_tensor(&[128], GgmlType::Q6_K.id(), 0, 1024));
    assert_mentions(&msg, &["'blk.0.w'", "block size 256"]);
}

#[test]
fn tensor_data_must_be_aligned_and_inside_the_file() {
    let msg = err_of(one_tensor(&[8], 0, 16, 64));
    assert_mentions(&msg, &["'blk.0.w'", "offset 16", "alignment 32"]);

    let bytes = one_tensor(&[8], 0, 32, 32);
    let file_size = bytes.len();
    let msg = err_of(bytes);
    assert_mentions(
        &msg,
        &[
            "'blk.0.w'",
            "32 bytes",
            &format!("{file_size}-byte file"),
            "past the end",
        ],
    );

    // An offset near u64::MAX must not wrap around.
    let msg = err_of(one_tensor(&[8], 0, u64::MAX - 31, 32));
    assert_mentions(&msg, &["'blk.0.w'", "past the end"]);

    let msg = err_of(one_tensor(&[1 << 40], 0, 0, 32));
    assert_mentions(&msg, &["'blk.0.w'", "4398046511104 bytes", "past the end"]);
}

#[test]
fn overlapping_tensors_are_rejected() {
    let bytes = Raw::header(3, 2, 0)
        .tensor("x", &[16], 0, 0)
        .tensor("y", &[8], 0, 32)
        .pad(32)
        .zeros(128)
        .build();
    assert_mentions(&err_of(bytes), &["'x'", "'y'", "overlap"]);
}
