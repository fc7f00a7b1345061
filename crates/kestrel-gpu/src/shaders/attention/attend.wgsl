// Decode attention: one workgroup per query head against the f16 cache.
@group(0) @binding(0) var<storage, read> q: array<f32>;
@group(0) @binding(1) var<storage, read> kc: array<u32>;
@group(0) @binding(2) var<storage, read> vc: array<u32>;
@group(0) @binding(3) var<storage, read_write> scratch: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;
// n_head, n_head_kv, head_dim_k, head_dim_v; position, window, scale bits, scratch stride
@group(0) @binding(5) var<uniform> p: array<vec4<u32>, 2>;

// Half i of a cache row array.
fn h(buf: u32, i: u32) -> f32 {
    var word: u32;
    if (buf == 0u) { word = kc[i >> 1u]; } else { word = vc[i >> 1u]; }
    return half(select(word & 0xffffu, word >> 16u, (i & 1u) == 1u));
}

F16_ROUND

// The score of query head `head` against cached key position j, as the
// CPU's (ggml's) f16 dot: Q rounded to f16, four accumulators of eight
// lanes over each 32 dimensions, then GGML_F32x8_REDUCE's order. A
// product of two halves is exact in f32, so the unfused add rounds as
// the CPU's fused one. (A head width that is not a multiple of 32 sums
// its tail in the same lanes, which the CPU does not.)
fn score(head: u32, j: u32, kbase: u32, dk: u32) -> f32 {
    var acc: array<f32, 32>;
    for (var i = 0u; i < 32u; i++) { acc[i] = 0.0; }
    for (var d = 0u; d < dk; d++) {
        let l = d % 32u;
        acc[l] = acc[l] + f16r(q[head * dk + d]) * h(0u, kbase + d);
    }
    var x: array<f32, 8>;
    for (var l = 0u; l < 8u; l++) {
        x[l] = (acc[l] + acc[16u + l]) + (acc[8u + l] + acc[24u + l]);
    }
    return ((x[0] + x[4]) + (x[1] + x[5])) + ((x[2] + x[6]) + (x[3] + x[7]));
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) g: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let head = g.x;
    let n_head = p[0].x;
    let dk = p[0].z;
    let dv = p[0].w;
    let kvh = head / (n_head / p[0].y);
    let pos = p[1].x;
    var lo = 0u;
    if (p[1].y > 0u && pos + 1u > p[1].y) { lo = pos + 1u - p[1].y; }
    let scale = bitcast<f32>(p[1].z);
    let sbase = head * p[1].w;
    let k_w = p[0].y * dk;
    let v_w = p[0].y * dv;
    for (var j = lo + t; j <= pos; j += 64u) {
        scratch[sbase + j] = score(head, j, j * k_w + kvh * dk, dk) * scale;
    }
    storageBarrier();
    workgroupBarrier();
    // The online softmax's steps, as the CPU takes them: where a score
    // raises the running maximum m the sum so far is scaled by
    // exp(m - s) (and the new value weighs 1), else the value weighs
    // exp(s - m). One thread finds each step's s - m (above 0 exactly
    // where the step rescales; the first position rescales the empty sum
    // by exp(-inf) = 0)...
    if (t == 0u) {
        var m = bitcast<f32>(0xff800000u);
        for (var j = lo; j <= pos; j++) {
            let s = scratch[sbase + j];
            scratch[sbase + j] = s - m;
            m = max(m, s);
        }
    }
    storageBarrier();
    workgroupBarrier();
    // ... then every thread takes its positions' exps (glibc's expf, as
    // the CPU's libm), a rescaling factor stored with its sign bit set...
    for (var j = lo + t; j <= pos; j += 64u) {
        let a = scratch[sbase + j];
        if (a > 0.0) {
            scratch[sbase + j] = bitcast<f32>(bitcast<u32>(expf_glibc(-a)) | 0x80000000u);
        } else {
            scratch[sbase + j] = expf_glibc(a);
        }
    }
    storageBarrier();
    workgroupBarrier();
    // ... and each thread walks them in order for its output dimensions.
    for (var d = t; d < dv; d += 64u) {
        var sum = 0.0;
        var acc = 0.0;
        for (var j = lo; j <= pos; j++) {
            let e = bitcast<u32>(scratch[sbase + j]);
            var ms = 1.0;
            var vs = 1.0;
            if ((e & 0x80000000u) != 0u) {
                ms = bitcast<f32>(e & 0x7fffffffu);
            } else {
                vs = bitcast<f32>(e);
            }
            if (ms != 1.0) { acc = f16r(acc * ms); }
            acc = f16r(fmaf(h(1u, j * v_w + kvh * dv + d), vs, acc));
            sum = fmaf(sum, ms, vs);
        }
        var inv = 0.0;
        if (sum != 0.0) { inv = div(1.0, sum); }
        out[head * dv + d] = acc * inv;
    }
}
