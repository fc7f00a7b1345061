//! Token sampling: sampler parameters, the CPU reference sampler (the exact distribution a GPU
//! sampler is held to), the seeded random generator ([`XorShift`]) that GPU sampling kernels
//! must reproduce bit for bit, top-N log-probabilities, and stop-string matching for streamed
//! text ([`StopMatcher`]), and the parameters' valid ranges ([`check`]).
//!
//! # The chain
//!
//! [`Sampler::sample_with_history`] turns one row of logits, plus the tokens seen so far (prompt
//! and generated), into a token id; [`Sampler::sample`] is the same with an empty history. The
//! order is llama.cpp's default chain (logit bias, penalties, top-k, top-p, min-p, temperature,
//! dist):
//!
//! 0. **Mask** (constrained decoding only): tokens a constraint does not allow get `-inf` before
//!    anything else ([`mask::mask_logits`]; the caller applies it to the row it passes in).
//! 1. **Sanitize.** NaN logits count as `-inf` (never chosen); `+inf` counts as `f32::MAX`, so
//!    several `+inf` logits tie with each other and beat every finite one.
//! 2. **Logit bias.** Each `(id, bias)` of [`SamplerParams::logit_bias`] adds `bias` to logit
//!    `id`. Ids outside the row are ignored (validating them is the caller's job), NaN biases are
//!    ignored, and several entries for one id add up. The result is sanitized again, so a bias
//!    of `-inf` bans a token (even one whose logit is `+inf`), and `+inf` lifts it to `f32::MAX`.
//! 3. **Penalties** (llama.cpp's `penalties` sampler) over the last
//!    [`repeat_last_n`](SamplerParams::repeat_last_n) tokens of the history: for every distinct
//!    token id in that window, seen `c` times, whose logit `l` is not `-inf`:
//!    `l = if l <= 0 { l * repeat_penalty } else { l / repeat_penalty }`, then
//!    `l -= c * frequency_penalty + presence_penalty`, then sanitize. History ids outside the
//!    row are ignored. Tokens already at `-inf` stay there, so penalties never revive a ban.
//! 4. **Greedy** when `temperature <= 0` (or NaN): the first maximum of the adjusted row
//!    (lowest token id among ties) is returned and no random number is drawn. Steps 5–10 are
//!    skipped; bias and penalties did apply, as in llama.cpp.
//! 5. **Sort** the candidates that are not `-inf` by logit, descending; ties by lower token id.
//! 6. **Top-k** (`top_k > 0`): keep the first `top_k` candidates.
//! 7. **Top-p** (`top_p < 1`): softmax (temperature 1) over the remaining candidates, then keep
//!    the shortest prefix whose cumulative probability is `>= top_p`, and at least one token.
//!    `top_p <= 0` therefore keeps exactly one token. In `f32`: with the weights `w_i` of step 9
//!    at temperature 1, the first `i` with `w_0 + ... + w_i >= top_p * sum(w)` ends the prefix
//!    (sums in order, blockwise as in step 10).
//! 8. **Min-p** (`min_p > 0`): keep the candidates whose logit is `>= max_logit + ln(min_p)`,
//!    i.e. whose probability is at least `min_p` times the most likely one's; at least one.
//! 9. **Temperature**: weights `w_i = exp((logit_i - max_logit) / temperature)` over the
//!    survivors (a softmax, up to the normalising sum). In `f32`: [`weight`]`(logit_i, max_logit,
//!    `[`inverse_temperature`]`(temperature))`, i.e. the difference times a reciprocal computed
//!    once, through [`exp_kestrel`] (integer fixed point), and 0 below `exp(-87)`. The float
//!    steps are each one correctly rounded operation and the exp is integer arithmetic, so the
//!    GPU sampler reproduces the bits.
//! 10. **Draw**: exactly one uniform `u` in `[0, 1)` from the generator ([`XorShift::next_f32`]),
//!     then inverse CDF over the candidates in the sorted order of step 5: the first candidate
//!     `i` with `u * sum(w) < w_0 + ... + w_i` (all in `f32`, summed in that order, in blocks of
//!     [`SUM_BLOCK`]: each block from 0, the block totals in order, a partial sum being the
//!     totals of the blocks before plus the partial sum within its block, so that a GPU can sum
//!     the blocks in parallel; pools of at most 256 sum plainly in order); if rounding leaves
//!     none, the last candidate.
//!
//! The filters see untempered logits, as in llama.cpp's default chain (top-k, top-p and min-p
//! run before its temperature sampler); top-p renormalises over what top-k left, as llama.cpp
//! does; with `min_keep = 1` throughout. If every adjusted logit is `-inf` (all NaN, `-inf` or
//! banned), the result is token 0 (in both modes; the sampling mode still draws its one number,
//! so the generator advances by exactly one draw per non-greedy call).
//!
//! [`distribution_with_history`] returns the exact distribution step 10 draws from;
//! [`logprobs_with_history`] reports log-probabilities of the full adjusted row (after steps 1–3,
//! before filters and temperature).

use std::borrow::Cow;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

pub mod check;
pub mod mask;
pub mod stop;

pub use check::RangeError;
pub use stop::{StopMatcher, StopStep};

/// Sampling parameters.
///
/// More fields may be added; build values with struct-update syntax
/// (`SamplerParams { top_k: 20, ..Default::default() }`) so that code keeps compiling as the
/// struct grows.
#[derive(Clone, Debug, PartialEq)]
pub struct SamplerParams {
    /// Softmax temperature; `<= 0` means greedy (argmax).
    pub temperature: f32,
    /// Keep only the `top_k` most likely tokens; `<= 0` turns the filter off.
    pub top_k: i32,
    /// Nucleus filter threshold; `>= 1.0` (or NaN) turns it off.
    pub top_p: f32,
    /// Drop tokens less likely than `min_p` times the most likely one; `<= 0.0` (or NaN) turns
    /// it off.
    pub min_p: f32,
    /// Seed of the [`XorShift`] generator.
    pub seed: u64,
    /// Repetition penalty: positive logits of recent tokens are divided by it, non-positive
    /// ones multiplied; `1.0` turns it off.
    pub repeat_penalty: f32,
    /// How many of the most recent history tokens the penalties look at; `0` turns all
    /// penalties off, negative (llama.cpp accepts `-1`) means the whole history.
    pub repeat_last_n: i32,
    /// Subtracted from a recent token's logit once per occurrence in the window.
    pub frequency_penalty: f32,
    /// Subtracted from a recent token's logit once if it occurs in the window at all.
    pub presence_penalty: f32,
    /// `(token id, bias)` pairs added to the logits before anything else; `-inf` bans a token.
    pub logit_bias: Vec<(u32, f32)>,
}

impl Default for SamplerParams {
    /// llama.cpp's defaults: temperature 0.8, top-k 40, top-p 0.95, min-p 0.05, penalties off
    /// (repeat penalty 1.0 over the last 64 tokens, frequency and presence 0), no logit bias,
    /// and a fresh [`random_seed`] (so two default samplers draw different sequences; set
    /// `seed` for reproducible output).
    fn default() -> SamplerParams {
        SamplerParams {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            seed: random_seed(),
            repeat_penalty: 1.0,
            repeat_last_n: 64,
            frequency_penalty: 0.0,
            presence_penalty: 0.0,
            logit_bias: Vec::new(),
        }
    }
}

impl SamplerParams {
    /// Greedy decoding (temperature 0); the other fields keep their defaults.
    pub fn greedy() -> SamplerParams {
        SamplerParams {
            temperature: 0.0,
            ..SamplerParams::default()
        }
    }
}

/// The CPU reference sampler: [`SamplerParams`] plus the generator state.
#[derive(Clone, Debug)]
pub struct Sampler {
    params: SamplerParams,
    rng: XorShift,
}

impl Sampler {
    /// A sampler whose generator is seeded with `params.seed`.
    pub fn new(params: SamplerParams) -> Sampler {
        let rng = XorShift::new(params.seed);
        Sampler { params, rng }
    }

    /// The parameters this sampler was built with.
    pub fn params(&self) -> &SamplerParams {
        &self.params
    }

    /// The generator, e.g. to hand its state to a GPU kernel.
    pub fn rng(&self) -> &XorShift {
        &self.rng
    }

    /// Picks the next token from `logits` (one entry per vocabulary token) with no token
    /// history, so penalties do nothing (logit bias still applies).
    ///
    /// # Panics
    /// If `logits` is empty.
    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        self.sample_with_history(logits, &[])
    }

    /// Picks the next token from `logits` following the chain in the crate documentation;
    /// `history` is every token so far (prompt, then generated), of which the penalties look at
    /// the last [`repeat_last_n`](SamplerParams::repeat_last_n).
    ///
    /// # Panics
    /// If `logits` is empty.
    pub fn sample_with_history(&mut self, logits: &[f32], history: &[u32]) -> u32 {
        assert!(!logits.is_empty(), "cannot sample from an empty logit row");
        let adjusted = adjust(&self.params, logits, history);
        if is_greedy(&self.params) {
            return argmax(&adjusted);
        }
        let candidates = filtered_candidates(&self.params, &adjusted);
        let u = self.rng.next_f32();
        draw(&candidates, self.params.temperature, u)
    }
}

/// The distribution [`Sampler::sample`] draws from: [`distribution_with_history`] with an empty
/// history.
pub fn distribution(params: &SamplerParams, logits: &[f32]) -> Vec<(u32, f32)> {
    distribution_with_history(params, logits, &[])
}

/// The distribution [`Sampler::sample_with_history`] draws from for these parameters, logits
/// and history: `(token, probability)` in draw order (most likely first, ties by lower id),
/// computed in `f32` exactly as the draw weighs the candidates (so a survivor whose weight
/// underflows is listed with probability 0). Greedy parameters give the
/// single argmax with probability 1; a row whose adjusted logits are all `-inf` gives an empty
/// list (the sampler then returns token 0).
pub fn distribution_with_history(
    params: &SamplerParams,
    logits: &[f32],
    history: &[u32],
) -> Vec<(u32, f32)> {
    if logits.is_empty() {
        return Vec::new();
    }
    let adjusted = adjust(params, logits, history);
    if is_greedy(params) {
        let best = argmax(&adjusted);
        return if sanitize(adjusted[best as usize]) == f32::NEG_INFINITY {
            Vec::new()
        } else {
            vec![(best, 1.0)]
        };
    }
    let candidates = filtered_candidates(params, &adjusted);
    let weights = tempered_weights(&candidates, params.temperature);
    let total = blocked_sum(&weights);
    candidates
        .iter()
        .zip(&weights)
        .map(|(c, w)| (c.id, w / total))
        .collect()
}

/// Steps 1–3 of the chain: the row after sanitizing, logit bias and penalties, as the filters
/// (or greedy) see it. Every entry is finite or `-inf`.
pub fn adjusted_logits(params: &SamplerParams, logits: &[f32], history: &[u32]) -> Vec<f32> {
    match adjust(params, logits, history) {
        Cow::Owned(row) => row,
        // Nothing to adjust: only the sanitizing is left to do.
        Cow::Borrowed(row) => row.iter().map(|&l| sanitize(l)).collect(),
    }
}

/// Log-probabilities reported alongside a sampled token.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogprobs {
    /// The token the probabilities are reported for (normally the sampled one).
    pub token: u32,
    /// Its natural-log probability.
    pub logprob: f32,
    /// The most likely tokens, `(id, logprob)`, most likely first, ties by lower id.
    pub top: Vec<(u32, f32)>,
}

/// Log-probabilities of `token` and of the `n` most likely tokens under the softmax of the full
/// row `logits` as given (temperature 1, no filters), computed in `f64`.
///
/// NaN counts as `-inf` and `+inf` as `f32::MAX`, as in the sampler. Tokens of probability 0
/// (`-inf`) are never listed among the alternatives, so `top` may hold fewer than `n`; the
/// chosen token is reported even then (logprob `-inf`). If no logit is finite there is no
/// distribution: `logprob` is `-inf` and `top` is empty.
///
/// # Panics
/// If `token` is not an index of `logits`.
pub fn logprobs(logits: &[f32], token: u32, n: usize) -> TokenLogprobs {
    assert!(
        (token as usize) < logits.len(),
        "token {token} outside a row of {} logits",
        logits.len()
    );
    let max = logits
        .iter()
        .map(|&l| sanitize(l))
        .fold(f32::NEG_INFINITY, f32::max);
    if max == f32::NEG_INFINITY {
        return TokenLogprobs {
            token,
            logprob: f32::NEG_INFINITY,
            top: Vec::new(),
        };
    }
    let max = f64::from(max);
    // f64 so that the differences of extreme logits (f32::MAX - -f32::MAX) stay finite.
    let log_sum = logits
        .iter()
        .map(|&l| (f64::from(sanitize(l)) - max).exp())
        .sum::<f64>()
        .ln();
    let logprob_of = |l: f32| (f64::from(sanitize(l)) - max - log_sum) as f32;

    let mut top: Vec<Candidate> = logits
        .iter()
        .enumerate()
        .map(|(i, &l)| Candidate {
            id: i as u32,
            logit: sanitize(l),
        })
        .filter(|c| c.logit > f32::NEG_INFINITY)
        .collect();
    if n == 0 {
        top.clear();
    } else if n < top.len() {
        top.select_nth_unstable_by(n - 1, candidate_order);
        top.truncate(n);
    }
    top.sort_unstable_by(candidate_order);
    TokenLogprobs {
        token,
        logprob: logprob_of(logits[token as usize]),
        top: top.iter().map(|c| (c.id, logprob_of(c.logit))).collect(),
    }
}

/// [`logprobs`] of the row after logit bias and penalties ([`adjusted_logits`]) but before the
/// filters and temperature: the model's distribution as the sampler's constraints reshape it,
/// independent of top-k/top-p/min-p/temperature. (llama.cpp's server reports the raw model row
/// by default; pass the raw logits to [`logprobs`] for that. The post-filter distribution is
/// [`distribution_with_history`].)
///
/// # Panics
/// If `token` is not an index of `logits`.
pub fn logprobs_with_history(
    params: &SamplerParams,
    logits: &[f32],
    history: &[u32],
    token: u32,
    n: usize,
) -> TokenLogprobs {
    logprobs(&adjust(params, logits, history), token, n)
}

/// Index of the first maximum of `logits` (lowest index among ties), with NaN counted as
/// `-inf`. If every entry is `-inf` or NaN, 0.
///
/// # Panics
/// If `logits` is empty.
pub fn argmax(logits: &[f32]) -> u32 {
    assert!(!logits.is_empty(), "argmax of an empty logit row");
    // The maximum lane by lane (each lane's running maximum is independent,
    // so the loop vectorizes; `max` skips NaN as the sanitized -inf would
    // lose), then the first position holding it: the same answer as one
    // scan keeping the first strict maximum, at a fraction of its time on a
    // large vocabulary.
    const L: usize = 16;
    let mut lanes = [f32::NEG_INFINITY; L];
    let chunks = logits.chunks_exact(L);
    let tail = chunks.remainder();
    for chunk in chunks {
        for j in 0..L {
            lanes[j] = lanes[j].max(chunk[j]);
        }
    }
    let best = sanitize(
        tail.iter()
            .chain(&lanes)
            .fold(f32::NEG_INFINITY, |a, &b| a.max(b)),
    );
    let is_best = |l: f32| sanitize(l) == best;
    let (at, chunk) = chunks_matching(logits, is_best)
        .next()
        .expect("the maximum is in the row");
    (at + chunk
        .iter()
        .position(|&l| is_best(l))
        .expect("a match in the chunk")) as u32
}

/// The chunks of 16 logits (with the index of their first) that hold at
/// least one logit satisfying `pass`, in order. Each chunk is tested as a
/// whole, without branches (the test vectorizes), so chunks without a
/// match cost a few vector instructions.
fn chunks_matching(
    logits: &[f32],
    pass: impl Fn(f32) -> bool,
) -> impl Iterator<Item = (usize, &[f32])> {
    const L: usize = 16;
    logits
        .chunks(L)
        .enumerate()
        .filter(move |(_, chunk)| chunk.iter().fold(0u32, |any, &l| any | u32::from(pass(l))) != 0)
        .map(|(c, chunk)| (c * L, chunk))
}

/// A seed from process-local entropy, for when the user gives none: the standard library's
/// per-process random hashing keys, the clock, a stack address, the process id and a counter,
/// mixed with splitmix64. Not for cryptography.
pub fn random_seed() -> u64 {
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let calls = CALLS.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let local = 0u8;
    let address = std::ptr::addr_of!(local) as usize as u64;
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u64(nanos);
    hasher.write_u64(address);
    hasher.write_u64(calls);
    hasher.write_u32(std::process::id());
    let mut state = hasher.finish() ^ nanos.rotate_left(32);
    splitmix64(&mut state)
}

/// Marsaglia's xorshift128 generator ("xor128", 2003): four 32-bit words of state, only 32-bit
/// xors and shifts, period 2^128 − 1. Chosen so that WGSL (no 64-bit integers) can run it.
///
/// **Step** — state `(x, y, z, w)`, all `u32`, shifts are logical:
/// ```text
/// t  = x ^ (x << 11)
/// x' = y;  y' = z;  z' = w
/// w' = w ^ (w >> 19) ^ t ^ (t >> 8)
/// output w'
/// ```
///
/// **Seeding** ([`XorShift::new`]) — on the host, with 64-bit arithmetic (wrapping):
/// splitmix64 with `s = seed`, called twice: each call does `s += 0x9E3779B97F4A7C15; z = s;
/// z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9; z = (z ^ (z >> 27)) * 0x94D049BB133111EB;
/// return z ^ (z >> 31)`. With outputs `a` then `b`: `x = low32(a)`, `y = high32(a)`,
/// `z = low32(b)`, `w = high32(b)`. If all four words are zero (the one state xorshift cannot
/// leave) `x` is set to `0x9E3779B9`. A GPU kernel receives the four words ([`XorShift::state`])
/// rather than the seed.
///
/// **Uniform** ([`XorShift::next_f32`]) — one step, then `(out >> 8) as f32 * 2^-24`: the top 24
/// bits, exactly representable, so the result lies in `[0, 1 − 2^-24]` and is never 1.0.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct XorShift {
    state: [u32; 4],
}

impl XorShift {
    /// The generator seeded from `seed` as described on the type.
    pub fn new(seed: u64) -> XorShift {
        let mut s = seed;
        let a = splitmix64(&mut s);
        let b = splitmix64(&mut s);
        XorShift::from_state([a as u32, (a >> 32) as u32, b as u32, (b >> 32) as u32])
    }

    /// A generator continuing from `state` (`[x, y, z, w]`); an all-zero state is replaced as
    /// in seeding.
    pub fn from_state(state: [u32; 4]) -> XorShift {
        let mut state = state;
        if state == [0; 4] {
            state[0] = 0x9E37_79B9;
        }
        XorShift { state }
    }

    /// The current state `[x, y, z, w]`.
    pub fn state(&self) -> [u32; 4] {
        self.state
    }

    /// Advances one step and returns the new `w`.
    pub fn next_u32(&mut self) -> u32 {
        let [x, y, z, w] = self.state;
        let t = x ^ (x << 11);
        let new_w = w ^ (w >> 19) ^ t ^ (t >> 8);
        self.state = [y, z, w, new_w];
        new_w
    }

    /// Advances one step and maps the output to `[0, 1)` (see the type's documentation).
    pub fn next_f32(&mut self) -> f32 {
        unit_f32(self.next_u32())
    }
}

/// The `[0, 1)` mapping of [`XorShift::next_f32`]: top 24 bits times 2^-24.
pub fn unit_f32(bits: u32) -> f32 {
    (bits >> 8) as f32 * (1.0 / 16_777_216.0)
}

fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[derive(Clone, Copy, Debug)]
struct Candidate {
    id: u32,
    logit: f32,
}

fn is_greedy(params: &SamplerParams) -> bool {
    // NaN temperature is treated as greedy too: it cannot scale anything meaningfully.
    params.temperature.is_nan() || params.temperature <= 0.0
}

fn sanitize(l: f32) -> f32 {
    if l.is_nan() {
        f32::NEG_INFINITY
    } else if l == f32::INFINITY {
        f32::MAX
    } else {
        l
    }
}

fn penalties_active(params: &SamplerParams, history: &[u32]) -> bool {
    // The same short cut as llama.cpp: with neutral values the formula is the identity.
    params.repeat_last_n != 0
        && !history.is_empty()
        && (params.repeat_penalty != 1.0
            || params.frequency_penalty != 0.0
            || params.presence_penalty != 0.0)
}

/// Steps 1–3 of the chain. Borrows the row untouched when there is no bias and no active
/// penalty (the consumers sanitize as they read), so the default path copies nothing.
fn adjust<'a>(params: &SamplerParams, logits: &'a [f32], history: &[u32]) -> Cow<'a, [f32]> {
    let penalize = penalties_active(params, history);
    if params.logit_bias.is_empty() && !penalize {
        return Cow::Borrowed(logits);
    }
    let mut row: Vec<f32> = logits.iter().map(|&l| sanitize(l)).collect();

    for &(id, bias) in &params.logit_bias {
        if let Some(l) = row.get_mut(id as usize) {
            if !bias.is_nan() {
                *l = sanitize(*l + bias);
            }
        }
    }

    if penalize {
        let window = match usize::try_from(params.repeat_last_n) {
            Ok(n) => &history[history.len().saturating_sub(n)..],
            Err(_) => history,
        };
        // Sorting groups equal ids, so counts come out without hashing.
        let mut recent = window.to_vec();
        recent.sort_unstable();
        for group in recent.chunk_by(|a, b| a == b) {
            let Some(l) = row.get_mut(group[0] as usize) else {
                continue;
            };
            if *l == f32::NEG_INFINITY {
                continue;
            }
            let count = group.len() as f32;
            let repeated = if *l <= 0.0 {
                *l * params.repeat_penalty
            } else {
                *l / params.repeat_penalty
            };
            // Grouped as llama.cpp does, so the f32 results agree.
            *l = sanitize(repeated - (count * params.frequency_penalty + params.presence_penalty));
        }
    }
    Cow::Owned(row)
}

/// Descending logit, then ascending id.
fn candidate_order(a: &Candidate, b: &Candidate) -> std::cmp::Ordering {
    b.logit.total_cmp(&a.logit).then(a.id.cmp(&b.id))
}

/// Steps 5–8 of the chain (sanitizing as it reads): the surviving candidates in draw order.
fn filtered_candidates(params: &SamplerParams, logits: &[f32]) -> Vec<Candidate> {
    let floor = top_k_floor(params, logits);
    let mut cands = candidates_from(logits, floor);

    // Top-k; selecting first keeps the sort to k elements.
    if params.top_k > 0 && (params.top_k as usize) < cands.len() {
        let k = params.top_k as usize;
        cands.select_nth_unstable_by(k - 1, candidate_order);
        cands.truncate(k);
    }
    cands.sort_unstable_by(candidate_order);

    // Top-p over the (renormalised) survivors of top-k.
    if params.top_p < 1.0 && cands.len() > 1 {
        let weights = tempered_weights(&cands, 1.0);
        // Cumulative weight against top_p * total rather than summed quotients: no division,
        // which a GPU does not round correctly.
        let bound = params.top_p * blocked_sum(&weights);
        let keep = first_cumulative(&weights, |c| c >= bound).map_or(cands.len(), |i| i + 1);
        cands.truncate(keep);
    }

    // Min-p, in logit space: p_i >= min_p * p_max  <=>  l_i >= l_max + ln(min_p).
    if params.min_p > 0.0 && cands.len() > 1 {
        let threshold = cands[0].logit + params.min_p.ln();
        let keep = 1 + cands[1..]
            .iter()
            .take_while(|c| c.logit >= threshold)
            .count();
        cands.truncate(keep);
    }
    cands
}

/// The logits that are not -inf and are at least `floor`, sanitized, in
/// id order. Sixteen at a time: a chunk is tested as a whole first (the
/// test vectorizes), and a chunk with survivors is compacted without
/// branches (a write per logit, the count advanced by the test), since
/// survivors fall at random and a branch per logit mispredicted on each.
fn candidates_from(logits: &[f32], floor: f32) -> Vec<Candidate> {
    // On the raw logits: NaN fails both tests as its sanitized -inf would,
    // +inf passes both as its sanitized f32::MAX would.
    let pass = |l: f32| l > f32::NEG_INFINITY && l >= floor;
    let mut cands = Vec::new();
    let mut buf = [Candidate { id: 0, logit: 0.0 }; 16];
    for (at, chunk) in chunks_matching(logits, pass) {
        let mut n = 0;
        for (j, &l) in chunk.iter().enumerate() {
            buf[n] = Candidate {
                id: (at + j) as u32,
                logit: sanitize(l),
            };
            n += usize::from(pass(l));
        }
        cands.extend_from_slice(&buf[..n]);
    }
    cands
}

/// A logit no larger than the k-th largest (so every top-k candidate and
/// every tie with the k-th passes `>= floor`): the k-th largest of the
/// row's maxima over `lanes` interleaved groups (positions equal mod
/// `lanes`). The maxima are entries at distinct positions, so their k-th
/// largest is at most the row's; with a few times k groups each maximum
/// is among the row's top entries, so only tens to hundreds of candidates
/// pass on a 49k vocabulary, at the cost of one vectorized pass (a
/// prefix's k-th largest let thousands through on rows in random order).
/// `-inf` (keep all) without top-k or for short rows.
fn top_k_floor(params: &SamplerParams, logits: &[f32]) -> f32 {
    let k = params.top_k.max(0) as usize;
    let lanes = k.saturating_mul(2).next_multiple_of(16).max(64);
    if k == 0 || logits.len() / 4 < lanes {
        return f32::NEG_INFINITY;
    }
    // `max` skips NaN, whose sanitized -inf never raises a maximum.
    let mut maxima = vec![f32::NEG_INFINITY; lanes];
    let chunks = logits.chunks_exact(lanes);
    let tail = chunks.remainder();
    for chunk in chunks {
        for (m, &l) in maxima.iter_mut().zip(chunk) {
            *m = m.max(l);
        }
    }
    for (m, &l) in maxima.iter_mut().zip(tail) {
        *m = m.max(l);
    }
    for m in maxima.iter_mut() {
        *m = sanitize(*m);
    }
    let (_, kth, _) = maxima.select_nth_unstable_by(k - 1, |a, b| b.total_cmp(a));
    *kth
}

/// [`weight`] of each candidate (sorted most likely first) against the first one.
fn tempered_weights(cands: &[Candidate], temperature: f32) -> Vec<f32> {
    let Some(first) = cands.first() else {
        return Vec::new();
    };
    let max = first.logit;
    let inv_t = inverse_temperature(temperature);
    cands.iter().map(|c| weight(c.logit, max, inv_t)).collect()
}

/// `1 / temperature` in `f32`, the factor the weights multiply by (a GPU kernel receives these
/// bits rather than dividing, as its division need not be correctly rounded). An infinite
/// reciprocal (temperature below about 3e-39) is clamped to `f32::MAX`, and a subnormal one
/// (temperature above about 8.5e37) is flushed to 0, since GPUs may flush subnormals.
pub fn inverse_temperature(temperature: f32) -> f32 {
    let inv = 1.0 / temperature;
    if inv == f32::INFINITY {
        f32::MAX
    } else if inv < f32::MIN_POSITIVE {
        0.0
    } else {
        inv
    }
}

/// Arguments below this have weight 0: `exp(-87)` is still a normal `f32`, so no weight is ever
/// subnormal (which a GPU may flush to zero).
const WEIGHT_MIN_ARG: f32 = -87.0;

/// The unnormalised weight of a candidate with logit `logit` when the most likely one has `max`:
/// `exp_kestrel((logit - max) * inv_t)`, or 0 where the difference overflows to `-inf` or the
/// argument is below -87. The float steps are single correctly rounded operations and the exp is
/// integer arithmetic, so a GPU kernel gets the same bits.
pub fn weight(logit: f32, max: f32, inv_t: f32) -> f32 {
    let d = logit - max;
    if d == f32::NEG_INFINITY {
        return 0.0;
    }
    let x = d * inv_t;
    if x < WEIGHT_MIN_ARG {
        return 0.0;
    }
    exp_kestrel(x)
}

/// `exp(x)` for `x` in `[-87, 0]`, within about half an ulp, computed in integer fixed point so
/// that a GPU kernel (WGSL, 32-bit integers only) gets the same bits: float `exp` is not
/// correctly rounded on either side, and WGSL's `fma` need not be fused (lavapipe's is not).
///
/// `a = |x|` truncated to 32 fractional bits; `t = a log2(e)` (32.32, the constant to 64 bits,
/// three truncated partial products); `n = floor(t)`, `f = frac(t)`; `2^-f = 2^(-j/16) 2^-r`
/// with `j` the top 4 bits of `f`, [`EXP_TABLE`] for the first factor and for the second
/// `e^-y`, `y = r ln 2 < 0.0434`, by its Taylor polynomial of degree 5 in Horner form (Q1.31,
/// products truncated); the result `2^-f 2^-n`, rounded to 24 bits half up. `|x| < 2^-32`
/// gives 1.
pub fn exp_kestrel(x: f32) -> f32 {
    let bits = x.to_bits() & 0x7fff_ffff;
    let e = (bits >> 23) as i32;
    if e < 127 - 32 {
        return 1.0;
    }
    let m = u64::from((bits & 0x7f_ffff) | 0x80_0000);
    // |x| = m 2^(e - 150); in units of 2^-32 (at most 2^39 for |x| <= 87).
    let sh = e - 150 + 32;
    let a = if sh >= 0 { m << sh } else { m >> -sh };
    let (a1, a0) = (a >> 32, a & 0xffff_ffff);
    let t = a
        + a1 * EXP_LOG2E_FRAC[0]
        + ((a0 * EXP_LOG2E_FRAC[0]) >> 32)
        + ((a1 * EXP_LOG2E_FRAC[1]) >> 32);
    let n = (t >> 32) as i32;
    let f = t as u32;
    let j = (f >> 28) as usize;
    let r = u64::from(f & 0x0fff_ffff);
    // y in Q1.31: r 2^-32 ln 2.
    let y = ((r * EXP_LN2_Q31) >> 32) as u32;
    let mul31 = |a: u32, b: u32| ((u64::from(a) * u64::from(b)) >> 31) as u32;
    const ONE: u32 = 1 << 31;
    let mut q = ONE - y / 5;
    for k in [4, 3, 2, 1] {
        q = ONE - mul31(y, q) / k;
    }
    let g = mul31(EXP_TABLE[j], q);
    // g 2^-31 2^-n to 24 bits, half up.
    let lead = 31 - g.leading_zeros() as i32;
    let s = lead - 23;
    let mut mant = (g + (1 << (s - 1))) >> s;
    let mut biased = lead + 96 - n;
    if mant >> 24 != 0 {
        mant >>= 1;
        biased += 1;
    }
    f32::from_bits(((biased.max(1) as u32) << 23) | (mant & 0x7f_ffff))
}

/// The fraction of `log2(e)` to 64 bits (high word, low word), truncated.
pub const EXP_LOG2E_FRAC: [u64; 2] = [0x7154_7652, 0xB82F_E177];
/// `ln(2) 2^31`, rounded.
pub const EXP_LN2_Q31: u64 = 0x58B9_0BFC;
/// `2^(-j/16) 2^31`, rounded, for `j` in `0..16`.
pub const EXP_TABLE: [u32; 16] = [
    0x8000_0000,
    0x7A92_BE8B,
    0x7560_6374,
    0x7066_6F76,
    0x6BA2_7E65,
    0x6712_460B,
    0x62B3_9509,
    0x5E84_51D0,
    0x5A82_799A,
    0x56AC_1F75,
    0x52FF_6B55,
    0x4F7A_9930,
    0x4C1B_F829,
    0x48E1_E9BA,
    0x45CA_E0F2,
    0x42D5_61B4,
];

/// Steps 9–10: inverse CDF with the uniform `u`.
fn draw(cands: &[Candidate], temperature: f32, u: f32) -> u32 {
    let weights = tempered_weights(cands, temperature);
    let target = u * blocked_sum(&weights);
    match first_cumulative(&weights, |c| target < c) {
        Some(i) => cands[i].id,
        None => cands.last().map_or(0, |c| c.id),
    }
}

/// Weights are summed in blocks of this many (in draw order): each block in order from 0, then
/// the block totals in order. A GPU sums the blocks in parallel and the totals on one thread
/// with the same bits; pools of at most one block sum plainly in order.
pub const SUM_BLOCK: usize = 256;

/// The total of `weights` as the chain defines it ([`SUM_BLOCK`]).
fn blocked_sum(weights: &[f32]) -> f32 {
    weights
        .chunks(SUM_BLOCK)
        .fold(0.0f32, |before, block| before + block_total(block))
}

fn block_total(block: &[f32]) -> f32 {
    block.iter().fold(0.0f32, |s, w| s + w)
}

/// The first `i` whose cumulative weight `P_i` satisfies `hit` (monotone in `P`), if any.
/// `P_i = B + (w_k + ... + w_i)`: `B` the sum of the totals of the blocks before `i`'s, the
/// parenthesis summed in order from the block's start `k`; `P` never decreases and ends at
/// [`blocked_sum`].
fn first_cumulative(weights: &[f32], hit: impl Fn(f32) -> bool) -> Option<usize> {
    let mut before = 0.0f32;
    for (b, block) in weights.chunks(SUM_BLOCK).enumerate() {
        let end = before + block_total(block);
        if hit(end) {
            let mut s = 0.0f32;
            for (j, w) in block.iter().enumerate() {
                s += w;
                if hit(before + s) {
                    return Some(b * SUM_BLOCK + j);
                }
            }
            // The last P of the block is `end` itself.
            return Some(b * SUM_BLOCK + block.len() - 1);
        }
        before = end;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Top-k over the whole row, as the sampler did before the prefix
    /// floor: the candidates the floor must not change.
    fn top_k_whole_row(k: usize, logits: &[f32]) -> Vec<(u32, u32)> {
        let mut c: Vec<Candidate> = logits
            .iter()
            .enumerate()
            .map(|(i, &l)| Candidate {
                id: i as u32,
                logit: sanitize(l),
            })
            .filter(|c| c.logit > f32::NEG_INFINITY)
            .collect();
        if k > 0 && k < c.len() {
            c.select_nth_unstable_by(k - 1, candidate_order);
            c.truncate(k);
        }
        c.sort_unstable_by(candidate_order);
        c.iter().map(|c| (c.id, c.logit.to_bits())).collect()
    }

    #[test]
    fn the_top_k_floor_keeps_exactly_the_top_k() {
        let mut s = 0x1234_5678_9abc_def0u64;
        let mut next = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        for case in 0..60 {
            let n = [1500usize, 5000, 49_152][case % 3];
            // Few distinct values (many ties), or spread ones, with -inf,
            // NaN and +inf sprinkled in; the largest values late in the row
            // for some cases (so the prefix holds none of them).
            let levels = [7u64, 1000, 1 << 30][case / 3 % 3];
            let mut row: Vec<f32> = (0..n)
                .map(|_| (next() % levels) as f32 / levels as f32 * 20.0 - 10.0)
                .collect();
            for _ in 0..20 {
                let i = next() as usize % n;
                row[i] = [f32::NEG_INFINITY, f32::NAN, f32::INFINITY, -0.0, 0.0][i % 5];
            }
            if case % 4 == 0 {
                for v in row[n - 100..].iter_mut() {
                    *v += 50.0;
                }
            }
            for k in [1usize, 2, 40, 64, 100, 1000, 4000] {
                let params = SamplerParams {
                    top_k: k as i32,
                    top_p: 1.0,
                    min_p: 0.0,
                    ..SamplerParams::default()
                };
                let got: Vec<(u32, u32)> = filtered_candidates(&params, &row)
                    .iter()
                    .map(|c| (c.id, c.logit.to_bits()))
                    .collect();
                assert_eq!(got, top_k_whole_row(k, &row), "case {case} n {n} k {k}");
            }
        }
    }

    /// The chunked argmax against one scan keeping the first strict
    /// maximum of the sanitized row: lengths around the chunk size, ties,
    /// NaN, both infinities, rows of nothing but NaN and -inf.
    #[test]
    fn argmax_equals_a_plain_scan() {
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        let scan = |row: &[f32]| {
            let mut best = 0;
            for (i, &l) in row.iter().enumerate() {
                if sanitize(l) > sanitize(row[best]) {
                    best = i;
                }
            }
            best as u32
        };
        for case in 0..400 {
            let n = [1usize, 15, 16, 17, 33, 100, 4097, 49_152][case % 8];
            let levels = [3u64, 1 << 20][case / 8 % 2];
            let mut row: Vec<f32> = (0..n)
                .map(|_| (next() % levels) as f32 / levels as f32 * 4.0 - 2.0)
                .collect();
            let specials = [f32::NEG_INFINITY, f32::NAN, f32::INFINITY, f32::MAX];
            for _ in 0..case % 5 {
                let i = next() as usize % n;
                row[i] = specials[next() as usize % specials.len()];
            }
            if case % 16 == 7 {
                row.iter_mut()
                    .for_each(|v| *v = [f32::NAN, f32::NEG_INFINITY][next() as usize % 2]);
            }
            assert_eq!(argmax(&row), scan(&row), "case {case} n {n}");
        }
    }

    #[test]
    fn unit_mapping_bounds() {
        assert_eq!(unit_f32(0), 0.0);
        assert_eq!(unit_f32(0xFF), 0.0);
        assert_eq!(unit_f32(0x100), 1.0 / 16_777_216.0);
        assert_eq!(unit_f32(u32::MAX), 1.0 - 1.0 / 16_777_216.0);
        assert!(unit_f32(u32::MAX) < 1.0);
    }

    #[test]
    fn zero_state_is_replaced() {
        let mut g = XorShift::from_state([0; 4]);
        assert_eq!(g.state(), [0x9E37_79B9, 0, 0, 0]);
        assert_ne!(g.next_u32(), 0);
    }

    #[test]
    fn draw_falls_back_to_last_candidate() {
        let cands = [
            Candidate { id: 4, logit: 0.0 },
            Candidate { id: 2, logit: -1.0 },
        ];
        assert_eq!(draw(&cands, 1.0, 0.0), 4);
        // u just below 1 lands in the last bucket.
        assert_eq!(draw(&cands, 1.0, unit_f32(u32::MAX)), 2);
        assert_eq!(draw(&[], 1.0, 0.5), 0);
    }

    #[test]
    fn exp_kestrel_is_accurate_and_exact_at_zero() {
        assert_eq!(exp_kestrel(0.0), 1.0);
        assert_eq!(exp_kestrel(-0.0), 1.0);
        let mut worst = 0.0f64;
        let mut x = WEIGHT_MIN_ARG;
        while x <= 0.0 {
            let want = f64::from(x).exp();
            let got = f64::from(exp_kestrel(x));
            assert!(got.is_normal(), "exp({x}) = {got}");
            // Relative error in units of 2^-24 (correct rounding stays below 1).
            worst = worst.max(((got - want) / want).abs() * 16_777_216.0);
            x += 0.000_731;
        }
        assert!(worst < 1.1, "worst relative error {worst} * 2^-24");
    }

    #[test]
    fn weights_at_the_edges() {
        assert_eq!(weight(3.0, 3.0, 1.0), 1.0);
        assert_eq!(weight(-f32::MAX, f32::MAX, 1.0), 0.0);
        assert_eq!(weight(-f32::MAX, f32::MAX, 0.0), 0.0);
        assert_eq!(weight(-1.0, 0.0, f32::MAX), 0.0);
        assert_eq!(weight(-100.0, 0.0, 0.5), exp_kestrel(-50.0));
        assert_eq!(weight(-88.0, 0.0, 1.0), 0.0);
        assert!(weight(-87.0, 0.0, 1.0) > 0.0);
        assert_eq!(inverse_temperature(0.5), 2.0);
        assert_eq!(inverse_temperature(1e-40), f32::MAX);
        assert_eq!(inverse_temperature(f32::INFINITY), 0.0);
        assert_eq!(inverse_temperature(1e38), 0.0);
    }

    #[test]
    fn neutral_params_borrow_the_row() {
        let logits = [1.0, f32::NAN];
        let p = SamplerParams {
            seed: 0,
            ..SamplerParams::default()
        };
        // Defaults: no bias, repeat penalty 1 -> nothing to adjust, even with a history.
        assert!(matches!(adjust(&p, &logits, &[0, 1]), Cow::Borrowed(_)));
        let p = SamplerParams {
            presence_penalty: 0.5,
            ..p
        };
        assert!(matches!(adjust(&p, &logits, &[0, 1]), Cow::Owned(_)));
        assert!(matches!(adjust(&p, &logits, &[]), Cow::Borrowed(_)));
    }
}
