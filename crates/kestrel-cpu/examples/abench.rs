//! Decode attention alone: `attend_batch` for K sequences of one query
//! token each at context CTX (SmolLM2's heads: 9 query, 3 KV, 64 wide),
//! over LAYERS separate caches taken in turn (1: cache-resident; 30: a
//! step's worth, from memory), on THREADS threads (2), each cache stored
//! head-major as the model stores it (POSITION_MAJOR=1: a position's heads
//! side by side instead; abench, CTX=150 K=4 LAYERS=30 FLUSH=2700, three
//! alternated runs: 51-60 us a call position-major, 40-41 head-major).
//! usage: CTX=126 K=4 LAYERS=30 THREADS=2 REPS=3000 cargo run --release -p kestrel-cpu --example abench
use kestrel_cpu::attention::{attend_batch, AttnItem, AttnShape, KvLayout};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

fn main() {
    let env = |k: &str, d: usize| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let (ctx_len, k, layers) = (
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
    let mut cache = || -> Vec<u16> { (0..ctx_len * nkv * d).map(|_| rnd()).collect() };
    let caches: Vec<Vec<(Vec<u16>, Vec<u16>)>> = (0..layers)
        .map(|_| (0..k).map(|_| (cache(), cache())).collect())
        .collect();
    let q: Vec<f32> = (0..nh * d).map(|i| (i % 7) as f32 * 0.1).collect();
    let reps = (env("REPS", 3000) / layers).max(1) * layers;
    // FLUSH: KiB of another buffer read before each call, as a step's
    // weight products evict the cache between its layers' attention.
    let flush = env("FLUSH", 0) * 128;
    let big: Vec<u64> = (0..(256usize << 17).max(2 * flush) as u64).collect();
    // As in a forward pass: the calls come from a worker of the pool while
    // the others spin, taking the parallel work as it appears (calls from
    // outside the pool waited on each hand-off for a worker to wake).
    let done = AtomicBool::new(false);
    let spent_out = std::sync::Mutex::new(std::time::Duration::ZERO);
    pool.broadcast(|ctx| {
        if ctx.index() != 0 {
            while !done.load(Ordering::Acquire) {
                if rayon::yield_now() != Some(rayon::Yield::Executed) {
                    std::hint::spin_loop();
                }
            }
            return;
        }
        let mut sink = 0u64;
        let mut spent = std::time::Duration::ZERO;
        for r in 0..reps {
            if flush > 0 {
                let at = (r * flush) % (big.len() - flush);
                sink = big[at..at + flush]
                    .iter()
                    .fold(sink, |a, &b| a.wrapping_add(b));
            }
            let items: Vec<AttnItem<'_>> = caches[r % layers]
                .iter()
                .map(|(kc, vc)| AttnItem {
                    q: &q,
                    kc,
                    vc,
                    lay: if env("POSITION_MAJOR", 0) == 1 {
                        KvLayout::position_major(&s)
                    } else {
                        KvLayout::head_major(&s, ctx_len)
                    },
                    pos0: ctx_len - 1,
                    n_tok: 1,
                    kv_cells: env("CELLS", 0),
                    ring: 0,
                })
                .collect();
            let t = Instant::now();
            std::hint::black_box(attend_batch(&s, &items, &pool));
            spent += t.elapsed();
        }
        std::hint::black_box(sink);
        done.store(true, Ordering::Release);
        *spent_out.lock().unwrap() = spent;
    });
    let us = spent_out.into_inner().unwrap().as_secs_f64() * 1e6 / reps as f64;
    println!(
        "K={k} CTX={ctx_len} LAYERS={layers}: {us:.1} us per call, {:.2} ns per head and key",
        us * 1e3 / (k * nh * ctx_len) as f64
    );
}
