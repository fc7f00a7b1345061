// Q4_K weights: unit, the dot of one 32-value unit.
fn unit(base: u32, u: u32) -> f32 {
    let sb = u / 8u;
    let j = u % 8u;
    let o = base + sb * 144u;
    let sm = q4k_scale_min(o, j);
    let q0 = o + 16u + 32u * (j / 2u);
    let shift = 4u * (j % 2u);
    var s = 0i;
    for (var k = 0u; k < 8u; k++) {
        s += dot4((u32_at(q0 + 4u * k) >> shift) & 0x0f0f0f0fu, aq(8u * u + k));
    }
    let mb = 17u * sb;
    let dx = bitcast<f32>(am(mb));
    let bs = bitcast<i32>(am(mb + 1u + 2u * j)) + bitcast<i32>(am(mb + 2u + 2u * j));
    return dx * h16(o) * f32(i32(sm.x) * s) - dx * h16(o + 2u) * f32(i32(sm.y) * bs);
}
