//! Broken tiny models must fail to load with an error that names the
//! culprit: a tensor of the wrong shape, a missing tensor, a tensor of a type
//! that cannot be a weight (`CpuModel::load`), an unknown architecture or a
//! missing hyperparameter (`ModelSpec::from_gguf`). Each case first checks
//! that the unbroken model of the same architecture loads, so the error is
//! caused by the edit alone.

mod common;

use std::sync::Arc;

use common::{tiny_parts, TinyParts};
use kestrel_cpu::CpuModel;
use kestrel_gguf::{GgmlType, GgufFile, Value};
use kestrel_model::ModelSpec;

/// Loads the model, returning the Display text of whichever step failed.
fn try_load(parts: &TinyParts, ty: GgmlType) -> Result<CpuModel, String> {
    let file =
        Arc::new(GgufFile::from_bytes(parts.to_bytes(ty)).map_err(|e| format!("gguf: {e}"))?);
    let spec = ModelSpec::from_gguf(&file).map_err(|e| e.to_string())?;
    CpuModel::load(file, spec, 1).map_err(|e| e.to_string())
}

fn expect_error(parts: &TinyParts, ty: GgmlType, needles: &[&str]) {
    match try_load(parts, ty) {
        Ok(_) => panic!("loaded although it should fail (expected {needles:?})"),
        Err(msg) => {
            for n in needles {
                assert!(msg.contains(n), "error '{msg}' does not mention '{n}'");
            }
        }
    }
}

#[test]
fn intact_models_load() {
    for arch in common::ARCHES {
        let parts = tiny_parts(arch, 3);
        if let Err(e) = try_load(&parts, GgmlType::Q8_0) {
            panic!("{arch}: {e}");
        }
    }
}

#[test]
fn wrong_shape_names_the_tensor() {
    // A projection with too few rows.
    let mut parts = tiny_parts("llama", 3);
    let t = parts.tensor_mut("blk.1.attn_k.weight");
    t.dims = vec![256, 64];
    t.values.truncate(256 * 64);
    expect_error(
        &parts,
        GgmlType::Q4_0,
        &["blk.1.attn_k.weight", "shape", "[256, 64]", "[256, 128]"],
    );

    // A norm of the wrong length.
    let mut parts = tiny_parts("qwen3", 3);
    let t = parts.tensor_mut("blk.0.attn_q_norm.weight");
    t.dims = vec![32];
    t.values.truncate(32);
    expect_error(
        &parts,
        GgmlType::F16,
        &["blk.0.attn_q_norm.weight", "[32]", "[64]"],
    );

    // phi3's fused up projection holding only the up half.
    let mut parts = tiny_parts("phi3", 3);
    let t = parts.tensor_mut("blk.0.ffn_up.weight");
    t.dims = vec![256, 512];
    t.values.truncate(256 * 512);
    expect_error(
        &parts,
        GgmlType::Q4_K,
        &["blk.0.ffn_up.weight", "[256, 512]", "[256, 1024]"],
    );

    // A separate output matrix with a vocabulary that disagrees with the tokenizer.
    let mut parts = tiny_parts("qwen2", 3);
    let t = parts.tensor_mut("output.weight");
    t.dims = vec![256, 299];
    t.values.truncate(256 * 299);
    expect_error(
        &parts,
        GgmlType::Q8_0,
        &["output.weight", "[256, 299]", "[256, 300]"],
    );
}

#[test]
fn missing_tensor_is_named() {
    let cases = [
        ("llama", "blk.1.ffn_gate.weight"),
        ("qwen2", "blk.0.attn_v.bias"),
        ("qwen3", "blk.1.attn_k_norm.weight"),
        ("gemma3", "blk.2.post_ffw_norm.weight"),
        ("phi3", "blk.0.attn_qkv.weight"),
        ("llama", "token_embd.weight"),
        ("gemma3", "output_norm.weight"),
    ];
    for (arch, name) in cases {
        let mut parts = tiny_parts(arch, 3);
        parts.remove_tensor(name);
        expect_error(&parts, GgmlType::Q5_1, &["missing", name]);
    }
}

#[test]
fn activation_only_type_is_rejected_by_name() {
    // Q8_K is an activation format; no weight can be stored in it.
    let parts = tiny_parts("llama", 3);
    let msg = try_load(&parts, GgmlType::Q8_K)
        .err()
        .expect("Q8_K weights must not load");
    assert!(msg.contains("q8_K"), "{msg}");
    assert!(msg.contains(".weight"), "{msg}");
}

#[test]
fn unknown_architecture_is_named() {
    let mut parts = tiny_parts("llama", 3);
    parts.set_meta("general.architecture", Value::String("mamba9".into()));
    expect_error(&parts, GgmlType::F32, &["unknown architecture", "mamba9"]);

    let mut parts = tiny_parts("llama", 3);
    parts.remove_meta("general.architecture");
    expect_error(&parts, GgmlType::F32, &["general.architecture"]);
}

#[test]
fn missing_hyperparameter_is_named() {
    for (arch, key) in [
        ("llama", "llama.block_count"),
        ("gemma3", "gemma3.embedding_length"),
        ("phi3", "phi3.attention.layer_norm_rms_epsilon"),
    ] {
        let mut parts = tiny_parts(arch, 3);
        parts.remove_meta(key);
        expect_error(&parts, GgmlType::F32, &["missing", key]);
    }
}
