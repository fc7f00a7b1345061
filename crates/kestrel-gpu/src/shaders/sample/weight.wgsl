// kestrel_sampling's exp_kestrel and weight in 32-bit integers (after the exp constants).
// The 64-bit product of two u32 as (low, high).
fn mul_wide(a: u32, b: u32) -> vec2<u32> {
    let a0 = a & 0xffffu;
    let a1 = a >> 16u;
    let b0 = b & 0xffffu;
    let b1 = b >> 16u;
    let p00 = a0 * b0;
    let p01 = a0 * b1;
    let p10 = a1 * b0;
    let mid = (p00 >> 16u) + (p01 & 0xffffu) + (p10 & 0xffffu);
    return vec2<u32>((p00 & 0xffffu) | (mid << 16u), a1 * b1 + (p01 >> 16u) + (p10 >> 16u) + (mid >> 16u));
}

fn add64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
    let lo = a.x + b.x;
    return vec2<u32>(lo, a.y + b.y + select(0u, 1u, lo < a.x));
}

// (a * b) >> 31 for a, b <= 2^31.
fn mul31(a: u32, b: u32) -> u32 {
    let w = mul_wide(a, b);
    return (w.y << 1u) | (w.x >> 31u);
}

// kestrel_sampling::exp_kestrel, step for step in 32-bit integers (exact
// on every adapter, whatever its float exp or fma does).
fn exp_k(xb: u32) -> f32 {
    let bits = xb & 0x7fffffffu;
    let e = i32(bits >> 23u);
    if (e < 95i) { return 1.0; }
    let m = (bits & 0x7fffffu) | 0x800000u;
    let sh = e - 118i;
    var a = vec2<u32>(m, 0u);
    if (sh > 0i) {
        a = vec2<u32>(m << u32(sh), m >> u32(32i - sh));
    } else if (sh < 0i) {
        a = vec2<u32>(m >> u32(-sh), 0u);
    }
    let l1 = EXP_LOG2E_HI;
    let l0 = EXP_LOG2E_LO;
    var t = add64(a, mul_wide(a.y, l1));
    t = add64(t, vec2<u32>(mul_wide(a.x, l1).y, 0u));
    t = add64(t, vec2<u32>(mul_wide(a.y, l0).y, 0u));
    let n = i32(t.y);
    let f = t.x;
    let r = f & 0x0fffffffu;
    let y = mul_wide(r, EXP_LN2).y;
    let one = 0x80000000u;
    var q = one - y / 5u;
    q = one - mul31(y, q) / 4u;
    q = one - mul31(y, q) / 3u;
    q = one - mul31(y, q) / 2u;
    q = one - mul31(y, q);
    let g = mul31(EXP_TABLE[f >> 28u], q);
    let lead = 31i - i32(countLeadingZeros(g));
    let s = u32(lead - 23i);
    var mant = (g + (1u << (s - 1u))) >> s;
    var biased = lead + 96i - n;
    if ((mant >> 24u) != 0u) {
        mant = mant >> 1u;
        biased += 1i;
    }
    return bitcast<f32>((u32(max(biased, 1i)) << 23u) | (mant & 0x7fffffu));
}

// kestrel_sampling::weight, with the -inf and "below -87" tests on the
// bits (WGSL may assume floats are finite).
fn weight(lb: u32, l0b: u32, inv_t: f32) -> f32 {
    let d = bitcast<f32>(lb) - bitcast<f32>(l0b);
    if (bitcast<u32>(d) == NEG_INF) { return 0.0; }
    let xb = bitcast<u32>(d * inv_t);
    if ((xb & 0x80000000u) != 0u && (xb & 0x7fffffffu) > 0x42ae0000u) { return 0.0; }
    return exp_k(xb);
}

