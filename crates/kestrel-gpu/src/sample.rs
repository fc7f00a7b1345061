//! Greedy token selection on the device, the chain's steps 1-4 (see
//! `kestrel_sampling`): sanitize (NaN = -inf, +inf = f32::MAX), logit bias
//! (entries in order, several for one id adding up), repetition, frequency
//! and presence penalties over the history window, then the first maximum
//! (lowest id among ties). The chosen id is written into the history buffer
//! at the next position, where the next step's embedding lookup reads it,
//! so nothing has to come back to the host inside a step.
//!
//! One workgroup of 256 threads. Floats are compared through their bits
//! (WGSL lets an implementation assume there are no NaNs or infinities, so
//! `x != x` and comparisons with infinities cannot be trusted). The
//! penalties divide by `repeat_penalty` as the CPU does; an adapter whose
//! division is not correctly rounded can part from the CPU in the last bit
//! (lavapipe's is exact).

use crate::{Gpu, GpuError};

/// What the greedy sampler applies before taking the maximum.
#[derive(Clone, Debug, Default)]
pub struct GreedyParams {
    pub logit_bias: Vec<(u32, f32)>,
    /// Last tokens of the history the penalties look at (0 = off).
    pub repeat_last_n: usize,
    pub repeat_penalty: f32,
    pub frequency_penalty: f32,
    pub presence_penalty: f32,
}

pub struct GreedySampler {
    pipeline: wgpu::ComputePipeline,
}

const SRC: &str = r#"
@group(0) @binding(0) var<storage, read_write> logits: array<u32>;
@group(0) @binding(1) var<storage, read_write> history: array<u32>;
@group(0) @binding(2) var<storage, read> bias_ids: array<u32>;
@group(0) @binding(3) var<storage, read> bias_vals: array<u32>;
// vocab, write position, window start, window length, bias entries,
// repeat penalty, frequency penalty, presence penalty (f32 bits)
@group(0) @binding(4) var<uniform> p: array<vec4<u32>, 2>;

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
    // Penalties: the first occurrence of each id in the window applies
    // them for all its occurrences, so every id is written by one thread.
    for (var j = t; j < wn; j += 256u) {
        let tok = history[ws + j];
        var first = tok < vocab;
        for (var k = 0u; k < j && first; k++) {
            if (history[ws + k] == tok) { first = false; }
        }
        if (first) {
            var c = 0u;
            for (var k = j; k < wn; k++) {
                if (history[ws + k] == tok) { c++; }
            }
            let lb = sanitize(logits[tok]);
            if (lb != NEG_INF) {
                let l = bitcast<f32>(lb);
                var r: f32;
                if ((lb & 0x80000000u) != 0u || (lb & 0x7fffffffu) == 0u) {
                    r = l * bitcast<f32>(p[1].y);
                } else {
                    r = l / bitcast<f32>(p[1].y);
                }
                let sub = f32(c) * bitcast<f32>(p[1].z) + bitcast<f32>(p[1].w);
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
            pipeline: gpu.pipeline("greedy sampler", SRC),
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
        params: &GreedyParams,
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
        let window = params.repeat_last_n.min(pos);
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
        ]);
        let bind = gpu.bind(&self.pipeline, &[logits, history, &ids, &vals, &uniform]);
        gpu.run(&self.pipeline, &bind, 1);
        Ok(())
    }
}
