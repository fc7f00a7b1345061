// Sampler step 1: sanitized logits with the token mask, bias and penalties, the first maximum,
// the candidate count.
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
// Allowed tokens, one bit each (bit t % 32 of word t / 32), read only when
// the mask flag is set.
@group(0) @binding(8) var<storage, read> mask: array<u32>;

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
    // A masked-out token is -inf before the whole chain, as the CPU does
    // it: bias and penalties then leave it there.
    let masked = p.v[4].y != 0u;
    for (var i = t; i < vocab; i += 256u) {
        if (masked && ((mask[i >> 5u] >> (i & 31u)) & 1u) == 0u) {
            adj[i] = NEG_INF;
        } else {
            adj[i] = sanitize(logits[i]);
        }
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
