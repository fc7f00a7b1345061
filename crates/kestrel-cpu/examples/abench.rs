//! Decode attention alone: `attend_batch` for K sequences of one query
//! token each at context CTX (SmolLM2's heads: 9 query, 3 KV, 64 wide),
//! over LAYERS separate caches taken in turn (1: cache-resident; 30: a
//! step's worth, from memory), on THREADS threads (2).
//! usage: CTX=126 K=4 LAYERS=30 THREADS=2 cargo run --release -p kestrel-cpu --example abench
use kestrel_cpu::attention::{attend_batch, AttnItem, AttnShape};
use std::time::Instant;

fn main() {
    let env = |k: &str, d: usize| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let (ctx, k, layers) = (
        env("CTX", 126).max(1),
        env("K", 4).max(1),
        env("LAYERS", 1).max(1),
    );
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(env("THREADS", 2))
        .build()
        .expect("thread pool");
    let (nh, nkv, d) = (9usize, 3usize, 64usize);
    let s = AttnShape {
        n_head: nh,
        n_head_kv: nkv,
        head_dim_k: d,
        head_dim_v: d,
        scale: 0.125,
        window: 0,
    };
    let mut st = 1u32;
    let mut rnd = || {
        st ^= st << 13;
        st ^= st >> 17;
        st ^= st << 5;
        kestrel_quant::f32_to_f16((st as f32 / u32::MAX as f32) - 0.5)
    };
    let mut cache = || -> Vec<u16> { (0..ctx * nkv * d).map(|_| rnd()).collect() };
    let caches: Vec<Vec<(Vec<u16>, Vec<u16>)>> = (0..layers)
        .map(|_| (0..k).map(|_| (cache(), cache())).collect())
        .collect();
    let q: Vec<f32> = (0..nh * d).map(|i| (i % 7) as f32 * 0.1).collect();
    let reps = (3000 / layers).max(1) * layers;
    let t0 = Instant::now();
    for r in 0..reps {
        let items: Vec<AttnItem<'_>> = caches[r % layers]
            .iter()
            .map(|(kc, vc)| AttnItem {
                q: &q,
                kc,
                vc,
                pos0: ctx - 1,
                n_tok: 1,
            })
            .collect();
        std::hint::black_box(attend_batch(&s, &items, &pool));
    }
    let us = t0.elapsed().as_secs_f64() * 1e6 / reps as f64;
    println!(
        "K={k} CTX={ctx} LAYERS={layers}: {us:.1} us per call, {:.2} ns per head and key",
        us * 1e3 / (k * nh * ctx) as f64
    );
}
