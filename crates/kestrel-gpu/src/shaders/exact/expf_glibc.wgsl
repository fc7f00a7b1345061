// expf_glibc(x): glibc's expf (the FMA build) step for step, its doubles in integers.
// Doubles as vec2<u32>(low word, high word); only normal values and zero
// occur on expf's way.

// The 64-bit product of two words, as (low, high).
fn mul32w(a: u32, b: u32) -> vec2<u32> {
    let al = a & 0xffffu;
    let ah = a >> 16u;
    let bl = b & 0xffffu;
    let bh = b >> 16u;
    let ll = al * bl;
    let lh = al * bh;
    let hl = ah * bl;
    let mid = (ll >> 16u) + (lh & 0xffffu) + (hl & 0xffffu);
    return vec2<u32>((ll & 0xffffu) | (mid << 16u), ah * bh + (lh >> 16u) + (hl >> 16u) + (mid >> 16u));
}

// 192-bit integers, word 0 the lowest.
fn acc6(w: ptr<function, array<u32, 6>>, i: u32, v: vec2<u32>) {
    let x0 = (*w)[i] + v.x;
    var carry = select(0u, 1u, x0 < v.x);
    (*w)[i] = x0;
    let x1 = (*w)[i + 1u] + v.y;
    let x1c = x1 + carry;
    carry = select(0u, 1u, x1 < v.y) + select(0u, 1u, x1c < x1);
    (*w)[i + 1u] = x1c;
    for (var k = i + 2u; k < 6u; k++) {
        let x = (*w)[k] + carry;
        carry = select(0u, 1u, x < carry);
        (*w)[k] = x;
    }
}

fn shl6(w: ptr<function, array<u32, 6>>, s: u32) {
    let q = i32(s / 32u);
    let r = s % 32u;
    for (var k = 5i; k >= 0i; k--) {
        let src = k - q;
        var v = 0u;
        if (src >= 0i) {
            v = (*w)[src] << r;
            if (r != 0u && src >= 1i) { v |= (*w)[src - 1i] >> (32u - r); }
        }
        (*w)[k] = v;
    }
}

// w >> s, the bits shifted out ORed into bit 0.
fn shr6_jam(w: ptr<function, array<u32, 6>>, s: u32) {
    if (s == 0u) { return; }
    var lost = 0u;
    if (s >= 192u) {
        for (var k = 0u; k < 6u; k++) {
            lost |= (*w)[k];
            (*w)[k] = 0u;
        }
        (*w)[0] = select(0u, 1u, lost != 0u);
        return;
    }
    let q = s / 32u;
    let r = s % 32u;
    for (var k = 0u; k < q; k++) { lost |= (*w)[k]; }
    if (r != 0u) { lost |= (*w)[q] << (32u - r); }
    for (var k = 0u; k < 6u; k++) {
        let src = k + q;
        var v = 0u;
        if (src < 6u) {
            v = (*w)[src] >> r;
            if (r != 0u && src + 1u < 6u) { v |= (*w)[src + 1u] << (32u - r); }
        }
        (*w)[k] = v;
    }
    if (lost != 0u) { (*w)[0] |= 1u; }
}

fn add6(a: ptr<function, array<u32, 6>>, b: ptr<function, array<u32, 6>>) {
    var carry = 0u;
    for (var k = 0u; k < 6u; k++) {
        let x = (*a)[k] + (*b)[k];
        let y = x + carry;
        carry = select(0u, 1u, x < (*b)[k]) + select(0u, 1u, y < x);
        (*a)[k] = y;
    }
}

// a -= b, for a >= b.
fn sub6(a: ptr<function, array<u32, 6>>, b: ptr<function, array<u32, 6>>) {
    var borrow = 0u;
    for (var k = 0u; k < 6u; k++) {
        let x = (*a)[k] - (*b)[k];
        let y = x - borrow;
        borrow = select(0u, 1u, (*a)[k] < (*b)[k]) + select(0u, 1u, x < borrow);
        (*a)[k] = y;
    }
}

fn lt6(a: ptr<function, array<u32, 6>>, b: ptr<function, array<u32, 6>>) -> bool {
    for (var k = 5i; k >= 0i; k--) {
        if ((*a)[k] != (*b)[k]) { return (*a)[k] < (*b)[k]; }
    }
    return false;
}

fn clz6(w: ptr<function, array<u32, 6>>) -> u32 {
    for (var k = 5i; k >= 0i; k--) {
        if ((*w)[k] != 0u) { return u32(5i - k) * 32u + countLeadingZeros((*w)[k]); }
    }
    return 192u;
}

// The double nearest to sign * w * 2^l (w nonzero, the result normal).
fn dround(w: ptr<function, array<u32, 6>>, l: i32, sign: u32) -> vec2<u32> {
    let h = 191i - i32(clz6(w));
    // 53 bits, a rounding bit and a sticky bit.
    if (h >= 54i) { shr6_jam(w, u32(h - 54i)); } else { shl6(w, u32(54i - h)); }
    let v0 = (*w)[0];
    let v1 = (*w)[1];
    var lo = (v0 >> 2u) | (v1 << 30u);
    var hi = (u32(h + l + 1023i) << 20u) | ((v1 >> 2u) & 0xfffffu);
    if (((v0 >> 1u) & 1u) == 1u && ((v0 & 1u) == 1u || (lo & 1u) == 1u)) {
        lo += 1u;
        if (lo == 0u) { hi += 1u; }
    }
    return vec2<u32>(lo, hi | sign);
}

// a * b + c rounded once to the nearest double (ties to even), for a, b,
// c normal or zero and a normal result.
fn dfma(a: vec2<u32>, b: vec2<u32>, c: vec2<u32>) -> vec2<u32> {
    let ea = i32((a.y >> 20u) & 0x7ffu);
    let eb = i32((b.y >> 20u) & 0x7ffu);
    let ec = i32((c.y >> 20u) & 0x7ffu);
    let sp = (a.y ^ b.y) & 0x80000000u;
    let sc = c.y & 0x80000000u;
    var cw = array<u32, 6>(c.x, (c.y & 0xfffffu) | 0x100000u, 0u, 0u, 0u, 0u);
    let lc = ec - 1075i;
    if (ea == 0i || eb == 0i) {
        if (ec == 0i) { return vec2<u32>(0u, 0u); }
        return c;
    }
    var pw = array<u32, 6>(0u, 0u, 0u, 0u, 0u, 0u);
    let ma = vec2<u32>(a.x, (a.y & 0xfffffu) | 0x100000u);
    let mb = vec2<u32>(b.x, (b.y & 0xfffffu) | 0x100000u);
    acc6(&pw, 0u, mul32w(ma.x, mb.x));
    acc6(&pw, 1u, mul32w(ma.x, mb.y));
    acc6(&pw, 1u, mul32w(ma.y, mb.x));
    acc6(&pw, 2u, mul32w(ma.y, mb.y));
    let lp = ea + eb - 2150i;
    if (ec == 0i) { return dround(&pw, lp, sp); }
    // The larger top bit goes to bit 189.
    let l = max(lp + 191i - i32(clz6(&pw)), lc + 191i - i32(clz6(&cw))) - 189i;
    if (lp >= l) { shl6(&pw, u32(lp - l)); } else { shr6_jam(&pw, u32(l - lp)); }
    if (lc >= l) { shl6(&cw, u32(lc - l)); } else { shr6_jam(&cw, u32(l - lc)); }
    if (sp == sc) {
        add6(&pw, &cw);
        return dround(&pw, l, sp);
    }
    if (lt6(&pw, &cw)) {
        sub6(&cw, &pw);
        return dround(&cw, l, sc);
    }
    if (lt6(&cw, &pw)) {
        sub6(&pw, &cw);
        return dround(&pw, l, sp);
    }
    return vec2<u32>(0u, 0u);
}

// A double to the nearest f32 (ties to even), subnormals included.
fn d2f(d: vec2<u32>) -> f32 {
    let sign = d.y & 0x80000000u;
    let e = i32((d.y >> 20u) & 0x7ffu);
    if (e == 0i) { return bitcast<f32>(sign); }
    var biased = e - 1023i + 127i;
    if (biased >= 255i) { return bitcast<f32>(sign | 0x7f800000u); }
    var w = array<u32, 6>(d.x, (d.y & 0xfffffu) | 0x100000u, 0u, 0u, 0u, 0u);
    // Keep 24 bits, a rounding bit and a sticky bit.
    var sh = 27u;
    if (biased < 1i) {
        sh += u32(1i - biased);
        biased = 0i;
    }
    shr6_jam(&w, sh);
    let v = w[0];
    var bits = v >> 2u;
    if (biased > 0i) { bits = (u32(biased) << 23u) | (bits & 0x7fffffu); }
    if (((v >> 1u) & 1u) == 1u && ((v & 1u) == 1u || (bits & 1u) == 1u)) { bits += 1u; }
    return bitcast<f32>(sign | bits);
}

// An f32 (normal or zero) as a double.
fn f2d(x: f32) -> vec2<u32> {
    let b = bitcast<u32>(x);
    let e = (b >> 23u) & 255u;
    if (e == 0u) { return vec2<u32>(0u, b & 0x80000000u); }
    let m = b & 0x7fffffu;
    return vec2<u32>(m << 29u, (b & 0x80000000u) | ((e + 896u) << 20u) | (m >> 3u));
}

// An integer of magnitude below 2^31 as a double.
fn i2d(n: i32) -> vec2<u32> {
    if (n == 0i) { return vec2<u32>(0u, 0u); }
    let sign = select(0u, 0x80000000u, n < 0i);
    let a = u32(abs(n));
    let lz = countLeadingZeros(a);
    // The leading one dropped: 52 fraction bits, of which the top 31 - lz are a's.
    let frac = (a << lz) << 1u;
    return vec2<u32>(frac << 20u, sign | ((1054u - lz) << 20u) | (frac >> 12u));
}

var<private> EXP2F_T: array<u32, 64> = array<u32, 64>(
    0x00000000u, 0x3ff00000u, 0xd3158574u, 0x3fefd9b0u,
    0x6cf9890fu, 0x3fefb558u, 0xd0125b51u, 0x3fef9301u,
    0x3c7d517bu, 0x3fef72b8u, 0x3168b9aau, 0x3fef5487u,
    0x6e756238u, 0x3fef387au, 0xf51fdee1u, 0x3fef1e9du,
    0x0a31b715u, 0x3fef06feu, 0x373aa9cbu, 0x3feef1a7u,
    0x4c123422u, 0x3feedea6u, 0x6061892du, 0x3feece08u,
    0xd5362a27u, 0x3feebfdau, 0x569d4f82u, 0x3feeb42bu,
    0xdd485429u, 0x3feeab07u, 0xb03a5585u, 0x3feea47eu,
    0x667f3bcdu, 0x3feea09eu, 0xe8ec5f74u, 0x3fee9f75u,
    0x73eb0187u, 0x3feea114u, 0x994cce13u, 0x3feea589u,
    0x422aa0dbu, 0x3feeace5u, 0xb0cdc5e5u, 0x3feeb737u,
    0x82a3f090u, 0x3feec491u, 0xb23e255du, 0x3feed503u,
    0x995ad3adu, 0x3feee89fu, 0xf2fb5e47u, 0x3feeff76u,
    0xdd85529cu, 0x3fef199bu, 0xdcef9069u, 0x3fef3720u,
    0xdcfba487u, 0x3fef5818u, 0x337b9b5fu, 0x3fef7c97u,
    0xa2a490dau, 0x3fefa4afu, 0x5b6e4540u, 0x3fefd076u,
);

fn expf_glibc(x: f32) -> f32 {
    let b = bitcast<u32>(x);
    if (((b >> 20u) & 0x7ffu) > 0x42au) {
        if (b == 0xff800000u) { return 0.0; }
        if (((b >> 20u) & 0x7ffu) >= 0x7f8u) { return x + x; }
        if (x > bitcast<f32>(0x42b17217u)) { return bitcast<f32>(0x7f800000u); }
        if (x < bitcast<f32>(0xc2cff1b4u)) { return 0.0; }
        // glibc's "may underflow" answer: 0x1.4p-75f squared.
        if (x < bitcast<f32>(0xc2ce8ecfu)) { return bitcast<f32>(1u); }
    }
    let xd = f2d(x);
    let inv_ln2_n = vec2<u32>(0x652b82feu, 0x40471547u);
    // The seven double operations, one dfma in a loop: a shader compiler
    // inlines every call, and seven copies took lavapipe 20 s to compile.
    var n = 0i;
    var r = vec2<u32>(0u, 0u);
    var z = r;
    var r2 = r;
    var y = r;
    var s = r;
    for (var step = 0u; step < 7u; step++) {
        var a = inv_ln2_n;
        var b = xd;
        var c = vec2<u32>(0u, 0u);
        switch step {
            // n = x * 32/ln2 rounded to an integer, by adding 1.5 * 2^52.
            case 0u: { c = vec2<u32>(0u, 0x43380000u); }
            // r = x * 32/ln2 - n
            case 1u: { c = i2d(-n); }
            // z = C0 r + C1
            case 2u: {
                a = vec2<u32>(0x4b912394u, 0x3ebc6af8u);
                b = r;
                c = vec2<u32>(0x50fac4f3u, 0x3f2ebfceu);
            }
            // r2 = r r
            case 3u: { a = r; b = r; }
            // y = C2 r + 1
            case 4u: {
                a = vec2<u32>(0xff0c52d6u, 0x3f962e42u);
                b = r;
                c = vec2<u32>(0u, 0x3ff00000u);
            }
            // y = z r2 + y
            case 5u: { a = z; b = r2; c = y; }
            // y * 2^(n/32)
            default: { a = y; b = s; }
        }
        let v = dfma(a, b, c);
        switch step {
            case 0u: {
                // The sum is 1.5 * 2^52 + n: n is its low word. 2^(n/32)
                // is the table's entry for n mod 32 with n << 47 added to
                // its bits.
                n = bitcast<i32>(v.x);
                let i = u32(n) & 31u;
                s = vec2<u32>(EXP2F_T[2u * i], EXP2F_T[2u * i + 1u] + (u32(n) << 15u));
            }
            case 1u: { r = v; }
            case 2u: { z = v; }
            case 3u: { r2 = v; }
            default: { y = v; }
        }
    }
    return d2f(y);
}
