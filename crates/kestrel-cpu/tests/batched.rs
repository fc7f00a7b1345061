//! `forward_batch_map` gives every sequence the same bits as running it alone:
//! several sequences at different stages (a long prompt on the tiled
//! attention path, a short prompt, one-token decodes) share each step's
//! weight products, on every architecture and weight type of the tiny
//! models. This is what lets the server batch requests without changing
//! any request's output.

mod common;

use std::sync::Arc;

use common::*;
use kestrel_cpu::{CpuModel, KvCache, Logits, SeqInput};
use kestrel_gguf::GgufFile;
use kestrel_model::ModelSpec;

/// One sequence's schedule: the tokens fed at each step (empty = idle that
/// step) and which logits it wants then.
struct Plan {
    steps: Vec<(Vec<u32>, Logits)>,
}

fn plans(nv: usize, seed: u64) -> Vec<Plan> {
    let p = |n, s| prompt(n, nv, seed * 31 + s);
    vec![
        // A long prompt (64+ queries: tiled attention), then decodes.
        Plan {
            steps: vec![
                (p(70, 1), Logits::All),
                (p(1, 2), Logits::Last),
                (p(1, 3), Logits::Last),
            ],
        },
        // A short prompt, then decodes.
        Plan {
            steps: vec![
                (p(5, 4), Logits::Last),
                (p(1, 5), Logits::Last),
                (p(1, 6), Logits::All),
            ],
        },
        // Joins late: idle, then a prompt chunk, then a decode.
        Plan {
            steps: vec![
                (Vec::new(), Logits::Last),
                (p(3, 7), Logits::All),
                (p(1, 8), Logits::Last),
            ],
        },
    ]
}

fn alone(model: &CpuModel, plan: &Plan) -> Vec<Vec<f32>> {
    let mut cache = model.new_cache(96);
    let mut pos = 0;
    let mut out = Vec::new();
    for (tokens, which) in &plan.steps {
        if tokens.is_empty() {
            out.push(Vec::new());
            continue;
        }
        out.push(model.forward(tokens, pos, &mut cache, *which));
        pos += tokens.len();
    }
    out
}

#[test]
// `step` indexes every plan's schedule and every expected result alike.
#[allow(clippy::needless_range_loop)]
fn batched_sequences_get_the_bits_they_get_alone() {
    let mut failures = Vec::new();
    for (ia, arch) in ARCHES.iter().enumerate() {
        for (it, &ty) in WEIGHT_TYPES.iter().enumerate() {
            let seed = 500 + (ia * 20 + it) as u64;
            let bytes = tiny_model(arch, ty, seed);
            let file = Arc::new(GgufFile::from_bytes(bytes).expect("tiny model parses"));
            let spec = ModelSpec::from_gguf(&file).expect("spec");
            let nv = spec.hparams.n_vocab;
            let model = CpuModel::load(file, spec, 1 + it % 2).expect("load");
            let plans = plans(nv, seed);
            let want: Vec<_> = plans.iter().map(|p| alone(&model, p)).collect();

            let mut caches: Vec<KvCache> = plans.iter().map(|_| model.new_cache(96)).collect();
            let mut pos = vec![0usize; plans.len()];
            for step in 0..3 {
                let mut inputs = Vec::new();
                let mut who = Vec::new();
                for ((i, plan), cache) in plans.iter().enumerate().zip(caches.iter_mut()) {
                    let (tokens, which) = &plan.steps[step];
                    if tokens.is_empty() {
                        continue;
                    }
                    inputs.push(SeqInput {
                        tokens,
                        pos0: pos[i],
                        cache,
                        logits: *which,
                    });
                    who.push(i);
                    pos[i] += tokens.len();
                }
                // As the server calls it: each step's logits land in the
                // buffer the last step left (longer, with its values still
                // in it), which must not show through.
                let got = model.forward_batch_map(&mut inputs, |_, l| l.to_vec());
                assert_eq!(got.len(), who.len(), "{arch}/{ty}: one result per sequence");
                for (g, &i) in got.iter().zip(&who) {
                    let w = &want[i][step];
                    if g.len() != w.len() {
                        failures.push(format!(
                            "{arch}/{ty} seq {i} step {step}: {} logits, alone {}",
                            g.len(),
                            w.len()
                        ));
                    } else if let Some(j) = (0..g.len()).find(|&j| g[j].to_bits() != w[j].to_bits())
                    {
                        failures.push(format!(
                            "{arch}/{ty} seq {i} step {step}: logit {j} is {} batched, {} alone",
                            g[j], w[j]
                        ));
                    }
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
