//! Quantized matrix products: weights stay in their GGUF block format, the
//! activations are quantized once per product to the type the weights pair
//! with, and each weight row is read once for all tokens of a batch.

use kestrel_gguf::GgmlType;
use kestrel_quant::{
    dot4_kernel, dot_band_kernel, dot_kernel, dot_path, quantize_activations, row_bytes,
    vec_dot_type, Chunk32, Dot4, DotPath, VecDotBandFn, VecDotFn,
};
use rayon::prelude::*;
use rayon::ThreadPool;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// A weight matrix in its stored block format: `rows` rows of `cols` elements.
#[derive(Clone, Copy, Debug)]
pub struct MatRef<'a> {
    pub ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
    pub data: &'a [u8],
}

impl MatRef<'_> {
    fn row_bytes(&self) -> usize {
        self.data.len() / self.rows
    }
}

/// Below this many weight bytes a product runs on the calling thread: a
/// hand-off to the workers costs more than the work.
const PARALLEL_MIN_BYTES: usize = 1 << 16;

/// out[t * w.rows + r] = dot(w row r, x row t) for `n_tok` rows of `x` (each `w.cols` long).
pub fn matmul(w: MatRef<'_>, x: &[f32], n_tok: usize, out: &mut [f32], pool: &ThreadPool) {
    debug_assert_eq!(x.len(), n_tok * w.cols);
    let acts = quantize_rows(w.ty, x, w.cols);
    let one_seq = 0..n_tok;
    run_products(
        vec![Product {
            w,
            acts: &acts,
            seqs: std::slice::from_ref(&one_seq),
            out,
        }],
        pool,
        None,
    );
}

/// Each row of `x` (rows of `cols`) quantized to the activation type that
/// weights of type `ty` pair with; products sharing an input and a pairing
/// (q/k/v, gate/up) quantize it once.
/// Prompt batches quantize their rows in parallel (on the current pool).
pub fn quantize_rows(ty: GgmlType, x: &[f32], cols: usize) -> Vec<Vec<u8>> {
    if x.len() / cols.max(1) >= 8 {
        x.par_chunks_exact(cols)
            .map(|row| quantize_activations(ty, row))
            .collect()
    } else {
        x.chunks_exact(cols)
            .map(|row| quantize_activations(ty, row))
            .collect()
    }
}

/// One weight x quantized-activations product; `out` is [tok][row].
/// `seqs` splits the activation rows into the sequences of a batch (one
/// range for a single sequence): a row's kernel is chosen by its place in
/// its own sequence, as if that sequence ran alone (see [`token_paths`]).
pub struct Product<'a> {
    pub w: MatRef<'a>,
    pub acts: &'a [Vec<u8>],
    pub seqs: &'a [Range<usize>],
    pub out: &'a mut [f32],
}

/// The kernel path of each activation row: ggml picks it from the row's
/// index in the product and the product's row count, so a sequence batched
/// with others must be given the paths of its own rows alone, or its
/// results would change with the company it keeps.
fn token_paths(w: &MatRef<'_>, seqs: &[Range<usize>]) -> Vec<DotPath> {
    seqs.iter()
        .flat_map(|s| (0..s.len()).map(move |i| dot_path(w.ty, w.rows, i, s.len())))
        .collect()
}

/// Runs several products in one hand-off to the workers (q/k/v, gate/up):
/// each product's weight rows are split into one contiguous band per worker,
/// so every weight byte is read once, by one thread, for all tokens. With a
/// [`Balance`], the bands are cut in proportion to each worker's recent
/// speed, and each worker runs the bands cut for it.
pub fn run_products(mut products: Vec<Product<'_>>, pool: &ThreadPool, balance: Option<&Balance>) {
    let threads = pool.current_num_threads();
    let bands = |w: &MatRef<'_>| {
        if threads <= 1 || w.data.len() < PARALLEL_MIN_BYTES {
            1
        } else {
            threads.min(w.rows)
        }
    };
    if threads <= 1 || products.iter().all(|p| bands(&p.w) == 1) {
        for p in &mut products {
            debug_assert_eq!(p.out.len(), p.acts.len() * p.w.rows);
            let rows = p.w.rows;
            for mut b in Band::split(p.out, rows, std::iter::once(0..rows)) {
                rows_into(p.w, p.acts, p.seqs, &mut b);
            }
        }
        return;
    }
    // Each band writes its own rows of the product's [tok][row] output in
    // place. (A [tok][band] buffer per band, copied into place afterwards,
    // cost fresh pages to fault in and zero, and a copy on one thread: 10%
    // of a two-thread 512-token Q5_0 product.)
    //
    // Worker j's bands (one of each product) go together as one share: with
    // a job per band, the leader took its newest and the other worker its
    // oldest, and q/k/v's unequal bands split unevenly.
    let cuts = balance.map_or_else(|| vec![1.0; threads], |b| b.shares(threads));
    let mut shares: Vec<Share<'_>> = (0..threads).map(|_| Share::default()).collect();
    let mut next = 0;
    for p in products.iter_mut() {
        debug_assert_eq!(p.out.len(), p.acts.len() * p.w.rows);
        let (w, acts, seqs) = (p.w, p.acts, p.seqs);
        let n = bands(&w);
        let ranges = if n == threads {
            cut_rows(w.rows, &cuts)
        } else {
            let band = w.rows.div_ceil(n);
            (0..w.rows)
                .step_by(band)
                .map(|r0| r0..(r0 + band).min(w.rows))
                .collect()
        };
        for (j, out) in Band::split(p.out, w.rows, ranges.into_iter())
            .into_iter()
            .enumerate()
        {
            // (A cut may be empty: fewer rows than four a worker.)
            if out.rows.is_empty() {
                continue;
            }
            // A product too small to split goes to the next share in turn.
            let j = if n == threads {
                j
            } else {
                (next + j) % threads
            };
            shares[j].work += out.rows.len() as f64 * w.cols as f64;
            shares[j].jobs.push(Job { w, acts, seqs, out });
        }
        if n < threads {
            next += n;
        }
    }
    let slots: Vec<std::sync::Mutex<Option<Share<'_>>>> = shares
        .into_iter()
        .map(|s| std::sync::Mutex::new(Some(s)))
        .collect();
    crate::fork::scope(pool, |s| {
        for _ in 0..threads {
            let slots = &slots;
            s.spawn(move || {
                // This worker's share first, then any share no worker has
                // taken (a worker that came late, or never).
                let me = rayon::current_thread_index().unwrap_or(0) % threads;
                let order = std::iter::once(me).chain((0..threads).filter(|&j| j != me));
                for j in order {
                    // (A poisoned lock: another job panicked, and the scope
                    // re-raises that panic.)
                    let Some(mut share) = slots[j].lock().ok().and_then(|mut s| s.take()) else {
                        continue;
                    };
                    let t0 = std::time::Instant::now();
                    for job in &mut share.jobs {
                        job.run();
                    }
                    if let Some(b) = balance.filter(|_| j == me) {
                        b.record(me, share.work, t0.elapsed().as_secs_f64());
                    }
                    break;
                }
            });
        }
    });
    if let Some(b) = balance {
        b.settle();
    }
}

/// One worker's bands of a hand-off's products, and their size (rows x
/// columns).
#[derive(Default)]
struct Share<'a> {
    jobs: Vec<Job<'a>>,
    work: f64,
}

/// One band of one product.
struct Job<'a> {
    w: MatRef<'a>,
    acts: &'a [Vec<u8>],
    seqs: &'a [Range<usize>],
    out: Band<'a>,
}

impl Job<'_> {
    fn run(&mut self) {
        rows_into(self.w, self.acts, self.seqs, &mut self.out);
    }
}

/// `rows` cut into one contiguous band per weight in `cuts`, in
/// proportion, at multiples of four rows (a four-row kernel then leaves
/// no row over in any band but the last).
fn cut_rows(rows: usize, cuts: &[f64]) -> Vec<Range<usize>> {
    let total: f64 = cuts.iter().sum();
    let mut at = 0.0;
    let mut start = 0;
    cuts.iter()
        .enumerate()
        .map(|(j, &c)| {
            at += c;
            let end = if j + 1 == cuts.len() {
                rows
            } else {
                ((rows as f64 * at / total).round() as usize / 4 * 4).clamp(start, rows)
            };
            let r = start..end;
            start = end;
            r
        })
        .collect()
}

/// Each worker's recent speed in a model's products: two cores of a VM
/// can run at different speeds for seconds at a time (a neighbour on a
/// sibling thread, the host's clocks), and with equal bands the faster
/// worker waited at every product's end (SmolLM2 decode, two threads, in
/// some runs: one worker finished last in 83-95% of hand-offs, its bands
/// taking 17-30% longer; over whole runs the waits were 7-13% of the
/// workers' time in products). Per worker, a moving average of its time
/// per unit of work relative to the hand-off's mean; bands are cut in
/// proportion to the inverse.
pub struct Balance {
    /// Per worker: the average relative cost (f64 bits; 1.0 = the mean).
    cost: Vec<AtomicU64>,
    /// This hand-off's measured costs (f64 bits; 0 = not measured).
    last: Vec<AtomicU64>,
}

/// The weight of a hand-off's measurement in the moving average: about
/// twenty hand-offs (a sixth of a SmolLM2 decode step) of memory.
const BALANCE_ALPHA: f64 = 0.05;

impl Balance {
    pub fn new(threads: usize) -> Balance {
        Balance {
            cost: (0..threads)
                .map(|_| AtomicU64::new(1f64.to_bits()))
                .collect(),
            last: (0..threads).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// The workers' weights: the inverse of each one's average cost (equal
    /// for a pool of another size).
    fn shares(&self, threads: usize) -> Vec<f64> {
        if threads != self.cost.len() {
            return vec![1.0; threads];
        }
        self.cost
            .iter()
            .map(|c| 1.0 / f64::from_bits(c.load(Relaxed)))
            .collect()
    }

    fn record(&self, worker: usize, work: f64, seconds: f64) {
        if let Some(slot) = self.last.get(worker).filter(|_| work > 0.0) {
            slot.store((seconds / work).to_bits(), Relaxed);
        }
    }

    /// Folds a hand-off in where every worker ran its own share: each
    /// worker's cost over their mean, averaged in (clamped, so one
    /// preempted hand-off cannot swing the split far).
    fn settle(&self) {
        let last: Vec<f64> = self
            .last
            .iter()
            .map(|l| f64::from_bits(l.swap(0, Relaxed)))
            .collect();
        if last.iter().any(|&c| !(c > 0.0 && c.is_finite())) {
            return;
        }
        let mean = last.iter().sum::<f64>() / last.len() as f64;
        for (avg, &c) in self.cost.iter().zip(&last) {
            let old = f64::from_bits(avg.load(Relaxed));
            let rel = (c / mean).clamp(0.5, 2.0);
            let new = (old + BALANCE_ALPHA * (rel - old)).clamp(0.5, 2.0);
            avg.store(new.to_bits(), Relaxed);
        }
    }
}

/// The rows `rows` of a [tok][row] output (`stride` rows per token), for
/// one worker to write: the bands of one buffer hold disjoint rows, so the
/// workers fill it in place, side by side.
pub(crate) struct Band<'a> {
    ptr: *mut f32,
    len: usize,
    stride: usize,
    rows: Range<usize>,
    out: std::marker::PhantomData<&'a mut [f32]>,
}

// SAFETY: a Band writes only elements of its own rows (checked in `put`)
// within the buffer it was split from, and `split` hands out bands of
// disjoint rows of one exclusively borrowed buffer: no element is written
// by two threads, and none is read through a Band.
unsafe impl Send for Band<'_> {}

impl<'a> Band<'a> {
    /// Bands over `out` ([tok][row], `stride` rows per token) for the given
    /// row ranges, which must be increasing and disjoint.
    pub(crate) fn split(
        out: &'a mut [f32],
        stride: usize,
        ranges: impl Iterator<Item = Range<usize>>,
    ) -> Vec<Band<'a>> {
        assert!(
            stride > 0 && out.len().is_multiple_of(stride),
            "output shape"
        );
        let ptr = out.as_mut_ptr();
        let mut end = 0;
        ranges
            .map(|rows| {
                assert!(rows.start >= end && rows.end <= stride, "disjoint bands");
                end = rows.end;
                Band {
                    ptr,
                    len: out.len(),
                    stride,
                    rows,
                    out: std::marker::PhantomData,
                }
            })
            .collect()
    }

    /// Output (token `t`, row `r`) = `v`; `r` must be one of this band's rows.
    #[inline(always)]
    fn put(&mut self, t: usize, r: usize, v: f32) {
        assert!(self.rows.contains(&r), "row {r} outside the band");
        let i = t * self.stride + r;
        assert!(i < self.len, "token {t} outside the output");
        // SAFETY: i < len, within the buffer borrowed for 'a; row r is this
        // band's alone (see the Send impl).
        unsafe { *self.ptr.add(i) = v };
    }

    /// Outputs (token `t + k`, row `r`) = `v[k]`, with the bounds checked
    /// once for all of `v`.
    #[inline(always)]
    fn put_tokens(&mut self, t: usize, r: usize, v: &[f32]) {
        assert!(self.rows.contains(&r), "row {r} outside the band");
        assert!(
            (t + v.len())
                .checked_mul(self.stride)
                .is_some_and(|n| n <= self.len),
            "tokens {t}..{} outside the output",
            t + v.len()
        );
        for (k, &x) in v.iter().enumerate() {
            // SAFETY: (t + k) * stride + r < (t + len) * stride <= len (r <
            // stride as a band row), within the buffer borrowed for 'a; row
            // r is this band's alone (see the Send impl).
            unsafe { *self.ptr.add((t + k) * self.stride + r) = x };
        }
    }

    /// Token `t`'s outputs for `rows` (rows of this band) as one slice, for
    /// a kernel to write in place.
    fn row_slice(&mut self, t: usize, rows: Range<usize>) -> &mut [f32] {
        assert!(
            self.rows.start <= rows.start && rows.start <= rows.end && rows.end <= self.rows.end,
            "rows {rows:?} outside the band"
        );
        let at = t
            .checked_mul(self.stride)
            .filter(|at| at.checked_add(rows.end).is_some_and(|end| end <= self.len))
            .unwrap_or_else(|| panic!("token {t} outside the output"));
        // SAFETY: at + rows.end <= len, within the buffer borrowed for 'a;
        // the rows are this band's alone (see the Send impl), and the slice
        // borrows the band mutably, so nothing else writes them meanwhile.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(at + rows.start), rows.len()) }
    }

    /// Rows `rows` of tokens `t..t + real` (1 to N), one slice a token;
    /// the slices past `real` are empty.
    fn token_slices<const N: usize>(
        &mut self,
        t: usize,
        real: usize,
        rows: Range<usize>,
    ) -> [&mut [f32]; N] {
        assert!(
            self.rows.start <= rows.start && rows.start <= rows.end && rows.end <= self.rows.end,
            "rows {rows:?} outside the band"
        );
        assert!(
            (1..=N).contains(&real)
                && (t + real)
                    .checked_mul(self.stride)
                    .is_some_and(|n| n <= self.len),
            "tokens {t}..{} outside the output",
            t + real
        );
        std::array::from_fn(|j| {
            if j >= real {
                return &mut [][..];
            }
            // SAFETY: (t + j) * stride + rows.end <= (t + real) * stride <=
            // len (rows.end <= stride as band rows), within the buffer
            // borrowed for 'a; the tokens' slices are disjoint (each
            // within its own token's stride), the rows are this band's
            // alone (see the Send impl), and the slices borrow the band
            // mutably, so nothing else writes them meanwhile.
            unsafe {
                std::slice::from_raw_parts_mut(
                    self.ptr.add((t + j) * self.stride + rows.start),
                    rows.len(),
                )
            }
        })
    }

    /// Outputs (token `t + j`, row `rows[k]`) = `v[k][j]` for j < `real`:
    /// a four-row kernel's results, with the bounds checked once for the
    /// sixteen (checked one by one, the stores cost a fifth of the
    /// kernel's time in batched decode).
    #[inline(always)]
    fn put4(&mut self, t: usize, real: usize, rows: [usize; 4], v: [[f32; 4]; 4]) {
        assert!(
            rows.iter().all(|r| self.rows.contains(r)),
            "rows {rows:?} outside the band"
        );
        assert!(
            real <= 4
                && (t + real)
                    .checked_mul(self.stride)
                    .is_some_and(|n| n <= self.len),
            "tokens {t}..{} outside the output",
            t + real
        );
        for (r, v4) in rows.into_iter().zip(v) {
            for (j, v) in v4.into_iter().enumerate().take(real) {
                // SAFETY: (t + j) * stride + r < (t + real) * stride <= len
                // (r < stride as a band row), within the buffer borrowed for
                // 'a; row r is this band's alone (see the Send impl).
                unsafe { *self.ptr.add((t + j) * self.stride + r) = v };
            }
        }
    }
}

/// Weight rows per cache tile (a few KiB to a few tens of KiB: L1).
const ROW_TILE: usize = 16;
/// Activation rows per cache tile (a multiple of 4, so four-token groups
/// keep their alignment; about 100 KiB of Q8 rows at these widths: L2).
const TOK_TILE: usize = 128;

/// The four rows' slices, built in registers: `[usize; 4]::map` was an
/// out-of-line call whose result came back through the stack, and the
/// reload after it (wide loads over narrow stores) stalled every call of a
/// four-row kernel (4% of a batched decode step in perf).
#[inline(always)]
fn slices4<'a>(row: impl Fn(usize) -> &'a [u8], r: [usize; 4]) -> [&'a [u8]; 4] {
    [row(r[0]), row(r[1]), row(r[2]), row(r[3])]
}

/// Token `t`'s results for every row of `out`'s band, as one sequence
/// decoding reads them: the band's quarters through `band` (four streams),
/// the rows past the last whole quarter (under four) through `one`.
fn token_band(
    w: MatRef<'_>,
    band: VecDotBandFn,
    one: VecDotFn,
    a: &[u8],
    t: usize,
    out: &mut Band<'_>,
) {
    let (r0, r1) = (out.rows.start, out.rows.end);
    let rb = w.row_bytes();
    let q = (r1 - r0) / 4;
    band(
        &w.data[r0 * rb..(r0 + 4 * q) * rb],
        a,
        out.row_slice(t, r0..r0 + 4 * q),
    );
    for r in r0 + 4 * q..r1 {
        out.put(t, r, one(w.cols, &w.data[r * rb..(r + 1) * rb], a));
    }
}

/// The rows of `out`'s band of `w` against every activation row.
/// Tokens on the same kernel path are taken four at a time where a four-row
/// kernel exists, so each unpacked weight block serves four tokens.
fn rows_into(w: MatRef<'_>, acts: &[Vec<u8>], seqs: &[Range<usize>], out: &mut Band<'_>) {
    let (r0, r1) = (out.rows.start, out.rows.end);
    let rb = w.row_bytes();
    let n_tok = acts.len();
    let ab = row_bytes(vec_dot_type(w.ty), w.cols);
    assert_eq!(w.data.len(), rb * w.rows, "{}: weight bytes", w.ty);
    assert_eq!(rb, row_bytes(w.ty, w.cols), "{}: weight row bytes", w.ty);
    assert!(acts.iter().all(|a| a.len() == ab), "activation row bytes");
    // Token runs sharing a path (ggml's choice depends on the token index).
    let paths = token_paths(&w, seqs);
    assert_eq!(
        paths.len(),
        n_tok,
        "sequence ranges cover the activation rows"
    );
    let mut runs: Vec<(usize, usize, VecDotFn, Option<Dot4>)> = Vec::new();
    for (t, &path) in paths.iter().enumerate() {
        match runs.last_mut() {
            Some(run) if t > 0 && paths[t - 1] == path => run.1 = t + 1,
            _ => runs.push((t, t + 1, dot_kernel(path, w.ty), dot4_kernel(path, w.ty))),
        }
    }
    let row = |r: usize| &w.data[r * rb..(r + 1) * rb];
    if n_tok == 1 {
        // Decode: the band is read as four unbroken streams, one per
        // quarter: more streams in flight kept the prefetchers ahead of the
        // loads (a row-at-a-time scan, one stream, ran 25-40% slower from
        // DRAM; two adjacent rows read together were slower still, their
        // streams breaking at every row). The band kernel takes the
        // quarters' rows four at a time in one call: per-call setup and
        // the wait on each result's reduction ended every four-row call
        // (kbench, one thread, rows in L2, three runs: Q8_0 49.7-51.7 ->
        // 53.0-55.9 GB/s, Q5_0 30.2-30.8 -> 32.3-32.9, Q4_1 28.7-29.4 ->
        // 30.8-32.0).
        if let Some(band) = dot_band_kernel(paths[0], w.ty) {
            token_band(w, band, runs[0].2, &acts[0], 0, out);
            return;
        }
    }
    // Cache blocking for prompt batches: a tile of activation rows stays in
    // L2 while tiles of weight rows pass through L1, instead of every
    // weight row streaming the whole batch's activations again.
    let mut prepared: Vec<Vec<Chunk32>> = Vec::new();
    let mut unpacked: Vec<Vec<Chunk32>> = Vec::new();
    for tt0 in (0..n_tok).step_by(TOK_TILE) {
        let tt1 = (tt0 + TOK_TILE).min(n_tok);
        // The tile's four-row groups, each with its activation values
        // prepared once for every weight row of the band, and how many of
        // its rows are real: two or three tokens left over go as a group
        // padded with copies of its last row (one pass over the weights
        // instead of one per token; each row's result is its own).
        let mut groups: Vec<(usize, Dot4, usize)> = Vec::new();
        for &(t0, t1, _, four) in &runs {
            if let Some(four) = four {
                let (a0, a1) = (t0.max(tt0), t1.min(tt1));
                let mut t = a0;
                while t + 4 <= a1 {
                    groups.push((t, four, 4));
                    t += 4;
                }
                if a1 >= t + 2 {
                    groups.push((t, four, a1 - t));
                }
            }
        }
        let group_acts =
            |t: usize, real: usize| [0, 1, 2, 3].map(|k: usize| &acts[t + k.min(real - 1)][..]);
        let unpack_tile = groups.len() >= 4;
        // Batched decode's few tokens (too few groups to unpack rows for),
        // where the format has a kernel for four weight rows at once: the
        // rows come from the band's four quarters, as decode reads them,
        // each activation load serves four rows, and every group takes its
        // turn on the same four rows while they are in L1 (eight sequences
        // went through the eight-token kernel one row at a time, slower).
        let by_rows4: Vec<bool> = groups
            .iter()
            .map(|&(_, four, _)| !unpack_tile && four.rows4.is_some())
            .collect();
        // Consecutive groups of one run go in pairs through an eight-row
        // kernel where there is one; with enough pairs to pay for
        // unpacking the weight rows, through the unpacked kernel, whose
        // activation layout may differ.
        let mut paired = vec![false; groups.len()];
        let mut g = 0;
        while g < groups.len() {
            let (t, four, _) = groups[g];
            // (A format may have only the unpacked eight-row kernel.)
            let pairs =
                !by_rows4[g] && (four.dot8.is_some() || (unpack_tile && four.unpacked.is_some()));
            if pairs && groups.get(g + 1).is_some_and(|&(t2, ..)| t2 == t + 4) && !by_rows4[g + 1] {
                paired[g] = true;
                paired[g + 1] = true;
                g += 2;
            } else {
                g += 1;
            }
        }
        prepared.resize_with(prepared.len().max(groups.len()), Vec::new);
        for (g, ((&(t, four, real), pre), &pair)) in groups
            .iter()
            .zip(prepared.iter_mut())
            .zip(&paired)
            .enumerate()
        {
            let prepare = match four.unpacked {
                Some(u) if pair && unpack_tile => u.prepare,
                _ if by_rows4[g] => four.rows4_prepare,
                _ => four.prepare,
            };
            prepare(group_acts(t, real), pre);
        }
        // With too few tokens to unpack rows for, a product is a few
        // passes over weights fresh from DRAM: its rows go as four
        // interleaved streams, as in decode (one stream left the
        // prefetchers behind the loads). Outputs do not depend on the order.
        let streams = !unpack_tile;
        let n_rows = r1 - r0;
        let quarter = n_rows / 4;
        let row_at = |p: usize| {
            if streams && p < 4 * quarter {
                r0 + (p % 4) * quarter + p / 4
            } else {
                r0 + p
            }
        };
        if by_rows4.contains(&true) {
            // One group (up to four sequences decoding) on a band kernel:
            // the loop over the rows runs inside one call.
            let band4 = match groups.as_slice() {
                &[(t, four, real)] => if real <= 2 {
                    four.rows4_two_band.or(four.rows4_band)
                } else {
                    four.rows4_band
                }
                .map(|band| (t, real, band)),
                _ => None,
            }
            .filter(|_| quarter > 0);
            if let Some((t, real, band)) = band4 {
                let n = 4 * quarter;
                band(
                    &w.data[r0 * rb..(r0 + n) * rb],
                    &prepared[0],
                    out.token_slices::<4>(t, real, r0..r0 + n),
                );
            }
            // Two groups of one run (seven or eight sequences: a second
            // group of two takes the two-token kernel row by row below),
            // each four weight rows serving both in one call.
            let band8 = match groups.as_slice() {
                &[(t, four, 4), (t1, _, real)] if runs.len() == 1 && t1 == t + 4 && real > 2 => {
                    four.rows4_band2.map(|band| (t, 4 + real, band))
                }
                _ => None,
            }
            .filter(|_| quarter > 0);
            if let Some((t, real, band)) = band8 {
                let n = 4 * quarter;
                band(
                    &w.data[r0 * rb..(r0 + n) * rb],
                    [&prepared[0], &prepared[1]],
                    out.token_slices::<8>(t, real, r0..r0 + n),
                );
            }
            let banded = band4.is_some() || band8.is_some();
            for k in (0..quarter).filter(|_| !banded) {
                let rows = [0, 1, 2, 3].map(|j| r0 + j * quarter + k);
                for (g, &(t, four, real)) in groups.iter().enumerate() {
                    let kernel = if real <= 2 {
                        four.rows4_two.or(four.rows4)
                    } else {
                        four.rows4
                    };
                    let Some(rows4) = kernel.filter(|_| by_rows4[g]) else {
                        continue;
                    };
                    out.put4(t, real, rows, rows4(slices4(row, rows), &prepared[g]));
                }
            }
            // Rows past the quarters (a band of rows not a multiple of
            // four) through the one-row kernel, on `prepare`'s layout.
            let mut plain = Vec::new();
            for (g, &(t, four, real)) in groups.iter().enumerate() {
                if !by_rows4[g] || r0 + 4 * quarter == r1 {
                    continue;
                }
                (four.prepare)(group_acts(t, real), &mut plain);
                for r in r0 + 4 * quarter..r1 {
                    let v4 = (four.dot)(row(r), group_acts(t, real), &plain);
                    for (j, v) in v4.into_iter().enumerate().take(real) {
                        out.put(t + j, r, v);
                    }
                }
            }
        }
        // Tokens not in a group go one at a time: a run's single leftover
        // token, or every token of a run without a four-row kernel.
        let singles = |&(t0, t1, _, four): &(usize, usize, VecDotFn, Option<Dot4>)| {
            let (a0, a1) = (t0.max(tt0), t1.min(tt1));
            let from = match four {
                Some(_) if a1.saturating_sub(a0) % 4 == 1 => a1 - 1,
                Some(_) => a1,
                None => a0,
            };
            from.max(a0)..a1
        };
        // Batched decode's leftover single token (five sequences: a group
        // and one) reads the band as one sequence decoding does, through
        // the band kernel (same bits as the one-row kernel), instead of a
        // one-row call per row: batchbench, five SmolLM2 sequences, the
        // Q8_0 output took 3.56 ms a step against 1.64 for four.
        let decode = !groups.is_empty() && by_rows4.iter().all(|&b| b);
        let lone: Vec<(usize, VecDotFn)> = runs
            .iter()
            .flat_map(|run| singles(run).map(move |tt| (tt, run.2)))
            .collect();
        let bands: Option<Vec<VecDotBandFn>> = lone
            .iter()
            .map(|&(tt, _)| dot_band_kernel(paths[tt], w.ty))
            .collect();
        let singles_done = match bands {
            Some(bands) if decode && quarter > 0 => {
                for (&(tt, one), band) in lone.iter().zip(bands) {
                    token_band(w, band, one, &acts[tt], tt, out);
                }
                true
            }
            _ => lone.is_empty(),
        };
        // Batched decode whose groups all went through the four-row kernel
        // above leaves nothing to the row tiles: skip their bookkeeping
        // (rows_into's own time in a four-sequence SmolLM2 step, perf:
        // 3.1 -> 2.45% per worker).
        if decode && singles_done {
            continue;
        }
        for pt0 in (0..n_rows).step_by(ROW_TILE) {
            let tile = (pt0..(pt0 + ROW_TILE).min(n_rows)).map(row_at);
            let mut tile_rows = [0usize; ROW_TILE];
            let n_tile = tile.len();
            for (slot, r) in tile_rows.iter_mut().zip(tile.clone()) {
                *slot = r;
            }
            // Where several eight-row passes cross the row tile, its rows
            // are unpacked once for all of them (Q5_0's fifth bits cost as
            // much as a token's products).
            let mut tile_unpacked = false;
            let mut g = 0;
            while g < groups.len() {
                if by_rows4[g] {
                    g += 1;
                    continue;
                }
                let (t, four, real) = groups[g];
                // Two consecutive groups of one run share each unpacked
                // weight block where the kernel takes eight rows.
                if paired[g] {
                    let (p0, p1) = (&prepared[g], &prepared[g + 1]);
                    let real = 4 + groups[g + 1].2;
                    match (four.unpacked, four.dot8) {
                        (Some(u), _) if unpack_tile => {
                            if !tile_unpacked {
                                unpacked.resize_with(ROW_TILE, Vec::new);
                                for (r, uw) in tile.clone().zip(unpacked.iter_mut()) {
                                    (u.unpack)(row(r), uw);
                                }
                                tile_unpacked = true;
                            }
                            // Two rows a call where the build can: each
                            // activation load then serves both.
                            let rows = &tile_rows[..n_tile];
                            let mut k0 = 0;
                            if let Some(dot16) = u.dot16 {
                                while k0 + 2 <= rows.len() {
                                    let [v0, v1] =
                                        dot16([&unpacked[k0], &unpacked[k0 + 1]], p0, p1);
                                    out.put_tokens(t, rows[k0], &v0[..real]);
                                    out.put_tokens(t, rows[k0 + 1], &v1[..real]);
                                    k0 += 2;
                                }
                            }
                            for (&r, uw) in rows[k0..].iter().zip(&unpacked[k0..]) {
                                let v8 = (u.dot8)(uw, p0, p1);
                                out.put_tokens(t, r, &v8[..real]);
                            }
                        }
                        (_, Some(dot8)) => {
                            for r in tile.clone() {
                                out.put_tokens(t, r, &dot8(row(r), p0, p1)[..real]);
                            }
                        }
                        // Pairing takes neither-kernel groups only with
                        // an unpacked kernel and a tile to unpack.
                        (_, None) => unreachable!("paired groups without an eight-row kernel"),
                    }
                    g += 2;
                    continue;
                }
                let a = group_acts(t, real);
                for r in tile.clone() {
                    let v4 = (four.dot)(row(r), a, &prepared[g]);
                    for (k, v) in v4.into_iter().enumerate().take(real) {
                        out.put(t + k, r, v);
                    }
                }
                g += 1;
            }
            for run in &runs {
                let one = run.2;
                for tt in singles(run) {
                    for r in tile.clone() {
                        out.put(tt, r, one(w.cols, row(r), &acts[tt]));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kestrel_quant::{dequantize_row, quantize_row};

    /// Xorshift values in [-0.5, 0.5) from `seed`.
    fn values(seed: u32) -> impl FnMut() -> f32 {
        let mut s = seed;
        move || {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s as f32 / u32::MAX as f32) - 0.5
        }
    }

    /// Every row of `w` on the calling thread, as one band.
    fn all_rows_into(w: MatRef<'_>, acts: &[Vec<u8>], seqs: &[Range<usize>], out: &mut [f32]) {
        for mut b in Band::split(out, w.rows, std::iter::once(0..w.rows)) {
            rows_into(w, acts, seqs, &mut b);
        }
    }

    /// Bands cut in proportion cover every row once, in order, each cut at
    /// a multiple of four rows.
    #[test]
    fn cut_rows_covers_every_row_in_proportion() {
        for (rows, cuts) in [
            (576usize, vec![1.0, 1.0]),
            (576, vec![1.0, 1.5]),
            (192, vec![2.0, 1.0, 1.0]),
            (10, vec![1.0, 1.0]),
            (3, vec![1.0, 1.0, 1.0]),
            (49152, vec![0.6, 1.4]),
        ] {
            let got = cut_rows(rows, &cuts);
            assert_eq!(got.len(), cuts.len());
            assert_eq!(got[0].start, 0);
            assert_eq!(got.last().unwrap().end, rows);
            for w in got.windows(2) {
                assert_eq!(w[0].end, w[1].start, "{rows} {cuts:?}: {got:?}");
            }
            let total: f64 = cuts.iter().sum();
            for (r, &c) in got[..got.len() - 1].iter().zip(&cuts) {
                assert!(r.end.is_multiple_of(4), "{rows} {cuts:?}: {got:?}");
                let want = rows as f64 * c / total;
                assert!(
                    (r.len() as f64 - want).abs() <= 4.0 + want * 0.01 || rows < 16,
                    "{rows} {cuts:?}: {got:?}"
                );
            }
        }
    }

    /// A worker measured slower gets a smaller share; a hand-off where one
    /// worker ran no share of its own leaves the averages alone.
    #[test]
    fn balance_moves_work_off_the_slower_worker() {
        let b = Balance::new(2);
        assert_eq!(b.shares(2), vec![1.0, 1.0]);
        for _ in 0..100 {
            b.record(0, 1000.0, 1e-3);
            b.record(1, 1000.0, 1.5e-3);
            b.settle();
        }
        let s = b.shares(2);
        assert!(s[0] / s[1] > 1.4 && s[0] / s[1] < 1.6, "{s:?}");
        b.record(1, 1000.0, 10e-3);
        b.settle();
        assert_eq!(b.shares(2), s, "one worker's time alone");
        assert_eq!(b.shares(3), vec![1.0; 3], "another pool size");
    }

    /// Products cut unevenly for an uneven balance (q/k/v-like shapes, one
    /// too small to split, and one whose faster worker's cut is empty) give
    /// the single-thread bits.
    #[test]
    fn uneven_bands_give_the_single_thread_bits() {
        let mut rnd = values(5);
        let ty = GgmlType::Q4_1;
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let balance = Balance::new(2);
        for _ in 0..50 {
            balance.record(0, 1.0, 1.0);
            balance.record(1, 1.0, 1.8);
            balance.settle();
        }
        // (Three rows of 35200 columns pass the size for a split; the
        // faster worker's cut, 2 rows, rounds down to none.)
        for (cols, shapes) in [(256usize, vec![576usize, 192, 8]), (35200, vec![3])] {
            let rb = ty.row_bytes(cols as u64).unwrap() as usize;
            let weights: Vec<Vec<u8>> = shapes
                .iter()
                .map(|&rows| {
                    let mut data = vec![0u8; rb * rows];
                    for row in data.chunks_exact_mut(rb) {
                        let wf: Vec<f32> = (0..cols).map(|_| rnd()).collect();
                        quantize_row(ty, &wf, row);
                    }
                    data
                })
                .collect();
            for n_tok in [1usize, 4] {
                let x: Vec<f32> = (0..n_tok * cols).map(|_| rnd()).collect();
                let acts: Vec<Vec<u8>> = x
                    .chunks_exact(cols)
                    .map(|r| quantize_activations(ty, r))
                    .collect();
                let seqs: Vec<Range<usize>> = (0..n_tok).map(|t| t..t + 1).collect();
                let mats: Vec<MatRef<'_>> = shapes
                    .iter()
                    .zip(&weights)
                    .map(|(&rows, data)| MatRef {
                        ty,
                        rows,
                        cols,
                        data,
                    })
                    .collect();
                let mut want: Vec<Vec<f32>> =
                    shapes.iter().map(|&r| vec![0f32; n_tok * r]).collect();
                for (w, out) in mats.iter().zip(want.iter_mut()) {
                    all_rows_into(*w, &acts, &seqs, out);
                }
                for bal in [None, Some(&balance)] {
                    let mut got: Vec<Vec<f32>> =
                        shapes.iter().map(|&r| vec![0f32; n_tok * r]).collect();
                    let products = mats
                        .iter()
                        .zip(got.iter_mut())
                        .map(|(w, out)| Product {
                            w: *w,
                            acts: &acts,
                            seqs: &seqs,
                            out,
                        })
                        .collect();
                    run_products(products, &pool, bal);
                    assert_eq!(
                        got,
                        want,
                        "{cols} columns, {n_tok} tokens, balance {}",
                        bal.is_some()
                    );
                }
            }
        }
    }

    /// Decode reads a band as four streams, two rows per call: every output
    /// must still carry the bits of its own row's one-row kernel, for row
    /// counts that do not divide by 4 (the leftover rows go one at a time).
    #[test]
    fn decode_streams_give_each_row_its_own_dot() {
        let cols = 512usize;
        let mut rnd = values(11);
        let x: Vec<f32> = (0..cols).map(|_| rnd()).collect();
        for ty in [
            GgmlType::Q4_0,
            GgmlType::Q4_1,
            GgmlType::Q5_0,
            GgmlType::Q8_0,
            GgmlType::Q4_K,
            GgmlType::Q6_K,
        ] {
            for rows in [1usize, 6, 8, 37, 64] {
                let rb = ty.row_bytes(cols as u64).unwrap() as usize;
                let mut data = vec![0u8; rb * rows];
                for r in 0..rows {
                    let wf: Vec<f32> = (0..cols).map(|_| rnd()).collect();
                    quantize_row(ty, &wf, &mut data[r * rb..(r + 1) * rb]);
                }
                let w = MatRef {
                    ty,
                    rows,
                    cols,
                    data: &data,
                };
                let acts = vec![quantize_activations(ty, &x)];
                let mut out = vec![0f32; rows];
                all_rows_into(w, &acts, std::slice::from_ref(&(0..1)), &mut out);
                let one = dot_kernel(dot_path(ty, rows, 0, 1), ty);
                for r in 0..rows {
                    let want = one(cols, &data[r * rb..(r + 1) * rb], &acts[0]);
                    assert_eq!(out[r].to_bits(), want.to_bits(), "{ty} rows {rows} row {r}");
                }
            }
        }
    }

    /// Batched decode (two to five sequences, one token each) takes the
    /// four-row group kernels, over a whole band in one call where there is
    /// a band build, and a fifth sequence the one-token band kernel: every
    /// output keeps its token's one-row bits, for row counts that do not
    /// divide by 4 (the leftover rows go one at a time).
    #[test]
    fn batched_decode_gives_every_sequence_its_one_row_bits() {
        let cols = 576usize;
        let mut rnd = values(13);
        let x: Vec<f32> = (0..8 * cols).map(|_| rnd()).collect();
        for ty in [GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q8_0] {
            for rows in [5usize, 8, 37, 64] {
                let rb = ty.row_bytes(cols as u64).unwrap() as usize;
                let mut data = vec![0u8; rb * rows];
                for row in data.chunks_exact_mut(rb) {
                    let wf: Vec<f32> = (0..cols).map(|_| rnd()).collect();
                    quantize_row(ty, &wf, row);
                }
                let w = MatRef {
                    ty,
                    rows,
                    cols,
                    data: &data,
                };
                for n_seq in 2usize..=8 {
                    let acts = quantize_rows(ty, &x[..n_seq * cols], cols);
                    let seqs: Vec<Range<usize>> = (0..n_seq).map(|t| t..t + 1).collect();
                    let mut out = vec![f32::NAN; n_seq * rows];
                    all_rows_into(w, &acts, &seqs, &mut out);
                    for (t, a) in acts.iter().enumerate() {
                        let one = dot_kernel(dot_path(ty, rows, 0, 1), ty);
                        for r in 0..rows {
                            let want = one(cols, &data[r * rb..(r + 1) * rb], a);
                            assert_eq!(
                                out[t * rows + r].to_bits(),
                                want.to_bits(),
                                "{ty} rows {rows}, {n_seq} sequences: sequence {t} row {r}"
                            );
                        }
                    }
                }
            }
        }
    }

    /// Prompt batches take the four- and eight-row kernels, with weight
    /// rows unpacked once per row tile where several eight-row passes
    /// cross it, or read as four streams where they are not: every output
    /// keeps the bits of its token's one-row kernel, for batches with
    /// leftover groups, padded groups and single tokens, and more rows than
    /// a tile.
    #[test]
    fn prompt_batches_give_every_token_its_one_row_bits() {
        // 40 rows: Q4_K's repacked path (rows a multiple of 8) in 3 tiles.
        let (rows, max_cols) = (40usize, 512usize);
        let mut rnd = values(11);
        let wf: Vec<f32> = (0..rows * max_cols).map(|_| rnd()).collect();
        let x: Vec<f32> = (0..37 * max_cols).map(|_| rnd() * 4.0).collect();
        for ty in [
            GgmlType::Q4_0,
            GgmlType::Q4_1,
            GgmlType::Q5_0,
            GgmlType::Q5_1,
            GgmlType::Q8_0,
            GgmlType::Q4_K,
            GgmlType::Q6_K,
        ] {
            // Ten legacy blocks, or two K-quant super-blocks.
            let cols = if ty.block_size() == 256 {
                max_cols
            } else {
                320
            };
            let rb = ty.row_bytes(cols as u64).unwrap() as usize;
            let mut data = vec![0u8; rb * rows];
            for r in 0..rows {
                quantize_row(
                    ty,
                    &wf[r * cols..(r + 1) * cols],
                    &mut data[r * rb..(r + 1) * rb],
                );
            }
            let w = MatRef {
                ty,
                rows,
                cols,
                data: &data,
            };
            // 2, 3, 7 and 23 end in a padded group (alone, paired with a
            // packed group, paired in an unpacked tile); 5 and 37 in one
            // single token.
            for n_tok in [2usize, 3, 5, 7, 16, 23, 37] {
                let acts = quantize_rows(ty, &x[..n_tok * cols], cols);
                let mut out = vec![0f32; n_tok * rows];
                let seq = 0..n_tok;
                all_rows_into(w, &acts, std::slice::from_ref(&seq), &mut out);
                for (t, a) in acts.iter().enumerate() {
                    let one = dot_kernel(dot_path(ty, rows, t, n_tok), ty);
                    for r in 0..rows {
                        let want = one(cols, &data[r * rb..(r + 1) * rb], a);
                        assert_eq!(
                            out[t * rows + r].to_bits(),
                            want.to_bits(),
                            "{ty} {n_tok} tokens: token {t} row {r}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn threaded_matmul_equals_single_thread_and_dequantized_reference() {
        let (rows, cols, n_tok) = (96usize, 512usize, 3usize);
        let mut rnd = values(7);
        let wf: Vec<f32> = (0..rows * cols).map(|_| rnd()).collect();
        let x: Vec<f32> = (0..n_tok * cols).map(|_| rnd()).collect();
        for ty in [
            GgmlType::Q4_0,
            GgmlType::Q8_0,
            GgmlType::Q4_K,
            GgmlType::F16,
        ] {
            let rb = ty.row_bytes(cols as u64).unwrap() as usize;
            let mut data = vec![0u8; rb * rows];
            for r in 0..rows {
                quantize_row(
                    ty,
                    &wf[r * cols..(r + 1) * cols],
                    &mut data[r * rb..(r + 1) * rb],
                );
            }
            let w = MatRef {
                ty,
                rows,
                cols,
                data: &data,
            };
            let mut a = vec![0f32; n_tok * rows];
            let mut b = vec![0f32; n_tok * rows];
            all_rows_into(
                w,
                &x.chunks_exact(cols)
                    .map(|r| quantize_activations(ty, r))
                    .collect::<Vec<_>>(),
                std::slice::from_ref(&(0..n_tok)),
                &mut a,
            );
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(3)
                .build()
                .unwrap();
            matmul(w, &x, n_tok, &mut b, &pool);
            assert_eq!(a, b, "{ty}");
            let mut deq = vec![0f32; cols];
            for r in 0..rows {
                dequantize_row(ty, &data[r * rb..(r + 1) * rb], &mut deq);
                for t in 0..n_tok {
                    let want: f32 = deq.iter().zip(&x[t * cols..]).map(|(p, q)| p * q).sum();
                    let got = b[t * rows + r];
                    assert!(
                        (got - want).abs() < 0.05 + 0.02 * want.abs(),
                        "{ty} r{r} t{t}: {got} vs {want}"
                    );
                }
            }
        }
    }
}
