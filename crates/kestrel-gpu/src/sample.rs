//! Token selection on the device, as `kestrel_sampling` defines it.
//! [`GreedySampler`] runs the chain's steps 1-4: sanitize (NaN = -inf,
//! +inf = f32::MAX), logit bias (entries in order, several for one id
//! adding up), repetition, frequency and presence penalties over the
//! history window, then the first maximum (lowest id among ties).
//! [`Sampler`] runs the whole chain (top-k, top-p, min-p, temperature and
//! the seeded xorshift draw), drawing the CPU sampler's tokens bit for bit.
//! Both write the chosen id into the history buffer at the next position,
//! where the next step's embedding lookup reads it, so nothing has to come
//! back to the host inside a step.
//!
//! The greedy sampler is one workgroup of 256 threads (and a scratch of two
//! words per token id for the penalty counts). Floats are compared through
//! their bits (WGSL lets an implementation assume there are no NaNs or
//! infinities, so `x != x` and comparisons with infinities cannot be
//! trusted). The penalties divide by `repeat_penalty` in integer
//! arithmetic, rounded as IEEE division rounds (WGSL's division need not
//! be), and keep products from being fused into a following add, so every
//! adapter computes the CPU's bits.
//!
//! lavapipe (Mesa's software Vulkan) ends an invocation's loops after 65535
//! iterations in all, so no kernel here walks a long range on one thread.

use kestrel_sampling::{
    inverse_temperature, SamplerParams, EXP_LN2_Q31, EXP_LOG2E_FRAC, EXP_TABLE,
};

use crate::{Gpu, GpuError};

pub struct GreedySampler {
    pipeline: wgpu::ComputePipeline,
    /// Two words per token id for the penalties, sized for the largest
    /// vocabulary seen (behind a lock: `run` takes `&self`).
    seen: std::sync::Mutex<Option<(usize, wgpu::Buffer)>>,
}

const SRC: &str = r#"
@group(0) @binding(0) var<storage, read_write> logits: array<u32>;
@group(0) @binding(1) var<storage, read_write> history: array<u32>;
@group(0) @binding(2) var<storage, read> bias_ids: array<u32>;
@group(0) @binding(3) var<storage, read> bias_vals: array<u32>;
// vocab, write position, window start, window length, bias entries,
// repeat penalty, frequency penalty, presence penalty (f32 bits), 0
@group(0) @binding(4) var<uniform> p: array<vec4<u32>, 3>;
// Per token id: occurrences in the window, then its first position there.
@group(0) @binding(5) var<storage, read_write> seen: array<atomic<u32>>;

// x, through an xor with a zero the compiler cannot see: a product passed
// through it cannot be fused into a following add (drivers may contract
// a * b + c into an fma; the CPU rounds the product first).
fn fence(x: f32) -> f32 {
    return bitcast<f32>(bitcast<u32>(x) ^ p[2].x);
}

const NEG_INF: u32 = 0xff800000u;
const MAX_F: u32 = 0x7f7fffffu;

var<workgroup> best_key: array<u32, 256>;
var<workgroup> best_id: array<u32, 256>;

// NaN -> -inf, +inf -> f32::MAX, on the bits.
fn sanitize(b: u32) -> u32 {
    if ((b & 0x7fffffffu) > 0x7f800000u) { return NEG_INF; }
    if (b == 0x7f800000u) { return MAX_F; }
    return b;
}

// An order-preserving u32 for a non-NaN float.
fn key(b: u32) -> u32 {
    if ((b & 0x80000000u) != 0u) { return ~b; }
    return b | 0x80000000u;
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) t: u32) {
    let vocab = p[0].x;
    let ws = p[0].z;
    let wn = p[0].w;
    if (t == 0u) {
        for (var i = 0u; i < p[1].x; i++) {
            let id = bias_ids[i];
            let b = bias_vals[i];
            if (id < vocab && (b & 0x7fffffffu) <= 0x7f800000u) {
                logits[id] = sanitize(bitcast<u32>(bitcast<f32>(sanitize(logits[id])) + bitcast<f32>(b)));
            }
        }
    }
    storageBarrier();
    workgroupBarrier();
    // Penalties: count each id's occurrences in the window and find its
    // first position; the thread at that position applies them, so every
    // id is written once. O(window) per thread: a pairwise scan passes
    // lavapipe's limit of 65535 loop iterations on long windows.
    for (var j = t; j < wn; j += 256u) {
        let tok = history[ws + j];
        if (tok < vocab) {
            atomicStore(&seen[2u * tok], 0u);
            atomicStore(&seen[2u * tok + 1u], 0xffffffffu);
        }
    }
    storageBarrier();
    workgroupBarrier();
    for (var j = t; j < wn; j += 256u) {
        let tok = history[ws + j];
        if (tok < vocab) {
            atomicAdd(&seen[2u * tok], 1u);
            atomicMin(&seen[2u * tok + 1u], j);
        }
    }
    storageBarrier();
    workgroupBarrier();
    for (var j = t; j < wn; j += 256u) {
        let tok = history[ws + j];
        if (tok < vocab && atomicLoad(&seen[2u * tok + 1u]) == j) {
            let c = atomicLoad(&seen[2u * tok]);
            let lb = sanitize(logits[tok]);
            if (lb != NEG_INF) {
                let l = bitcast<f32>(lb);
                var r: f32;
                if ((lb & 0x80000000u) != 0u || (lb & 0x7fffffffu) == 0u) {
                    r = fence(l * bitcast<f32>(p[1].y));
                } else {
                    r = bitcast<f32>(div_exact(lb, p[1].y));
                }
                let sub = fence(f32(c) * bitcast<f32>(p[1].z)) + bitcast<f32>(p[1].w);
                logits[tok] = sanitize(bitcast<u32>(r - sub));
            }
        }
    }
    storageBarrier();
    workgroupBarrier();
    // First maximum: ascending ids per thread keep the first, then the
    // tree keeps the larger value, the lower id on a tie.
    var bk = 0u;
    var bi = 0xffffffffu;
    for (var i = t; i < vocab; i += 256u) {
        let k = key(sanitize(logits[i]));
        if (bi == 0xffffffffu || k > bk) {
            bk = k;
            bi = i;
        }
    }
    best_key[t] = bk;
    best_id[t] = bi;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s >>= 1u) {
        if (t < s) {
            let ok = best_key[t + s];
            let oi = best_id[t + s];
            let mi = best_id[t];
            if (oi != 0xffffffffu && (mi == 0xffffffffu || ok > best_key[t] || (ok == best_key[t] && oi < mi))) {
                best_key[t] = ok;
                best_id[t] = oi;
            }
        }
        workgroupBarrier();
    }
    if (t == 0u) {
        // Every logit -inf: all tie, so the first maximum is token 0, as
        // the CPU sampler answers.
        history[p[0].y] = best_id[0];
    }
}
"#;

impl GreedySampler {
    pub fn new(gpu: &Gpu) -> GreedySampler {
        GreedySampler {
            pipeline: gpu.pipeline("greedy sampler", &[SRC, crate::matvec::EXACT_DIV].concat()),
            seen: Default::default(),
        }
    }

    /// Picks the token from `vocab` logits (adjusted in place) and writes
    /// it to `history[pos]`; the penalties read `history[..pos]`.
    pub fn run(
        &self,
        gpu: &Gpu,
        (logits, history): (&wgpu::Buffer, &wgpu::Buffer),
        vocab: usize,
        pos: usize,
        params: &SamplerParams,
    ) -> Result<(), GpuError> {
        if vocab == 0
            || logits.size() < (vocab * 4) as u64
            || history.size() < ((pos + 1) * 4) as u64
        {
            return Err(GpuError::Shape(format!(
                "greedy sampler: {vocab} logits in {} bytes, position {pos} in a history of {} bytes",
                logits.size(),
                history.size()
            )));
        }
        // Negative: the whole history, as the full sampler reads it.
        let window = usize::try_from(params.repeat_last_n).map_or(pos, |n| n.min(pos));
        let active = window > 0
            && (params.repeat_penalty != 1.0
                || params.frequency_penalty != 0.0
                || params.presence_penalty != 0.0);
        let window = if active { window } else { 0 };
        let ids: Vec<u32> = params.logit_bias.iter().map(|b| b.0).collect();
        let vals: Vec<f32> = params.logit_bias.iter().map(|b| b.1).collect();
        let ids = gpu.upload_u32("bias ids", &ids)?;
        let vals = gpu.upload_f32("bias values", &vals)?;
        let uniform = gpu.params(&[
            vocab as u32,
            pos as u32,
            (pos - window) as u32,
            window as u32,
            params.logit_bias.len() as u32,
            params.repeat_penalty.to_bits(),
            params.frequency_penalty.to_bits(),
            params.presence_penalty.to_bits(),
            0,
            0,
            0,
            0,
        ]);
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if seen.as_ref().is_none_or(|(n, _)| *n < vocab) {
            *seen = Some((vocab, gpu.scratch_f32("greedy penalty counts", 2 * vocab)));
        }
        let (_, seen) = seen.as_ref().expect("allocated above");
        let bind = gpu.bind(
            &self.pipeline,
            &[logits, history, &ids, &vals, &uniform, seen],
        );
        gpu.run(&self.pipeline, &bind, 1);
        Ok(())
    }
}

/// The whole chain of `kestrel_sampling` on the device, drawing the same
/// token as the CPU sampler for the same logits, history, parameters and
/// generator state (bit for bit: every float step is one correctly rounded
/// add, subtract or multiply, the exp and the penalty's division are
/// integer arithmetic, and sums follow the CPU's blocks of
/// `kestrel_sampling::SUM_BLOCK`), and advancing the generator by exactly
/// one step per non-greedy call (greedy draws nothing).
///
/// Kernels, all recorded with `Gpu::run` (one submission inside a step,
/// nothing read back):
/// 1. `adjust` (one workgroup): sanitized logits with bias and penalties
///    into a scratch row (the caller's logits are not modified), the first
///    maximum, the count of candidates (not `-inf`); greedy ends here and
///    writes the first maximum into `history[pos]`.
/// 2. With `0 < top_k < vocab`: a radix select over order-preserving keys
///    (4 passes of 8 bits: histogram, choose the digit) finds the `top_k`-th
///    largest key `T` and how many of the keys equal to `T` are needed.
/// 3. A stable compaction (count per tile, scan, write) gathers the pool in
///    id order: every key above the threshold and the first needed ones
///    equal to it. The threshold is `T` (top-k binding), `max + ln(min_p)`
///    when min-p is the only filter (a superset of its survivors), or `-inf`
///    (every candidate, when nothing bounds the count).
/// 4. The pool is sorted by (logit descending, id ascending): by rank
///    (each element counts those before it) when the pool is at most
///    [`RANK_SORT_MAX`], else by a stable 4-pass LSD radix sort on the
///    inverted keys, which keeps id order among ties.
/// 5. `finish` (one workgroup): top-p, min-p, temperature and the draw
///    over the sorted pool (weights and block totals in parallel, the
///    totals and the search on one thread); the token goes into
///    `history[pos]`, the generator state back to its buffer.
///
/// Scratch buffers are sized for the largest vocabulary seen and reused;
/// calls are ordered on the queue, so several sequences may share one
/// sampler within a step.
pub struct Sampler {
    adjust: wgpu::ComputePipeline,
    sel_hist: wgpu::ComputePipeline,
    sel_choose: wgpu::ComputePipeline,
    cmp_count: wgpu::ComputePipeline,
    cmp_scan: wgpu::ComputePipeline,
    cmp_write: wgpu::ComputePipeline,
    rank_sort: wgpu::ComputePipeline,
    rs_hist: wgpu::ComputePipeline,
    rs_scan: wgpu::ComputePipeline,
    rs_scatter: wgpu::ComputePipeline,
    finish: wgpu::ComputePipeline,
    /// One uniform per radix pass holding its shift (0, 8, 16, 24).
    shifts: [wgpu::Buffer; 4],
    scratch: Option<Scratch>,
}

/// Pools up to this size are sorted by rank in one dispatch (quadratic
/// work); larger ones by radix sort.
pub const RANK_SORT_MAX: usize = 1024;

/// Elements per thread in the compaction and the radix sort (each thread
/// walks its tile in order, which is what keeps both stable).
const TILE: usize = 256;

/// Words of the state buffer before the select histogram.
const STATE_WORDS: usize = 16;

struct Scratch {
    vocab: usize,
    /// Adjusted logits (f32 bits).
    adj: wgpu::Buffer,
    /// Maximum key, candidate count, select prefix and remainder, pool
    /// size; then the select histogram (256 words).
    state: wgpu::Buffer,
    /// Per-tile counts of the compaction (above, equal).
    tiles: wgpu::Buffer,
    /// (key, id) pairs, ping-pong for the sorts.
    pool_a: wgpu::Buffer,
    pool_b: wgpu::Buffer,
    /// Radix sort histogram, digit-major over tiles.
    hist: wgpu::Buffer,
    /// Candidate weights.
    weights: wgpu::Buffer,
    /// Their totals per block of 256.
    blocks: wgpu::Buffer,
}

const COMMON: &str = r#"
const NEG_INF: u32 = 0xff800000u;
const MAX_F: u32 = 0x7f7fffffu;
// State words.
const MAXK: u32 = 0u;
const NFIN: u32 = 1u;
const SEL_PREFIX: u32 = 2u;
const SEL_REM: u32 = 3u;
const NPOOL: u32 = 4u;
const ARGMAX: u32 = 5u;
const HIST: u32 = 16u;
const TILE: u32 = 256u;
const GRID_X: u32 = 32768u;

// vocab, pos, window start, window length;
// bias entries, repeat, frequency, presence penalty (bits);
// k, mode (0 all, 1 top-k select, 2 min-p prefilter), greedy, pool bound;
// top_p (bits), ln(min_p) (bits), flags (1 top-p, 2 min-p), 1/temperature (bits);
// 0 (for fence)
struct Params { v: array<vec4<u32>, 5> }

// NaN -> -inf, +inf -> f32::MAX, on the bits.
fn sanitize(b: u32) -> u32 {
    if ((b & 0x7fffffffu) > 0x7f800000u) { return NEG_INF; }
    if (b == 0x7f800000u) { return MAX_F; }
    return b;
}

// An order-preserving u32 for a non-NaN float, and back.
fn key(b: u32) -> u32 {
    if ((b & 0x80000000u) != 0u) { return ~b; }
    return b | 0x80000000u;
}
fn unkey(k: u32) -> u32 {
    if ((k & 0x80000000u) != 0u) { return k & 0x7fffffffu; }
    return ~k;
}
// The key with -0 taken as +0, for comparisons that follow float `>=`.
fn cmp_key(b: u32) -> u32 {
    if (b == 0x80000000u) { return key(0u); }
    return key(b);
}

fn gid(wg: vec3<u32>, t: u32) -> u32 {
    return (wg.y * GRID_X + wg.x) * 256u + t;
}
"#;

const ADJUST: &str = r#"
@group(0) @binding(0) var<storage, read> logits: array<u32>;
@group(0) @binding(1) var<storage, read_write> history: array<u32>;
@group(0) @binding(2) var<storage, read> bias_ids: array<u32>;
@group(0) @binding(3) var<storage, read> bias_vals: array<u32>;
@group(0) @binding(4) var<storage, read_write> adj: array<u32>;
@group(0) @binding(5) var<storage, read_write> st: array<u32>;
@group(0) @binding(6) var<uniform> p: Params;
// Per token id: occurrences in the window, then its first position there
// (the pool's scratch, unused until the compaction).
@group(0) @binding(7) var<storage, read_write> seen: array<atomic<u32>>;

var<workgroup> best_key: array<u32, 256>;
var<workgroup> best_id: array<u32, 256>;
var<workgroup> cnt: array<u32, 256>;

// As in the greedy sampler: keeps a product from being fused into an add.
fn fence(x: f32) -> f32 {
    return bitcast<f32>(bitcast<u32>(x) ^ p.v[4].x);
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) t: u32) {
    let vocab = p.v[0].x;
    let ws = p.v[0].z;
    let wn = p.v[0].w;
    for (var i = t; i < vocab; i += 256u) {
        adj[i] = sanitize(logits[i]);
    }
    storageBarrier();
    workgroupBarrier();
    // Bias entries in order on one thread: several for one id add up.
    if (t == 0u) {
        for (var i = 0u; i < p.v[1].x; i++) {
            let id = bias_ids[i];
            let b = bias_vals[i];
            if (id < vocab && (b & 0x7fffffffu) <= 0x7f800000u) {
                adj[id] = sanitize(bitcast<u32>(bitcast<f32>(adj[id]) + bitcast<f32>(b)));
            }
        }
    }
    storageBarrier();
    workgroupBarrier();
    // Penalties: count each id's occurrences in the window and find its
    // first position; the thread at that position applies them, so every
    // id is written once. O(window) per thread (the greedy sampler's
    // pairwise scan would pass lavapipe's loop limit on long windows).
    for (var j = t; j < wn; j += 256u) {
        let tok = history[ws + j];
        if (tok < vocab) {
            atomicStore(&seen[2u * tok], 0u);
            atomicStore(&seen[2u * tok + 1u], 0xffffffffu);
        }
    }
    storageBarrier();
    workgroupBarrier();
    for (var j = t; j < wn; j += 256u) {
        let tok = history[ws + j];
        if (tok < vocab) {
            atomicAdd(&seen[2u * tok], 1u);
            atomicMin(&seen[2u * tok + 1u], j);
        }
    }
    storageBarrier();
    workgroupBarrier();
    for (var j = t; j < wn; j += 256u) {
        let tok = history[ws + j];
        if (tok < vocab && atomicLoad(&seen[2u * tok + 1u]) == j) {
            let c = atomicLoad(&seen[2u * tok]);
            let lb = adj[tok];
            if (lb != NEG_INF) {
                let l = bitcast<f32>(lb);
                var r: f32;
                if ((lb & 0x80000000u) != 0u || (lb & 0x7fffffffu) == 0u) {
                    r = fence(l * bitcast<f32>(p.v[1].y));
                } else {
                    r = bitcast<f32>(div_exact(lb, p.v[1].y));
                }
                let sub = fence(f32(c) * bitcast<f32>(p.v[1].z)) + bitcast<f32>(p.v[1].w);
                adj[tok] = sanitize(bitcast<u32>(r - sub));
            }
        }
    }
    storageBarrier();
    workgroupBarrier();
    // First maximum and the number of candidates.
    var bk = 0u;
    var bi = 0xffffffffu;
    var n = 0u;
    for (var i = t; i < vocab; i += 256u) {
        let b = adj[i];
        let k = key(b);
        if (bi == 0xffffffffu || k > bk) {
            bk = k;
            bi = i;
        }
        if (b != NEG_INF) { n++; }
    }
    best_key[t] = bk;
    best_id[t] = bi;
    cnt[t] = n;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s >>= 1u) {
        if (t < s) {
            let ok = best_key[t + s];
            let oi = best_id[t + s];
            let mi = best_id[t];
            if (oi != 0xffffffffu && (mi == 0xffffffffu || ok > best_key[t] || (ok == best_key[t] && oi < mi))) {
                best_key[t] = ok;
                best_id[t] = oi;
            }
            cnt[t] += cnt[t + s];
        }
        workgroupBarrier();
    }
    st[HIST + t] = 0u;
    if (t == 0u) {
        st[MAXK] = best_key[0];
        st[NFIN] = cnt[0];
        st[ARGMAX] = best_id[0];
        st[SEL_PREFIX] = 0u;
        st[SEL_REM] = p.v[2].x;
        st[NPOOL] = 0u;
        // Greedy: the first maximum (token 0 when every logit is -inf,
        // as all tie there).
        if (p.v[2].z != 0u) {
            history[p.v[0].y] = best_id[0];
        }
    }
}
"#;

const SEL_HIST: &str = r#"
@group(0) @binding(0) var<storage, read> adj: array<u32>;
@group(0) @binding(1) var<storage, read_write> st: array<atomic<u32>>;
@group(0) @binding(2) var<uniform> p: Params;
@group(0) @binding(3) var<uniform> shift_u: vec4<u32>;

var<workgroup> h: array<atomic<u32>, 256>;

// 4096 keys per workgroup: local counts first, then one global add per
// digit.
@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) t: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    atomicStore(&h[t], 0u);
    workgroupBarrier();
    let vocab = p.v[0].x;
    let shift = shift_u.x;
    let prefix = atomicLoad(&st[SEL_PREFIX]);
    // The digits above this pass must match those chosen so far (none in
    // the first pass; a shift by 32 would wrap, hence the select).
    let hi = select(0xffffffffu << (shift + 8u), 0u, shift >= 24u);
    let base = (wg.y * GRID_X + wg.x) * 4096u;
    for (var j = 0u; j < 16u; j++) {
        let i = base + j * 256u + t;
        if (i < vocab) {
            let k = key(adj[i]);
            if ((k & hi) == (prefix & hi)) {
                atomicAdd(&h[(k >> shift) & 255u], 1u);
            }
        }
    }
    workgroupBarrier();
    let c = atomicLoad(&h[t]);
    if (c > 0u) {
        atomicAdd(&st[HIST + t], c);
    }
}
"#;

const SEL_CHOOSE: &str = r#"
@group(0) @binding(0) var<storage, read_write> st: array<u32>;
@group(0) @binding(1) var<uniform> shift_u: vec4<u32>;

// The digit (from the top) at which the count of keys reaches the number
// still wanted; keys above it are all in, and the remainder moves on.
@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) t: u32) {
    if (t == 0u) {
        let rem = st[SEL_REM];
        var cum = 0u;
        var digit = 0u;
        var left = rem;
        for (var b = 255i; b >= 0i; b--) {
            let c = st[HIST + u32(b)];
            if (cum + c >= rem) {
                digit = u32(b);
                left = rem - cum;
                break;
            }
            cum += c;
        }
        st[SEL_PREFIX] = st[SEL_PREFIX] | (digit << shift_u.x);
        st[SEL_REM] = left;
    }
    storageBarrier();
    workgroupBarrier();
    st[HIST + t] = 0u;
}
"#;

/// The pool threshold: keys above `x` are in, and the first `y` keys equal
/// to `x` (in id order).
const PLAN: &str = r#"
fn plan() -> vec2<u32> {
    let nfin = st[NFIN];
    if (nfin == 0u) { return vec2<u32>(0xffffffffu, 0u); }
    let mode = p.v[2].y;
    if (mode == 1u && p.v[2].x < nfin) {
        return vec2<u32>(st[SEL_PREFIX], st[SEL_REM]);
    }
    if (mode == 2u) {
        // Every logit >= max + ln(min_p), and at least the maximum; the
        // finishing kernel trims exactly.
        let maxk = st[MAXK];
        let lnb = p.v[3].y;
        if (lnb == 0x7f800000u) { return vec2<u32>(maxk, 0xffffffffu); }
        let thr = bitcast<f32>(unkey(maxk)) + bitcast<f32>(lnb);
        return vec2<u32>(min(cmp_key(bitcast<u32>(thr)), maxk), 0xffffffffu);
    }
    return vec2<u32>(key(NEG_INF), 0u);
}
"#;

const CMP_COUNT: &str = r#"
@group(0) @binding(0) var<storage, read> adj: array<u32>;
@group(0) @binding(1) var<storage, read> st: array<u32>;
@group(0) @binding(2) var<storage, read_write> tiles: array<u32>;
@group(0) @binding(3) var<uniform> p: Params;

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) t: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let vocab = p.v[0].x;
    let nt = (vocab + TILE - 1u) / TILE;
    let tile = gid(wg, t);
    if (tile >= nt) { return; }
    let th = plan();
    var above = 0u;
    var equal = 0u;
    let end = min(tile * TILE + TILE, vocab);
    for (var i = tile * TILE; i < end; i++) {
        let k = key(adj[i]);
        if (k > th.x) { above++; } else if (k == th.x) { equal++; }
    }
    tiles[tile] = above;
    tiles[nt + tile] = equal;
}
"#;

/// Exclusive prefix sums over `buf[off..off + len]` by one workgroup:
/// each thread a contiguous chunk, then the chunk totals.
const SCAN: &str = r#"
var<workgroup> part: array<u32, 256>;
var<workgroup> total_wg: u32;

fn scan_range(t: u32, off: u32, len: u32) -> u32 {
    let chunk = (len + 255u) / 256u;
    let s = min(t * chunk, len);
    let e = min(s + chunk, len);
    var sum = 0u;
    for (var i = s; i < e; i++) { sum += buf[off + i]; }
    part[t] = sum;
    workgroupBarrier();
    if (t == 0u) {
        var acc = 0u;
        for (var j = 0u; j < 256u; j++) {
            let v = part[j];
            part[j] = acc;
            acc += v;
        }
        total_wg = acc;
    }
    workgroupBarrier();
    var acc = part[t];
    for (var i = s; i < e; i++) {
        let v = buf[off + i];
        buf[off + i] = acc;
        acc += v;
    }
    let total = total_wg;
    workgroupBarrier();
    return total;
}
"#;

const CMP_SCAN: &str = r#"
@group(0) @binding(0) var<storage, read_write> st: array<u32>;
@group(0) @binding(1) var<storage, read_write> buf: array<u32>;
@group(0) @binding(2) var<uniform> p: Params;

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) t: u32) {
    let nt = (p.v[0].x + TILE - 1u) / TILE;
    let th = plan();
    let above = scan_range(t, 0u, nt);
    let equal = scan_range(t, nt, nt);
    if (t == 0u) {
        st[NPOOL] = above + min(equal, th.y);
    }
}
"#;

const CMP_WRITE: &str = r#"
@group(0) @binding(0) var<storage, read> adj: array<u32>;
@group(0) @binding(1) var<storage, read> st: array<u32>;
@group(0) @binding(2) var<storage, read> tiles: array<u32>;
@group(0) @binding(3) var<storage, read_write> pool: array<vec2<u32>>;
@group(0) @binding(4) var<uniform> p: Params;

// Each tile writes its members in id order after everything the tiles
// before it keep: all their keys above the threshold and as many equal
// ones as are still wanted.
@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) t: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let vocab = p.v[0].x;
    let nt = (vocab + TILE - 1u) / TILE;
    let tile = gid(wg, t);
    if (tile >= nt) { return; }
    let th = plan();
    var eq_rank = tiles[nt + tile];
    var o = tiles[tile] + min(eq_rank, th.y);
    let end = min(tile * TILE + TILE, vocab);
    for (var i = tile * TILE; i < end; i++) {
        let k = key(adj[i]);
        if (k > th.x) {
            pool[o] = vec2<u32>(k, i);
            o++;
        } else if (k == th.x) {
            if (eq_rank < th.y) {
                pool[o] = vec2<u32>(k, i);
                o++;
            }
            eq_rank++;
        }
    }
}
"#;

const RANK_SORT: &str = r#"
@group(0) @binding(0) var<storage, read> src: array<vec2<u32>>;
@group(0) @binding(1) var<storage, read_write> dst: array<vec2<u32>>;
@group(0) @binding(2) var<storage, read> st: array<u32>;

// The pool is in id order, so an element's place is the number of larger
// keys plus the number of equal keys before it.
@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) t: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let n = st[NPOOL];
    let i = gid(wg, t);
    if (i >= n) { return; }
    let e = src[i];
    var rank = 0u;
    for (var j = 0u; j < n; j++) {
        let k = src[j].x;
        if (k > e.x || (k == e.x && j < i)) { rank++; }
    }
    dst[rank] = e;
}
"#;

const RS_HIST: &str = r#"
@group(0) @binding(0) var<storage, read> src: array<vec2<u32>>;
@group(0) @binding(1) var<storage, read_write> hist: array<u32>;
@group(0) @binding(2) var<storage, read> st: array<u32>;
@group(0) @binding(3) var<uniform> p: Params;
@group(0) @binding(4) var<uniform> shift_u: vec4<u32>;

// Digit counts per tile of the inverted key (ascending inverted keys are
// descending keys), digit-major so that one scan gives every offset.
@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) t: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let nt = (p.v[2].w + TILE - 1u) / TILE;
    let tile = gid(wg, t);
    if (tile >= nt) { return; }
    for (var b = 0u; b < 256u; b++) { hist[b * nt + tile] = 0u; }
    let n = st[NPOOL];
    let end = min(tile * TILE + TILE, n);
    for (var i = tile * TILE; i < end; i++) {
        let d = ((~src[i].x) >> shift_u.x) & 255u;
        hist[d * nt + tile] += 1u;
    }
}
"#;

const RS_SCAN: &str = r#"
@group(0) @binding(0) var<storage, read_write> buf: array<u32>;
@group(0) @binding(1) var<uniform> p: Params;

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) t: u32) {
    let nt = (p.v[2].w + TILE - 1u) / TILE;
    _ = scan_range(t, 0u, 256u * nt);
}
"#;

const RS_SCATTER: &str = r#"
@group(0) @binding(0) var<storage, read> src: array<vec2<u32>>;
@group(0) @binding(1) var<storage, read_write> dst: array<vec2<u32>>;
@group(0) @binding(2) var<storage, read_write> hist: array<u32>;
@group(0) @binding(3) var<storage, read> st: array<u32>;
@group(0) @binding(4) var<uniform> p: Params;
@group(0) @binding(5) var<uniform> shift_u: vec4<u32>;

// Each tile walks its elements in order, so equal digits keep their order
// (the sort is stable and ties stay in id order).
@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) t: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let nt = (p.v[2].w + TILE - 1u) / TILE;
    let tile = gid(wg, t);
    if (tile >= nt) { return; }
    let n = st[NPOOL];
    let end = min(tile * TILE + TILE, n);
    for (var i = tile * TILE; i < end; i++) {
        let e = src[i];
        let slot = (((~e.x) >> shift_u.x) & 255u) * nt + tile;
        let o = hist[slot];
        hist[slot] = o + 1u;
        dst[o] = e;
    }
}
"#;

/// The constants of kestrel_sampling's `exp_kestrel` as WGSL, written from
/// the sampling crate's own tables so the two cannot drift apart.
fn exp_constants() -> String {
    let table: Vec<String> = EXP_TABLE.iter().map(|w| format!("{w:#010x}u")).collect();
    format!(
        "const EXP_TABLE = array<u32, 16>({});\nconst EXP_LOG2E_HI: u32 = {:#010x}u;\n\
         const EXP_LOG2E_LO: u32 = {:#010x}u;\nconst EXP_LN2: u32 = {:#010x}u;\n",
        table.join(", "),
        EXP_LOG2E_FRAC[0],
        EXP_LOG2E_FRAC[1],
        EXP_LN2_Q31
    )
}

/// kestrel_sampling's `exp_kestrel` and `weight`, shared by the finishing
/// kernel and [`weights_on_device`] (after [`exp_constants`]).
const WEIGHT_FNS: &str = r#"
// The 64-bit product of two u32 as (low, high).
fn mul_wide(a: u32, b: u32) -> vec2<u32> {
    let a0 = a & 0xffffu;
    let a1 = a >> 16u;
    let b0 = b & 0xffffu;
    let b1 = b >> 16u;
    let p00 = a0 * b0;
    let p01 = a0 * b1;
    let p10 = a1 * b0;
    let mid = (p00 >> 16u) + (p01 & 0xffffu) + (p10 & 0xffffu);
    return vec2<u32>((p00 & 0xffffu) | (mid << 16u), a1 * b1 + (p01 >> 16u) + (p10 >> 16u) + (mid >> 16u));
}

fn add64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
    let lo = a.x + b.x;
    return vec2<u32>(lo, a.y + b.y + select(0u, 1u, lo < a.x));
}

// (a * b) >> 31 for a, b <= 2^31.
fn mul31(a: u32, b: u32) -> u32 {
    let w = mul_wide(a, b);
    return (w.y << 1u) | (w.x >> 31u);
}

// kestrel_sampling::exp_kestrel, step for step in 32-bit integers (exact
// on every adapter, whatever its float exp or fma does).
fn exp_k(xb: u32) -> f32 {
    let bits = xb & 0x7fffffffu;
    let e = i32(bits >> 23u);
    if (e < 95i) { return 1.0; }
    let m = (bits & 0x7fffffu) | 0x800000u;
    let sh = e - 118i;
    var a = vec2<u32>(m, 0u);
    if (sh > 0i) {
        a = vec2<u32>(m << u32(sh), m >> u32(32i - sh));
    } else if (sh < 0i) {
        a = vec2<u32>(m >> u32(-sh), 0u);
    }
    let l1 = EXP_LOG2E_HI;
    let l0 = EXP_LOG2E_LO;
    var t = add64(a, mul_wide(a.y, l1));
    t = add64(t, vec2<u32>(mul_wide(a.x, l1).y, 0u));
    t = add64(t, vec2<u32>(mul_wide(a.y, l0).y, 0u));
    let n = i32(t.y);
    let f = t.x;
    let r = f & 0x0fffffffu;
    let y = mul_wide(r, EXP_LN2).y;
    let one = 0x80000000u;
    var q = one - y / 5u;
    q = one - mul31(y, q) / 4u;
    q = one - mul31(y, q) / 3u;
    q = one - mul31(y, q) / 2u;
    q = one - mul31(y, q);
    let g = mul31(EXP_TABLE[f >> 28u], q);
    let lead = 31i - i32(countLeadingZeros(g));
    let s = u32(lead - 23i);
    var mant = (g + (1u << (s - 1u))) >> s;
    var biased = lead + 96i - n;
    if ((mant >> 24u) != 0u) {
        mant = mant >> 1u;
        biased += 1i;
    }
    return bitcast<f32>((u32(max(biased, 1i)) << 23u) | (mant & 0x7fffffu));
}

// kestrel_sampling::weight, with the -inf and "below -87" tests on the
// bits (WGSL may assume floats are finite).
fn weight(lb: u32, l0b: u32, inv_t: f32) -> f32 {
    let d = bitcast<f32>(lb) - bitcast<f32>(l0b);
    if (bitcast<u32>(d) == NEG_INF) { return 0.0; }
    let xb = bitcast<u32>(d * inv_t);
    if ((xb & 0x80000000u) != 0u && (xb & 0x7fffffffu) > 0x42ae0000u) { return 0.0; }
    return exp_k(xb);
}

"#;

const FINISH: &str = r#"
@group(0) @binding(0) var<storage, read> pool: array<vec2<u32>>;
@group(0) @binding(1) var<storage, read_write> w: array<f32>;
@group(0) @binding(2) var<storage, read> st: array<u32>;
@group(0) @binding(3) var<storage, read_write> history: array<u32>;
@group(0) @binding(4) var<storage, read_write> rng: array<u32>;
@group(0) @binding(5) var<uniform> p: Params;
@group(0) @binding(6) var<storage, read_write> bt: array<f32>;

var<workgroup> keep_wg: u32;

// Sums follow kestrel_sampling's blocks of 256 (SUM_BLOCK): each block in
// order from 0 (in parallel here), then the block totals in order on one
// thread. (One thread could not sum a large pool anyway: lavapipe ends an
// invocation's loops after 65535 iterations in all.)
fn block_totals(t: u32, n: u32) {
    let nb = (n + 255u) / 256u;
    for (var b = t; b < nb; b += 256u) {
        var s = 0.0;
        let e = min(b * 256u + 256u, n);
        for (var i = b * 256u; i < e; i++) { s += w[i]; }
        bt[b] = s;
    }
}

fn blocked_sum(n: u32) -> f32 {
    var s = 0.0;
    for (var b = 0u; b < (n + 255u) / 256u; b++) { s = s + bt[b]; }
    return s;
}

fn hit(c: f32, x: f32, strict: bool) -> bool {
    if (strict) { return x < c; }
    return c >= x;
}

// kestrel_sampling's first_cumulative: the first i whose cumulative
// weight hits x (`c >= x`, or `x < c` when strict); n if none.
fn first_cumulative(n: u32, x: f32, strict: bool) -> u32 {
    var before = 0.0;
    for (var b = 0u; b < (n + 255u) / 256u; b++) {
        let end = before + bt[b];
        if (hit(end, x, strict)) {
            let e = min(b * 256u + 256u, n);
            var s = 0.0;
            for (var i = b * 256u; i < e; i++) {
                s += w[i];
                if (hit(before + s, x, strict)) { return i; }
            }
            return e - 1u;
        }
        before = end;
    }
    return n;
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) t: u32) {
    let n = st[NPOOL];
    let flags = p.v[3].z;
    var l0b = 0u;
    if (n > 0u) { l0b = unkey(pool[0].x); }
    // Top-p: weights at temperature 1 (1/1 = 1).
    let topp = (flags & 1u) != 0u && n > 1u;
    let m = select(0u, n, topp);
    for (var i = t; i < m; i += 256u) {
        w[i] = weight(unkey(pool[i].x), l0b, 1.0);
    }
    storageBarrier();
    workgroupBarrier();
    block_totals(t, m);
    storageBarrier();
    workgroupBarrier();
    if (t == 0u) {
        var keep = n;
        if (topp) {
            let bound = bitcast<f32>(p.v[3].x) * blocked_sum(n);
            keep = min(first_cumulative(n, bound, false) + 1u, n);
        }
        // Min-p: logit >= max + ln(min_p) (a float >=, so -0 equals +0).
        if ((flags & 2u) != 0u && keep > 1u) {
            let lnb = p.v[3].y;
            if (lnb == 0x7f800000u) {
                keep = 1u;
            } else {
                let tk = cmp_key(bitcast<u32>(bitcast<f32>(l0b) + bitcast<f32>(lnb)));
                keep = min_p_keep(keep, tk);
            }
        }
        keep_wg = keep;
    }
    storageBarrier();
    workgroupBarrier();
    let keep = keep_wg;
    let inv_t = bitcast<f32>(p.v[3].w);
    for (var i = t; i < keep; i += 256u) {
        w[i] = weight(unkey(pool[i].x), l0b, inv_t);
    }
    storageBarrier();
    workgroupBarrier();
    block_totals(t, keep);
    storageBarrier();
    workgroupBarrier();
    if (t == 0u) {
        // One xorshift128 step (kestrel_sampling::XorShift), u = top 24
        // bits * 2^-24.
        var s = vec4<u32>(rng[0], rng[1], rng[2], rng[3]);
        if (all(s == vec4<u32>(0u))) { s.x = 0x9e3779b9u; }
        let tt = s.x ^ (s.x << 11u);
        let nw = s.w ^ (s.w >> 19u) ^ tt ^ (tt >> 8u);
        rng[0] = s.y;
        rng[1] = s.z;
        rng[2] = s.w;
        rng[3] = nw;
        let u = f32(nw >> 8u) * bitcast<f32>(0x33800000u);
        var tok = 0u;
        if (keep > 0u) {
            let i = first_cumulative(keep, u * blocked_sum(keep), true);
            // None (rounding): the last candidate.
            tok = pool[min(i, keep - 1u)].y;
        }
        history[p.v[0].y] = tok;
    }
}

// The survivors of min-p: the first, then the prefix with key >= tk (the
// pool is sorted, so a binary search finds the end).
fn min_p_keep(keep: u32, tk: u32) -> u32 {
    var lo = 1u;
    var hi = keep;
    while (lo < hi) {
        let mid = (lo + hi) / 2u;
        if (cmp_key(unkey(pool[mid].x)) >= tk) { lo = mid + 1u; } else { hi = mid; }
    }
    return lo;
}
"#;

impl Sampler {
    pub fn new(gpu: &Gpu) -> Sampler {
        let make = |label: &str, parts: &[&str]| gpu.pipeline(label, &parts.concat());
        Sampler {
            adjust: make("sample adjust", &[COMMON, crate::matvec::EXACT_DIV, ADJUST]),
            sel_hist: make("sample select histogram", &[COMMON, SEL_HIST]),
            sel_choose: make("sample select digit", &[COMMON, SEL_CHOOSE]),
            cmp_count: make("sample pool count", &[COMMON, PLAN, CMP_COUNT]),
            cmp_scan: make("sample pool scan", &[COMMON, PLAN, SCAN, CMP_SCAN]),
            cmp_write: make("sample pool write", &[COMMON, PLAN, CMP_WRITE]),
            rank_sort: make("sample rank sort", &[COMMON, RANK_SORT]),
            rs_hist: make("sample radix histogram", &[COMMON, RS_HIST]),
            rs_scan: make("sample radix scan", &[COMMON, SCAN, RS_SCAN]),
            rs_scatter: make("sample radix scatter", &[COMMON, RS_SCATTER]),
            finish: make(
                "sample finish",
                &[COMMON, &exp_constants(), WEIGHT_FNS, FINISH],
            ),
            shifts: [0u32, 8, 16, 24].map(|s| gpu.params(&[s, 0, 0, 0])),
            scratch: None,
        }
    }

    /// A generator state buffer for one sequence, holding the four words
    /// of `kestrel_sampling::XorShift::state` (`[x, y, z, w]`); each
    /// non-greedy [`Sampler::run`] advances it by one step.
    pub fn rng_buffer(gpu: &Gpu, state: [u32; 4]) -> Result<wgpu::Buffer, GpuError> {
        gpu.upload_u32("sampler rng state", &state)
    }

    fn ensure_scratch(&mut self, gpu: &Gpu, vocab: usize) -> Result<(), GpuError> {
        let fits = self.scratch.as_ref().is_some_and(|s| s.vocab >= vocab);
        if !fits {
            let need = (vocab * 8) as u64;
            if need > gpu.max_binding {
                return Err(GpuError::TooLarge {
                    what: format!("the sampler's pool for {vocab} tokens"),
                    need,
                    limit: gpu.max_binding,
                });
            }
            let tiles = vocab.div_ceil(TILE);
            self.scratch = Some(Scratch {
                vocab,
                adj: gpu.scratch_f32("sampler adjusted logits", vocab),
                state: gpu.scratch_f32("sampler state", STATE_WORDS + 256),
                tiles: gpu.scratch_f32("sampler tile counts", 2 * tiles),
                pool_a: gpu.scratch_f32("sampler pool", 2 * vocab),
                pool_b: gpu.scratch_f32("sampler pool", 2 * vocab),
                hist: gpu.scratch_f32("sampler radix histogram", 256 * tiles),
                weights: gpu.scratch_f32("sampler weights", vocab),
                blocks: gpu.scratch_f32("sampler block sums", tiles),
            });
        }
        Ok(())
    }

    /// Picks the next token from `vocab` logits (left unmodified) following
    /// the chain of `kestrel_sampling`, with `history[..pos]` for the
    /// penalties, writes it to `history[pos]` and, unless greedy, advances
    /// the generator in `rng` (4 words) by one step. Records only
    /// dispatches: inside a step ([`Gpu::begin_step`]) nothing is
    /// submitted or read back.
    pub fn run(
        &mut self,
        gpu: &Gpu,
        (logits, history, rng): (&wgpu::Buffer, &wgpu::Buffer, &wgpu::Buffer),
        vocab: usize,
        pos: usize,
        params: &SamplerParams,
    ) -> Result<(), GpuError> {
        if vocab == 0
            || vocab > u32::MAX as usize / 2
            || logits.size() < (vocab * 4) as u64
            || history.size() < ((pos + 1) * 4) as u64
            || rng.size() < 16
        {
            return Err(GpuError::Shape(format!(
                "sampler: {vocab} logits in {} bytes, position {pos} in a history of {} bytes, \
                 a generator state of {} bytes (needs 16)",
                logits.size(),
                history.size(),
                rng.size()
            )));
        }
        let greedy = params.temperature.is_nan() || params.temperature <= 0.0;
        let penalize = params.repeat_last_n != 0
            && pos > 0
            && (params.repeat_penalty != 1.0
                || params.frequency_penalty != 0.0
                || params.presence_penalty != 0.0);
        let window = match usize::try_from(params.repeat_last_n) {
            _ if !penalize => 0,
            Ok(n) => n.min(pos),
            Err(_) => pos,
        };
        // Which threshold gathers the pool, and the most it can hold.
        let top_k = usize::try_from(params.top_k).unwrap_or(0);
        let top_p_on = params.top_p < 1.0;
        let min_p_on = params.min_p > 0.0;
        let (mode, bound) = if top_k > 0 && top_k < vocab {
            (1u32, top_k)
        } else if !top_p_on && min_p_on {
            (2, vocab)
        } else {
            (0, vocab)
        };
        let flags = u32::from(top_p_on) | (u32::from(min_p_on) << 1);
        // top_p <= 0 keeps one token either way; clamping keeps -inf off
        // the device.
        let top_p = if top_p_on { params.top_p.max(0.0) } else { 1.0 };
        let ln_min_p = if min_p_on { params.min_p.ln() } else { 0.0 };
        let ids: Vec<u32> = params.logit_bias.iter().map(|b| b.0).collect();
        let vals: Vec<f32> = params.logit_bias.iter().map(|b| b.1).collect();
        let ids = gpu.upload_u32("bias ids", &ids)?;
        let vals = gpu.upload_f32("bias values", &vals)?;
        let uniform = gpu.params(&[
            vocab as u32,
            pos as u32,
            (pos - window) as u32,
            window as u32,
            params.logit_bias.len() as u32,
            params.repeat_penalty.to_bits(),
            params.frequency_penalty.to_bits(),
            params.presence_penalty.to_bits(),
            if mode == 1 { top_k as u32 } else { 0 },
            mode,
            u32::from(greedy),
            bound as u32,
            top_p.to_bits(),
            ln_min_p.to_bits(),
            flags,
            inverse_temperature(params.temperature).to_bits(),
            0,
            0,
            0,
            0,
        ]);
        self.ensure_scratch(gpu, vocab)?;
        let s = self.scratch.as_ref().expect("allocated above");
        let bind = gpu.bind(
            &self.adjust,
            &[
                logits, history, &ids, &vals, &s.adj, &s.state, &uniform, &s.pool_b,
            ],
        );
        gpu.run(&self.adjust, &bind, 1);
        if greedy {
            return Ok(());
        }
        let groups = |threads: usize| threads.div_ceil(256) as u32;
        if mode == 1 {
            // Most significant digit first: the prefix narrows each pass.
            for shift in self.shifts.iter().rev() {
                let b = gpu.bind(&self.sel_hist, &[&s.adj, &s.state, &uniform, shift]);
                gpu.run(&self.sel_hist, &b, vocab.div_ceil(4096) as u32);
                let b = gpu.bind(&self.sel_choose, &[&s.state, shift]);
                gpu.run(&self.sel_choose, &b, 1);
            }
        }
        let tiles = groups(vocab.div_ceil(TILE));
        let b = gpu.bind(&self.cmp_count, &[&s.adj, &s.state, &s.tiles, &uniform]);
        gpu.run(&self.cmp_count, &b, tiles);
        let b = gpu.bind(&self.cmp_scan, &[&s.state, &s.tiles, &uniform]);
        gpu.run(&self.cmp_scan, &b, 1);
        let b = gpu.bind(
            &self.cmp_write,
            &[&s.adj, &s.state, &s.tiles, &s.pool_a, &uniform],
        );
        gpu.run(&self.cmp_write, &b, tiles);
        let sorted = if bound <= RANK_SORT_MAX {
            let b = gpu.bind(&self.rank_sort, &[&s.pool_a, &s.pool_b, &s.state]);
            gpu.run(&self.rank_sort, &b, groups(bound));
            &s.pool_b
        } else {
            // Least significant digit first, ping-pong: four passes end
            // back in pool_a.
            let sort_tiles = groups(bound.div_ceil(TILE));
            let mut src = &s.pool_a;
            let mut dst = &s.pool_b;
            for shift in &self.shifts {
                let b = gpu.bind(&self.rs_hist, &[src, &s.hist, &s.state, &uniform, shift]);
                gpu.run(&self.rs_hist, &b, sort_tiles);
                let b = gpu.bind(&self.rs_scan, &[&s.hist, &uniform]);
                gpu.run(&self.rs_scan, &b, 1);
                let b = gpu.bind(
                    &self.rs_scatter,
                    &[src, dst, &s.hist, &s.state, &uniform, shift],
                );
                gpu.run(&self.rs_scatter, &b, sort_tiles);
                std::mem::swap(&mut src, &mut dst);
            }
            src
        };
        let b = gpu.bind(
            &self.finish,
            &[
                sorted, &s.weights, &s.state, history, rng, &uniform, &s.blocks,
            ],
        );
        gpu.run(&self.finish, &b, 1);
        Ok(())
    }
}

const WEIGHT_PROBE: &str = r#"
@group(0) @binding(0) var<storage, read_write> io: array<u32>;
@group(0) @binding(1) var<uniform> q: vec4<u32>;

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) t: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let i = gid(wg, t);
    if (i < q.x) {
        io[i] = bitcast<u32>(weight(io[i], q.y, bitcast<f32>(q.z)));
    }
}
"#;

/// The finishing kernel's candidate weight, `kestrel_sampling::weight(l,
/// max, inv_t)`, for each `l` of `logits`, computed on the device: lets
/// tests hold the device's float steps to the CPU's bit for bit.
#[doc(hidden)]
pub fn weights_on_device(
    gpu: &Gpu,
    logits: &[f32],
    max: f32,
    inv_t: f32,
) -> Result<Vec<f32>, GpuError> {
    let pipeline = gpu.pipeline(
        "sample weight probe",
        &[COMMON, &exp_constants(), WEIGHT_FNS, WEIGHT_PROBE].concat(),
    );
    let io = gpu.upload_f32("weight probe", logits)?;
    let q = gpu.params(&[logits.len() as u32, max.to_bits(), inv_t.to_bits(), 0]);
    let bind = gpu.bind(&pipeline, &[&io, &q]);
    gpu.run(&pipeline, &bind, logits.len().div_ceil(256) as u32);
    gpu.read_f32(&io, logits.len())
}

const DIV_PROBE: &str = r#"
@group(0) @binding(0) var<storage, read_write> io: array<u32>;
@group(0) @binding(1) var<uniform> q: vec4<u32>;

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) t: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let i = gid(wg, t);
    if (i < q.x) {
        io[2u * i] = div_exact(io[2u * i], io[2u * i + 1u]);
    }
}
"#;

/// The penalty's division `a / b` (for positive finite `a`) as the
/// samplers compute it on the device, for each pair: lets tests hold it to
/// IEEE division bit for bit.
#[doc(hidden)]
pub fn divide_on_device(gpu: &Gpu, pairs: &[(f32, f32)]) -> Result<Vec<f32>, GpuError> {
    let pipeline = gpu.pipeline(
        "sample division probe",
        &[COMMON, crate::matvec::EXACT_DIV, DIV_PROBE].concat(),
    );
    let flat: Vec<f32> = pairs.iter().flat_map(|&(a, b)| [a, b]).collect();
    let io = gpu.upload_f32("division probe", &flat)?;
    let q = gpu.params(&[pairs.len() as u32, 0, 0, 0]);
    let bind = gpu.bind(&pipeline, &[&io, &q]);
    gpu.run(&pipeline, &bind, pairs.len().div_ceil(256) as u32);
    let out = gpu.read_f32(&io, flat.len())?;
    Ok(out.chunks(2).map(|c| c[0]).collect())
}
