//! End-to-end checks of `CpuModel` on tiny random models of every supported
//! architecture (llama, qwen2, qwen3, gemma3, phi3) and every weight type
//! (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K..Q6_K):
//!
//! - the model loads and its logits are finite and n_vocab long per token;
//! - they agree with a naive f64 reference forward over the dequantized
//!   weights (tests/common) within a tolerance relative to the logit spread,
//!   and the argmax agrees wherever the reference's top-2 gap is clear;
//! - batched prefill, chunked prefill and one-token-at-a-time decode agree;
//! - `Logits::Last` of a batch is that position's row of `Logits::All`;
//! - prompts of >= 64 tokens (the tiled attention path) match the reference;
//! - the reference is sharp enough to notice a wrong architecture feature
//!   (each per-arch flag flipped makes it disagree with the CPU backend), and
//!   a backend given a wrong block description fails the comparison.
//!
//! Tolerances: the CPU path quantizes activations (Q8_0 / Q8_1 / Q8_K, or
//! F16 / BF16 for float weights), keeps the KV cache in f16 and accumulates
//! short-batch attention in f16, none of which the reference does. The worst
//! logit error is measured against the spread (max - min) of the reference
//! logits of the same token.

mod common;

use std::sync::Arc;

use common::*;
use kestrel_cpu::{CpuModel, Logits};
use kestrel_gguf::{GgmlType, GgufFile};
use kestrel_model::ModelSpec;

/// Worst |cpu - reference| allowed, as a fraction of the reference logit spread.
/// Measured worst cases over all architectures (seeds as below): F32 0.0005,
/// F16 0.0006, BF16 0.004, Q4_0..Q8_0 0.016, K-quants 0.023 (Q8_K activations
/// share one scale per 256 values). The limits leave about 2x headroom.
fn tolerance(ty: GgmlType) -> f64 {
    match ty {
        // Only the f16 KV cache and f16 attention accumulation differ
        // (F16 weights also take f16 activations).
        GgmlType::F32 | GgmlType::F16 => 0.002,
        // BF16 activations keep 8 significant bits.
        GgmlType::BF16 => 0.01,
        // 8-bit activations (Q8_0 / Q8_1 per 32 values).
        GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q5_0 | GgmlType::Q5_1 | GgmlType::Q8_0 => 0.035,
        // Q8_K activations, one scale per 256 values.
        _ => 0.045,
    }
}

/// The loosest of the tolerances above.
const MAX_TOLERANCE: f64 = 0.045;

/// Fraction of the spread by which the reference's best token must lead the
/// second for the argmax to be required to agree.
const CLEAR_GAP: f64 = 0.05;

/// How far prefill, chunked prefill and decode may part, as a fraction of the
/// logit spread. Where one token and a batch take the same kernels they
/// differ only by attention's summation order. Where ggml (and so Kestrel)
/// switches kernels with the batch size (repacked gemv/gemm for Q4_0/Q4_K,
/// the tiled matmul for K-quants from 8 tokens on) the f32 order differs, a
/// quantized activation can round the other way, and logits move by up to
/// 0.008 of the spread (measured); 0.02 still catches a wrong position or a
/// stale cache, which move them by far more.
fn same_path_tol(ty: GgmlType) -> f64 {
    let rows = 64; // any multiple of 8, as every tiny-model weight has
    let batch = kestrel_quant::dot_path(ty, rows, 0, PROMPT_LEN);
    if batch == kestrel_quant::dot_path(ty, rows, 0, 1) {
        1e-4
    } else {
        0.02
    }
}

const PROMPT_LEN: usize = 8;

fn as_f64(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| x as f64).collect()
}

struct Case {
    model: CpuModel,
    reference: Reference,
    cfg: TinyConfig,
}

fn load(arch: &str, ty: GgmlType, seed: u64, threads: usize) -> Case {
    let bytes = tiny_model(arch, ty, seed);
    let file = Arc::new(GgufFile::from_bytes(bytes).expect("tiny model parses"));
    let spec = ModelSpec::from_gguf(&file).unwrap_or_else(|e| panic!("{arch}/{ty}: spec: {e}"));
    let cfg = config(arch);
    assert_eq!(spec.hparams.n_vocab, cfg.n_vocab, "{arch}/{ty}: n_vocab");
    let reference = Reference::new(&file, cfg.clone(), ArchFlags::of(arch));
    let model =
        CpuModel::load(file, spec, threads).unwrap_or_else(|e| panic!("{arch}/{ty}: load: {e}"));
    Case {
        model,
        reference,
        cfg,
    }
}

/// Compares one token's CPU logits with the reference's; returns a failure
/// description or None. `clear` counts the positions whose argmax was checked.
fn compare(what: &str, got: &[f32], want: &[f64], tol: f64, clear: &mut usize) -> Option<String> {
    if got.len() != want.len() {
        return Some(format!("{what}: {} logits, want {}", got.len(), want.len()));
    }
    if let Some(i) = got.iter().position(|v| !v.is_finite()) {
        return Some(format!("{what}: logit {i} is {}", got[i]));
    }
    let err = rel_err(got, want);
    if err.is_nan() || err > tol {
        return Some(format!("{what}: error {err:.5} of the spread > {tol}"));
    }
    let spread = want.iter().cloned().fold(f64::NEG_INFINITY, f64::max)
        - want.iter().cloned().fold(f64::INFINITY, f64::min);
    let (best, gap) = top2(want);
    if gap > CLEAR_GAP * spread {
        *clear += 1;
        let got_best = argmax_f32(got);
        if got_best != best {
            return Some(format!(
                "{what}: argmax {got_best}, reference {best} (gap {gap:.4})"
            ));
        }
    }
    None
}

/// Runs every weight type of one architecture; collects failures so one run
/// reports them all.
fn check_arch(arch: &str) {
    let mut failures = Vec::new();
    let mut clear = 0usize;
    let mut worst = Vec::new();
    for (i, &ty) in WEIGHT_TYPES.iter().enumerate() {
        let seed = 1000 + i as u64;
        // Alternate one and two threads (the two-thread matmul splits rows).
        let case = load(arch, ty, seed, 1 + i % 2);
        let nv = case.cfg.n_vocab;
        let tokens = prompt(PROMPT_LEN, nv, seed);
        let want = case.reference.forward(&tokens);
        let tol = tolerance(ty);
        let tag = format!("{arch}/{ty}");

        // Whole prompt at once, every position's logits.
        let mut cache = case.model.new_cache(32);
        let all = case.model.forward(&tokens, 0, &mut cache, Logits::All);
        if all.len() != PROMPT_LEN * nv {
            failures.push(format!(
                "{tag}: Logits::All gave {} values, want {}",
                all.len(),
                PROMPT_LEN * nv
            ));
            continue;
        }
        let mut type_worst = 0f64;
        for (p, row) in all.chunks_exact(nv).enumerate() {
            type_worst = type_worst.max(rel_err(row, &want[p]));
            failures.extend(compare(
                &format!("{tag} prefill pos {p}"),
                row,
                &want[p],
                tol,
                &mut clear,
            ));
        }
        worst.push(format!("{ty}={type_worst:.4}"));

        // One token at a time, each step compared with the prefill row.
        let mut cache = case.model.new_cache(32);
        for (p, &t) in tokens.iter().enumerate() {
            let step = case.model.forward(&[t], p, &mut cache, Logits::Last);
            let e = rel_err(&step, &as_f64(&all[p * nv..(p + 1) * nv]));
            if e.is_nan() || e > same_path_tol(ty) {
                failures.push(format!(
                    "{tag}: decode pos {p} differs from prefill by {e:.6} of the spread"
                ));
            }
            if p == PROMPT_LEN - 1 {
                failures.extend(compare(
                    &format!("{tag} decode last"),
                    &step,
                    &want[p],
                    tol,
                    &mut clear,
                ));
            }
        }

        // Prefill in two chunks: 3 tokens (Logits::Last, which must be row 2 of
        // the whole-prompt Logits::All), then 5 more at pos0 = 3.
        let mut cache = case.model.new_cache(32);
        let first = case
            .model
            .forward(&tokens[..3], 0, &mut cache, Logits::Last);
        let rest = case.model.forward(&tokens[3..], 3, &mut cache, Logits::All);
        if first.len() != nv || rest.len() != (PROMPT_LEN - 3) * nv {
            failures.push(format!(
                "{tag}: chunked prefill gave {} and {} logits",
                first.len(),
                rest.len()
            ));
            continue;
        }
        for (p, row) in std::iter::once((2, &first[..]))
            .chain(rest.chunks_exact(nv).enumerate().map(|(i, r)| (3 + i, r)))
        {
            let e = rel_err(row, &as_f64(&all[p * nv..(p + 1) * nv]));
            if e.is_nan() || e > same_path_tol(ty) {
                failures.push(format!("{tag}: chunked prefill pos {p} differs from whole prefill by {e:.6} of the spread"));
            }
        }
    }
    eprintln!("{arch}: worst error / spread per type: {}", worst.join(" "));
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    // The argmax check must have had something to check.
    assert!(
        clear >= WEIGHT_TYPES.len(),
        "{arch}: only {clear} positions with a clear top-2 gap"
    );
}

#[test]
fn llama_matches_reference_for_every_weight_type() {
    check_arch("llama");
}

#[test]
fn qwen2_matches_reference_for_every_weight_type() {
    check_arch("qwen2");
}

#[test]
fn qwen3_matches_reference_for_every_weight_type() {
    check_arch("qwen3");
}

#[test]
fn gemma3_matches_reference_for_every_weight_type() {
    check_arch("gemma3");
}

#[test]
fn phi3_matches_reference_for_every_weight_type() {
    check_arch("phi3");
}

/// A 72-token prompt takes the tiled (>= 64 queries, f32) attention path;
/// then one more token is decoded over the long cache.
#[test]
fn long_prompts_match_reference() {
    let mut failures = Vec::new();
    for (arch, ty) in [
        ("llama", GgmlType::Q4_K),
        ("gemma3", GgmlType::Q8_0),
        ("qwen2", GgmlType::F16),
    ] {
        let case = load(arch, ty, 77, 2);
        let nv = case.cfg.n_vocab;
        let tokens = prompt(73, nv, 77);
        let want = case.reference.forward(&tokens);
        let tol = tolerance(ty);
        let mut clear = 0;
        let mut cache = case.model.new_cache(96);
        let all = case
            .model
            .forward(&tokens[..72], 0, &mut cache, Logits::All);
        assert_eq!(all.len(), 72 * nv, "{arch}/{ty}");
        for (p, row) in all.chunks_exact(nv).enumerate() {
            failures.extend(compare(
                &format!("{arch}/{ty} long prefill pos {p}"),
                row,
                &want[p],
                tol,
                &mut clear,
            ));
        }
        let next = case
            .model
            .forward(&tokens[72..], 72, &mut cache, Logits::Last);
        failures.extend(compare(
            &format!("{arch}/{ty} decode pos 72"),
            &next,
            &want[72],
            tol,
            &mut clear,
        ));
        assert!(
            clear > 5,
            "{arch}/{ty}: only {clear} clear argmax positions"
        );
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Each architecture feature the reference models must matter: flipping it
/// makes the reference disagree with the (F32) CPU backend by more than the
/// loosest tolerance, so a backend with that feature wrong would fail the
/// checks above for every weight type. This is what makes the agreement above meaningful.
#[test]
fn reference_notices_each_wrong_arch_feature() {
    let ty = GgmlType::F32;
    let mut missed = Vec::new();
    for arch in ARCHES {
        let case = load(arch, ty, 5, 1);
        let tokens = prompt(PROMPT_LEN, case.cfg.n_vocab, 5);
        let mut cache = case.model.new_cache(32);
        let got = case.model.forward(&tokens, 0, &mut cache, Logits::All);
        let right = ArchFlags::of(arch);
        let mut mutants = vec![(
            "rope style",
            ArchFlags {
                neox: !right.neox,
                ..right
            },
        )];
        if arch == "qwen2" {
            mutants.push((
                "no q/k/v bias",
                ArchFlags {
                    qkv_bias: false,
                    ..right
                },
            ));
        }
        if right.qk_norm {
            mutants.push((
                "no q/k norm",
                ArchFlags {
                    qk_norm: false,
                    ..right
                },
            ));
        }
        if arch == "gemma3" {
            mutants.push((
                "silu",
                ArchFlags {
                    gelu: false,
                    ..right
                },
            ));
            mutants.push((
                "no post norms",
                ArchFlags {
                    post_norms: false,
                    ..right
                },
            ));
            mutants.push((
                "unscaled embeddings",
                ArchFlags {
                    scale_embeddings: false,
                    ..right
                },
            ));
            mutants.push((
                "no sliding window",
                ArchFlags {
                    sliding_window: false,
                    ..right
                },
            ));
        }
        if arch == "phi3" {
            mutants.push((
                "[up; gate]",
                ArchFlags {
                    gate_first: false,
                    ..right
                },
            ));
        }
        let bytes = tiny_model(arch, ty, 5);
        let file = GgufFile::from_bytes(bytes).unwrap();
        for (name, flags) in mutants {
            let wrong = Reference::new(&file, case.cfg.clone(), flags).forward(&tokens);
            let err = (0..PROMPT_LEN)
                .map(|p| {
                    rel_err(
                        &got[p * case.cfg.n_vocab..(p + 1) * case.cfg.n_vocab],
                        &wrong[p],
                    )
                })
                .fold(0.0, f64::max);
            eprintln!("{arch}: mutant '{name}' error {err:.4}");
            if err <= MAX_TOLERANCE {
                missed.push(format!(
                    "{arch}: '{name}' only changes logits by {err:.4} of the spread"
                ));
            }
        }
    }
    assert!(missed.is_empty(), "{}", missed.join("\n"));
}

/// The same from the other side: a backend run with a wrong block description
/// (a mis-specified architecture) fails the comparison with the reference.
#[test]
fn wrong_block_spec_fails_the_reference_check() {
    use kestrel_model::{Activation, RopeStyle};
    let arch = "gemma3";
    let ty = GgmlType::Q8_0;
    let file = Arc::new(GgufFile::from_bytes(tiny_model(arch, ty, 9)).unwrap());
    let cfg = config(arch);
    let tokens = prompt(PROMPT_LEN, cfg.n_vocab, 9);
    let want = Reference::new(&file, cfg.clone(), ArchFlags::of(arch)).forward(&tokens);
    let good = ModelSpec::from_gguf(&file).unwrap();
    let run = |spec: ModelSpec| {
        let model = CpuModel::load(file.clone(), spec, 1).expect("loads");
        let mut cache = model.new_cache(16);
        let got = model.forward(&tokens, 0, &mut cache, Logits::All);
        (0..PROMPT_LEN)
            .map(|p| rel_err(&got[p * cfg.n_vocab..(p + 1) * cfg.n_vocab], &want[p]))
            .fold(0.0, f64::max)
    };
    let base = run(good.clone());
    assert!(base <= tolerance(ty), "correct spec: {base}");
    let mut broken: Vec<(&str, ModelSpec)> = Vec::new();
    let mut s = good.clone();
    s.block.rope = RopeStyle::Normal;
    broken.push(("normal rope", s));
    let mut s = good.clone();
    s.block.activation = Activation::SiluGlu;
    broken.push(("silu", s));
    let mut s = good.clone();
    s.block.scale_embeddings = false;
    broken.push(("unscaled embeddings", s));
    let mut s = good.clone();
    s.hparams.swa_layers = vec![false; cfg.n_layer];
    broken.push(("no sliding window", s));
    let mut s = good.clone();
    s.hparams.rope_base_swa = s.hparams.rope_base;
    broken.push(("one rope base", s));
    for (name, spec) in broken {
        let err = run(spec);
        eprintln!("{arch}: backend with '{name}' error {err:.4}");
        assert!(err > tolerance(ty), "{name}: error only {err:.4}");
    }
}

/// A window layer kept as llama.cpp's default ring (the window plus a
/// 512-token micro-batch, rounded up to 256 cells: 768 for the tiny window
/// of 4), position p in row p mod 768, against the naive reference past
/// the ring's size: a prompt of 900 tokens (passes of 512 and 388, the
/// second writing over the first's rows) and decode steps after it. The
/// ring and a full-size cache (`full_swa`) differ only in the order the
/// window's keys are summed; a wrong row would put the wrong keys in.
#[test]
fn gemma3_window_ring_matches_reference() {
    let ty = GgmlType::F16;
    let case = load("gemma3", ty, 5, 2);
    let nv = case.cfg.n_vocab;
    let tokens = prompt(904, nv, 5);
    let want = case.reference.forward(&tokens);
    let mut failures = Vec::new();
    for full in [false, true] {
        let mut cache = case.model.new_cache(1024);
        if full {
            cache.full_swa();
        }
        assert_eq!(cache.swa_ring(), if full { 0 } else { 768 });
        // Positions 100..110 stay until position 868 is stored over 100.
        assert!(cache.keeps(100, 110, 868));
        assert_eq!(cache.keeps(100, 110, 869), full);
        assert!(cache.keeps(0, 0, 5000), "nothing to keep");
        let mut clear = 0;
        let all = case
            .model
            .forward(&tokens[..900], 0, &mut cache, Logits::All);
        let mut rows: Vec<Vec<f32>> = all.chunks_exact(nv).map(<[f32]>::to_vec).collect();
        for p in 900..904 {
            rows.push(
                case.model
                    .forward(&tokens[p..p + 1], p, &mut cache, Logits::Last),
            );
        }
        for (p, row) in rows.iter().enumerate() {
            failures.extend(compare(
                &format!("full_swa {full}, pos {p}"),
                row,
                &want[p],
                tolerance(ty),
                &mut clear,
            ));
        }
        assert!(clear > 100, "only {clear} clear argmax positions");
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
