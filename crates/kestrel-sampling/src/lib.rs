//! Token sampling: sampler parameters, the CPU reference sampler, and the seeded random
//! generator ([`XorShift`]) that GPU sampling kernels must reproduce bit for bit.
//!
//! # The chain
//!
//! [`Sampler::sample`] turns one row of logits into a token id:
//!
//! 1. **Sanitize.** NaN logits count as `-inf` (never chosen); `+inf` counts as `f32::MAX`.
//!    Tokens at `-inf` are dropped from the candidates (their probability is 0 anyway).
//! 2. **Greedy** when `temperature <= 0`: the first maximum (lowest token id among ties) is
//!    returned and no random number is drawn. Steps 3–8 are skipped.
//! 3. **Sort** candidates by logit, descending; ties are broken by the lower token id.
//! 4. **Top-k** (`top_k > 0`): keep the first `top_k` candidates.
//! 5. **Top-p** (`top_p < 1`): softmax (temperature 1) over the remaining candidates, then keep
//!    the shortest prefix whose cumulative probability is `>= top_p`, and at least one token.
//!    `top_p <= 0` therefore keeps exactly one token.
//! 6. **Min-p** (`min_p > 0`): keep the candidates whose logit is `>= max_logit + ln(min_p)`,
//!    i.e. whose probability is at least `min_p` times the most likely one's; at least one.
//! 7. **Temperature**: weights `w_i = exp((logit_i - max_logit) / temperature)` over the
//!    survivors (a softmax, up to the normalising sum).
//! 8. **Draw**: exactly one uniform `u` in `[0, 1)` from the generator ([`XorShift::next_f32`]),
//!    then inverse CDF over the candidates in the sorted order of step 3: the first candidate `i`
//!    with `u * sum(w) < w_0 + ... + w_i` (all in `f32`, summed in that order); if rounding
//!    leaves none, the last candidate.
//!
//! The filters see untempered logits, as in llama.cpp's default chain (top-k, top-p and min-p
//! run before its temperature sampler); top-p renormalises over what top-k left, as llama.cpp
//! does; with `min_keep = 1` throughout. If every logit is `-inf` or NaN, the result is token 0
//! (in both modes; the sampling mode still draws its one number, so the generator advances by
//! exactly one draw per non-greedy call).

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Sampling parameters.
///
/// More fields will be added (logit bias, repetition penalties, ...); build values with
/// struct-update syntax (`SamplerParams { top_k: 20, ..Default::default() }`) so that code keeps
/// compiling as the struct grows.
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
}

impl Default for SamplerParams {
    /// llama.cpp's defaults: temperature 0.8, top-k 40, top-p 0.95, min-p 0.05, and a fresh
    /// [`random_seed`] (so two default samplers draw different sequences; set `seed` for
    /// reproducible output).
    fn default() -> SamplerParams {
        SamplerParams {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            seed: random_seed(),
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

    /// Picks the next token from `logits` (one entry per vocabulary token) following the chain
    /// in the crate documentation.
    ///
    /// # Panics
    /// If `logits` is empty.
    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        assert!(!logits.is_empty(), "cannot sample from an empty logit row");
        if is_greedy(&self.params) {
            return argmax(logits);
        }
        let candidates = filtered_candidates(&self.params, logits);
        let u = self.rng.next_f32();
        draw(&candidates, self.params.temperature, u)
    }
}

/// The distribution [`Sampler::sample`] draws from for these parameters and logits: `(token,
/// probability)` in draw order (most likely first, ties by lower id). Greedy parameters give the
/// single argmax with probability 1; all `-inf`/NaN logits give an empty list (the sampler then
/// returns token 0).
pub fn distribution(params: &SamplerParams, logits: &[f32]) -> Vec<(u32, f32)> {
    if logits.is_empty() {
        return Vec::new();
    }
    if is_greedy(params) {
        let best = argmax(logits);
        return if sanitize(logits[best as usize]) == f32::NEG_INFINITY {
            Vec::new()
        } else {
            vec![(best, 1.0)]
        };
    }
    let candidates = filtered_candidates(params, logits);
    let weights = tempered_weights(&candidates, params.temperature);
    let total: f32 = weights.iter().sum();
    candidates
        .iter()
        .zip(&weights)
        .map(|(c, w)| (c.id, w / total))
        .collect()
}

/// Index of the first maximum of `logits` (lowest index among ties), with NaN counted as
/// `-inf`. If every entry is `-inf` or NaN, 0.
///
/// # Panics
/// If `logits` is empty.
pub fn argmax(logits: &[f32]) -> u32 {
    assert!(!logits.is_empty(), "argmax of an empty logit row");
    let mut best = 0usize;
    let mut best_val = sanitize(logits[0]);
    for (i, &l) in logits.iter().enumerate().skip(1) {
        let l = sanitize(l);
        if l > best_val {
            best = i;
            best_val = l;
        }
    }
    best as u32
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

/// Descending logit, then ascending id.
fn candidate_order(a: &Candidate, b: &Candidate) -> std::cmp::Ordering {
    b.logit.total_cmp(&a.logit).then(a.id.cmp(&b.id))
}

/// Steps 1 and 3–6 of the chain: the surviving candidates in draw order.
fn filtered_candidates(params: &SamplerParams, logits: &[f32]) -> Vec<Candidate> {
    let mut cands: Vec<Candidate> = logits
        .iter()
        .enumerate()
        .map(|(i, &l)| Candidate {
            id: i as u32,
            logit: sanitize(l),
        })
        .filter(|c| c.logit > f32::NEG_INFINITY)
        .collect();

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
        let total: f32 = weights.iter().sum();
        let mut cumulative = 0.0f32;
        let mut keep = cands.len();
        for (i, w) in weights.iter().enumerate() {
            cumulative += w / total;
            if cumulative >= params.top_p {
                keep = i + 1;
                break;
            }
        }
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

/// `exp((l_i - l_max) / temperature)` for candidates sorted most likely first.
fn tempered_weights(cands: &[Candidate], temperature: f32) -> Vec<f32> {
    let Some(first) = cands.first() else {
        return Vec::new();
    };
    let max = first.logit;
    cands
        .iter()
        .map(|c| ((c.logit - max) / temperature).exp())
        .collect()
}

/// Step 7–8: inverse CDF with the uniform `u`.
fn draw(cands: &[Candidate], temperature: f32, u: f32) -> u32 {
    let weights = tempered_weights(cands, temperature);
    let total: f32 = weights.iter().sum();
    let target = u * total;
    let mut cumulative = 0.0f32;
    for (c, w) in cands.iter().zip(&weights) {
        cumulative += w;
        if target < cumulative {
            return c.id;
        }
    }
    cands.last().map_or(0, |c| c.id)
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
