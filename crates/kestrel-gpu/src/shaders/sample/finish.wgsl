// Sampler's last kernel: top-p, min-p, temperature and the seeded draw.
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
