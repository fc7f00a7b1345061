//! The body that the one-query path's AVX2 and AVX-512 builds share: up to
//! four heads of one KV head at a time, the dot products first, then the
//! online softmax in passes, then the values 64 dimensions at a time, in
//! registers of either width (`F16Block`).

use kestrel_quant::{f16_dot, f32_to_f16_row};

use super::avx2::f16_dot32;
use super::avx512::{dots16_avx512, expf_rows_avx512, f16_dot32_avx512, running_max_avx512};
use super::{heads_portable, Query, MAX_RUN};
use crate::attention::keys::Runs;

/// The body of [`heads_avx2`](super::avx2::heads_avx2) (`WIDE` false) and [`heads_avx512`](super::avx512::heads_avx512) (true),
/// up to [`MAX_RUN`] heads at a time; the caller has the matching features.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(super) unsafe fn heads_x86<const WIDE: bool>(
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
pub(super) trait F16Block: Copy {
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

/// How many cache rows ahead the decode loops prefetch. In a step the
/// weights evict the cache between layers, so its rows come from memory:
/// abench with 3 MB read before each call (FLUSH=3000), SmolLM2's heads,
/// 30 layers, four alternated runs, us a call, 8 / 16 / 24 rows ahead: four
/// sequences at context 150 39.8-55.6 / 30.3-39.0 / 30.9-36.4, one sequence
/// 11.5-18.3 / 9.9-12.9 / 9.6-10.7; cache-resident no different.
#[cfg(target_arch = "x86_64")]
pub(super) const KV_PREFETCH: usize = 24;

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
pub(super) fn prefetch_halves(p: *const u16, len: usize) {
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
