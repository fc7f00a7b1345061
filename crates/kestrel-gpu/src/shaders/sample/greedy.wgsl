// The greedy sampler: bias, penalties and the first maximum, in one workgroup
// (after float_bits.wgsl).
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

var<workgroup> best_key: array<u32, 256>;
var<workgroup> best_id: array<u32, 256>;

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
