//! Causal attention over the f16 KV cache, with optional sliding window and
//! grouped-query heads. It follows the two paths of ggml's CPU flash
//! attention because their rounding differs: batches under 64 queries
//! (decode, short prompts) go one query and one key at a time, with Q
//! rounded to f16 and V accumulated in f16 (`one_query`); larger batches go
//! in 64x64 tiles in f32 (`tiled`).
//!
//! One query over a cache view of 512+ cells (llama.cpp's view is the cells
//! up to the query's rounded up to 256, so from position 256 on) takes ggml's
//! split-KV path: the view is cut into one chunk of keys per thread, each
//! chunk's partial (maximum, sum, f16-accumulated value sums) is computed as
//! above, and the partials are merged in chunk order (see [`SplitKv`]).
//!
//! This module owns the shapes and the dispatch (which path, which tasks on
//! which workers); `keys` says which cache rows a query visits; each path
//! lives in its own module, with its instruction-set builds beside it.

mod keys;
mod one_query;
mod split_kv;
#[cfg(test)]
mod tests;
mod tiled;

use keys::{causal_keys, cell_runs, rows_of, Runs};
use one_query::{heads_dispatch, Query, MAX_RUN};
use split_kv::Partials;
pub use split_kv::SplitKv;
use tiled::attend_tiled;

use rayon::prelude::*;
use rayon::ThreadPool;

/// ggml switches to its tiled f32 kernel at this many query rows.
pub const TILED_MIN_QUERIES: usize = 64;

/// Below about this many multiply-adds a call runs on the calling thread.
const PARALLEL_MIN_WORK: usize = 1 << 17;

pub struct AttnShape {
    pub n_head: usize,
    pub n_head_kv: usize,
    pub head_dim_k: usize,
    pub head_dim_v: usize,
    /// Multiplies q·k before the softmax.
    pub scale: f32,
    /// Sliding window in tokens (a query at p sees keys p-window+1..=p); 0 = none.
    pub window: usize,
}

/// Where a cache slice holds row j of KV head h: keys at `j * k_row + h *
/// k_head`, values at `j * v_row + h * v_head`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvLayout {
    pub k_row: usize,
    pub k_head: usize,
    pub v_row: usize,
    pub v_head: usize,
}

impl KvLayout {
    /// A position's heads side by side, as llama.cpp's cache rows hold them.
    pub fn position_major(s: &AttnShape) -> KvLayout {
        KvLayout {
            k_row: s.n_head_kv * s.head_dim_k,
            k_head: s.head_dim_k,
            v_row: s.n_head_kv * s.head_dim_v,
            v_head: s.head_dim_v,
        }
    }

    /// Each KV head's `rows` rows together: a task reads one head's keys
    /// and values as two unbroken streams.
    pub fn head_major(s: &AttnShape, rows: usize) -> KvLayout {
        KvLayout {
            k_row: s.head_dim_k,
            k_head: rows * s.head_dim_k,
            v_row: s.head_dim_v,
            v_head: rows * s.head_dim_v,
        }
    }
}

/// q: n_tok rows of n_head*head_dim_k at positions pos0..; k/v cache rows hold
/// n_head_kv heads per position. Returns n_tok rows of n_head*head_dim_v.
/// Query rows (or, for one token, heads) are spread over the pool's workers.
pub fn attend(
    s: &AttnShape,
    q: &[f32],
    kc: &[u16],
    vc: &[u16],
    pos0: usize,
    n_tok: usize,
    pool: &ThreadPool,
) -> Vec<f32> {
    let dv = s.head_dim_v;
    let lay = KvLayout::position_major(s);
    if n_tok >= TILED_MIN_QUERIES {
        return attend_tiled(s, q, kc, vc, lay, pos0, n_tok, 0, pool);
    }
    let mut out = vec![0f32; n_tok * s.n_head * dv];
    let work = n_tok * s.n_head * (pos0 + n_tok) * (s.head_dim_k + dv);
    let one = |i: usize, dst: &mut [f32]| {
        // Chunk i is query row i, or head i of the single query row.
        let row = |t: usize| Query {
            s,
            q,
            kc,
            vc,
            lay,
            t,
            keys: Runs::one(causal_keys(s, pos0 + t)),
        };
        if n_tok == 1 {
            heads_dispatch(&row(0), i, dst, None);
        } else {
            for (h, d) in dst.chunks_exact_mut(dv).enumerate() {
                heads_dispatch(&row(i), h, d, None);
            }
        }
    };
    let chunk = if n_tok == 1 { dv } else { s.n_head * dv };
    if work < PARALLEL_MIN_WORK || pool.current_num_threads() == 1 {
        out.chunks_mut(chunk)
            .enumerate()
            .for_each(|(i, d)| one(i, d));
    } else {
        pool.install(|| {
            out.par_chunks_mut(chunk)
                .enumerate()
                .for_each(|(i, d)| one(i, d))
        });
    }
    out
}

/// One sequence's part of [`attend_batch`]: its query rows (as for
/// [`attend`]) and its own cache.
pub struct AttnItem<'a> {
    pub q: &'a [f32],
    pub kc: &'a [u16],
    pub vc: &'a [u16],
    /// Where `kc` and `vc` hold each row of each KV head.
    pub lay: KvLayout,
    pub pos0: usize,
    pub n_tok: usize,
    /// The cells llama.cpp's cache would have for this sequence (its
    /// context rounded up to 256), which with the thread count decides
    /// ggml's split-KV chunks for one query; 0 never splits. For a layer
    /// whose cache is a ring (see `ring`), the ring's cells.
    pub kv_cells: usize,
    /// The cells of llama.cpp's sliding-window cache where it keeps one
    /// smaller than the context (`swa_full` off: the window plus a batch,
    /// rounded up to 256), reusing them in turn: position p sits in cell
    /// p mod `ring`, and the attention visits cells in order, so once the
    /// positions pass `ring` the newest keys come first. `kc` and `vc` then
    /// hold the ring's rows, row = cell. 0: row = cell = position.
    pub ring: usize,
}

/// [`attend`] for several sequences at once, with the same results for each.
/// Short query batches (decode) go out as one parallel loop over every
/// (sequence, query row, head): one hand-off to the workers per layer
/// instead of one per sequence, which for a few decoding sequences cost
/// more than their attention did. Batches of 64+ queries take the tiled path
/// one sequence at a time (each already splits well).
pub fn attend_batch(s: &AttnShape, items: &[AttnItem<'_>], pool: &ThreadPool) -> Vec<Vec<f32>> {
    let dv = s.head_dim_v;
    let mut outs: Vec<Vec<f32>> = items
        .iter()
        .map(|it| {
            if it.n_tok >= TILED_MIN_QUERIES {
                attend_tiled(
                    s, it.q, it.kc, it.vc, it.lay, it.pos0, it.n_tok, it.ring, pool,
                )
            } else {
                vec![0f32; it.n_tok * s.n_head * dv]
            }
        })
        .collect();
    // Heads that share a KV head go together, in the longest run that
    // still gives every worker a task: each key converted once for the
    // run, and the heads' running maxima, sums and value sums interleaved
    // (see [`run_x86`]). One head per task while a worker kept four tasks
    // was slower: batchbench, one sequence at context 136-200, attention
    // per step, one head / longest run: SmolLM2 (3 heads a KV head) 0.42-
    // 0.46 / 0.32 ms, Qwen2.5 (7) 0.45-0.61 / 0.34; Gemma-3 (4 heads, one
    // KV head, so runs of two for two workers) 0.23-0.28 / 0.18-0.20.
    let n_rep = s.n_head / s.n_head_kv;
    let rows: usize = items
        .iter()
        .filter(|it| it.n_tok < TILED_MIN_QUERIES)
        .map(|it| it.n_tok)
        .sum();
    let threads = pool.current_num_threads();
    let run = (1..=n_rep.min(MAX_RUN))
        .rev()
        .find(|&r| rows * s.n_head_kv * n_rep.div_ceil(r) >= threads)
        .unwrap_or(1);
    // Items on ggml's split-KV path: per chunk, each head's (maximum, sum)
    // and unscaled value sums, merged once every chunk is done.
    let splits: Vec<Option<SplitKv>> = items
        .iter()
        .map(|it| {
            (it.n_tok == 1)
                .then(|| SplitKv::for_query(it.pos0, it.kv_cells, threads))
                .flatten()
        })
        .collect();
    // With chunks enough to keep every worker busy, a chunk goes as one task
    // for all heads (as a thread takes it in ggml). abench, two threads, 700
    // keys, three alternated runs: four sequences, a task per run of heads
    // 191-209 us a call, per chunk 178-188, unsplit 166-183; two sequences
    // (four chunks) were no faster per chunk, so they keep the finer tasks.
    let split_chunks: usize = splits.iter().flatten().map(|sp| sp.chunks).sum();
    let whole_chunks = split_chunks >= 4 * threads;
    let mut partials: Vec<Partials> = splits
        .iter()
        .map(|sp| Partials::new(sp.map_or(0, |sp| sp.chunks), s.n_head, dv))
        .collect();
    let mut tasks: Vec<Task<'_, '_>> = Vec::new();
    let mut work = 0;
    for (((it, out), sp), part) in items
        .iter()
        .zip(outs.iter_mut())
        .zip(&splits)
        .zip(partials.iter_mut())
    {
        if it.n_tok >= TILED_MIN_QUERIES {
            continue;
        }
        work += it.n_tok * s.n_head * (it.pos0 + it.n_tok) * (s.head_dim_k + dv);
        if let Some(sp) = sp {
            let keys = causal_keys(s, it.pos0);
            for (c, (st, su)) in part
                .stats
                .chunks_exact_mut(s.n_head)
                .zip(part.sums.chunks_exact_mut(s.n_head * dv))
                .enumerate()
            {
                let ck = rows_of(sp.keys(c, &keys, it.ring), it.ring);
                if ck.is_empty() {
                    continue;
                }
                if whole_chunks {
                    tasks.push(Task {
                        it,
                        t: 0,
                        keys: ck,
                        h0: 0,
                        dst: su,
                        stats: Some(st),
                    });
                    continue;
                }
                for (g, (gs, gu)) in st
                    .chunks_exact_mut(n_rep)
                    .zip(su.chunks_exact_mut(n_rep * dv))
                    .enumerate()
                {
                    for (i, (rs, ru)) in gs.chunks_mut(run).zip(gu.chunks_mut(run * dv)).enumerate()
                    {
                        tasks.push(Task {
                            it,
                            t: 0,
                            keys: ck.clone(),
                            h0: g * n_rep + i * run,
                            dst: ru,
                            stats: Some(rs),
                        });
                    }
                }
            }
            continue;
        }
        for (g, group) in out.chunks_exact_mut(n_rep * dv).enumerate() {
            let (t, h) = (g / s.n_head_kv, (g % s.n_head_kv) * n_rep);
            for (i, d) in group.chunks_mut(run * dv).enumerate() {
                tasks.push(Task {
                    it,
                    t,
                    keys: if it.ring > 0 {
                        let cells = cell_runs(&causal_keys(s, it.pos0 + t), 0..it.ring, it.ring);
                        rows_of(cells, it.ring)
                    } else {
                        Runs::one(causal_keys(s, it.pos0 + t))
                    },
                    h0: h + i * run,
                    dst: d,
                    stats: None,
                });
            }
        }
    }
    let one = |task: Task<'_, '_>| {
        let it = task.it;
        let x = Query {
            s,
            q: it.q,
            kc: it.kc,
            vc: it.vc,
            lay: it.lay,
            t: task.t,
            keys: task.keys,
        };
        // Runs of at most `run` heads, none across a KV head's group.
        let (mut h, mut dst, mut stats) = (task.h0, task.dst, task.stats);
        while !dst.is_empty() {
            let n = run.min((h / n_rep + 1) * n_rep - h).min(dst.len() / dv);
            let (d, rest) = dst.split_at_mut(n * dv);
            let (st, st_rest) = match stats {
                Some(st) => {
                    let (a, b) = st.split_at_mut(n);
                    (Some(a), Some(b))
                }
                None => (None, None),
            };
            heads_dispatch(&x, h, d, st);
            (h, dst, stats) = (h + n, rest, st_rest);
        }
    };
    if work < PARALLEL_MIN_WORK || threads == 1 {
        tasks.into_iter().for_each(one);
    } else {
        // One job per task, the caller taking them as well: a task is a few
        // microseconds, and the caller waits for the last one spinning (see
        // `fork`), where rayon's join yielded the thread.
        crate::fork::scope(pool, |s| {
            for task in tasks {
                s.spawn(move || one(task));
            }
        });
    }
    for ((out, sp), part) in outs.iter_mut().zip(&splits).zip(&partials) {
        if sp.is_some() {
            part.merge_into(out);
        }
    }
    outs
}

/// One task of [`attend_batch`]: query row `t` of an item, heads `h0..`
/// (as many as `dst` holds rows, in runs that share a KV head), over
/// `keys`; with `stats`, a split-KV chunk's partial.
struct Task<'a, 'b> {
    it: &'b AttnItem<'a>,
    t: usize,
    keys: Runs,
    h0: usize,
    dst: &'b mut [f32],
    stats: Option<&'b mut [(f32, f32)]>,
}
