//! Times batched decode steps: `k` sequences, one token each, per
//! `forward_batch` call, for k = 1..=8, with a per-kernel-class breakdown.
//! usage: cargo run --release -p kestrel-cpu --example batchbench -- MODEL [THREADS]
//! (K=k: that k alone; STEPS: steps timed, 40; PAIR=a,b: instead, a set of
//! a sequences and a set of b taking turns step by step, and the ratio of
//! their aggregate rates: a VM's memory speed drifts within minutes, and
//! only steps interleaved in the same minutes compare one batch size with
//! another, as `scripts/bench-serve.py`'s levels do with its streams)

use std::sync::Arc;
use std::time::Instant;

use kestrel_cpu::{CpuModel, Logits, SeqInput};
use kestrel_gguf::{Backing, GgufFile};
use kestrel_model::ModelSpec;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let path = args.get(1).expect("usage: batchbench MODEL [THREADS]");
    let threads = args.get(2).map_or(2, |t| t.parse().expect("threads"));
    let file = Arc::new(
        GgufFile::open_backed(std::path::Path::new(path), Backing::preferred()).expect("open"),
    );
    let spec = ModelSpec::from_gguf(&file).expect("spec");
    let model = CpuModel::load(file, spec, threads).expect("load");
    let prompt: Vec<u32> = (0..32).map(|i| 100 + i * 7).collect();
    let steps = std::env::var("STEPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(40);
    if let Ok(pair) = std::env::var("PAIR") {
        let ks: Vec<usize> = pair
            .split(',')
            .map(|k| k.parse().expect("PAIR=a,b"))
            .collect();
        assert!(ks.len() == 2 && !ks.contains(&0), "PAIR=a,b");
        let mut sets: Vec<Vec<_>> = ks
            .iter()
            .map(|&k| (0..k).map(|_| model.new_cache(512)).collect())
            .collect();
        for c in sets.iter_mut().flatten() {
            model.forward(&prompt, 0, c, Logits::Last);
        }
        let mut ms = [0f64; 2];
        // Four untimed steps first, as below.
        for s in 0..steps + 4 {
            for (set, m) in sets.iter_mut().zip(ms.iter_mut()) {
                let t0 = Instant::now();
                step(&model, set, s, 32 + s);
                if s >= 4 {
                    *m += t0.elapsed().as_secs_f64() * 1000.0 / steps as f64;
                }
            }
        }
        println!(
            "k={}: {:.2} ms/step, k={}: {:.2} ms/step; aggregate {:.2}x",
            ks[0],
            ms[0],
            ks[1],
            ms[1],
            (ks[1] as f64 / ms[1]) / (ks[0] as f64 / ms[0])
        );
        return;
    }
    let only: Option<usize> = std::env::var("K").ok().and_then(|k| k.parse().ok());
    for k in 1..=8usize {
        if only.is_some_and(|o| o != k) {
            continue;
        }
        let mut caches: Vec<_> = (0..k).map(|_| model.new_cache(512)).collect();
        for c in caches.iter_mut() {
            model.forward(&prompt, 0, c, Logits::Last);
        }
        let mut run = |n: usize, pos0: usize| {
            for s in 0..n {
                step(&model, &mut caches, s, pos0 + s);
            }
        };
        run(4, 32);
        let t0 = Instant::now();
        run(steps, 36);
        let ms = t0.elapsed().as_secs_f64() * 1000.0 / steps as f64;
        // The same steps again, profiled: what the op classes leave out of
        // the wall time is the pass's own overhead (allocation, copies,
        // waking the pool).
        model.set_profiling(true);
        let t0 = Instant::now();
        run(steps, 36 + steps);
        let wall = t0.elapsed().as_secs_f64() * 1000.0 / steps as f64;
        model.set_profiling(false);
        let prof = model.take_profile();
        let per = |d: std::time::Duration| d.as_secs_f64() * 1000.0 / steps as f64;
        println!(
            "k={k}: {ms:.2} ms/step, {:.1} tokens/s aggregate; profiled run {wall:.2} ms/step, {:.2} in ops",
            k as f64 * 1000.0 / ms,
            per(prof.total())
        );
        let mut e = prof.entries.clone();
        e.sort_by_key(|x| std::cmp::Reverse(x.time));
        for x in e.iter() {
            print!("  {} {:.2}ms", x.class, per(x.time));
        }
        println!();
    }
}

/// One decode step of every sequence in `caches`: step `s`'s token for
/// each, at position `pos`.
fn step(model: &CpuModel, caches: &mut [kestrel_cpu::KvCache], s: usize, pos: usize) {
    let toks: Vec<[u32; 1]> = (0..caches.len()).map(|i| [(200 + i + s) as u32]).collect();
    let mut inputs: Vec<SeqInput<'_>> = caches
        .iter_mut()
        .zip(&toks)
        .map(|(c, t)| SeqInput {
            tokens: t,
            pos0: pos,
            cache: c,
            logits: Logits::Last,
        })
        .collect();
    model.forward_batch_map(&mut inputs, |_, l| l[0]);
}
