//! The whole forward pass on the GPU against the CPU backend, on the tiny
//! random models the CPU tests use (llama, qwen2, qwen3, gemma3; Q8_0,
//! Q4_K, F32 and Q4_1 weights): at every position of a prompt fed one token
//! per step, the GPU's logits are within 3% of the CPU's logit spread (both
//! round activations to 8 bits the same way, but a last-bit difference
//! upstream can move one quant, and the CPU's batched prompt takes other
//! kernel paths from 4 and 8 tokens), and the token the GPU writes into the history
//! buffer is the greedy choice over its own logits and agrees with the
//! CPU's wherever the CPU's top two are clearly apart.

// The CPU tests' tiny-model builder, shared rather than copied.
#[path = "../../kestrel-cpu/tests/common/mod.rs"]
mod common;

use std::sync::Arc;

use kestrel_cpu::{CpuModel, Logits};
use kestrel_gguf::{GgmlType, GgufFile};
use kestrel_gpu::model::GpuModel;
use kestrel_gpu::Gpu;
use kestrel_model::ModelSpec;
use kestrel_sampling::SamplerParams;

#[test]
fn gpu_forward_matches_the_cpu_on_tiny_models() {
    let mut clear = 0;
    for arch in ["llama", "qwen2", "qwen3", "gemma3"] {
        for (i, ty) in [
            GgmlType::Q8_0,
            GgmlType::Q4_K,
            GgmlType::F32,
            GgmlType::Q4_1,
        ]
        .into_iter()
        .enumerate()
        {
            let tag = format!("{arch}/{ty}");
            let bytes = common::tiny_model(arch, ty, 40 + i as u64);
            let file = Arc::new(GgufFile::from_bytes(bytes).expect("tiny model"));
            let spec = ModelSpec::from_gguf(&file).expect("spec");
            let nv = spec.hparams.n_vocab;
            let cpu = CpuModel::load(file.clone(), spec.clone(), 2).expect("cpu load");
            let gpu = GpuModel::load(Gpu::new().expect("gpu"), file, spec, 32).expect("gpu load");
            let prompt = common::prompt(10, nv, 7 + i as u64);
            let mut cache = cpu.new_cache(32);
            let want = cpu.forward(&prompt, 0, &mut cache, Logits::All);
            let seq = gpu.new_seq();
            gpu.write_tokens(&seq, 0, &prompt).unwrap();
            let greedy = SamplerParams {
                temperature: 0.0,
                ..SamplerParams::default()
            };
            for pos in 0..prompt.len() {
                gpu.step(&seq, pos, Some(&greedy)).unwrap();
                let got = gpu.read_logits().unwrap();
                let row = &want[pos * nv..(pos + 1) * nv];
                let (lo, hi) = row
                    .iter()
                    .fold((f32::MAX, f32::MIN), |(a, b), &v| (a.min(v), b.max(v)));
                let worst = got
                    .iter()
                    .zip(row)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0f32, f32::max);
                assert!(
                    worst <= 0.03 * (hi - lo),
                    "{tag} pos {pos}: logits differ by {worst} (spread {})",
                    hi - lo
                );
                let picked = gpu.read_token(&seq, pos + 1).unwrap();
                assert_eq!(
                    picked,
                    kestrel_sampling::argmax(&got),
                    "{tag} pos {pos}: device pick"
                );
                let mut sorted: Vec<f32> = row.to_vec();
                sorted.sort_by(|a, b| b.total_cmp(a));
                if sorted[0] - sorted[1] > 0.1 * (hi - lo) {
                    assert_eq!(
                        picked,
                        kestrel_sampling::argmax(row),
                        "{tag} pos {pos}: greedy token"
                    );
                    clear += 1;
                }
                // The next step reads the prompt's token, not the pick.
                if pos + 1 < prompt.len() {
                    gpu.write_tokens(&seq, pos + 1, &prompt[pos + 1..pos + 2])
                        .unwrap();
                }
            }
        }
    }
    assert!(
        clear >= 20,
        "only {clear} positions had a clear greedy token"
    );
}

/// The pipeline: a decode step is one submission, nothing is read back
/// inside it, and its token comes back as 4 bytes after the next step has
/// been submitted; generating that way gives the same tokens as stepping
/// and reading each token before the next step.
#[test]
fn decode_steps_are_one_submission_and_read_back_one_step_behind() {
    let bytes = common::tiny_model("llama", GgmlType::Q8_0, 11);
    let file = Arc::new(GgufFile::from_bytes(bytes).expect("tiny model"));
    let spec = ModelSpec::from_gguf(&file).expect("spec");
    let nv = spec.hparams.n_vocab;
    let model = GpuModel::load(Gpu::new().expect("gpu"), file, spec, 64).expect("gpu load");
    let g = &model.gpu;
    let prompt = common::prompt(6, nv, 3);
    let greedy = SamplerParams {
        temperature: 0.0,
        ..SamplerParams::default()
    };
    let n = 12;

    // Step, then read, then the next step.
    let seq = model.new_seq();
    model.write_tokens(&seq, 0, &prompt).unwrap();
    for pos in 0..prompt.len() - 1 {
        let before = g.submissions();
        model.step(&seq, pos, None).unwrap();
        assert_eq!(
            g.submissions(),
            before + 1,
            "a prompt step is one submission"
        );
    }
    let mut plain = Vec::new();
    for pos in prompt.len() - 1..prompt.len() - 1 + n {
        model.step(&seq, pos, Some(&greedy)).unwrap();
        plain.push(model.read_token(&seq, pos + 1).unwrap());
    }

    // Pipelined, one step behind.
    let seq = model.new_seq();
    model.write_tokens(&seq, 0, &prompt).unwrap();
    for pos in 0..prompt.len() - 1 {
        model.step(&seq, pos, None).unwrap();
    }
    let mut pos = prompt.len() - 1;
    let mut pending = model.step_async(&seq, pos, &greedy).unwrap();
    let mut piped = Vec::new();
    while piped.len() < n {
        let (subs, read) = (g.submissions(), g.readback_bytes());
        let next = model.step_async(&seq, pos + 1, &greedy).unwrap();
        assert_eq!(g.submissions(), subs + 1, "a decode step is one submission");
        assert_eq!(g.readback_bytes(), read, "nothing read back inside a step");
        piped.push(pending.wait(g).unwrap());
        assert_eq!(
            g.readback_bytes(),
            read + 4,
            "one token-sized readback per step"
        );
        pending = next;
        pos += 1;
    }
    assert_eq!(piped, plain);
    assert!(piped.windows(2).any(|w| w[0] != w[1]), "{piped:?}");
}

/// Sampling with a temperature on the device, inside the step: at every
/// step the token the GPU writes into the history is the one the CPU
/// sampler draws from the GPU's own logits with the same parameters,
/// history and generator (advanced once per step on both sides).
#[test]
fn sampled_decode_draws_the_cpu_samplers_tokens() {
    use kestrel_sampling::{Sampler, SamplerParams, XorShift};
    let bytes = common::tiny_model("llama", GgmlType::Q8_0, 13);
    let file = Arc::new(GgufFile::from_bytes(bytes).expect("tiny model"));
    let spec = ModelSpec::from_gguf(&file).expect("spec");
    let nv = spec.hparams.n_vocab;
    let model = GpuModel::load(Gpu::new().expect("gpu"), file, spec, 48).expect("gpu load");
    let prompt = common::prompt(5, nv, 9);
    for (seed, top_k, top_p, min_p, penalty) in [
        (7u64, 40, 0.95f32, 0.05f32, 1.0f32),
        (99, 0, 1.0, 0.0, 1.3),
        (12345, 5, 0.8, 0.0, 1.0),
    ] {
        let gp = SamplerParams {
            temperature: 1.5,
            top_k,
            top_p,
            min_p,
            repeat_penalty: penalty,
            ..SamplerParams::default()
        };
        let mut cpu = Sampler::new(SamplerParams {
            temperature: 1.5,
            top_k,
            top_p,
            min_p,
            repeat_penalty: penalty,
            seed,
            ..SamplerParams::default()
        });
        let seq = model.new_seq();
        model.set_rng(&seq, XorShift::new(seed).state());
        model.write_tokens(&seq, 0, &prompt).unwrap();
        for pos in 0..prompt.len() - 1 {
            model.step(&seq, pos, None).unwrap();
        }
        let mut history = prompt.clone();
        let mut distinct = std::collections::HashSet::new();
        for pos in prompt.len() - 1..prompt.len() + 20 {
            model.step(&seq, pos, Some(&gp)).unwrap();
            let logits = model.read_logits().unwrap();
            let got = model.read_token(&seq, pos + 1).unwrap();
            let want = cpu.sample_with_history(&logits, &history);
            assert_eq!(got, want, "seed {seed} position {pos}");
            history.push(got);
            distinct.insert(got);
        }
        // A temperature of 1.5 over a random model: the draws vary.
        assert!(distinct.len() > 3, "seed {seed}: {distinct:?}");
    }
}

/// Batched decode: three sequences with different prompts, positions,
/// parameters and seeds, stepped together in one submission per step, get
/// exactly the logits (bit for bit) and tokens each gets stepped alone, on
/// every architecture (biases, q/k norms, post norms and sliding windows
/// included).
#[test]
fn batched_decode_equals_each_sequence_alone() {
    use kestrel_gpu::model::GpuSeq;
    use kestrel_sampling::XorShift;
    for arch in ["llama", "qwen2", "qwen3", "gemma3"] {
        let bytes = common::tiny_model(arch, GgmlType::Q8_0, 21);
        let file = Arc::new(GgufFile::from_bytes(bytes).expect("tiny model"));
        let spec = ModelSpec::from_gguf(&file).expect("spec");
        let nv = spec.hparams.n_vocab;
        let model = GpuModel::load(Gpu::new().expect("gpu"), file, spec, 48).expect("gpu load");
        let prompts: Vec<Vec<u32>> = [3usize, 7, 5]
            .iter()
            .enumerate()
            .map(|(k, &n)| common::prompt(n, nv, 50 + k as u64))
            .collect();
        let params: Vec<SamplerParams> = [(0.0f32, 0), (1.0, 40), (0.7, 5)]
            .iter()
            .map(|&(temperature, top_k)| SamplerParams {
                temperature,
                top_k,
                repeat_penalty: 1.1,
                ..SamplerParams::default()
            })
            .collect();
        let steps = 6;
        let start = |k: usize| -> GpuSeq {
            let seq = model.new_seq();
            model.set_rng(&seq, XorShift::new(100 + k as u64).state());
            model.write_tokens(&seq, 0, &prompts[k]).unwrap();
            for pos in 0..prompts[k].len() - 1 {
                model.step(&seq, pos, None).unwrap();
            }
            seq
        };
        // Alone: tokens and logits per step.
        let mut alone = Vec::new();
        for k in 0..3 {
            let seq = start(k);
            let mut run = Vec::new();
            for t in 0..steps {
                let pos = prompts[k].len() - 1 + t;
                model.step(&seq, pos, Some(&params[k])).unwrap();
                let logits = model.read_logits().unwrap();
                run.push((model.read_token(&seq, pos + 1).unwrap(), logits));
            }
            alone.push(run);
        }
        // Together.
        let seqs: Vec<GpuSeq> = (0..3).map(start).collect();
        for t in 0..steps {
            let batch: Vec<(&GpuSeq, usize)> = seqs
                .iter()
                .enumerate()
                .map(|(k, s)| (s, prompts[k].len() - 1 + t))
                .collect();
            let pending = model.step_batch(&batch, &params).unwrap();
            let tokens: Vec<u32> = pending
                .into_iter()
                .map(|p| p.wait(&model.gpu).unwrap())
                .collect();
            let logits = model.read_batch_logits(3).unwrap();
            for (k, run) in alone.iter().enumerate() {
                let (want_tok, want_logits) = &run[t];
                assert_eq!(tokens[k], *want_tok, "{arch} sequence {k} step {t}");
                let row = &logits[k * nv..(k + 1) * nv];
                let same = row
                    .iter()
                    .zip(want_logits)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "{arch} sequence {k} step {t}: logits differ");
            }
        }
    }
}

/// A prompt prefilled in chunks (positions sharing weight reads) leaves
/// the cache as one-token steps do: the next step's logits are bit-for-bit
/// those after stepping the prompt one token at a time, for prompt lengths
/// below, at and past one chunk, on every architecture.
#[test]
fn chunked_prefill_equals_one_token_steps() {
    use kestrel_gpu::model::MAX_SEQS;
    for arch in ["llama", "qwen2", "qwen3", "gemma3"] {
        let bytes = common::tiny_model(arch, GgmlType::Q8_0, 31);
        let file = Arc::new(GgufFile::from_bytes(bytes).expect("tiny model"));
        let spec = ModelSpec::from_gguf(&file).expect("spec");
        let nv = spec.hparams.n_vocab;
        let model = GpuModel::load(Gpu::new().expect("gpu"), file, spec, 48).expect("gpu load");
        let greedy = SamplerParams {
            temperature: 0.0,
            ..SamplerParams::default()
        };
        for len in [3, MAX_SEQS + 1, 2 * MAX_SEQS + 3] {
            let prompt = common::prompt(len, nv, 60 + len as u64);
            let after = |chunked: bool| {
                let seq = model.new_seq();
                model.write_tokens(&seq, 0, &prompt).unwrap();
                if chunked {
                    model.prefill(&seq, 0, len - 1).unwrap();
                } else {
                    for pos in 0..len - 1 {
                        model.step(&seq, pos, None).unwrap();
                    }
                }
                model.step(&seq, len - 1, Some(&greedy)).unwrap();
                model.read_logits().unwrap()
            };
            let (a, b) = (after(false), after(true));
            let same = a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits());
            assert!(same, "{arch} prompt of {len}: logits after prefill differ");
        }
    }
}

/// On an adapter whose largest binding is smaller than the weights (16 KiB
/// here), matrices go up in parts and a step's logits keep every bit.
#[test]
fn weights_split_over_small_bindings_give_the_same_logits() {
    for arch in ["llama", "gemma3"] {
        let bytes = common::tiny_model(arch, GgmlType::Q8_0, 17);
        let file = Arc::new(GgufFile::from_bytes(bytes).expect("tiny model"));
        let spec = ModelSpec::from_gguf(&file).expect("spec");
        let nv = spec.hparams.n_vocab;
        let prompt = common::prompt(6, nv, 23);
        let greedy = SamplerParams {
            temperature: 0.0,
            ..SamplerParams::default()
        };
        let logits = |limit: Option<u64>| {
            let mut gpu = Gpu::new().expect("gpu");
            if let Some(l) = limit {
                gpu.max_binding = l;
            }
            let model = GpuModel::load(gpu, file.clone(), spec.clone(), 16).expect("gpu load");
            let seq = model.new_seq();
            model.write_tokens(&seq, 0, &prompt).unwrap();
            let mut all = Vec::new();
            for pos in 0..prompt.len() {
                model.step(&seq, pos, Some(&greedy)).unwrap();
                all.extend(model.read_logits().unwrap().iter().map(|v| v.to_bits()));
            }
            all
        };
        assert!(
            logits(None) == logits(Some(16 << 10)),
            "{arch}: split weights change the logits"
        );
    }
}
