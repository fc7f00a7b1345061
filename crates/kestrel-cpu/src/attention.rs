//! Causal attention over the f16 KV cache, with optional sliding window and
//! grouped-query heads. It follows the two paths of ggml's CPU flash
//! attention because their rounding differs: batches under 64 queries
//! (decode, short prompts) go one query and one key at a time, with Q
//! rounded to f16 and V accumulated in f16; larger batches go in 64x64 tiles
//! in f32 (see [`attend_tiled`]).
//!
//! One query over a cache view of 512+ cells (llama.cpp's view is the cells
//! up to the query's rounded up to 256, so from position 256 on) takes ggml's
//! split-KV path: the view is cut into one chunk of keys per thread, each
//! chunk's partial (maximum, sum, f16-accumulated value sums) is computed as
//! above, and the partials are merged in chunk order (see [`SplitKv`]).

use crate::ops::exp_minus8;
use kestrel_quant::{f16_dot, f16_mad, f16_scale, f16_to_f32_row, f32_to_f16_row};
use std::ops::Range;

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

/// The keys one attention task visits, in order: at most two runs of cache
/// rows (in a ring, the newest lap, then the one before it).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Runs([Range<usize>; 2]);

impl Runs {
    fn one(r: Range<usize>) -> Runs {
        Runs([r, 0..0])
    }

    fn len(&self) -> usize {
        self.0[0].len() + self.0[1].len()
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The rows in visiting order.
    fn iter(&self) -> impl Iterator<Item = usize> {
        self.0[0].clone().chain(self.0[1].clone())
    }

    /// Each nonempty run with the number of keys before it.
    fn runs(&self) -> impl Iterator<Item = (usize, Range<usize>)> + '_ {
        let first = self.0[0].len();
        [(0, self.0[0].clone()), (first, self.0[1].clone())]
            .into_iter()
            .filter(|(_, r)| !r.is_empty())
    }
}

/// The keys among `keys` (a query's causal range, ending just past its
/// position) that sit in view cells `cells`, in cell order: with no ring the
/// cells are the positions; in a ring of `ring` cells, position q sits in
/// cell q mod `ring` (llama.cpp fills the cells in order from 0 and, once
/// full, reuses the cell of the position a window and a batch back), so
/// the query's own lap (cells 0 to its own) comes before the older lap's
/// cells after it. A window never spans more than the ring's cells.
fn cell_runs(keys: &Range<usize>, cells: Range<usize>, ring: usize) -> Runs {
    // An empty run is 0..0, whatever cut it.
    let clip = |a: usize, b: usize, r: &Range<usize>| {
        let (a, b) = (a.max(r.start), b.min(r.end));
        if a < b {
            a..b
        } else {
            0..0
        }
    };
    if ring == 0 || keys.is_empty() {
        return Runs::one(clip(cells.start, cells.end, keys));
    }
    let (a, b) = (cells.start.min(ring), cells.end.min(ring));
    // The first position of the newest key's lap.
    let lap = (keys.end - 1) / ring * ring;
    let newest = clip(lap + a, lap + b, &(keys.start.max(lap)..keys.end));
    let older = match lap.checked_sub(ring) {
        Some(prev) => clip(prev + a, prev + b, &(keys.start..lap.max(keys.start))),
        None => 0..0,
    };
    Runs([newest, older])
}

/// `keys` (positions) as cache rows: in a ring, row = position mod its
/// size (each run lies within one lap).
fn rows_of(keys: Runs, ring: usize) -> Runs {
    if ring == 0 {
        return keys;
    }
    Runs(keys.0.map(|r| {
        let start = r.start % ring;
        start..start + r.len()
    }))
}

/// The keys a query at position `p` reads: all before it, or the window's.
fn causal_keys(s: &AttnShape, p: usize) -> Range<usize> {
    let lo = if s.window > 0 {
        (p + 1).saturating_sub(s.window)
    } else {
        0
    };
    lo..p + 1
}

/// ggml's split-KV decode (`flash_attn_ext_f16` with one query row and a
/// view of 512+ cells): the view is `n_kv` cells, llama.cpp's
/// `get_n_kv` (the cells up to the query's, rounded up to 256, at least
/// 256, at most the cache's), cut into one chunk of `chunk` cells per
/// thread; masked cells (past the query, outside the window) are skipped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SplitKv {
    pub n_kv: usize,
    pub chunk: usize,
    pub chunks: usize,
}

impl SplitKv {
    /// The split for one query at position `p` in a cache of `kv_cells`
    /// cells on `threads` threads, if ggml takes that path.
    pub fn for_query(p: usize, kv_cells: usize, threads: usize) -> Option<SplitKv> {
        let n_kv = kv_cells.min((p + 1).next_multiple_of(256).max(256));
        (n_kv >= 512).then(|| {
            let chunks = threads.max(1);
            SplitKv {
                n_kv,
                chunk: n_kv.div_ceil(chunks),
                chunks,
            }
        })
    }

    /// Chunk `c`'s keys among `keys` (maybe none), in cell order (see
    /// [`cell_runs`]).
    fn keys(&self, c: usize, keys: &Range<usize>, ring: usize) -> Runs {
        let cells = (c * self.chunk).min(self.n_kv)..((c + 1) * self.chunk).min(self.n_kv);
        cell_runs(keys, cells, ring)
    }
}

/// ggml's `flash_attn_ext_reduce_partials` for one head: the chunks'
/// (maximum, sum) and unscaled value sums merged in chunk order, each
/// step's products fused as ggml's compiler fuses them (the old term's),
/// then scaled by the sum's reciprocal.
fn merge_partials<'a>(chunks: impl Iterator<Item = ((f32, f32), &'a [f32])>, dst: &mut [f32]) {
    /// With FMA enabled, so the fused steps are instructions, not calls.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn fused<'a>(chunks: impl Iterator<Item = ((f32, f32), &'a [f32])>, dst: &mut [f32]) {
        merge_body(chunks, dst)
    }
    #[cfg(target_arch = "x86_64")]
    if kestrel_quant::avx2_in_use() {
        // SAFETY: the CPU has AVX2 and FMA (checked just above).
        return unsafe { fused(chunks, dst) };
    }
    merge_body(chunks, dst)
}

#[inline(always)]
fn merge_body<'a>(chunks: impl Iterator<Item = ((f32, f32), &'a [f32])>, dst: &mut [f32]) {
    dst.fill(0.0);
    let (mut m, mut total) = (f32::NEG_INFINITY, 0f32);
    for ((mc, sc), vkq) in chunks {
        if sc == 0.0 {
            continue;
        }
        let m_new = m.max(mc);
        let old = (m - m_new).exp();
        let new = (mc - m_new).exp();
        for (d, &v) in dst.iter_mut().zip(vkq.iter()) {
            *d = d.mul_add(old, v * new);
        }
        total = total.mul_add(old, sc * new);
        m = m_new;
    }
    if total != 0.0 {
        let inv = 1.0 / total;
        dst.iter_mut().for_each(|d| *d *= inv);
    }
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

/// One split sequence's partials, `[chunk][head]`: (maximum, sum) and the
/// unscaled value sums (head_dim_v each). A chunk with no keys keeps
/// (-inf, 0), which the merge skips as ggml's does.
struct Partials {
    chunks: usize,
    n_head: usize,
    dv: usize,
    stats: Vec<(f32, f32)>,
    sums: Vec<f32>,
}

impl Partials {
    fn new(chunks: usize, n_head: usize, dv: usize) -> Self {
        Partials {
            chunks,
            n_head,
            dv,
            stats: vec![(f32::NEG_INFINITY, 0f32); chunks * n_head],
            sums: vec![0f32; chunks * n_head * dv],
        }
    }

    /// Every head's merged result into `out` (n_head rows of head_dim_v).
    fn merge_into(&self, out: &mut [f32]) {
        let (n_head, dv) = (self.n_head, self.dv);
        for (h, dst) in out.chunks_exact_mut(dv).enumerate() {
            let chunk = |c: usize| {
                let at = c * n_head + h;
                (self.stats[at], &self.sums[at * dv..(at + 1) * dv])
            };
            merge_partials((0..self.chunks).map(chunk), dst);
        }
    }
}

/// What a run of heads reads: the shape, the query rows, the cache, which
/// query row, and the keys it attends to (all it may see, or a split-KV
/// chunk of them).
struct Query<'a> {
    s: &'a AttnShape,
    q: &'a [f32],
    kc: &'a [u16],
    vc: &'a [u16],
    lay: KvLayout,
    t: usize,
    keys: Runs,
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

/// Attention of query row `t` for heads `h0..h0 + n` (all reading the same
/// KV head) over `keys` into `dst` (n rows of head_dim_v): [`head`],
/// compiled with AVX2/FMA (or AVX-512) where the CPU has them. With
/// `stats`, each head's (running maximum, sum) goes there and `dst` gets
/// the value sums unscaled (a split-KV partial).
fn heads_dispatch(x: &Query<'_>, h0: usize, dst: &mut [f32], stats: Option<&mut [(f32, f32)]>) {
    #[cfg(target_arch = "x86_64")]
    if kestrel_quant::avx512_in_use() {
        // SAFETY: the CPU has AVX2, FMA, F16C and AVX-512 F/BW/VL (checked
        // just above).
        return unsafe { heads_avx512(x, h0, dst, stats) };
    }
    #[cfg(target_arch = "x86_64")]
    if kestrel_quant::avx2_in_use() {
        // SAFETY: the CPU has AVX2, FMA and F16C (checked just above).
        return unsafe { heads_avx2(x, h0, dst, stats) };
    }
    heads_portable(x, h0, dst, stats);
}

/// [`head`] for each of the heads of [`heads_dispatch`].
fn heads_portable(x: &Query<'_>, h0: usize, dst: &mut [f32], mut stats: Option<&mut [(f32, f32)]>) {
    for (i, d) in dst.chunks_exact_mut(x.s.head_dim_v).enumerate() {
        let st = head(x, h0 + i, d, stats.is_some());
        if let Some(stats) = stats.as_deref_mut() {
            stats[i] = st;
        }
    }
}

/// Most heads that [`heads_x86`] interleaves.
const MAX_RUN: usize = 4;

/// [`head`] with AVX2: the scores and the online-softmax factors first (a
/// sequence that depends on the scores alone), then the values 64
/// dimensions at a time, the f16 accumulator held in registers and rounded
/// through f16 at every step exactly where `f16_scale` and `f16_mad` store
/// it; eight independent chains per key instead of a call and a
/// load/convert/store round trip per key. Same values (tested).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn heads_avx2(x: &Query<'_>, h0: usize, dst: &mut [f32], stats: Option<&mut [(f32, f32)]>) {
    // SAFETY: AVX2, FMA and F16C are enabled here.
    unsafe { heads_x86::<false>(x, h0, dst, stats) }
}

/// [`heads_avx2`] with AVX-512: each step over 16 lanes instead of 8 (the
/// 32 registers hold four heads' accumulators); every lane's operations are
/// the same.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
unsafe fn heads_avx512(
    x: &Query<'_>,
    h0: usize,
    dst: &mut [f32],
    stats: Option<&mut [(f32, f32)]>,
) {
    // SAFETY: AVX2, FMA, F16C and AVX-512 F/BW/VL are enabled here.
    unsafe { heads_x86::<true>(x, h0, dst, stats) }
}

/// The body of [`heads_avx2`] (`WIDE` false) and [`heads_avx512`] (true),
/// up to [`MAX_RUN`] heads at a time; the caller has the matching features.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn heads_x86<const WIDE: bool>(
    x: &Query<'_>,
    h0: usize,
    dst: &mut [f32],
    stats: Option<&mut [(f32, f32)]>,
) {
    let dv = x.s.head_dim_v;
    let mut stats = stats;
    for (i, d) in dst.chunks_mut(MAX_RUN * dv).enumerate() {
        let h = h0 + i * MAX_RUN;
        let st = stats
            .as_deref_mut()
            .map(|st| &mut st[i * MAX_RUN..i * MAX_RUN + d.len() / dv]);
        // SAFETY (all four): the caller has the features WIDE asks for.
        match d.len() / dv {
            1 => unsafe { run_x86::<WIDE, 1>(x, h, d, st) },
            2 => unsafe { run_x86::<WIDE, 2>(x, h, d, st) },
            3 => unsafe { run_x86::<WIDE, 3>(x, h, d, st) },
            _ => unsafe { run_x86::<WIDE, MAX_RUN>(x, h, d, st) },
        }
    }
}

/// `H` heads from `h0` on, sharing one KV head: each key row and value row
/// is loaded once for all of them, and the heads' value sums are
/// independent chains that overlap (one head's chain, a multiply-add and two
/// f16 conversions per key, left the core waiting on their latency).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn run_x86<const WIDE: bool, const H: usize>(
    x: &Query<'_>,
    h0: usize,
    dst: &mut [f32],
    stats: Option<&mut [(f32, f32)]>,
) {
    let (s, q, kc, vc, t) = (x.s, x.q, x.kc, x.vc, x.t);
    let (dk, dv) = (s.head_dim_k, s.head_dim_v);
    if !dv.is_multiple_of(64) || x.keys.is_empty() {
        heads_portable(x, h0, dst, stats);
        return;
    }
    let q_w = s.n_head * dk;
    let (k_w, v_w) = (x.lay.k_row, x.lay.v_row);
    let kvh = h0 / (s.n_head / s.n_head_kv);
    // Where this KV head's row 0 starts.
    let (k0, v0) = (kvh * x.lay.k_head, kvh * x.lay.v_head);
    assert_eq!(
        (h0 + H - 1) / (s.n_head / s.n_head_kv),
        kvh,
        "heads of one KV head"
    );
    let nk = x.keys.len();
    // The loops below fetch KV_PREFETCH rows ahead; the first rows are
    // asked for here, before the query's conversion, so a short context
    // does not start on a miss.
    for j in x.keys.iter().take(KV_PREFETCH) {
        prefetch_row(kc, j * k_w + k0, dk);
    }
    let sc = RUN_SCRATCH.with_borrow_mut(std::mem::take);
    let mut q16 = reuse(sc.q16, H * dk, 0u16);
    let qrow = &q[t * q_w + h0 * dk..t * q_w + (h0 + H) * dk];
    f32_to_f16_row(qrow, &mut q16);
    // The dot products first, in a loop of loads and multiply-adds alone:
    // the cache rows usually come from memory (a step's weights have
    // evicted them), and the softmax's exp calls in the same loop held so
    // many instructions per key that few loads were in flight at once.
    let mut dots = reuse(sc.dots, H * nk, 0f32);
    // Run by run (a ring's two laps), key `base + i` of the visiting order
    // at `dots[h * nk + base + i]`.
    for (base, run) in x.keys.runs() {
        // With AVX-512, sixteen keys at a time: each key converted once for
        // all the heads, the query converted once, and the sixteen dot
        // products reduced together (`dots16_avx512`); the rest key by key.
        let done = if WIDE && dk.is_multiple_of(32) {
            // SAFETY: the caller has AVX-512 F/BW/VL; dots16 checks that
            // the run's key rows are in the cache.
            unsafe { dots16_avx512::<H>(kc, k_w, k0, run.clone(), &q16, dk, &mut dots, base) }
        } else {
            0
        };
        for (i, j) in run.enumerate().skip(done) {
            let key = &kc[j * k_w + k0..j * k_w + k0 + dk];
            prefetch_row(kc, (j + KV_PREFETCH) * k_w + k0, dk);
            for (hh, qh) in q16.chunks_exact(dk).enumerate() {
                dots[hh * nk + base + i] = if !dk.is_multiple_of(32) {
                    f16_dot(key, qh)
                } else if WIDE {
                    // SAFETY: the caller has AVX-512 F/BW/VL; equal lengths.
                    unsafe { f16_dot32_avx512(key, qh) }
                } else {
                    // SAFETY: the caller has AVX2/FMA/F16C; equal lengths.
                    unsafe { f16_dot32(key, qh) }
                };
            }
        }
    }
    // The online softmax of each head in three passes with the same values
    // as `online_step` key by key: the running maximum and each key's
    // exponent argument (sequential compares), the exponentials (eight at a
    // time with AVX-512, the libm function's own steps), then the running
    // sum. A libm call per key in one loop cost a quarter of the attention.
    // Likewise the first value rows, which arrive during the softmax.
    for j in x.keys.iter().take(KV_PREFETCH) {
        prefetch_row(vc, j * v_w + v0, dv);
    }
    let mut steps = reuse(sc.steps, H * nk, (0f32, 0f32));
    let mut inv = [0f32; H];
    let mut args = reuse(sc.args, H * nk, 0f32);
    let mut rises = reuse(sc.rises, H * nk, false);
    let mut exps = reuse(sc.exps, H * nk, 0f32);
    // The heads side by side, key by key: each head's running maximum and
    // running sum are chains of their own (a compare, a fused add per
    // key), which one head at a time left waiting on their latency.
    if WIDE {
        for ((d, a), r) in dots
            .chunks_exact(nk)
            .zip(args.chunks_exact_mut(nk))
            .zip(rises.chunks_exact_mut(nk))
        {
            // SAFETY: the caller has AVX-512 F/BW/VL.
            unsafe { running_max_avx512(d, s.scale, a, r) };
        }
    } else {
        let mut m = [f32::NEG_INFINITY; H];
        for i in 0..nk {
            for (hh, m) in m.iter_mut().enumerate() {
                let k = hh * nk + i;
                let sc = dots[k] * s.scale;
                rises[k] = sc > *m;
                if rises[k] {
                    args[k] = *m - sc;
                    *m = sc;
                } else {
                    args[k] = sc - *m;
                }
            }
        }
    }
    if WIDE {
        // SAFETY: the caller has AVX-512 F/BW/VL.
        unsafe { expf_rows_avx512(&args, &mut exps) };
    } else {
        exps.iter_mut().zip(&args).for_each(|(e, a)| *e = a.exp());
    }
    // Each key's factors first (a select the compiler vectorizes), then
    // the heads' running sums side by side over slices of length nk (so
    // the loop carries no bounds checks).
    for ((st, &e), &r) in steps.iter_mut().zip(&exps).zip(&rises) {
        *st = if r { (e, 1.0) } else { (1.0, e) };
    }
    let by_head: [&[(f32, f32)]; H] = std::array::from_fn(|hh| &steps[hh * nk..][..nk]);
    let mut sum = [0f32; H];
    for i in 0..nk {
        for (sum, st) in sum.iter_mut().zip(&by_head) {
            let (ms, vs) = st[i];
            *sum = sum.mul_add(ms, vs);
        }
    }
    match stats {
        // A split-KV partial: the maximum as `online_step` leaves it, the
        // sum, and the value sums as they stand (times 1, exact).
        Some(stats) => {
            for (hh, (st, inv)) in stats.iter_mut().zip(inv.iter_mut()).enumerate() {
                let mut m = f32::NEG_INFINITY;
                for &d in &dots[hh * nk..(hh + 1) * nk] {
                    let sc = d * s.scale;
                    if sc > m {
                        m = sc;
                    }
                }
                *st = (m, sum[hh]);
                *inv = 1.0;
            }
        }
        None => {
            for (inv, &sum) in inv.iter_mut().zip(&sum) {
                *inv = if sum == 0.0 { 0.0 } else { 1.0 / sum };
            }
        }
    }
    for b in 0..dv / 64 {
        let col = v0 + 64 * b;
        use std::arch::x86_64::{__m256, __m512};
        if WIDE {
            // SAFETY: the caller has AVX-512 F/BW/VL.
            unsafe { values64::<__m512, H>(vc, v_w, col, &x.keys, &steps, &inv, dst, 64 * b, dv) }
        } else {
            // SAFETY: the caller has AVX2/FMA/F16C.
            unsafe { values64::<__m256, H>(vc, v_w, col, &x.keys, &steps, &inv, dst, 64 * b, dv) }
        }
    }
    RUN_SCRATCH.set(RunScratch {
        q16,
        dots,
        steps,
        args,
        rises,
        exps,
    });
}

/// [`run_x86`]'s buffers, kept by each thread from call to call: six
/// allocations per call (per sequence and KV head) were 360 a step for
/// four SmolLM2 sequences, most of them past malloc's per-thread cache.
#[cfg(target_arch = "x86_64")]
#[derive(Default)]
struct RunScratch {
    q16: Vec<u16>,
    dots: Vec<f32>,
    steps: Vec<(f32, f32)>,
    args: Vec<f32>,
    rises: Vec<bool>,
    exps: Vec<f32>,
}

#[cfg(target_arch = "x86_64")]
thread_local! {
    static RUN_SCRATCH: std::cell::RefCell<RunScratch> = std::cell::RefCell::default();
}

/// `v` emptied and refilled with `n` copies of `x` (its allocation kept).
#[cfg(target_arch = "x86_64")]
fn reuse<T: Clone>(mut v: Vec<T>, n: usize, x: T) -> Vec<T> {
    v.clear();
    v.resize(n, x);
    v
}

/// One register width of [`values64`]: `Block` holds a 64-value block as
/// f32 lanes (eight AVX2 or four AVX-512 registers). The methods are
/// inlined into callers that have the width's target features.
#[cfg(target_arch = "x86_64")]
trait F16Block: Copy {
    type Block: Copy + AsRef<[Self]> + AsMut<[Self]>;
    /// Halves per register.
    const LANES: usize;
    unsafe fn zero_block() -> Self::Block;
    unsafe fn splat(x: f32) -> Self;
    /// `LANES` f16 values at `p`, widened.
    unsafe fn load_f16(p: *const u16) -> Self;
    /// `a * f`, rounded through f16.
    unsafe fn mul_round(a: Self, f: Self) -> Self;
    /// `x * w + a` (one fused operation), rounded through f16.
    unsafe fn fma_round(x: Self, w: Self, a: Self) -> Self;
    /// `self * s` stored at `p` (`LANES` floats).
    unsafe fn store_scaled(self, p: *mut f32, s: f32);
}

#[cfg(target_arch = "x86_64")]
impl F16Block for std::arch::x86_64::__m256 {
    type Block = [Self; 8];
    const LANES: usize = 8;
    #[inline(always)]
    unsafe fn zero_block() -> Self::Block {
        // SAFETY (all methods): the caller has AVX2, FMA and F16C; the
        // pointers cover LANES elements (the callers' contract).
        unsafe { [std::arch::x86_64::_mm256_setzero_ps(); 8] }
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> Self {
        unsafe { std::arch::x86_64::_mm256_set1_ps(x) }
    }
    #[inline(always)]
    unsafe fn load_f16(p: *const u16) -> Self {
        use std::arch::x86_64::*;
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i)) }
    }
    #[inline(always)]
    unsafe fn mul_round(a: Self, f: Self) -> Self {
        use std::arch::x86_64::*;
        unsafe {
            _mm256_cvtph_ps(_mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm256_mul_ps(
                a, f,
            )))
        }
    }
    #[inline(always)]
    unsafe fn fma_round(x: Self, w: Self, a: Self) -> Self {
        use std::arch::x86_64::*;
        unsafe {
            _mm256_cvtph_ps(_mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(
                _mm256_fmadd_ps(x, w, a),
            ))
        }
    }
    #[inline(always)]
    unsafe fn store_scaled(self, p: *mut f32, s: f32) {
        use std::arch::x86_64::*;
        unsafe { _mm256_storeu_ps(p, _mm256_mul_ps(self, _mm256_set1_ps(s))) }
    }
}

#[cfg(target_arch = "x86_64")]
impl F16Block for std::arch::x86_64::__m512 {
    type Block = [Self; 4];
    const LANES: usize = 16;
    #[inline(always)]
    unsafe fn zero_block() -> Self::Block {
        // SAFETY (all methods): the caller has AVX-512 F/BW/VL; the
        // pointers cover LANES elements (the callers' contract).
        unsafe { [std::arch::x86_64::_mm512_setzero_ps(); 4] }
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> Self {
        unsafe { std::arch::x86_64::_mm512_set1_ps(x) }
    }
    #[inline(always)]
    unsafe fn load_f16(p: *const u16) -> Self {
        use std::arch::x86_64::*;
        unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i)) }
    }
    #[inline(always)]
    unsafe fn mul_round(a: Self, f: Self) -> Self {
        use std::arch::x86_64::*;
        unsafe {
            _mm512_cvtph_ps(_mm512_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm512_mul_ps(
                a, f,
            )))
        }
    }
    #[inline(always)]
    unsafe fn fma_round(x: Self, w: Self, a: Self) -> Self {
        use std::arch::x86_64::*;
        unsafe {
            _mm512_cvtph_ps(_mm512_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(
                _mm512_fmadd_ps(x, w, a),
            ))
        }
    }
    #[inline(always)]
    unsafe fn store_scaled(self, p: *mut f32, s: f32) {
        use std::arch::x86_64::*;
        unsafe { _mm512_storeu_ps(p, _mm512_mul_ps(self, _mm512_set1_ps(s))) }
    }
}

/// One 64-dimension block of `H` heads' weighted value sums over `keys`
/// (row j's 64 values at `vc[j * v_w + col..]`): per key, each head's running
/// f16 accumulator is rescaled by its `ms` (where its maximum moved) and
/// takes `vs` times the value, rounded through f16 after every operation.
/// Head h's result goes to `dst[h * dv + off..][..64]`, times `inv[h]`.
/// The caller has the target features of `V`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn values64<V: F16Block, const H: usize>(
    vc: &[u16],
    v_w: usize,
    col: usize,
    keys: &Runs,
    steps: &[(f32, f32)],
    inv: &[f32; H],
    dst: &mut [f32],
    off: usize,
    dv: usize,
) {
    // SAFETY (the block): the caller has V's features; every pointer below
    // covers LANES elements of a 64-element slice.
    unsafe {
        let nk = keys.len();
        let mut acc = [V::zero_block(); H];
        for (base, run) in keys.runs() {
            let rows = &vc[run.start * v_w + col..];
            for i in 0..run.len() {
                let v = &rows[i * v_w..i * v_w + 64];
                prefetch_row(rows, (i + KV_PREFETCH) * v_w, 64);
                let mut x = V::zero_block();
                for (c, x) in x.as_mut().iter_mut().enumerate() {
                    *x = V::load_f16(v.as_ptr().add(c * V::LANES));
                }
                for (hh, a) in acc.iter_mut().enumerate() {
                    let (ms, vs) = steps[hh * nk + base + i];
                    if ms != 1.0 {
                        let f = V::splat(ms);
                        for a in a.as_mut() {
                            *a = V::mul_round(*a, f);
                        }
                    }
                    let w = V::splat(vs);
                    for (a, &x) in a.as_mut().iter_mut().zip(x.as_ref()) {
                        *a = V::fma_round(x, w, *a);
                    }
                }
            }
        }
        for (hh, a) in acc.iter().enumerate() {
            let out = &mut dst[hh * dv + off..hh * dv + off + 64];
            for (c, a) in a.as_ref().iter().enumerate() {
                a.store_scaled(out.as_mut_ptr().add(c * V::LANES), inv[hh]);
            }
        }
    }
}

/// The softmax's first pass for one head, sixteen keys at a time: each
/// score (`dot * scale`), whether it rises above the running maximum
/// before it, and its exponent argument (`max - score` where it rises,
/// else `score - max`), exactly as the key-by-key loop: the maximum before
/// each key comes from a prefix maximum in four shift-and-max steps, the
/// earlier value kept on ties (so a -0 and a +0 keep the first, as the
/// compare does) and a NaN score never taken (it never rises).
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
unsafe fn running_max_avx512(dots: &[f32], scale: f32, args: &mut [f32], rises: &mut [bool]) {
    use std::arch::x86_64::*;
    let n = dots.len();
    assert!(
        args.len() == n && rises.len() == n,
        "one argument per score"
    );
    let ninf = _mm512_set1_ps(f32::NEG_INFINITY);
    let lanes = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    // Lane i takes lane i - s (lanes below s: -inf).
    let back = |s: i32| {
        (
            _mm512_sub_epi32(lanes, _mm512_set1_epi32(s)),
            !((1u16 << s) - 1),
        )
    };
    let shifts = [back(1), back(2), back(4), back(8)];
    let mut m = f32::NEG_INFINITY;
    let whole = n / 16 * 16;
    for c in (0..whole).step_by(16) {
        // SAFETY: c + 16 <= n for all three slices (asserted lengths).
        unsafe {
            let sc = _mm512_mul_ps(_mm512_loadu_ps(dots.as_ptr().add(c)), _mm512_set1_ps(scale));
            let nan = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(sc, sc);
            // `max_ps(later, earlier)` returns `earlier` on ties.
            let mut p = _mm512_mask_mov_ps(sc, nan, ninf);
            for &(idx, keep) in &shifts {
                p = _mm512_max_ps(p, _mm512_mask_permutexvar_ps(ninf, keep, idx, p));
            }
            let (idx1, keep1) = shifts[0];
            let before = _mm512_max_ps(
                _mm512_mask_permutexvar_ps(ninf, keep1, idx1, p),
                _mm512_set1_ps(m),
            );
            let rise = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(sc, before);
            let a = _mm512_mask_mov_ps(_mm512_sub_ps(sc, before), rise, _mm512_sub_ps(before, sc));
            _mm512_storeu_ps(args.as_mut_ptr().add(c), a);
            let flags = _mm_and_si128(_mm_movm_epi8(rise), _mm_set1_epi8(1));
            // A bool is one byte, 0 or 1.
            _mm_storeu_si128(rises.as_mut_ptr().add(c) as *mut __m128i, flags);
            let last = _mm512_cvtss_f32(_mm512_permutexvar_ps(_mm512_set1_epi32(15), p));
            if last > m {
                m = last;
            }
        }
    }
    running_max_from(
        m,
        &dots[whole..],
        scale,
        &mut args[whole..],
        &mut rises[whole..],
    );
}

/// The softmax's first pass key by key, from running maximum `m`: each
/// score `dot * scale`, whether it rises above the maximum before it, and
/// its exponent argument (`max - score` where it rises, else
/// `score - max`); returns the maximum after the last.
#[cfg(target_arch = "x86_64")]
fn running_max_from(
    mut m: f32,
    dots: &[f32],
    scale: f32,
    args: &mut [f32],
    rises: &mut [bool],
) -> f32 {
    for ((&dot, a), r) in dots.iter().zip(args.iter_mut()).zip(rises.iter_mut()) {
        let sc = dot * scale;
        *r = sc > m;
        if *r {
            *a = m - sc;
            m = sc;
        } else {
            *a = sc - m;
        }
    }
    m
}

/// glibc's `expf` (its FMA build, which this CPU's libm runs; the
/// algorithm of glibc 2.27+), eight lanes at a time, for arguments <= 0 or
/// NaN, as the softmax passes them: 2^(k/32) from a table times a cubic in
/// the remainder, in f64, rounded once to f32; below the smallest argument
/// with a nonzero result, 0. The same bits as the libm call for every such
/// argument (checked exhaustively when written; the tests compare a sample).
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
unsafe fn expf8_avx512(x: std::arch::x86_64::__m256) -> std::arch::x86_64::__m256 {
    use std::arch::x86_64::*;
    // 32/ln2, the shift that rounds to an integer in the low mantissa
    // bits, and the cubic's coefficients (scaled by 1/32 per power).
    let inv_ln2_n = _mm512_set1_pd(f64::from_bits(0x4047_1547_652b_82fe));
    let shift = _mm512_set1_pd(f64::from_bits(0x4338_0000_0000_0000));
    let c0 = _mm512_set1_pd(f64::from_bits(0x3ebc_6af8_4b91_2394));
    let c1 = _mm512_set1_pd(f64::from_bits(0x3f2e_bfce_50fa_c4f3));
    let c2 = _mm512_set1_pd(f64::from_bits(0x3f96_2e42_ff0c_52d6));
    let t = |i: usize| {
        // SAFETY: EXP2F_TABLE holds 32 entries; 8 are read from i <= 24.
        unsafe { _mm512_loadu_si512(EXP2F_TABLE.as_ptr().add(i) as *const __m512i) }
    };
    let xd = _mm512_cvtps_pd(x);
    let k = _mm512_fmadd_pd(inv_ln2_n, xd, shift);
    let ki = _mm512_castpd_si512(k);
    let kd = _mm512_sub_pd(k, shift);
    let r = _mm512_fmadd_pd(inv_ln2_n, xd, _mm512_sub_pd(_mm512_setzero_pd(), kd));
    // Table entry k mod 32: entries 0-15 and 16-31 by two two-register
    // permutes (four index bits each), the fifth bit choosing.
    let low = _mm512_permutex2var_epi64(t(0), ki, t(8));
    let high = _mm512_permutex2var_epi64(t(16), ki, t(24));
    let upper = _mm512_test_epi64_mask(ki, _mm512_set1_epi64(16));
    let tab = _mm512_mask_blend_epi64(upper, low, high);
    let scale = _mm512_castsi512_pd(_mm512_add_epi64(tab, _mm512_slli_epi64::<47>(ki)));
    let z = _mm512_fmadd_pd(c0, r, c1);
    let r2 = _mm512_mul_pd(r, r);
    let y = _mm512_fmadd_pd(c2, r, _mm512_set1_pd(1.0));
    let y = _mm512_mul_pd(_mm512_fmadd_pd(z, r2, y), scale);
    let out = _mm512_cvtpd_ps(y);
    // Below log(2^-150) glibc returns 0 (the argument -inf included).
    let lo = _mm256_set1_ps(f32::from_bits(0xc2cf_f1b4));
    let under = _mm256_cmp_ps_mask::<_CMP_LT_OQ>(x, lo);
    _mm256_mask_mov_ps(out, under, _mm256_setzero_ps())
}

/// 2^(i/32) for i in 0..32 as f64 bits, less i << 47 (the exponent that
/// [`expf8_avx512`] adds back with k's integer part).
#[cfg(target_arch = "x86_64")]
const EXP2F_TABLE: [u64; 32] = [
    0x3ff0000000000000,
    0x3fefd9b0d3158574,
    0x3fefb5586cf9890f,
    0x3fef9301d0125b51,
    0x3fef72b83c7d517b,
    0x3fef54873168b9aa,
    0x3fef387a6e756238,
    0x3fef1e9df51fdee1,
    0x3fef06fe0a31b715,
    0x3feef1a7373aa9cb,
    0x3feedea64c123422,
    0x3feece086061892d,
    0x3feebfdad5362a27,
    0x3feeb42b569d4f82,
    0x3feeab07dd485429,
    0x3feea47eb03a5585,
    0x3feea09e667f3bcd,
    0x3fee9f75e8ec5f74,
    0x3feea11473eb0187,
    0x3feea589994cce13,
    0x3feeace5422aa0db,
    0x3feeb737b0cdc5e5,
    0x3feec49182a3f090,
    0x3feed503b23e255d,
    0x3feee89f995ad3ad,
    0x3feeff76f2fb5e47,
    0x3fef199bdd85529c,
    0x3fef3720dcef9069,
    0x3fef5818dcfba487,
    0x3fef7c97337b9b5f,
    0x3fefa4afa2a490da,
    0x3fefd0765b6e4540,
];

/// `exps[i] = args[i].exp()` for the softmax's arguments: [`expf8_avx512`]
/// eight at a time, the libm call for the last few.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
unsafe fn expf_rows_avx512(args: &[f32], exps: &mut [f32]) {
    use std::arch::x86_64::*;
    assert_eq!(args.len(), exps.len(), "one result per argument");
    let mut a = args.chunks_exact(8);
    let mut e = exps.chunks_exact_mut(8);
    for (a, e) in (&mut a).zip(&mut e) {
        // SAFETY: both chunks hold 8 floats; AVX-512 is enabled here.
        unsafe {
            let v = expf8_avx512(_mm256_loadu_ps(a.as_ptr()));
            _mm256_storeu_ps(e.as_mut_ptr(), v);
        }
    }
    for (e, a) in e.into_remainder().iter_mut().zip(a.remainder()) {
        *e = a.exp();
    }
}

/// How many cache rows ahead the decode loops prefetch. In a step the
/// weights evict the cache between layers, so its rows come from memory:
/// abench with 3 MB read before each call (FLUSH=3000), SmolLM2's heads,
/// 30 layers, four alternated runs, us a call, 8 / 16 / 24 rows ahead: four
/// sequences at context 150 39.8-55.6 / 30.3-39.0 / 30.9-36.4, one sequence
/// 11.5-18.3 / 9.9-12.9 / 9.6-10.7; cache-resident no different.
#[cfg(target_arch = "x86_64")]
const KV_PREFETCH: usize = 24;

/// Asks for the cache lines of `x[at..at + len]` if that lies inside `x`
/// (a row past the end is simply not fetched).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn prefetch_row(x: &[u16], at: usize, len: usize) {
    if len > 0 && at + len <= x.len() {
        prefetch_halves(x.as_ptr().wrapping_add(at), len);
    }
}

/// Asks for every 64-byte line that `len` halves from `p` touch, the last
/// one too when they do not start on a line boundary. (A plain loop: the
/// iterator chain this was compiled to a dozen instructions per row.) The
/// address is only formed, never dereferenced: it may lie anywhere.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn prefetch_halves(p: *const u16, len: usize) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
    let p = p as *const i8;
    let mut off = 0;
    while off < len {
        // SAFETY: a prefetch never faults.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(2 * off)) };
        off += 32;
    }
    // SAFETY: as above.
    unsafe { _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(2 * (len.max(1) - 1))) };
}

/// `f16_dot` for lengths that are multiples of 32 (no f64 tail), reduced in
/// registers in the same order as `f16_dot_finish`: per lane (a0 + a2) +
/// (a1 + a3), then the halves, then (x0 + x1) + (x2 + x3).
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn f16_dot32(a: &[u16], b: &[u16]) -> f32 {
    use std::arch::x86_64::*;
    assert!(a.len() == b.len() && a.len().is_multiple_of(32));
    let ph8 = |x: &[u16], i: usize| {
        // SAFETY: i + 8 <= len (the loop below steps within the length).
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(x.as_ptr().add(i) as *const __m128i)) }
    };
    let mut acc = [_mm256_setzero_ps(); 4];
    for i in (0..a.len()).step_by(32) {
        for (j, accj) in acc.iter_mut().enumerate() {
            *accj = _mm256_fmadd_ps(ph8(a, i + 8 * j), ph8(b, i + 8 * j), *accj);
        }
    }
    let x = _mm256_add_ps(_mm256_add_ps(acc[0], acc[2]), _mm256_add_ps(acc[1], acc[3]));
    let t = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps::<1>(x));
    let u = _mm_add_ps(t, _mm_movehdup_ps(t));
    _mm_cvtss_f32(_mm_add_ss(u, _mm_movehl_ps(u, u)))
}

/// [`f16_dot32`] over 16 lanes: one accumulator holds the lanes of the
/// narrow version's first two, the other its last two, so every lane's
/// chain and the reduction are the same.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
unsafe fn f16_dot32_avx512(a: &[u16], b: &[u16]) -> f32 {
    use std::arch::x86_64::*;
    assert!(a.len() == b.len() && a.len().is_multiple_of(32));
    let ph16 = |x: &[u16], i: usize| {
        // SAFETY: i + 16 <= len (the loop below steps within the length).
        unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(x.as_ptr().add(i) as *const __m256i)) }
    };
    let (mut lo, mut hi) = (_mm512_setzero_ps(), _mm512_setzero_ps());
    for i in (0..a.len()).step_by(32) {
        lo = _mm512_fmadd_ps(ph16(a, i), ph16(b, i), lo);
        hi = _mm512_fmadd_ps(ph16(a, i + 16), ph16(b, i + 16), hi);
    }
    // (a0 + a2) and (a1 + a3) side by side, then their sum.
    let pair = _mm512_add_ps(lo, hi);
    let x = _mm256_add_ps(
        _mm512_castps512_ps256(pair),
        _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(pair))),
    );
    let t = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps::<1>(x));
    let u = _mm_add_ps(t, _mm_movehdup_ps(t));
    _mm_cvtss_f32(_mm_add_ss(u, _mm_movehl_ps(u, u)))
}

/// The dot products of `H` heads' f16 queries (`q16`, `dk` each) with the
/// keys at rows `keys` (offset `off` in rows of `k_w`), sixteen keys at a
/// time, key i of them into `dots[h * stride + base + i]` (`stride`: the
/// dots' length per head); returns how many keys it did (a
/// multiple of 16, the rest left to the caller). Every key's lanes run
/// `f16_dot32_avx512`'s steps and its reduction's pairings (the 256-bit
/// halves, then the 128-bit quarters, then lanes 0 + 1 and 2 + 3, then
/// those two), done for sixteen keys by shuffles across registers instead
/// of within each: the same bits at a third of the instructions, with each
/// key row converted once for all the heads and the query once per call.
/// The caller has AVX-512 F/BW/VL, `dk` is a multiple of 32 and the key
/// rows are within `kc`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn dots16_avx512<const H: usize>(
    kc: &[u16],
    k_w: usize,
    off: usize,
    keys: Range<usize>,
    q16: &[u16],
    dk: usize,
    dots: &mut [f32],
    base: usize,
) -> usize {
    let (lo, nk) = (keys.start, keys.len());
    let stride = dots.len() / H;
    assert!(dk.is_multiple_of(32) && q16.len() == H * dk && base + nk <= stride);
    let blocks = nk / 16;
    if blocks == 0 {
        return 0;
    }
    assert!(
        (lo + 16 * blocks - 1) * k_w + off + dk <= kc.len(),
        "key rows"
    );
    // SAFETY: the asserts above cover every load and store; the caller has
    // AVX-512 F/BW/VL.
    unsafe {
        match dk / 32 {
            2 => dots16_body::<H, 2>(kc, k_w, off, lo, blocks, q16, dots, stride, base),
            4 => dots16_body::<H, 4>(kc, k_w, off, lo, blocks, q16, dots, stride, base),
            8 => dots16_body::<H, 8>(kc, k_w, off, lo, blocks, q16, dots, stride, base),
            // Other widths key by key (the caller's loop).
            _ => return 0,
        }
    }
    16 * blocks
}

/// [`dots16_avx512`]'s loop for `S` = dk / 32: the query's registers in a
/// fixed array and the key rows read through raw pointers, so the loop is
/// loads, conversions and multiply-adds alone (slice indexing with the
/// width known only at run time left a score of bounds checks per key).
/// The caller checked that `blocks` blocks of sixteen key rows from row
/// `lo` lie within `kc`, that `q16` holds `H * 32 * S` halves and that
/// each head's `base + 16 * blocks` dots fit in its `stride`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn dots16_body<const H: usize, const S: usize>(
    kc: &[u16],
    k_w: usize,
    off: usize,
    lo: usize,
    blocks: usize,
    q16: &[u16],
    dots: &mut [f32],
    stride: usize,
    base: usize,
) {
    use std::arch::x86_64::*;
    // SAFETY (the block): the caller's checks cover every load and store.
    unsafe {
        let qf: [[[__m512; 2]; S]; H] = std::array::from_fn(|hh| {
            std::array::from_fn(|st| {
                std::array::from_fn(|x| {
                    let at = q16.as_ptr().add(hh * 32 * S + 32 * st + 16 * x);
                    _mm512_cvtph_ps(_mm256_loadu_si256(at as *const __m256i))
                })
            })
        });
        // Lane 4c + e of the reduction holds key 4e + c.
        let order = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
        // Each head's sixteen keys, each key's two accumulators added.
        let mut pairs = [[_mm512_setzero_ps(); 16]; H];
        let kp = kc.as_ptr();
        for b in 0..blocks {
            for kk in 0..16 {
                let j = lo + 16 * b + kk;
                let key = kp.add(j * k_w + off);
                prefetch_halves(kp.wrapping_add((j + KV_PREFETCH) * k_w + off), 32 * S);
                let mut acc = [[_mm512_setzero_ps(); 2]; H];
                for st in 0..S {
                    let klo =
                        _mm512_cvtph_ps(_mm256_loadu_si256(key.add(32 * st) as *const __m256i));
                    let khi = _mm512_cvtph_ps(_mm256_loadu_si256(
                        key.add(32 * st + 16) as *const __m256i
                    ));
                    for (a, q) in acc.iter_mut().zip(&qf) {
                        a[0] = _mm512_fmadd_ps(klo, q[st][0], a[0]);
                        a[1] = _mm512_fmadd_ps(khi, q[st][1], a[1]);
                    }
                }
                for (ph, a) in pairs.iter_mut().zip(&acc) {
                    ph[kk] = _mm512_add_ps(a[0], a[1]);
                }
            }
            for (hh, p) in pairs.iter().enumerate() {
                // Halves: [key 2m's 8 | key 2m+1's 8].
                let v: [__m512; 8] = std::array::from_fn(|m| {
                    let (x, y) = (p[2 * m], p[2 * m + 1]);
                    _mm512_add_ps(
                        _mm512_shuffle_f32x4::<0b01_00_01_00>(x, y),
                        _mm512_shuffle_f32x4::<0b11_10_11_10>(x, y),
                    )
                });
                // Quarters: keys 4m .. 4m + 3, four lanes each.
                let w: [__m512; 4] = std::array::from_fn(|m| {
                    let (x, y) = (v[2 * m], v[2 * m + 1]);
                    _mm512_add_ps(
                        _mm512_shuffle_f32x4::<0b10_00_10_00>(x, y),
                        _mm512_shuffle_f32x4::<0b11_01_11_01>(x, y),
                    )
                });
                // Lanes 0 + 1 and 2 + 3, then those two.
                let z: [__m512; 2] = std::array::from_fn(|n| {
                    let (x, y) = (w[2 * n], w[2 * n + 1]);
                    _mm512_add_ps(
                        _mm512_shuffle_ps::<0b10_00_10_00>(x, y),
                        _mm512_shuffle_ps::<0b11_01_11_01>(x, y),
                    )
                });
                let r = _mm512_add_ps(
                    _mm512_shuffle_ps::<0b10_00_10_00>(z[0], z[1]),
                    _mm512_shuffle_ps::<0b11_01_11_01>(z[0], z[1]),
                );
                _mm512_storeu_ps(
                    dots.as_mut_ptr().add(hh * stride + base + 16 * b),
                    _mm512_permutexvar_ps(order, r),
                );
            }
        }
    }
}

/// Attention of query row `t`, head `h`, over `keys`, into `dst`
/// (head_dim_v values), in the rounding of ggml's one-query-at-a-time path
/// (`flash_attn_ext_f16_one_chunk`): Q rounded to f16, f16 dot products, V
/// accumulated in f16. Returns the running maximum and the sum; with
/// `partial`, `dst` gets the value sums unscaled (a split-KV chunk's).
#[inline(always)]
fn head(x: &Query<'_>, h: usize, dst: &mut [f32], partial: bool) -> (f32, f32) {
    let (s, q, kc, vc, t) = (x.s, x.q, x.kc, x.vc, x.t);
    let (dk, dv) = (s.head_dim_k, s.head_dim_v);
    let q_w = s.n_head * dk;
    let lay = x.lay;
    let kvh = h / (s.n_head / s.n_head_kv);
    let qh = &q[t * q_w + h * dk..t * q_w + (h + 1) * dk];
    let key = |j: usize| &kc[j * lay.k_row + kvh * lay.k_head..][..dk];
    let value = |j: usize| &vc[j * lay.v_row + kvh * lay.v_head..][..dv];
    let mut m = f32::NEG_INFINITY;
    let mut sum = 0f32;
    let mut q16 = vec![0u16; dk];
    let mut acc = vec![0u16; dv];
    f32_to_f16_row(qh, &mut q16);
    for j in x.keys.iter() {
        let sc = f16_dot(key(j), &q16) * s.scale;
        let (ms, vs) = online_step(&mut m, sc);
        if ms != 1.0 {
            f16_scale(&mut acc, ms);
        }
        f16_mad(&mut acc, value(j), vs);
        sum = sum.mul_add(ms, vs);
    }
    let inv = if partial {
        1.0
    } else if sum == 0.0 {
        0.0
    } else {
        1.0 / sum
    };
    let mut wide = vec![0f32; dv];
    f16_to_f32_row(&acc, &mut wide);
    dst.iter_mut().zip(&wide).for_each(|(d, a)| *d = a * inv);
    (m, sum)
}

/// ggml's key tile (`GGML_FA_TILE_KV`); its query tile is the same size.
const KV_TILE: usize = 64;

/// Batches of 64+ queries, in the rounding of ggml's tiled path
/// (`flash_attn_ext_tiled`): keys in tiles of 64; per tile the scores are
/// sequential fused sums over the head dimension, scaled and masked; the
/// running maximum moves per tile (rescaling by libm `expf`); the weights come
/// from ggml's vector `expf` with per-8 partial sums added in f64; values
/// accumulate in f32 as sequential fused sums over the tile's keys.
/// Work is split by (head, 64-query tile).
#[allow(clippy::too_many_arguments)]
fn attend_tiled(
    s: &AttnShape,
    q: &[f32],
    kc: &[u16],
    vc: &[u16],
    lay: KvLayout,
    pos0: usize,
    n_tok: usize,
    ring: usize,
    pool: &ThreadPool,
) -> Vec<f32> {
    let dv = s.head_dim_v;
    let n_qt = n_tok.div_ceil(KV_TILE);
    let task = |i: usize| -> Vec<f32> {
        let (h, qt) = (i / n_qt, i % n_qt);
        let t0 = qt * KV_TILE;
        let t1 = (t0 + KV_TILE).min(n_tok);
        #[cfg(target_arch = "x86_64")]
        if kestrel_quant::avx512_in_use() {
            // SAFETY: the CPU has AVX2, FMA, F16C and AVX-512 F/BW/VL
            // (checked just above).
            return unsafe { tile_avx512(s, q, kc, vc, lay, pos0, ring, h, t0, t1) };
        }
        #[cfg(target_arch = "x86_64")]
        if kestrel_quant::avx2_in_use() {
            // SAFETY: the CPU has AVX2 and FMA (checked just above).
            return unsafe { tile_avx2(s, q, kc, vc, lay, pos0, ring, h, t0, t1) };
        }
        tile::<2>(s, q, kc, vc, lay, pos0, ring, h, t0, t1)
    };
    let parts: Vec<Vec<f32>> =
        pool.install(|| (0..s.n_head * n_qt).into_par_iter().map(task).collect());
    let mut out = vec![0f32; n_tok * s.n_head * dv];
    for (i, part) in parts.iter().enumerate() {
        let (h, qt) = (i / n_qt, i % n_qt);
        for (k, row) in part.chunks_exact(dv).enumerate() {
            let t = qt * KV_TILE + k;
            out[(t * s.n_head + h) * dv..(t * s.n_head + h + 1) * dv].copy_from_slice(row);
        }
    }
    out
}

/// A build of [`tile`] with `$features` enabled and `$rows` query rows per
/// pass.
macro_rules! tile_build {
    ($(#[$doc:meta])* $name:ident, $features:literal, $rows:literal) => {
        $(#[$doc])*
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = $features)]
        #[allow(clippy::too_many_arguments)]
        unsafe fn $name(
            s: &AttnShape,
            q: &[f32],
            kc: &[u16],
            vc: &[u16],
            lay: KvLayout,
            pos0: usize,
            ring: usize,
            h: usize,
            t0: usize,
            t1: usize,
        ) -> Vec<f32> {
            tile::<$rows>(s, q, kc, vc, lay, pos0, ring, h, t0, t1)
        }
    };
}

tile_build!(
    /// [`tile`] compiled with AVX2/FMA, so its fused multiply-adds are
    /// instructions and its loops over keys and dimensions vectorize.
    tile_avx2,
    "avx2,fma,f16c",
    2
);

tile_build!(
    /// [`tile`] with AVX-512, query rows four at a time: each K and V tile
    /// element loaded (from L2: the tiles outgrow L1 at large head sizes)
    /// serves four rows' chains instead of two; AVX-512's 32 registers hold
    /// the four rows' sums. Every element's operations are unchanged.
    tile_avx512,
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl",
    4
);

/// Query rows t0..t1 of head `h`; returns (t1 - t0) rows of head_dim_v.
/// Rows go `ROWS` at a time (2 or 4) through the score and value loops.
/// The keys go in tiles of cells, as ggml's view has them: the positions,
/// or in a ring (see [`AttnItem::ring`]) once the rows pass its size, its
/// cells, each holding the latest position congruent to it. Cell c is
/// cache row c either way.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn tile<const ROWS: usize>(
    s: &AttnShape,
    q: &[f32],
    kc: &[u16],
    vc: &[u16],
    lay: KvLayout,
    pos0: usize,
    ring: usize,
    h: usize,
    t0: usize,
    t1: usize,
) -> Vec<f32> {
    let (dk, dv) = (s.head_dim_k, s.head_dim_v);
    let q_w = s.n_head * dk;
    let kvh = h / (s.n_head / s.n_head_kv);
    let (k0, v0) = (kvh * lay.k_head, kvh * lay.v_head);
    let rows = t1 - t0;
    let mut out = vec![0f32; rows * dv];
    let mut m = vec![f32::NEG_INFINITY; rows];
    let mut sum = vec![0f32; rows];
    // K tile transposed (dk x 64) and V tile (64 x dv), widened to f32.
    let mut kt = vec![0f32; dk * KV_TILE];
    let mut vt = vec![0f32; KV_TILE * dv];
    let mut krow = vec![0f32; dk];
    let mut kq4 = [[0f32; KV_TILE]; 4];
    let last = pos0 + t1 - 1;
    let (n_cells, lap) = if ring > 0 && last >= ring {
        (ring, last / ring * ring)
    } else {
        (last + 1, 0)
    };
    // (Past the newest lap's cells, lap >= ring.)
    let pos_of = |c: usize| {
        if lap + c <= last {
            lap + c
        } else {
            lap + c - ring
        }
    };
    for ic in (0..n_cells).step_by(KV_TILE) {
        let n_k = KV_TILE.min(n_cells - ic);
        for tk in 0..KV_TILE {
            if tk < n_k {
                let j = ic + tk;
                f16_to_f32_row(&kc[j * lay.k_row + k0..][..dk], &mut krow);
                f16_to_f32_row(
                    &vc[j * lay.v_row + v0..][..dv],
                    &mut vt[tk * dv..(tk + 1) * dv],
                );
            } else {
                krow.iter_mut().for_each(|v| *v = 0.0);
                vt[tk * dv..(tk + 1) * dv].iter_mut().for_each(|v| *v = 0.0);
            }
            for (d, &v) in krow.iter().enumerate() {
                kt[d * KV_TILE + tk] = v;
            }
        }
        // Query rows two at a time: each K and V tile element loaded once
        // serves both rows' FMA chains (the tiles do not fit L1). Every
        // element still sees the same operations in the same order.
        let mut r = 0;
        while r < rows {
            let n = if ROWS == 4 && r + 3 < rows {
                4
            } else if r + 1 < rows {
                2
            } else {
                1
            };
            let qrow = |i: usize| {
                let t = t0 + r + i;
                &q[t * q_w + h * dk..t * q_w + (h + 1) * dk]
            };
            if n == 4 {
                qk_quad(&kt, [qrow(0), qrow(1), qrow(2), qrow(3)], &mut kq4);
            } else if n == 2 {
                let [k0, k1, ..] = &mut kq4;
                qk_pair(&kt, qrow(0), qrow(1), k0, k1);
            } else {
                qk_one(&kt, qrow(0), &mut kq4[0]);
            }
            let mut active = [false; 4];
            for i in 0..n {
                let row = r + i;
                let keys = causal_keys(s, pos0 + t0 + row);
                let kq = &mut kq4[i];
                for (tk, a) in kq.iter_mut().enumerate() {
                    *a = if tk < n_k && keys.contains(&pos_of(ic + tk)) {
                        *a * s.scale
                    } else {
                        f32::NEG_INFINITY
                    };
                }
                let tile_max = kq.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
                if tile_max == f32::NEG_INFINITY {
                    continue;
                }
                active[i] = true;
                let acc = &mut out[row * dv..(row + 1) * dv];
                let m_new = m[row].max(tile_max);
                if m_new > m[row] {
                    let ms = (m[row] - m_new).exp();
                    acc.iter_mut().for_each(|a| *a *= ms);
                    sum[row] *= ms;
                }
                m[row] = m_new;
                let mut total = 0f64;
                for chunk in kq.as_chunks_mut::<8>().0 {
                    exp_minus8(chunk, m_new);
                    total += f64::from(crate_hsum8(chunk));
                }
                sum[row] = (f64::from(sum[row]) + total) as f32;
            }
            if n == 4 && active == [true; 4] {
                let mut rows4 = out[r * dv..(r + 4) * dv].chunks_exact_mut(dv);
                let acc = [(); 4].map(|_| rows4.next().expect("four rows"));
                pv_quad(&vt, dv, &kq4, acc);
            } else if n == 2 && active[..2] == [true, true] {
                let (a0, a1) = out[r * dv..(r + 2) * dv].split_at_mut(dv);
                pv_pair(&vt, dv, &kq4[0], &kq4[1], a0, a1);
            } else {
                for i in 0..n {
                    if active[i] {
                        let row = r + i;
                        pv_one(&vt, dv, &kq4[i], &mut out[row * dv..(row + 1) * dv]);
                    }
                }
            }
            r += n;
        }
    }
    for (r, row) in out.chunks_exact_mut(dv).enumerate() {
        let inv = if sum[r] == 0.0 { 0.0 } else { 1.0 / sum[r] };
        row.iter_mut().for_each(|a| *a *= inv);
    }
    out
}

/// Scores of one query row against a transposed K tile (`kt[d][tk]`):
/// kq[tk] = sum over d of k * q, fused, in order of d.
#[inline(always)]
fn qk_one(kt: &[f32], qh: &[f32], kq: &mut [f32; KV_TILE]) {
    *kq = [0f32; KV_TILE];
    for (d, &qd) in qh.iter().enumerate() {
        let kd = &kt[d * KV_TILE..(d + 1) * KV_TILE];
        for (a, &k) in kq.iter_mut().zip(kd) {
            *a = k.mul_add(qd, *a);
        }
    }
}

/// [`qk_one`] for two rows, keys in halves of 32 so both rows' sums stay
/// in registers.
#[inline(always)]
fn qk_pair(kt: &[f32], q0: &[f32], q1: &[f32], kq0: &mut [f32; KV_TILE], kq1: &mut [f32; KV_TILE]) {
    const HALF: usize = KV_TILE / 2;
    for half in 0..2 {
        let (mut a0, mut a1) = ([0f32; HALF], [0f32; HALF]);
        for (d, (&x0, &x1)) in q0.iter().zip(q1).enumerate() {
            let at = d * KV_TILE + HALF * half;
            let kd: &[f32; HALF] = kt[at..at + HALF].try_into().expect("32 keys");
            for ((a, b), &k) in a0.iter_mut().zip(a1.iter_mut()).zip(kd) {
                *a = k.mul_add(x0, *a);
                *b = k.mul_add(x1, *b);
            }
        }
        kq0[HALF * half..HALF * (half + 1)].copy_from_slice(&a0);
        kq1[HALF * half..HALF * (half + 1)].copy_from_slice(&a1);
    }
}

/// [`qk_one`] for four rows, keys in halves of 32 (four named sums, in
/// [`qk_pair`]'s shape, which LLVM keeps in registers).
#[inline(always)]
fn qk_quad(kt: &[f32], q: [&[f32]; 4], kq: &mut [[f32; KV_TILE]; 4]) {
    const HALF: usize = KV_TILE / 2;
    let [q0, q1, q2, q3] = q;
    for half in 0..2 {
        let (mut a0, mut a1, mut a2, mut a3) =
            ([0f32; HALF], [0f32; HALF], [0f32; HALF], [0f32; HALF]);
        for (d, (((&x0, &x1), &x2), &x3)) in q0.iter().zip(q1).zip(q2).zip(q3).enumerate() {
            let at = d * KV_TILE + HALF * half;
            let kd: &[f32; HALF] = kt[at..at + HALF].try_into().expect("32 keys");
            for i in 0..HALF {
                let k = kd[i];
                a0[i] = k.mul_add(x0, a0[i]);
                a1[i] = k.mul_add(x1, a1[i]);
                a2[i] = k.mul_add(x2, a2[i]);
                a3[i] = k.mul_add(x3, a3[i]);
            }
        }
        for (kqr, ar) in kq.iter_mut().zip([&a0, &a1, &a2, &a3]) {
            kqr[HALF * half..HALF * (half + 1)].copy_from_slice(ar);
        }
    }
}

/// [`pv_one`] for four rows, 32 dimensions at a time for all four.
#[inline(always)]
fn pv_quad(vt: &[f32], dv: usize, w: &[[f32; KV_TILE]; 4], acc: [&mut [f32]; 4]) {
    let [acc0, acc1, acc2, acc3] = acc;
    let [w0, w1, w2, w3] = w;
    let wide = dv / 32 * 32;
    for c in (0..wide).step_by(32) {
        let mut a0: [f32; 32] = acc0[c..c + 32].try_into().expect("32");
        let mut a1: [f32; 32] = acc1[c..c + 32].try_into().expect("32");
        let mut a2: [f32; 32] = acc2[c..c + 32].try_into().expect("32");
        let mut a3: [f32; 32] = acc3[c..c + 32].try_into().expect("32");
        for tk in 0..KV_TILE {
            let at = tk * dv + c;
            let v: &[f32; 32] = vt[at..at + 32].try_into().expect("32 values");
            let (u0, u1, u2, u3) = (w0[tk], w1[tk], w2[tk], w3[tk]);
            for i in 0..32 {
                a0[i] = v[i].mul_add(u0, a0[i]);
                a1[i] = v[i].mul_add(u1, a1[i]);
                a2[i] = v[i].mul_add(u2, a2[i]);
                a3[i] = v[i].mul_add(u3, a3[i]);
            }
        }
        acc0[c..c + 32].copy_from_slice(&a0);
        acc1[c..c + 32].copy_from_slice(&a1);
        acc2[c..c + 32].copy_from_slice(&a2);
        acc3[c..c + 32].copy_from_slice(&a3);
    }
    for (accr, wr) in [acc0, acc1, acc2, acc3].into_iter().zip(w) {
        for (tk, &u) in wr.iter().enumerate() {
            let vrow = &vt[tk * dv + wide..(tk + 1) * dv];
            for (x, &v) in accr[wide..].iter_mut().zip(vrow) {
                *x = v.mul_add(u, *x);
            }
        }
    }
}

/// acc[d] += v[tk][d] * w[tk] over the tile's keys in order (V tile
/// `vt[tk][d]`), 64 dimensions at a time: eight independent FMA chains whose
/// partial sums stay in registers across the keys.
#[inline(always)]
fn pv_one(vt: &[f32], dv: usize, w: &[f32; KV_TILE], acc: &mut [f32]) {
    let (wide, tail) = acc.as_chunks_mut::<64>();
    for (c, a64) in wide.iter_mut().enumerate() {
        let mut av = *a64;
        for (tk, &w) in w.iter().enumerate() {
            let at = tk * dv + 64 * c;
            let v: &[f32; 64] = vt[at..at + 64].try_into().expect("64 values");
            for (a, &v) in av.iter_mut().zip(v) {
                *a = v.mul_add(w, *a);
            }
        }
        *a64 = av;
    }
    let d0 = dv - tail.len();
    for (tk, &w) in w.iter().enumerate() {
        let vrow = &vt[tk * dv + d0..(tk + 1) * dv];
        for (a, &v) in tail.iter_mut().zip(vrow) {
            *a = v.mul_add(w, *a);
        }
    }
}

/// [`pv_one`] for two rows, 32 dimensions at a time for both.
#[inline(always)]
fn pv_pair(
    vt: &[f32],
    dv: usize,
    w0: &[f32; KV_TILE],
    w1: &[f32; KV_TILE],
    acc0: &mut [f32],
    acc1: &mut [f32],
) {
    let (wide0, tail0) = acc0.as_chunks_mut::<32>();
    let (wide1, tail1) = acc1.as_chunks_mut::<32>();
    for (c, (x0, x1)) in wide0.iter_mut().zip(wide1.iter_mut()).enumerate() {
        let (mut a0, mut a1) = (*x0, *x1);
        for (tk, (&u0, &u1)) in w0.iter().zip(w1).enumerate() {
            let at = tk * dv + 32 * c;
            let v: &[f32; 32] = vt[at..at + 32].try_into().expect("32 values");
            for ((a, b), &v) in a0.iter_mut().zip(a1.iter_mut()).zip(v) {
                *a = v.mul_add(u0, *a);
                *b = v.mul_add(u1, *b);
            }
        }
        *x0 = a0;
        *x1 = a1;
    }
    let d0 = dv - tail0.len();
    for (tk, (&u0, &u1)) in w0.iter().zip(w1).enumerate() {
        let vrow = &vt[tk * dv + d0..(tk + 1) * dv];
        for ((a, b), &v) in tail0.iter_mut().zip(tail1.iter_mut()).zip(vrow) {
            *a = v.mul_add(u0, *a);
            *b = v.mul_add(u1, *b);
        }
    }
}

/// `hsum_float_8`'s order: ((x0+x4) + (x2+x6)) + ((x1+x5) + (x3+x7)).
#[inline(always)]
fn crate_hsum8(x: &[f32; 8]) -> f32 {
    let r = [x[0] + x[4], x[1] + x[5], x[2] + x[6], x[3] + x[7]];
    (r[0] + r[2]) + (r[1] + r[3])
}

/// One online-softmax step for score `s`: returns (factor for the running
/// accumulator, weight of this value), updating the running maximum.
fn online_step(m: &mut f32, s: f32) -> (f32, f32) {
    if s > *m {
        let old = *m;
        *m = s;
        ((old - s).exp(), 1.0)
    } else {
        (1.0, (s - *m).exp())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kestrel_quant::{f16_to_f32, f32_to_f16};

    /// Xorshift32 values uniform in [-1, 1), from `seed`.
    fn uniform(seed: u32) -> impl FnMut() -> f32 {
        let mut st = seed;
        move || {
            st ^= st << 13;
            st ^= st >> 17;
            st ^= st << 5;
            (st as f32 / u32::MAX as f32) * 2.0 - 1.0
        }
    }

    /// Plain softmax attention in f64 over f16-rounded inputs.
    fn reference(
        s: &AttnShape,
        q: &[f32],
        kc: &[u16],
        vc: &[u16],
        pos0: usize,
        n_tok: usize,
    ) -> Vec<f64> {
        let (dk, dv) = (s.head_dim_k, s.head_dim_v);
        let group = s.n_head / s.n_head_kv;
        let mut out = vec![0f64; n_tok * s.n_head * dv];
        for t in 0..n_tok {
            let p = pos0 + t;
            let lo = if s.window > 0 {
                (p + 1).saturating_sub(s.window)
            } else {
                0
            };
            for h in 0..s.n_head {
                let kvh = h / group;
                let qh = &q[t * s.n_head * dk + h * dk..][..dk];
                let scores: Vec<f64> = (lo..=p)
                    .map(|j| {
                        let kr = &kc[j * s.n_head_kv * dk + kvh * dk..][..dk];
                        qh.iter()
                            .zip(kr)
                            .map(|(a, &b)| *a as f64 * f16_to_f32(b) as f64)
                            .sum::<f64>()
                            * s.scale as f64
                    })
                    .collect();
                let mx = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let w: Vec<f64> = scores.iter().map(|x| (x - mx).exp()).collect();
                let z: f64 = w.iter().sum();
                for (i, j) in (lo..=p).enumerate() {
                    let vr = &vc[j * s.n_head_kv * dv + kvh * dv..][..dv];
                    for d in 0..dv {
                        out[(t * s.n_head + h) * dv + d] += w[i] / z * f16_to_f32(vr[d]) as f64;
                    }
                }
            }
        }
        out
    }

    #[test]
    fn both_paths_match_reference_softmax_attention() {
        let mut rnd = uniform(99u32);
        for (n_tok, window) in [(5usize, 0usize), (70, 0), (5, 3), (70, 16)] {
            let s = AttnShape {
                n_head: 4,
                n_head_kv: 2,
                head_dim_k: 32,
                head_dim_v: 32,
                scale: 0.3,
                window,
            };
            let pos0 = 3;
            let n_pos = pos0 + n_tok;
            let kc: Vec<u16> = (0..n_pos * 2 * 32).map(|_| f32_to_f16(rnd())).collect();
            let vc: Vec<u16> = (0..n_pos * 2 * 32).map(|_| f32_to_f16(rnd())).collect();
            let q: Vec<f32> = (0..n_tok * 4 * 32).map(|_| rnd() * 2.0).collect();
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(2)
                .build()
                .unwrap();
            let got = attend(&s, &q, &kc, &vc, pos0, n_tok, &pool);
            let want = reference(&s, &q, &kc, &vc, pos0, n_tok);
            // The short-batch path accumulates in f16 (about 3 decimal digits).
            let tol = if n_tok >= TILED_MIN_QUERIES {
                1e-4
            } else {
                4e-3
            };
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (*g as f64 - w).abs() < tol,
                    "n_tok={n_tok} window={window} i={i}: {g} vs {w}"
                );
            }
        }
    }

    /// llama.cpp's view of the cache (`get_n_kv`) and ggml's chunking of it.
    #[test]
    fn split_kv_follows_llama_cpp_view_and_chunks() {
        // Up to position 255 the view is 256 cells: no split.
        assert_eq!(SplitKv::for_query(0, 4096, 2), None);
        assert_eq!(SplitKv::for_query(255, 4096, 2), None);
        // A cache under 512 cells never splits.
        assert_eq!(SplitKv::for_query(300, 256, 2), None);
        let at = |p, cells, threads| SplitKv::for_query(p, cells, threads).expect("a split");
        let sp = at(256, 4096, 2);
        assert_eq!((sp.n_kv, sp.chunk, sp.chunks), (512, 256, 2));
        assert_eq!(sp.keys(0, &(0..257), 0), Runs::one(0..256));
        assert_eq!(sp.keys(1, &(0..257), 0), Runs::one(256..257));
        // Three threads: chunks of 171, the last one short; the view stops
        // at the cache's cells.
        let sp = at(700, 768, 3);
        assert_eq!((sp.n_kv, sp.chunk), (768, 256));
        let sp = at(520, 4096, 3);
        assert_eq!((sp.n_kv, sp.chunk), (768, 256));
        assert_eq!(sp.keys(2, &(0..521), 0), Runs::one(512..521));
        let sp = at(256, 4096, 3);
        assert_eq!(sp.chunk, 171);
        assert_eq!(
            sp.keys(2, &(0..257), 0),
            Runs::default(),
            "masked chunk: no keys"
        );
        // A window cuts the first chunk's keys.
        assert_eq!(at(600, 4096, 2).keys(0, &(89..601), 0), Runs::one(89..384));
    }

    /// Six query heads over two KV heads of `dim`, scale 1/4.
    fn six_over_two(dim: usize, window: usize) -> AttnShape {
        AttnShape {
            n_head: 6,
            n_head_kv: 2,
            head_dim_k: dim,
            head_dim_v: dim,
            scale: 0.25,
            window,
        }
    }

    /// A position-major cache of `rows` rows for `s`: random keys and values.
    fn random_cache(s: &AttnShape, rows: usize, rnd: &mut impl FnMut() -> f32) -> [Vec<u16>; 2] {
        let n = rows * s.n_head_kv * s.head_dim_k;
        [3.0, 4.0].map(|spread| (0..n).map(|_| f32_to_f16(rnd() * spread)).collect())
    }

    /// The same cache stored head-major gives every path's bits as stored
    /// position-major: decode with and without split-KV chunks, in a ring,
    /// short batches, and the tiled path.
    #[test]
    fn head_major_cache_gives_position_major_bits() {
        let mut rnd = uniform(23);
        for (n_tok, pos0, window, ring, cells) in [
            (1usize, 40usize, 0usize, 0usize, 256usize),
            (1, 700, 0, 0, 1024),
            (1, 900, 200, 512, 512),
            (3, 50, 0, 0, 256),
            (70, 20, 0, 0, 256),
            (80, 600, 100, 512, 512),
        ] {
            let s = six_over_two(64, window);
            let (n_head, n_head_kv, dim) = (s.n_head, s.n_head_kv, s.head_dim_k);
            let rows = if ring > 0 { ring } else { cells };
            let [kc, vc] = random_cache(&s, rows, &mut rnd);
            // [row][head][dim] -> [head][row][dim].
            let by_head = |c: &[u16]| -> Vec<u16> {
                (0..n_head_kv)
                    .flat_map(|h| (0..rows).map(move |r| (r * n_head_kv + h) * dim))
                    .flat_map(|at| c[at..at + dim].to_vec())
                    .collect()
            };
            let (kh, vh) = (by_head(&kc), by_head(&vc));
            let q: Vec<f32> = (0..n_tok * n_head * dim).map(|_| rnd() * 2.0).collect();
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(2)
                .build()
                .unwrap();
            let item = |kc, vc, lay| AttnItem {
                q: &q,
                kc,
                vc,
                lay,
                pos0,
                n_tok,
                kv_cells: rows,
                ring,
            };
            let want = attend_batch(&s, &[item(&kc, &vc, KvLayout::position_major(&s))], &pool);
            let got = attend_batch(&s, &[item(&kh, &vh, KvLayout::head_major(&s, rows))], &pool);
            let bits = |v: &[Vec<f32>]| v.concat().iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(
                bits(&got),
                bits(&want),
                "{n_tok} queries at {pos0}, ring {ring}"
            );
        }
    }

    /// [`cell_runs`] against the cells walked one by one: cell c of a ring
    /// holds the latest position at or before the query's that is c modulo
    /// the ring's size, and is visited if that position is among the keys.
    #[test]
    fn cell_runs_visit_a_rings_cells_in_order() {
        for (ring, window) in [(512usize, 300usize), (768, 512), (1024, 512), (256, 256)] {
            for p in (0..3 * ring + 40).step_by(7) {
                let keys = (p + 1).saturating_sub(window)..p + 1;
                let n_kv = ring.min((p + 1).next_multiple_of(256));
                for threads in 1..=3 {
                    let chunk = n_kv.div_ceil(threads);
                    let mut all = Vec::new();
                    for c in 0..threads {
                        let cells = (c * chunk).min(n_kv)..((c + 1) * chunk).min(n_kv);
                        let lap = p / ring * ring;
                        let want: Vec<usize> = cells
                            .clone()
                            .filter_map(|c| {
                                let q = if lap + c <= p {
                                    lap + c
                                } else {
                                    (lap + c).checked_sub(ring)?
                                };
                                keys.contains(&q).then_some(q)
                            })
                            .collect();
                        let got: Vec<usize> =
                            cell_runs(&keys, cells.clone(), ring).iter().collect();
                        assert_eq!(got, want, "ring {ring} p {p} cells {cells:?}");
                        all.extend(got);
                    }
                    // Every key once.
                    all.sort_unstable();
                    assert_eq!(all, keys.clone().collect::<Vec<_>>(), "ring {ring} p {p}");
                }
            }
        }
        // No ring: the cells are the positions.
        assert_eq!(cell_runs(&(10..50), 0..30, 0), Runs::one(10..30));
        // A ring of 512 at position 600 (window 300): cells 0..=88 hold
        // 512..=600, then cells 301.. the older lap's 301..511.
        assert_eq!(
            cell_runs(&(301..601), 0..512, 512),
            Runs([512..601, 301..512])
        );
        assert_eq!(cell_runs(&(301..601), 0..256, 512), Runs([512..601, 0..0]));
        assert_eq!(
            cell_runs(&(301..601), 256..512, 512),
            Runs([0..0, 301..512])
        );
    }

    /// The split-KV decode of `attend_batch` against a plain transcription
    /// of ggml's: each chunk's online softmax key by key (f16 accumulator),
    /// then the partials merged in chunk order with the fused steps its
    /// compiler emits, bit for bit; on 1-3 threads, with GQA and a window,
    /// and one sequence under the split beside one that is not; and with
    /// the window's cells a ring (the cells walked in order, each holding
    /// the latest position congruent to it).
    #[test]
    fn split_kv_decode_equals_ggml_transcription() {
        let mut rnd = uniform(0x5eed_u32);
        for (threads, pos, window, dim, ring) in [
            (2usize, 256usize, 0usize, 64usize, 0usize),
            (2, 700, 0, 64, 0),
            (3, 520, 0, 64, 0),
            (1, 300, 0, 64, 0),
            (2, 600, 100, 32, 0),
            (3, 900, 0, 128, 0),
            (2, 700, 300, 64, 512),
            (3, 1000, 200, 64, 512),
            (1, 900, 256, 64, 512),
            (2, 1020, 500, 32, 768),
            (2, 530, 256, 64, 512),
        ] {
            let s = six_over_two(dim, window);
            let (n_head, n_head_kv) = (s.n_head, s.n_head_kv);
            let cells = 1024;
            let [kc, vc] = random_cache(&s, cells, &mut rnd);
            let q: Vec<f32> = (0..n_head * dim).map(|_| rnd() * 2.0).collect();
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            let item = |pos0, kv_cells| AttnItem {
                q: &q,
                kc: &kc,
                vc: &vc,
                lay: KvLayout::position_major(&s),
                pos0,
                n_tok: 1,
                kv_cells,
                ring,
            };
            // A ring is the view's cells, and the cache's rows.
            let view = if ring > 0 { ring } else { cells };
            let got = attend_batch(&s, &[item(pos, view), item(100, view)], &pool);

            // ggml, transcribed: n_kv, chunk = ceil(n_kv / nth), per chunk
            // and head M, S and VKQ (f16 accumulator read back as f32).
            let n_kv = view.min((pos + 1).div_ceil(256) * 256);
            // The position in cell ic (a ring's latest congruent one).
            let lap = pos.checked_div(ring).map_or(0, |l| l * ring);
            let pos_of = |ic: usize| {
                if ring == 0 || lap + ic <= pos {
                    Some(lap + ic)
                } else {
                    (lap + ic).checked_sub(ring)
                }
            };
            let chunk = n_kv.div_ceil(threads);
            let lo = if window > 0 {
                (pos + 1).saturating_sub(window)
            } else {
                0
            };
            let mut want = vec![0f32; n_head * dim];
            for (h, out) in want.chunks_exact_mut(dim).enumerate() {
                let kvh = h / (n_head / n_head_kv);
                let mut q16 = vec![0u16; dim];
                f32_to_f16_row(&q[h * dim..(h + 1) * dim], &mut q16);
                let (mut m_f, mut s_f) = (f32::NEG_INFINITY, 0f32);
                let mut vkq_f = vec![0f32; dim];
                for c in 0..threads {
                    let ic_start = c * chunk;
                    if ic_start >= n_kv {
                        continue;
                    }
                    let ic_end = (ic_start + chunk).min(n_kv);
                    let (mut m, mut sum) = (f32::NEG_INFINITY, 0f32);
                    let mut acc = vec![0u16; dim];
                    for ic in ic_start..ic_end {
                        if pos_of(ic).is_none_or(|kp| kp > pos || kp < lo) {
                            continue; // masked
                        }
                        // A ring's rows are its cells.
                        let at = (ic * n_head_kv + kvh) * dim;
                        let sc = f16_dot(&kc[at..at + dim], &q16) * s.scale;
                        let (mut ms, mut vs) = (1f32, 1f32);
                        if sc > m {
                            let old = m;
                            m = sc;
                            ms = (old - m).exp();
                            f16_scale(&mut acc, ms);
                        } else {
                            vs = (sc - m).exp();
                        }
                        f16_mad(&mut acc, &vc[at..at + dim], vs);
                        // `S = S*ms + vs`, fused by ggml's compiler.
                        sum = sum.mul_add(ms, vs);
                    }
                    let vkq: Vec<f32> = acc.iter().map(|&a| f16_to_f32(a)).collect();
                    if sum == 0.0 {
                        continue;
                    }
                    let m_new = m_f.max(m);
                    let (so, sn) = ((m_f - m_new).exp(), (m - m_new).exp());
                    for (f, v) in vkq_f.iter_mut().zip(&vkq) {
                        *f = f.mul_add(so, v * sn);
                    }
                    s_f = s_f.mul_add(so, sum * sn);
                    m_f = m_new;
                }
                let inv = 1.0 / s_f;
                for (o, v) in out.iter_mut().zip(&vkq_f) {
                    *o = v * inv;
                }
            }
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            let at = format!(
                "{threads} threads, position {pos}, window {window}, dim {dim}, ring {ring}"
            );
            assert_eq!(bits(&got[0]), bits(&want), "{at}");
            // The sequence at position 100 (a 256-cell view) is not split:
            // it equals `attend`.
            let plain = attend(&s, &q, &kc, &vc, 100, 1, &pool);
            assert_eq!(bits(&got[1]), bits(&plain), "{at}: unsplit sequence");
            // Four split sequences: enough chunks for a task per chunk, all
            // heads in one; the same bits.
            let four: Vec<AttnItem<'_>> = (0..4).map(|_| item(pos, view)).collect();
            for (i, g) in attend_batch(&s, &four, &pool).iter().enumerate() {
                assert_eq!(bits(g), bits(&want), "{at}: sequence {i} of four");
            }
        }
    }

    /// The AVX2 and AVX-512 one-query paths against the portable one, bit
    /// for bit, with GQA, runs of 1 to 6 heads of one KV head (past the
    /// four interleaved at once), windows, and contexts long enough for the
    /// running maximum to move many times.
    #[test]
    fn avx2_head_equals_portable_bit_for_bit() {
        if !kestrel_quant::avx2_in_use() {
            eprintln!("no AVX2 here: nothing to compare");
            return;
        }
        let mut rnd = uniform(7u32);
        for (dim, window, pos0, n_head, n_head_kv) in [
            (64usize, 0usize, 0usize, 6usize, 2usize),
            (64, 0, 150, 6, 2),
            (128, 40, 90, 6, 2),
            (64, 7, 30, 6, 2),
            (64, 0, 70, 6, 1),
            (192, 0, 20, 3, 3),
            (256, 0, 40, 4, 1),
        ] {
            let s = AttnShape {
                n_head,
                n_head_kv,
                head_dim_k: dim,
                head_dim_v: dim,
                scale: 0.7,
                window,
            };
            let n_rep = n_head / n_head_kv;
            let n_tok = 3;
            let n_pos = pos0 + n_tok;
            let kc: Vec<u16> = (0..n_pos * n_head_kv * dim)
                .map(|_| f32_to_f16(rnd() * 3.0))
                .collect();
            let vc: Vec<u16> = (0..n_pos * n_head_kv * dim)
                .map(|_| f32_to_f16(rnd() * 5.0))
                .collect();
            let q: Vec<f32> = (0..n_tok * n_head * dim).map(|_| rnd() * 2.0).collect();
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            for t in 0..n_tok {
                let mut want = vec![0f32; n_head * dim];
                let keys = causal_keys(&s, pos0 + t);
                let over = |keys: Runs| Query {
                    s: &s,
                    q: &q,
                    kc: &kc,
                    vc: &vc,
                    lay: KvLayout::position_major(&s),
                    t,
                    keys,
                };
                let x = over(Runs::one(keys.clone()));
                for (h, d) in want.chunks_exact_mut(dim).enumerate() {
                    head(&x, h, d, false);
                }
                // Every run (h0, n) inside one KV head's group.
                for h0 in 0..n_head {
                    for n in 1..=n_rep - h0 % n_rep {
                        let want = &want[h0 * dim..(h0 + n) * dim];
                        let mut got = vec![0f32; n * dim];
                        // SAFETY: AVX2, FMA and F16C were detected above.
                        unsafe { heads_avx2(&x, h0, &mut got, None) };
                        let at = format!("dim {dim} pos0 {pos0} t {t} heads {h0}+{n}");
                        assert_eq!(bits(&got), bits(want), "AVX2: {at}");
                        if kestrel_quant::avx512_in_use() {
                            // SAFETY: AVX-512 F/BW/VL (with AVX2) were detected.
                            unsafe { heads_avx512(&x, h0, &mut got, None) };
                            assert_eq!(bits(&got), bits(want), "AVX-512: {at}");
                        }
                        // A split-KV chunk's partial over the later keys:
                        // the same maxima, sums and unscaled value sums.
                        let part = over(Runs::one(keys.start + keys.len() / 3..keys.end));
                        let mut want_st = vec![(0f32, 0f32); n];
                        let mut want_p = vec![0f32; n * dim];
                        heads_portable(&part, h0, &mut want_p, Some(&mut want_st));
                        let st_bits = |v: &[(f32, f32)]| {
                            v.iter()
                                .map(|(m, x)| (m.to_bits(), x.to_bits()))
                                .collect::<Vec<_>>()
                        };
                        let mut st = vec![(0f32, 0f32); n];
                        // SAFETY: AVX2, FMA and F16C were detected above.
                        unsafe { heads_avx2(&part, h0, &mut got, Some(&mut st)) };
                        assert_eq!(bits(&got), bits(&want_p), "AVX2 partial: {at}");
                        assert_eq!(st_bits(&st), st_bits(&want_st), "AVX2 stats: {at}");
                        if kestrel_quant::avx512_in_use() {
                            // SAFETY: AVX-512 F/BW/VL (with AVX2) were detected.
                            unsafe { heads_avx512(&part, h0, &mut got, Some(&mut st)) };
                            assert_eq!(bits(&got), bits(&want_p), "AVX-512 partial: {at}");
                            assert_eq!(st_bits(&st), st_bits(&want_st), "AVX-512 stats: {at}");
                        }
                        // Two runs, the later keys first (a ring's order),
                        // whole and as a partial.
                        let mid = keys.start + keys.len() * 2 / 5;
                        let ringed = over(Runs([mid..keys.end, keys.start..mid]));
                        for partial in [false, true] {
                            let mut want_st = vec![(0f32, 0f32); n];
                            let mut want_r = vec![0f32; n * dim];
                            fn stats(st: &mut [(f32, f32)], on: bool) -> Option<&mut [(f32, f32)]> {
                                on.then_some(st)
                            }
                            heads_portable(&ringed, h0, &mut want_r, stats(&mut want_st, partial));
                            let mut st = vec![(0f32, 0f32); n];
                            // SAFETY: AVX2, FMA and F16C were detected above.
                            unsafe { heads_avx2(&ringed, h0, &mut got, stats(&mut st, partial)) };
                            let at = format!("{at}, two runs, partial {partial}");
                            assert_eq!(bits(&got), bits(&want_r), "AVX2: {at}");
                            assert_eq!(st_bits(&st), st_bits(&want_st), "AVX2 stats: {at}");
                            if kestrel_quant::avx512_in_use() {
                                // SAFETY: AVX-512 F/BW/VL (with AVX2) were detected.
                                unsafe {
                                    heads_avx512(&ringed, h0, &mut got, stats(&mut st, partial))
                                };
                                assert_eq!(bits(&got), bits(&want_r), "AVX-512: {at}");
                                assert_eq!(st_bits(&st), st_bits(&want_st), "AVX-512 stats: {at}");
                            }
                        }
                    }
                }
            }
        }
    }

    /// The vector first softmax pass against the key-by-key loop on scores
    /// with ties of equal values and of -0/+0, NaN, infinities and every
    /// tail length: the same arguments (bits) and rises.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn running_max_avx512_equals_the_key_by_key_pass() {
        if !kestrel_quant::avx512_in_use() {
            eprintln!("no AVX-512 here: nothing to compare");
            return;
        }
        let mut st = 0x1234_5678u32;
        let specials = [
            0.0f32,
            -0.0,
            1.5,
            1.5,
            f32::NAN,
            f32::NEG_INFINITY,
            f32::INFINITY,
            -3.0,
        ];
        // Also runs of signed zeros after a negative start: the maximum is
        // a zero that ties with the other, and which one it keeps shows in
        // the sign of the next arguments.
        let zeros = [-0.0f32, 0.0];
        for (n, zero_runs) in (0..70)
            .map(|n| (n, false))
            .chain((1..40).map(|n| (n, true)))
        {
            let dots: Vec<f32> = (0..n)
                .map(|k| {
                    st ^= st << 13;
                    st ^= st >> 17;
                    st ^= st << 5;
                    if zero_runs {
                        if k == 0 {
                            -1.0
                        } else {
                            zeros[(st >> 8) as usize % 2]
                        }
                    } else if st.is_multiple_of(3) {
                        specials[(st >> 8) as usize % specials.len()]
                    } else {
                        (st % 1000) as f32 / 100.0 - 5.0
                    }
                })
                .collect();
            let scale = 0.7;
            let (mut want_a, mut want_r) = (vec![0f32; n], vec![false; n]);
            running_max_from(f32::NEG_INFINITY, &dots, scale, &mut want_a, &mut want_r);
            let (mut a, mut r) = (vec![0f32; n], vec![false; n]);
            // SAFETY: AVX-512 F/BW/VL (with AVX2) were detected above.
            unsafe { running_max_avx512(&dots, scale, &mut a, &mut r) };
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&a), bits(&want_a), "arguments, n = {n}: {dots:?}");
            assert_eq!(r, want_r, "rises, n = {n}");
        }
    }

    /// The eight-lane exp against libm's for softmax arguments: every
    /// 61st float from -0 down past the underflow bound (the rest were
    /// checked exhaustively when it was written), the bound's neighbours,
    /// -inf and NaN.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn expf8_equals_libm_expf() {
        if !kestrel_quant::avx512_in_use() {
            eprintln!("no AVX-512 here: nothing to compare");
            return;
        }
        let bound = 0xc2cf_f1b4u32;
        let mut xs: Vec<f32> = (0x8000_0000u32..bound + 1000)
            .step_by(61)
            .map(f32::from_bits)
            .collect();
        xs.extend((bound - 3..bound + 3).map(f32::from_bits));
        xs.extend([f32::NEG_INFINITY, -0.0, 0.0, -1e-30, -88.0, -87.5]);
        // The one argument where the remainder's fused multiply-add (as
        // glibc's FMA build computes it) changes the result.
        xs.push(f32::from_bits(0xc27c_65d9));
        while xs.len() % 8 != 3 {
            xs.push(-1.5);
        }
        let mut got = vec![0f32; xs.len()];
        // SAFETY: AVX-512 F/BW/VL (with AVX2) were detected above.
        unsafe { expf_rows_avx512(&xs, &mut got) };
        for (x, g) in xs.iter().zip(&got) {
            assert_eq!(g.to_bits(), x.exp().to_bits(), "exp({x:e})");
        }
        let nan = [f32::NAN; 8];
        let mut out = [0f32; 8];
        // SAFETY: as above.
        unsafe { expf_rows_avx512(&nan, &mut out) };
        assert!(out.iter().all(|v| v.is_nan()), "NaN in, NaN out");
    }

    /// The table holds 2^(i/32) rounded to f64, less i << 47.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn exp2f_table_is_two_to_the_i_over_32() {
        for (i, &bits) in EXP2F_TABLE.iter().enumerate() {
            let v = f64::from_bits(bits + ((i as u64) << 47));
            let want = (i as f64 / 32.0).exp2();
            assert!(
                (v - want).abs() <= want * f64::EPSILON / 2.0,
                "entry {i}: {v} vs {want}"
            );
        }
    }

    /// The tiled path compiled with AVX2 (and with AVX-512, rows four at a
    /// time, where the CPU has it) against the portable build of the same
    /// code (row pairs, a leftover row, masked rows, windows, a head
    /// size with a tail past the 32- and 64-wide blocks), bit for bit.
    #[test]
    fn avx2_tiles_equal_portable_bit_for_bit() {
        if !kestrel_quant::avx2_in_use() {
            eprintln!("no AVX2 here: nothing to compare");
            return;
        }
        let mut rnd = uniform(5u32);
        for (dim, window, pos0, n_tok) in [
            (64usize, 0usize, 0usize, 67usize),
            (96, 20, 9, 64),
            (40, 0, 70, 65),
        ] {
            let s = AttnShape {
                n_head: 4,
                n_head_kv: 2,
                head_dim_k: dim,
                head_dim_v: dim,
                scale: 0.5,
                window,
            };
            let n_pos = pos0 + n_tok;
            let kc: Vec<u16> = (0..n_pos * 2 * dim)
                .map(|_| f32_to_f16(rnd() * 3.0))
                .collect();
            let vc: Vec<u16> = (0..n_pos * 2 * dim)
                .map(|_| f32_to_f16(rnd() * 5.0))
                .collect();
            let q: Vec<f32> = (0..n_tok * 4 * dim).map(|_| rnd() * 2.0).collect();
            let lay = KvLayout::position_major(&s);
            for h in 0..4 {
                for t0 in (0..n_tok).step_by(KV_TILE) {
                    let t1 = (t0 + KV_TILE).min(n_tok);
                    // SAFETY: AVX2, FMA and F16C were detected above.
                    let a = unsafe { tile_avx2(&s, &q, &kc, &vc, lay, pos0, 0, h, t0, t1) };
                    let b = tile::<2>(&s, &q, &kc, &vc, lay, pos0, 0, h, t0, t1);
                    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(
                        bits(&a),
                        bits(&b),
                        "dim {dim} window {window} h {h} t0 {t0}"
                    );
                    // Four rows at a time: portable, and with AVX-512 where
                    // the CPU has it.
                    let c = tile::<4>(&s, &q, &kc, &vc, lay, pos0, 0, h, t0, t1);
                    assert_eq!(bits(&c), bits(&b), "quads: dim {dim} h {h} t0 {t0}");
                    if kestrel_quant::avx512_in_use() {
                        // SAFETY: AVX-512 F/BW/VL were detected.
                        let e = unsafe { tile_avx512(&s, &q, &kc, &vc, lay, pos0, 0, h, t0, t1) };
                        assert_eq!(bits(&e), bits(&b), "AVX-512: dim {dim} h {h} t0 {t0}");
                    }
                }
            }
        }
    }
}
