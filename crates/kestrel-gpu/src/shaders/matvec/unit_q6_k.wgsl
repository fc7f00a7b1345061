// Q6_K weights: unit, the dot of one 32-value unit.
fn unit(base: u32, u: u32) -> f32 {
    let sb = u / 8u;
    let o = base + sb * 210u;
    let e = (u % 8u) * 32u;
    let n = e / 128u;
    let grp = (e % 128u) / 32u;
    let ql = o + 64u * n + 32u * (grp % 2u);
    let qh = o + 128u + 32u * n;
    let nib = 4u * (grp / 2u);
    var s0 = 0i;
    var s1 = 0i;
    for (var k = 0u; k < 8u; k++) {
        let lo = (u32_at(ql + 4u * k) >> nib) & 0x0f0f0f0fu;
        let hi = ((u32_at(qh + 4u * k) >> (2u * grp)) & 0x03030303u) << 4u;
        let d = dot4(sub_bytes(lo | hi, 32u), aq(8u * u + k));
        if (k < 4u) { s0 += d; } else { s1 += d; }
    }
    let sc = o + 192u + 8u * n + 2u * grp;
    let isum = i8i(b8(sc)) * s0 + i8i(b8(sc + 1u)) * s1;
    return bitcast<f32>(am(17u * sb)) * h16(o + 208u) * f32(isum);
}
