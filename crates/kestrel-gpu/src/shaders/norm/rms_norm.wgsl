// RMSNorm, one workgroup per row, the sum of squares exact in integers.
@group(0) @binding(0) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> wt: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> y: array<vec4<f32>>;
// rows, width / 4, eps bits, width
@group(0) @binding(3) var<uniform> p: vec4<u32>;

// The 96-bit partial sums, low to high word (12 KiB at 1024 threads); the
// low words first carry the row's largest square, the last the scale.
var<workgroup> a0: array<u32, WG>;
var<workgroup> a1: array<u32, WG>;
var<workgroup> a2: array<u32, WG>;

// The bits of a square (non-negative: ordered as unsigned integers).
fn sq(v: f32) -> u32 { return bitcast<u32>(v * v) & 0x7fffffffu; }

// Exponent field, subnormals counted as 1 (their weight).
fn ex(b: u32) -> u32 { return max(b >> 23u, 1u); }

fn add96(a: vec3<u32>, b: vec3<u32>) -> vec3<u32> {
    let lo = a.x + b.x;
    let c0 = u32(lo < a.x);
    let m0 = a.y + b.y;
    let m1 = m0 + c0;
    let c1 = u32(m0 < a.y) + u32(m1 < m0);
    return vec3<u32>(lo, m1, a.z + b.z + c1);
}

// Square b in units of 2^(emax - 150 - 56) (the largest square's mantissa
// sits at bits 56..79; what falls below bit 0 is dropped).
fn place(b: u32, emax: u32) -> vec3<u32> {
    if (b == 0u) { return vec3<u32>(0u); }
    let m = select(b & 0x7fffffu, (b & 0x7fffffu) | 0x800000u, (b >> 23u) != 0u);
    let s = i32(ex(b)) + 56i - i32(emax);
    if (s < 0i) {
        if (s <= -24i) { return vec3<u32>(0u); }
        return vec3<u32>(m >> u32(-s), 0u, 0u);
    }
    let k = u32(s) / 32u;
    let r = u32(s) % 32u;
    let low = m << r;
    let high = select(0u, m >> (32u - r), r != 0u);
    if (k == 0u) { return vec3<u32>(low, high, 0u); }
    return vec3<u32>(0u, low, high);
}

// The 64-bit square of r < 2^26, as (high, low) words.
fn sq64(r: u32) -> vec2<u32> {
    let rh = r >> 16u;
    let rl = r & 0xffffu;
    let lo = rl * rl;
    let mid = 2u * rh * rl;
    let lo2 = lo + (mid << 16u);
    return vec2<u32>(rh * rh + (mid >> 16u) + u32(lo2 < lo), lo2);
}

fn le64(a: vec2<u32>, b: vec2<u32>) -> bool {
    return a.x < b.x || (a.x == b.x && a.y <= b.y);
}

// sqrt(v) rounded to nearest, for a positive normal v.
fn sqrt_cr(v: f32) -> f32 {
    let b = bitcast<u32>(v);
    var e = i32(b >> 23u) - 150i;
    var m = (b & 0x7fffffu) | 0x800000u;
    if ((e & 1i) != 0i) {
        m <<= 1u;
        e -= 1i;
    }
    // n = m * 2^26 (under 2^51); r = floor(sqrt(n)), 25 or 26 bits.
    let n = vec2<u32>(m >> 6u, m << 26u);
    var r = u32(sqrt(f32(n.x) * 4294967296.0 + f32(n.y)));
    for (var i = 0; i < 8 && !le64(sq64(r), n); i++) { r -= 1u; }
    for (var i = 0; i < 8 && le64(sq64(r + 1u), n); i++) { r += 1u; }
    let s2 = sq64(r);
    let exact = s2.x == n.x && s2.y == n.y;
    // Keep 24 bits, round on the next one (an exact half cannot occur).
    var drop = 1u;
    if (r >= 0x2000000u) { drop = 2u; }
    var mant = r >> drop;
    let rest = r & ((1u << drop) - 1u);
    let half = 1u << (drop - 1u);
    if (rest > half || (rest == half && (!exact || (mant & 1u) != 0u))) { mant += 1u; }
    var re = (e - 26i) / 2i + i32(drop) + 150i;
    if (mant == 0x1000000u) {
        mant >>= 1u;
        re += 1i;
    }
    return bitcast<f32>((u32(re) << 23u) | (mant & 0x7fffffu));
}

// The mean of the squares summed in `a` (units of 2^(emax - 206)) over n
// values, rounded to f32.
fn mean_of(a: vec3<u32>, emax: u32, n: u32) -> f32 {
    if (a.x == 0u && a.y == 0u && a.z == 0u) { return 0.0; }
    // Long division by n, 16 bits at a time (n < 2^16).
    var hw = array<u32, 6>(a.z >> 16u, a.z & 0xffffu, a.y >> 16u, a.y & 0xffffu,
                           a.x >> 16u, a.x & 0xffffu);
    var q = array<u32, 3>(0u, 0u, 0u);
    var rem = 0u;
    for (var i = 0u; i < 6u; i++) {
        let cur = (rem << 16u) | hw[i];
        let d = cur / n;
        rem = cur % n;
        let word = 2u - i / 2u;
        q[word] |= d << (16u * (1u - i % 2u));
    }
    var lead = 0u;
    if (q[2] != 0u) {
        lead = 64u + firstLeadingBit(q[2]);
    } else if (q[1] != 0u) {
        lead = 32u + firstLeadingBit(q[1]);
    } else {
        lead = firstLeadingBit(q[0]);
    }
    // A normal largest square alone is at least 2^79, so lead >= 63; only
    // all-subnormal squares come below (a mean no eps notices).
    if (lead < 32u) { return 0.0; }
    var mant = 0u;
    for (var i = 0u; i < 24u; i++) {
        let b = lead - i;
        mant = (mant << 1u) | ((q[b / 32u] >> (b % 32u)) & 1u);
    }
    let rb = lead - 24u;
    let round = (q[rb / 32u] >> (rb % 32u)) & 1u;
    var sticky = rem != 0u;
    for (var i = 0u; i < rb; i++) {
        if (((q[i / 32u] >> (i % 32u)) & 1u) != 0u) { sticky = true; }
    }
    if (round != 0u && (sticky || (mant & 1u) != 0u)) { mant += 1u; }
    var be = i32(lead) + i32(emax) - 79i;
    if (mant == 0x1000000u) {
        mant >>= 1u;
        be += 1i;
    }
    // Far below any eps: the CPU's mean + eps is eps there too.
    if (be <= 0i) { return 0.0; }
    if (be >= 255i) { return bitcast<f32>(0x7f800000u); }
    return bitcast<f32>((u32(be) << 23u) | (mant & 0x7fffffu));
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) g: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let row = g.y * GRID_X + g.x;
    let n4 = p.y;
    let base = row * n4;
    let live = row < p.x;
    var most = 0u;
    if (live) {
        for (var i = t; i < n4; i += WG) {
            let v = x[base + i];
            most = max(most, max(max(sq(v.x), sq(v.y)), max(sq(v.z), sq(v.w))));
        }
    }
    a0[t] = most;
    workgroupBarrier();
    for (var k = WG / 2u; k > 0u; k >>= 1u) {
        if (t < k) { a0[t] = max(a0[t], a0[t + k]); }
        workgroupBarrier();
    }
    let biggest = a0[0];
    workgroupBarrier();
    let emax = ex(biggest);
    var s = vec3<u32>(0u);
    if (live && biggest < 0x7f800000u) {
        for (var i = t; i < n4; i += WG) {
            let v = x[base + i];
            s = add96(s, place(sq(v.x), emax));
            s = add96(s, place(sq(v.y), emax));
            s = add96(s, place(sq(v.z), emax));
            s = add96(s, place(sq(v.w), emax));
        }
    }
    a0[t] = s.x;
    a1[t] = s.y;
    a2[t] = s.z;
    workgroupBarrier();
    for (var k = WG / 2u; k > 0u; k >>= 1u) {
        if (t < k) {
            let r = add96(vec3<u32>(a0[t], a1[t], a2[t]), vec3<u32>(a0[t + k], a1[t + k], a2[t + k]));
            a0[t] = r.x;
            a1[t] = r.y;
            a2[t] = r.z;
        }
        workgroupBarrier();
    }
    if (t == 0u) {
        var mean: f32;
        if (biggest > 0x7f800000u) {
            mean = bitcast<f32>(0x7fc00000u);
        } else if (biggest == 0x7f800000u) {
            mean = bitcast<f32>(0x7f800000u);
        } else {
            mean = mean_of(vec3<u32>(a0[0], a1[0], a2[0]), emax, p.w);
        }
        let v = mean + bitcast<f32>(p.z);
        let vb = bitcast<u32>(v);
        var scale: f32;
        if (vb >= 0x7f800000u) {
            // inf gives 0 as 1 / sqrt(inf) does; NaN stays NaN.
            scale = select(0.0, v, vb > 0x7f800000u);
        } else if (vb == 0u) {
            scale = bitcast<f32>(0x7f800000u);
        } else {
            scale = div(1.0, sqrt_cr(v));
        }
        a0[0] = bitcast<u32>(scale);
    }
    workgroupBarrier();
    let scale = bitcast<f32>(a0[0]);
    if (live) {
        for (var i = t; i < n4; i += WG) {
            y[base + i] = x[base + i] * scale * wt[i];
        }
    }
}
