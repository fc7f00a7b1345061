// div_exact and div: IEEE division rounded to nearest even, in integers.
// a / b rounded to nearest even as IEEE division does, for a positive
// finite a, in integers: WGSL's division need not be correctly rounded.
fn div_exact(ab: u32, bb: u32) -> u32 {
    let sign = bb & 0x80000000u;
    let bm = bb & 0x7fffffffu;
    if (bm > 0x7f800000u) { return 0x7fc00000u; }
    if (bm == 0x7f800000u) { return sign; }
    if (bm == 0u) { return sign | 0x7f800000u; }
    var ea = i32(ab >> 23u);
    var ma = ab & 0x7fffffu;
    if (ea == 0i) {
        ea = 1i;
        while ((ma & 0x800000u) == 0u) { ma <<= 1u; ea -= 1i; }
    } else {
        ma |= 0x800000u;
    }
    var eb = i32(bm >> 23u);
    var mb = bm & 0x7fffffu;
    if (eb == 0i) {
        eb = 1i;
        while ((mb & 0x800000u) == 0u) { mb <<= 1u; eb -= 1i; }
    } else {
        mb |= 0x800000u;
    }
    var e = ea - eb + 127i;
    if (ma < mb) {
        ma <<= 1u;
        e -= 1i;
    }
    // 26 quotient bits (the leading one at bit 25), then a sticky bit.
    var q = 0u;
    var r = ma;
    for (var i = 0u; i < 26u; i++) {
        q <<= 1u;
        if (r >= mb) {
            r -= mb;
            q |= 1u;
        }
        r <<= 1u;
    }
    let sticky = r != 0u;
    // Bits below the result's last place: 2 for a normal result, more
    // for a subnormal one.
    var drop = 2u;
    if (e < 1i) {
        if (e < -25i) { return sign; }
        drop = u32(3i - e);
        e = 0i;
    }
    var m = q >> drop;
    let rest = q & ((1u << drop) - 1u);
    let halfway = 1u << (drop - 1u);
    if (rest > halfway || (rest == halfway && (sticky || (m & 1u) != 0u))) {
        m += 1u;
    }
    if (e == 0i) {
        // A subnormal (or, rounded up, the smallest normal: m = 2^23).
        return sign | m;
    }
    if (m == 0x1000000u) {
        m >>= 1u;
        e += 1i;
    }
    if (e >= 255i) { return sign | 0x7f800000u; }
    return sign | (u32(e) << 23u) | (m & 0x7fffffu);
}

// a / b for finite a (0 / b is a signed zero).
fn div(a: f32, b: f32) -> f32 {
    let ab = bitcast<u32>(a);
    if ((ab & 0x7fffffffu) == 0u) {
        return bitcast<f32>((ab ^ bitcast<u32>(b)) & 0x80000000u);
    }
    return bitcast<f32>(div_exact(ab & 0x7fffffffu, bitcast<u32>(b)) ^ (ab & 0x80000000u));
}
