// fmaf and fma_int in integers, rounded once (where the adapter's fma is not fused).
// 64-bit integers as vec2<u32>, x the low word.
fn shl64(v: vec2<u32>, s: u32) -> vec2<u32> {
    let w = select(v, vec2<u32>(0u, v.x), s >= 32u);
    let r = s & 31u;
    let carry = select(w.x >> ((32u - r) & 31u), 0u, r == 0u);
    return vec2<u32>(w.x << r, (w.y << r) | carry);
}

// v >> s with the bits shifted out ORed into bit 0.
fn shr64_jam(v: vec2<u32>, s: u32) -> vec2<u32> {
    let t = min(s, 63u);
    let w = select(v, vec2<u32>(v.y, 0u), t >= 32u);
    let r = t & 31u;
    let l = (32u - r) & 31u;
    var lost = select(0u, v.x, t >= 32u) | select(w.x << l, 0u, r == 0u);
    var out = vec2<u32>((w.x >> r) | select(w.y << l, 0u, r == 0u), w.y >> r);
    if (s >= 64u) {
        lost = v.x | v.y;
        out = vec2<u32>(0u, 0u);
    }
    out.x |= select(0u, 1u, lost != 0u);
    return out;
}

fn clz64(v: vec2<u32>) -> u32 {
    return select(32u + countLeadingZeros(v.x), countLeadingZeros(v.y), v.y != 0u);
}

fn lt64(a: vec2<u32>, b: vec2<u32>) -> bool {
    return a.y < b.y || (a.y == b.y && a.x < b.x);
}

// The float nearest to sign * r * 2^l (r nonzero), ties to even.
fn round64(r: vec2<u32>, l: i32, sign: u32) -> f32 {
    let lz = clz64(r);
    var w = shl64(r, lz);
    var biased = l + 63i - i32(lz) + 127i;
    if (biased >= 255i) { return bitcast<f32>(sign | 0x7f800000u); }
    // A subnormal's last place is 2^-149.
    w = select(w, shr64_jam(w, u32(max(1i - biased, 0i))), biased < 1i);
    biased = max(biased, 0i);
    let m = w.y >> 8u;
    let sticky = ((w.y & 0x7fu) | w.x) != 0u;
    var bits = select(m, (u32(biased) << 23u) | (m & 0x7fffffu), biased > 0i);
    // A carry out of the mantissa steps the exponent (up to infinity).
    bits += select(0u, 1u, ((w.y >> 7u) & 1u) == 1u && (sticky || (bits & 1u) == 1u));
    return bitcast<f32>(sign | bits);
}

// The significand and the exponent of its last place of a finite nonzero
// magnitude: |x| = m * 2^e.
fn fx_m(b: u32) -> u32 {
    let f = b & 0x7fffffu;
    return select(f, f | 0x800000u, ((b >> 23u) & 255u) != 0u);
}
fn fx_e(b: u32) -> i32 {
    let e = i32((b >> 23u) & 255u);
    return select(e, 1i, e == 0i) - 150i;
}

fn fmaf(a: f32, b: f32, c: f32) -> f32 {
    let ab = bitcast<u32>(a);
    let bb = bitcast<u32>(b);
    let cb = bitcast<u32>(c);
    let aa = ab & 0x7fffffffu;
    let ba = bb & 0x7fffffffu;
    let ca = cb & 0x7fffffffu;
    if (aa >= 0x7f800000u || ba >= 0x7f800000u) { return a * b + c; }
    // A finite product plus an infinite or NaN c is c.
    if (ca >= 0x7f800000u) { return c; }
    if (aa == 0u || ba == 0u) { return a * b + c; }
    // The exact product: up to 48 bits.
    let ma = fx_m(ab);
    let mb = fx_m(bb);
    let al = ma & 0xffffu;
    let ah = ma >> 16u;
    let bl = mb & 0xffffu;
    let bh = mb >> 16u;
    let mid = ah * bl + al * bh;
    let lo0 = al * bl;
    let lo = lo0 + (mid << 16u);
    let prod = vec2<u32>(lo, ah * bh + (mid >> 16u) + select(0u, 1u, lo < lo0));
    return fma_tail(prod, fx_e(ab) + fx_e(bb), (ab ^ bb) & 0x80000000u, cb);
}

// fmaf(d, f32(n), c) for an integer |n| <= 2^16 (a block's lane sum):
// the product is two multiplications.
fn fma_int(d: f32, n: i32, c: f32) -> f32 {
    let db = bitcast<u32>(d);
    let da = db & 0x7fffffffu;
    if (da >= 0x7f800000u || n == 0i || da == 0u) { return d * f32(n) + c; }
    // A finite product plus an infinite or NaN c is c.
    if ((bitcast<u32>(c) & 0x7fffffffu) >= 0x7f800000u) { return c; }
    let un = u32(abs(n));
    let ma = fx_m(db);
    let lo0 = (ma & 0xffffu) * un;
    let hi0 = (ma >> 16u) * un;
    let lo = lo0 + (hi0 << 16u);
    let prod = vec2<u32>(lo, (hi0 >> 16u) + select(0u, 1u, lo < lo0));
    return fma_tail(prod, fx_e(db), (db ^ bitcast<u32>(n)) & 0x80000000u, bitcast<u32>(c));
}

// sign * prod * 2^ep + c (c's bits, finite) rounded once.
fn fma_tail(prod: vec2<u32>, ep: i32, sp: u32, cb: u32) -> f32 {
    if ((cb & 0x7fffffffu) == 0u) { return round64(prod, ep, sp); }
    let sc = cb & 0x80000000u;
    // Both with their top bit at bit 61; lp and lc the exponents of bit 0.
    let zp = clz64(prod);
    let pw = shl64(prod, zp - 2u);
    let lp = ep - i32(zp) + 2i;
    let zc = countLeadingZeros(fx_m(cb)) + 32u;
    let cw = shl64(vec2<u32>(fx_m(cb), 0u), zc - 2u);
    let lc = fx_e(cb) - i32(zc) + 2i;
    let d = lp - lc;
    let p_big = d > 0i || (d == 0i && !lt64(pw, cw));
    let x = select(cw, pw, p_big);
    let y = shr64_jam(select(pw, cw, p_big), u32(abs(d)));
    let l = max(lp, lc);
    let sx = select(sc, sp, p_big);
    if (sp == sc) {
        let sum = x + y;
        return round64(vec2<u32>(sum.x, sum.y + select(0u, 1u, sum.x < x.x)), l, sx);
    }
    let dif = vec2<u32>(x.x - y.x, x.y - y.y - select(0u, 1u, x.x < y.x));
    // Exact cancellation rounds to +0.
    if ((dif.x | dif.y) == 0u) { return 0.0; }
    return round64(dif, l, sx);
}
