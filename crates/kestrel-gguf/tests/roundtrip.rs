//! Writer -> reader round trips, typed getters, v2 files and the report.

mod common;

use common::Raw;
use kestrel_gguf::{inspect_report, Array, GgmlType, GgufFile, GgufWriter, Value};

fn every_value() -> Vec<(&'static str, Value)> {
    vec![
        ("t.u8", Value::U8(200)),
        ("t.i8", Value::I8(-100)),
        ("t.u16", Value::U16(60000)),
        ("t.i16", Value::I16(-30000)),
        ("t.u32", Value::U32(4_000_000_000)),
        ("t.i32", Value::I32(-2_000_000_000)),
        ("t.u64", Value::U64(u64::MAX)),
        ("t.i64", Value::I64(i64::MIN)),
        ("t.f32", Value::F32(1.5e-5)),
        ("t.f64", Value::F64(-2.25e100)),
        ("t.bool_t", Value::Bool(true)),
        ("t.bool_f", Value::Bool(false)),
        ("t.str", Value::String("héllo\n\u{1F600}".into())),
        ("t.str_empty", Value::String(String::new())),
        ("a.u8", Value::Array(Array::U8(vec![0, 1, 255]))),
        ("a.i8", Value::Array(Array::I8(vec![-128, 0, 127]))),
        ("a.u16", Value::Array(Array::U16(vec![0, 65535]))),
        ("a.i16", Value::Array(Array::I16(vec![-32768, 32767]))),
        ("a.u32", Value::Array(Array::U32(vec![1, u32::MAX]))),
        ("a.i32", Value::Array(Array::I32(vec![-1, i32::MAX]))),
        ("a.u64", Value::Array(Array::U64(vec![u64::MAX, 0]))),
        ("a.i64", Value::Array(Array::I64(vec![i64::MIN, i64::MAX]))),
        (
            "a.f32",
            Value::Array(Array::F32(vec![0.5, -1e30, f32::INFINITY])),
        ),
        ("a.f64", Value::Array(Array::F64(vec![1e-300, 3.0]))),
        ("a.bool", Value::Array(Array::Bool(vec![true, false, true]))),
        (
            "a.str",
            Value::Array(Array::String(vec!["a".into(), String::new(), "ü".into()])),
        ),
        ("a.empty", Value::Array(Array::U32(vec![]))),
        (
            "a.nested",
            Value::Array(Array::Array(vec![
                Array::I32(vec![1, 2]),
                Array::String(vec!["x".into()]),
                Array::Array(vec![Array::F32(vec![9.0]), Array::Bool(vec![])]),
                Array::U8(vec![]),
            ])),
        ),
        ("a.nested_empty", Value::Array(Array::Array(vec![]))),
    ]
}

#[test]
fn every_value_type_round_trips_in_order() {
    let mut w = GgufWriter::new();
    for (k, v) in every_value() {
        w.add(k, v);
    }
    let f = GgufFile::from_bytes(w.to_bytes()).unwrap();
    assert_eq!(f.version(), 3);
    let got: Vec<(String, Value)> = f.metadata().to_vec();
    let want: Vec<(String, Value)> = every_value()
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    assert_eq!(got, want);
    assert!(f.tensors().is_empty());
}

#[test]
fn adding_a_key_twice_replaces_the_value() {
    let mut w = GgufWriter::new();
    w.add("a", Value::U32(1));
    w.add("b", Value::U32(2));
    w.add("a", Value::String("x".into()));
    let f = GgufFile::from_bytes(w.to_bytes()).unwrap();
    assert_eq!(f.metadata().len(), 2);
    assert_eq!(f.metadata()[0].0, "a");
    assert_eq!(f.get_str("a"), Some("x"));
}

/// Deterministic non-trivial bytes so misplaced data is detected.
fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn every_tensor_type_round_trips() {
    let mut w = GgufWriter::new();
    w.add("general.architecture", Value::String("test".into()));
    let mut expected = Vec::new();
    for (i, ty) in GgmlType::ALL.into_iter().enumerate() {
        // 2 blocks per row, 3 rows, plus a 1-D and a 4-D tensor of each type.
        let row = 2 * ty.block_size() as u64;
        for (j, dims) in [vec![row, 3], vec![row], vec![row, 1, 2, 2]]
            .into_iter()
            .enumerate()
        {
            let n_bytes = ty.row_bytes(row).unwrap() * dims[1..].iter().product::<u64>();
            let name = format!("{}.{j}", ty.name());
            let data = pattern(n_bytes as usize, (i * 3 + j) as u8);
            w.add_tensor(&name, &dims, ty, data.clone());
            expected.push((name, dims, ty, data));
        }
    }
    let f = GgufFile::from_bytes(w.to_bytes()).unwrap();
    assert_eq!(f.tensors().len(), expected.len());
    for (t, (name, dims, ty, data)) in f.tensors().iter().zip(&expected) {
        assert_eq!(&t.name, name);
        assert_eq!(&t.dims, dims);
        assert_eq!(t.ty, *ty);
        assert_eq!(t.n_bytes, data.len() as u64);
        assert_eq!(t.offset % 32, 0, "{name} offset {} unaligned", t.offset);
        assert!(t.offset >= f.data_offset());
        assert_eq!(f.tensor_data(t), &data[..], "{name} data");
        assert_eq!(t.n_elements(), dims.iter().product::<u64>());
        assert_eq!(t.row_len() as u64, dims[0]);
        assert_eq!(t.n_rows() as u64, dims[1..].iter().product::<u64>());
        assert_eq!(f.tensor(name), Some(t));
    }
    assert!(f.tensor("missing").is_none());
}

#[test]
fn custom_alignment_is_used_and_reported() {
    let mut w = GgufWriter::new();
    w.add("general.alignment", Value::U32(256));
    w.add_tensor("a", &[3], GgmlType::F32, vec![1; 12]);
    w.add_tensor("b", &[5], GgmlType::F16, vec![2; 10]);
    let f = GgufFile::from_bytes(w.to_bytes()).unwrap();
    assert_eq!(f.alignment(), 256);
    assert_eq!(f.data_offset() % 256, 0);
    let b = f.tensor("b").unwrap();
    assert_eq!(b.offset, f.data_offset() + 256);
    assert_eq!(f.tensor_data(b), &[2; 10]);
}

#[test]
fn default_alignment_is_32() {
    let f = GgufFile::from_bytes(GgufWriter::new().to_bytes()).unwrap();
    assert_eq!(f.alignment(), 32);
    assert_eq!(f.architecture(), None);
}

#[test]
fn typed_getters_convert_only_when_lossless() {
    let mut w = GgufWriter::new();
    w.add("general.architecture", Value::String("llama".into()));
    w.add("u8", Value::U8(7));
    w.add("neg", Value::I32(-5));
    w.add("big", Value::U64(u64::MAX));
    w.add("u33", Value::U64(1 << 33));
    w.add("f64", Value::F64(0.25));
    w.add("b", Value::Bool(true));
    w.add(
        "toks",
        Value::Array(Array::String(vec!["a".into(), "b".into()])),
    );
    w.add("fs", Value::Array(Array::F32(vec![1.0, 2.0])));
    w.add("is", Value::Array(Array::I32(vec![-1, 3])));
    let f = GgufFile::from_bytes(w.to_bytes()).unwrap();

    assert_eq!(f.architecture(), Some("llama"));
    assert_eq!(f.get_u32("u8"), Some(7));
    assert_eq!(f.get_u64("u8"), Some(7));
    assert_eq!(f.get_i64("u8"), Some(7));
    assert_eq!(f.get_f32("u8"), Some(7.0));
    assert_eq!(f.get_u32("neg"), None);
    assert_eq!(f.get_u64("neg"), None);
    assert_eq!(f.get_i64("neg"), Some(-5));
    assert_eq!(f.get_u32("u33"), None);
    assert_eq!(f.get_u64("u33"), Some(1 << 33));
    assert_eq!(f.get_u64("big"), Some(u64::MAX));
    assert_eq!(f.get_i64("big"), None);
    assert_eq!(f.get_f32("f64"), Some(0.25));
    assert_eq!(f.get_u32("f64"), None);
    assert_eq!(f.get_bool("b"), Some(true));
    assert_eq!(f.get_bool("u8"), None);
    assert_eq!(f.get_str("u8"), None);
    assert_eq!(
        f.get_str_array("toks"),
        Some(&["a".to_string(), "b".to_string()][..])
    );
    assert_eq!(f.get_str_array("fs"), None);
    assert_eq!(f.get_f32_array("fs"), Some(&[1.0, 2.0][..]));
    assert_eq!(f.get_i32_array("is"), Some(&[-1, 3][..]));
    assert_eq!(f.get_i32_array("fs"), None);
    assert_eq!(
        f.get_array("toks").map(|a| (a.len(), a.type_name())),
        Some((2, "string"))
    );
    assert!(f.get("nope").is_none());
    assert_eq!(f.get_u32("nope"), None);
}

#[test]
fn hand_written_v2_file_is_read() {
    // v2 has the same little-endian layout as v3.
    let bytes = Raw::header(2, 1, 2)
        .kv_str("general.architecture", "llama")
        .kv_u32("llama.block_count", 2)
        .tensor("w", &[4, 2], 0, 0)
        .pad(32)
        .bytes(&pattern(32, 9))
        .build();
    let f = GgufFile::from_bytes(bytes).unwrap();
    assert_eq!(f.version(), 2);
    assert_eq!(f.architecture(), Some("llama"));
    assert_eq!(f.get_u32("llama.block_count"), Some(2));
    let t = f.tensor("w").unwrap();
    assert_eq!(
        (t.ty, t.n_bytes, t.n_rows(), t.row_len()),
        (GgmlType::F32, 32, 2, 4)
    );
    assert_eq!(f.tensor_data(t), &pattern(32, 9)[..]);
}

#[test]
fn write_then_open_via_mmap() {
    let mut w = GgufWriter::new();
    w.add("general.architecture", Value::String("qwen2".into()));
    w.add_tensor(
        "token_embd.weight",
        &[32, 2],
        GgmlType::Q8_0,
        pattern(68, 1),
    );
    let path = std::env::temp_dir().join(format!("kestrel-gguf-test-{}.gguf", std::process::id()));
    w.write(&path).unwrap();
    let opened = GgufFile::open(&path);
    std::fs::remove_file(&path).unwrap();
    let f = opened.unwrap();
    assert_eq!(f.architecture(), Some("qwen2"));
    let t = f.tensor("token_embd.weight").unwrap();
    assert_eq!(f.tensor_data(t), &pattern(68, 1)[..]);
    assert_eq!(f.as_bytes(), &w.to_bytes()[..]);
}

#[test]
fn open_missing_file_names_the_path() {
    let err = GgufFile::open("/nonexistent/dir/model.gguf")
        .unwrap_err()
        .to_string();
    assert!(err.contains("/nonexistent/dir/model.gguf"), "{err}");
}

#[test]
#[should_panic(expected = "needs 24 bytes")]
fn writer_rejects_wrong_data_length() {
    GgufWriter::new().add_tensor("x", &[32, 1], GgmlType::Q5_1, vec![0; 23]);
}

#[test]
fn inspect_report_summarizes_without_dumping() {
    let mut w = GgufWriter::new();
    w.add("general.architecture", Value::String("llama".into()));
    w.add("general.name", Value::String("Tiny".into()));
    w.add("general.license", Value::String("mit".into()));
    w.add("llama.context_length", Value::U32(2048));
    w.add("llama.block_count", Value::U32(2));
    w.add("llamaish.not_a_hyperparameter", Value::U32(5));
    w.add("tokenizer.ggml.model", Value::String("gpt2".into()));
    w.add("tokenizer.ggml.pre", Value::String("smollm".into()));
    let toks = ["<unk>", "<s>", "</s>", "secret_token_text"];
    w.add(
        "tokenizer.ggml.tokens",
        Value::Array(Array::String(toks.map(String::from).to_vec())),
    );
    w.add(
        "tokenizer.ggml.merges",
        Value::Array(Array::String(vec!["a b".into()])),
    );
    w.add("tokenizer.ggml.bos_token_id", Value::U32(1));
    w.add("tokenizer.ggml.eos_token_id", Value::U32(2));
    w.add("tokenizer.ggml.add_bos_token", Value::Bool(true));
    w.add("tokenizer.chat_template", Value::String("{{ x }}".into()));
    w.add(
        "tokenizer.ggml.scores",
        Value::Array(Array::F32(vec![0.5; 4])),
    );
    w.add_tensor("token_embd.weight", &[32, 4], GgmlType::Q4_0, vec![0; 72]);
    w.add_tensor("output_norm.weight", &[32], GgmlType::F32, vec![0; 128]);
    w.add_tensor("blk.0.ffn.weight", &[32, 2], GgmlType::Q4_0, vec![0; 36]);
    let r = inspect_report(&GgufFile::from_bytes(w.to_bytes()).unwrap());

    for want in [
        "GGUF version 3",
        "architecture: llama",
        "name: \"Tiny\"",
        "vocab size: 4",
        "merges: 1",
        "bos id: 1 \"<s>\"",
        "eos id: 2 \"</s>\"",
        "add_bos_token: true",
        "chat template: present (7 bytes)",
        "general.license = \"mit\"",
        "tokenizer.ggml.scores = array<f32>[4]",
        "q4_0      2 tensors  108 B",
        "f32       1 tensors  128 B",
        "total     3 tensors  236 B",
    ] {
        assert!(r.contains(want), "report lacks {want:?}:\n{r}");
    }
    // Hyperparameters are sorted and limited to the "llama." prefix.
    let block = r.find("llama.block_count = 2").expect(&r);
    let ctx = r.find("llama.context_length = 2048").expect(&r);
    assert!(block < ctx, "{r}");
    let hyper_end = r.find("\ntokenizer:").unwrap();
    assert!(r.find("llamaish").unwrap() > hyper_end, "{r}");
    // Arrays are summarized, never dumped.
    assert!(!r.contains("secret_token_text"), "{r}");
    assert!(!r.contains("a b"), "{r}");
}

#[test]
fn opening_an_empty_or_short_file_is_a_clean_error() {
    let dir = std::env::temp_dir();
    for (i, content) in [&b""[..], b"GGUF\x03\x00"].into_iter().enumerate() {
        let path = dir.join(format!(
            "kestrel-gguf-short-{}-{i}.gguf",
            std::process::id()
        ));
        std::fs::write(&path, content).unwrap();
        let res = GgufFile::open(&path);
        std::fs::remove_file(&path).unwrap();
        let msg = res.unwrap_err().to_string();
        assert!(msg.contains("truncated"), "{msg}");
    }
}

#[test]
fn gguf_file_can_be_shared_across_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<GgufFile>();
}
