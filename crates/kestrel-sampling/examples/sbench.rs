//! Time of one draw with llama.cpp's default chain on a vocabulary-sized
//! row shaped like a model's (a few strong logits over a broad mass):
//! `cargo run --release -p kestrel-sampling --example sbench [VOCAB]`.
use kestrel_sampling::{Sampler, SamplerParams};
use std::time::Instant;

fn main() {
    let vocab: usize = std::env::args()
        .nth(1)
        .map_or(49152, |v| v.parse().expect("vocabulary size"));
    let mut s = 1u32;
    let mut rnd = move || {
        s ^= s << 13;
        s ^= s >> 17;
        s ^= s << 5;
        s as f32 / u32::MAX as f32
    };
    let rows: Vec<Vec<f32>> = (0..16)
        .map(|_| {
            (0..vocab)
                .map(|_| {
                    let u = rnd();
                    // Mostly -4..4, one in a thousand up to 14.
                    if u > 0.999 {
                        14.0 * rnd()
                    } else {
                        8.0 * rnd() - 4.0
                    }
                })
                .collect()
        })
        .collect();
    let history: Vec<u32> = (0..100).map(|i| i * 37 % vocab as u32).collect();
    for (name, params) in [
        (
            "default chain",
            SamplerParams {
                seed: 7,
                ..SamplerParams::default()
            },
        ),
        (
            // A ban (as `ignore_eos` sets): the row is copied and adjusted.
            "default chain, one token banned",
            SamplerParams {
                seed: 7,
                logit_bias: vec![(2, f32::NEG_INFINITY)],
                ..SamplerParams::default()
            },
        ),
        ("greedy", SamplerParams::greedy()),
    ] {
        let mut sampler = Sampler::new(params);
        let reps = 2000;
        let t0 = Instant::now();
        let mut sum = 0u64;
        for i in 0..reps {
            sum += u64::from(sampler.sample_with_history(&rows[i % rows.len()], &history));
        }
        let us = t0.elapsed().as_secs_f64() * 1e6 / reps as f64;
        println!("{name}: {us:.1} us per draw (checksum {sum})");
    }
}
