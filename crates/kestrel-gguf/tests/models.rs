//! The real test models: each must open and show known facts. A missing
//! model fails the test (with the command that fetches it) instead of skipping.

use std::path::PathBuf;

use kestrel_gguf::{GgmlType, GgufFile};

fn open_model(name: &str) -> GgufFile {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../models")
        .join(name);
    assert!(
        path.exists(),
        "{} is missing: run scripts/fetch-models.sh",
        path.display()
    );
    GgufFile::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Facts every model shares: a consistent tensor table and tokenizer.
fn check_common(f: &GgufFile, arch: &str, blocks: u32, embd: u64, vocab: usize, n_tensors: usize) {
    assert_eq!(f.version(), 3);
    assert_eq!(f.architecture(), Some(arch));
    assert_eq!(f.alignment(), 32);
    assert_eq!(f.get_u32(&format!("{arch}.block_count")), Some(blocks));
    assert_eq!(f.get_u64(&format!("{arch}.embedding_length")), Some(embd));
    assert_eq!(
        f.get_str_array("tokenizer.ggml.tokens").map(|t| t.len()),
        Some(vocab)
    );
    assert_eq!(f.tensors().len(), n_tensors);

    let embd_t = f.tensor("token_embd.weight").expect("token_embd.weight");
    assert_eq!(embd_t.dims, vec![embd, vocab as u64]);
    assert_eq!(f.tensor_data(embd_t).len() as u64, embd_t.n_bytes);
    assert!(f
        .tensor(&format!("blk.{}.attn_q.weight", blocks - 1))
        .is_some());
    assert!(f.tensor(&format!("blk.{blocks}.attn_q.weight")).is_none());
    // Tensors are laid out back to back, each aligned, ending inside the file.
    let mut end = f.data_offset();
    for t in f.tensors() {
        assert_eq!(t.offset, end.next_multiple_of(32), "{}", t.name);
        end = t.offset + t.n_bytes;
    }
    assert!(end <= f.file_size());

    let report = kestrel_gguf::inspect_report(f);
    assert!(
        report.contains(&format!("architecture: {arch}")),
        "{report}"
    );
    assert!(report.contains(&format!("vocab size: {vocab}")), "{report}");
}

#[test]
fn smollm2_135m_q4_1() {
    let f = open_model("SmolLM2-135M-Instruct.Q4_1.gguf");
    check_common(&f, "llama", 30, 576, 49152, 272);
    assert_eq!(f.tensor("token_embd.weight").unwrap().ty, GgmlType::Q8_0);
    assert_eq!(f.tensor("blk.0.attn_q.weight").unwrap().ty, GgmlType::Q4_1);
    assert_eq!(f.get_u32("llama.attention.head_count"), Some(9));
    assert_eq!(f.get_u32("llama.attention.head_count_kv"), Some(3));
    assert_eq!(f.get_str("tokenizer.ggml.model"), Some("gpt2"));
    assert_eq!(
        f.get_str_array("tokenizer.ggml.tokens").unwrap()[1],
        "<|im_start|>"
    );
}

#[test]
fn gemma3_270m_q4_k_m() {
    let f = open_model("gemma-3-270m-q4_k_m.gguf");
    check_common(&f, "gemma3", 18, 640, 262144, 236);
    assert_eq!(f.get_u32("gemma3.attention.sliding_window"), Some(512));
    assert_eq!(f.get_str("tokenizer.ggml.model"), Some("llama"));
    assert_eq!(
        f.get_f32_array("tokenizer.ggml.scores").map(|s| s.len()),
        Some(262144)
    );
    assert_eq!(f.get_bool("tokenizer.ggml.add_bos_token"), Some(true));
}

#[test]
fn qwen25_coder_05b_q4_k_m() {
    let f = open_model("qwen2.5-coder-0.5b-q4_k_m.gguf");
    check_common(&f, "qwen2", 24, 896, 151936, 291);
    assert_eq!(f.get_f32("qwen2.rope.freq_base"), Some(1_000_000.0));
    assert_eq!(f.get_u32("tokenizer.ggml.eos_token_id"), Some(151645));
    assert_eq!(
        f.get_str_array("tokenizer.ggml.merges").map(|m| m.len()),
        Some(151387)
    );
    assert!(f
        .get_str("tokenizer.chat_template")
        .unwrap()
        .contains("im_start"));
    assert!(f.tensor("blk.0.attn_q.bias").is_some());
}
