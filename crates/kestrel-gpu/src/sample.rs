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

/// `NEG_INF`, `MAX_F`, `sanitize` and `key`, which both samplers use.
const FLOAT_BITS: &str = include_str!("shaders/sample/float_bits.wgsl");

const GREEDY: &str = include_str!("shaders/sample/greedy.wgsl");

impl GreedySampler {
    pub fn new(gpu: &Gpu) -> GreedySampler {
        GreedySampler {
            pipeline: gpu.pipeline(
                "greedy sampler",
                &[FLOAT_BITS, GREEDY, crate::shaders::EXACT_DIV].concat(),
            ),
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
/// 1. `adjust` (one workgroup): sanitized logits, `-inf` where a token
///    mask ([`Sampler::run_masked`]) disallows them, with bias and penalties
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
    /// Bound as the token mask when there is none (never read then).
    no_mask: wgpu::Buffer,
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

/// The full sampler's prelude: the float bits, then its own state words,
/// parameters and helpers.
const COMMON: &str = concat!(
    include_str!("shaders/sample/float_bits.wgsl"),
    include_str!("shaders/sample/common.wgsl")
);

const ADJUST: &str = include_str!("shaders/sample/adjust.wgsl");

const SEL_HIST: &str = include_str!("shaders/sample/select_histogram.wgsl");

const SEL_CHOOSE: &str = include_str!("shaders/sample/select_digit.wgsl");

/// The pool threshold: keys above `x` are in, and the first `y` keys equal
/// to `x` (in id order).
const PLAN: &str = include_str!("shaders/sample/plan.wgsl");

const CMP_COUNT: &str = include_str!("shaders/sample/pool_count.wgsl");

/// Exclusive prefix sums over `buf[off..off + len]` by one workgroup:
/// each thread a contiguous chunk, then the chunk totals.
const SCAN: &str = include_str!("shaders/sample/scan.wgsl");

const CMP_SCAN: &str = include_str!("shaders/sample/pool_scan.wgsl");

const CMP_WRITE: &str = include_str!("shaders/sample/pool_write.wgsl");

const RANK_SORT: &str = include_str!("shaders/sample/rank_sort.wgsl");

const RS_HIST: &str = include_str!("shaders/sample/radix_histogram.wgsl");

const RS_SCAN: &str = include_str!("shaders/sample/radix_scan.wgsl");

const RS_SCATTER: &str = include_str!("shaders/sample/radix_scatter.wgsl");

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
const WEIGHT_FNS: &str = include_str!("shaders/sample/weight.wgsl");

const FINISH: &str = include_str!("shaders/sample/finish.wgsl");

impl Sampler {
    pub fn new(gpu: &Gpu) -> Sampler {
        let make = |label: &str, parts: &[&str]| gpu.pipeline(label, &parts.concat());
        Sampler {
            adjust: make(
                "sample adjust",
                &[COMMON, crate::shaders::EXACT_DIV, ADJUST],
            ),
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
            no_mask: gpu.scratch_f32("sampler no mask", 1),
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
        bufs: (&wgpu::Buffer, &wgpu::Buffer, &wgpu::Buffer),
        vocab: usize,
        pos: usize,
        params: &SamplerParams,
    ) -> Result<(), GpuError> {
        self.run_masked(gpu, bufs, vocab, pos, params, None)
    }

    /// [`Sampler::run`] over the tokens `mask` allows (bit `t % 32` of
    /// word `t / 32` set: token `t` allowed; at least `vocab.div_ceil(32)`
    /// words): every other logit is `-inf` before the whole chain, as the
    /// CPU sampler sees a row with those logits set to `-inf` (so nothing
    /// allowed gives token 0, and a draw still advances the generator).
    pub fn run_masked(
        &mut self,
        gpu: &Gpu,
        (logits, history, rng): (&wgpu::Buffer, &wgpu::Buffer, &wgpu::Buffer),
        vocab: usize,
        pos: usize,
        params: &SamplerParams,
        mask: Option<&wgpu::Buffer>,
    ) -> Result<(), GpuError> {
        let mask_bytes = (vocab.div_ceil(32) * 4) as u64;
        if vocab == 0
            || vocab > u32::MAX as usize / 2
            || logits.size() < (vocab * 4) as u64
            || history.size() < ((pos + 1) * 4) as u64
            || rng.size() < 16
            || mask.is_some_and(|m| m.size() < mask_bytes)
        {
            return Err(GpuError::Shape(format!(
                "sampler: {vocab} logits in {} bytes, position {pos} in a history of {} bytes, \
                 a generator state of {} bytes (needs 16), a token mask of {:?} bytes \
                 (needs {mask_bytes})",
                logits.size(),
                history.size(),
                rng.size(),
                mask.map(|m| m.size())
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
            u32::from(mask.is_some()),
            0,
            0,
        ]);
        self.ensure_scratch(gpu, vocab)?;
        let s = self.scratch.as_ref().expect("allocated above");
        let bind = gpu.bind(
            &self.adjust,
            &[
                logits,
                history,
                &ids,
                &vals,
                &s.adj,
                &s.state,
                &uniform,
                &s.pool_b,
                mask.unwrap_or(&self.no_mask),
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

const WEIGHT_PROBE: &str = include_str!("shaders/sample/weight_probe.wgsl");

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

const DIV_PROBE: &str = include_str!("shaders/sample/div_probe.wgsl");

/// The penalty's division `a / b` (for positive finite `a`) as the
/// samplers compute it on the device, for each pair: lets tests hold it to
/// IEEE division bit for bit.
#[doc(hidden)]
pub fn divide_on_device(gpu: &Gpu, pairs: &[(f32, f32)]) -> Result<Vec<f32>, GpuError> {
    let pipeline = gpu.pipeline(
        "sample division probe",
        &[COMMON, crate::shaders::EXACT_DIV, DIV_PROBE].concat(),
    );
    let flat: Vec<f32> = pairs.iter().flat_map(|&(a, b)| [a, b]).collect();
    let io = gpu.upload_f32("division probe", &flat)?;
    let q = gpu.params(&[pairs.len() as u32, 0, 0, 0]);
    let bind = gpu.bind(&pipeline, &[&io, &q]);
    gpu.run(&pipeline, &bind, pairs.len().div_ceil(256) as u32);
    let out = gpu.read_f32(&io, flat.len())?;
    Ok(out.chunks(2).map(|c| c[0]).collect())
}
