// F16 weights: unit, the dot of one 32-value unit.
fn unit(base: u32, u: u32) -> f32 {
    let o = (base >> 2u) + u * 16u;
    let xi = u * 32u;
    var s = 0.0;
    for (var j = 0u; j < 16u; j++) {
        let v = w[o + j];
        s += half(v & 0xffffu) * f16r(ax(xi + 2u * j)) + half(v >> 16u) * f16r(ax(xi + 2u * j + 1u));
    }
    return s;
}
