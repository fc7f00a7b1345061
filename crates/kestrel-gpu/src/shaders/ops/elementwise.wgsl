// The element-wise ops: SwiGLU, GeGLU, softcap, scale and the residual add.
@group(0) @binding(0) var<storage, read_write> y: array<f32>;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
// n, op, f32 parameter bits
@group(0) @binding(3) var<uniform> p: vec4<u32>;
// ggml's GELU of every f16 input as f16, two to a word
// (`kestrel_quant::gelu_f16_table`).
@group(0) @binding(4) var<storage, read> gelu_table: array<u32>;

HALF
F16_ROUND

// GELU as ggml computes it on the CPU: the table entry of x rounded to f16.
fn gelu(x: f32) -> f32 {
    if (x <= -10.0) { return 0.0; }
    if (x >= 10.0) { return x; }
    let h = f16bits(x);
    return half((gelu_table[h >> 1u] >> (16u * (h & 1u))) & 0xffffu);
}

// ggml's vectorised expf (ggml_v_expf), step for step as the CPU's twin
// computes it (`fmaf` rounding once, as its fused instructions do), so SiLU
// agrees with the CPU's to the last bit.
fn v_expf(x: f32) -> f32 {
    // ggml rounds x·log2(e) to an integer by adding 1.5·2^23 in one fused
    // step (the product is never rounded on its own) and subtracting it
    // again; rounding the product first differs where it lands on a half.
    // `fmaf` is exact by construction, so no compiler folds the sum away.
    let r = bitcast<f32>(0x4b400000u);
    let z = fmaf(x, bitcast<f32>(0x3fb8aa3bu), r);
    let n = z - r;
    let b = fmaf(-n, bitcast<f32>(0x35bfbe8eu), fmaf(-n, bitcast<f32>(0x3f317200u), x));
    // The integer's low bits, shifted into the exponent field.
    let e = bitcast<u32>(z) << 23u;
    let k = bitcast<f32>(e + bitcast<u32>(1.0));
    let u = b * b;
    let j = fmaf(
        fmaf(fmaf(bitcast<f32>(0x3c072010u), b, bitcast<f32>(0x3d2b9f17u)), u,
            fmaf(bitcast<f32>(0x3e2aaf33u), b, bitcast<f32>(0x3efffedbu))),
        u,
        bitcast<f32>(0x3f7ffff6u) * b);
    if (abs(n) <= 126.0) { return fmaf(j, k, k); }
    var g = 0u;
    if (n <= 0.0) { g = 0x82000000u; }
    let s1 = bitcast<f32>(g + 0x7f000000u);
    let s2 = bitcast<f32>(e - g);
    if (abs(n) > 192.0) { return s1 * s1; }
    return fmaf(s2, j, s2) * s1;
}

EXACT_DIV
FMA_SRC
EXPF_SRC

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) g: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let i = (g.y * GRID_X + g.x) * 64u + t;
    if (i >= p.x) { return; }
    switch (p.y) {
        // y = silu(a) * b, as ggml: its SIMD exp for whole groups of 8 of a
        // row (p.w values), libm's for the row's tail (glibc's, emulated).
        case 0u: {
            let x = a[i];
            var e: f32;
            if (i % p.w < p.w / 8u * 8u) { e = v_expf(-x); } else { e = expf_glibc(-x); }
            y[i] = div(x, 1.0 + e) * b[i];
        }
        // y = gelu(a) * b (a >= 10 passes through, as ggml's table path)
        case 1u: { y[i] = gelu(a[i]) * b[i]; }
        // y = cap * tanh(y / cap)
        case 2u: { let cap = bitcast<f32>(p.z); y[i] = tanh(y[i] * (1.0 / cap)) * cap; }
        // y *= c
        case 4u: { y[i] = y[i] * bitcast<f32>(p.z); }
        // y += a
        default: { y[i] = y[i] + a[i]; }
    }
}
