// F32 weights: unit, the dot of one 32-value unit.
fn unit(base: u32, u: u32) -> f32 {
    let o = (base >> 2u) + u * 32u;
    let xi = u * 32u;
    var s = 0.0;
    for (var j = 0u; j < 32u; j++) { s += bitcast<f32>(w[o + j]) * ax(xi + j); }
    return s;
}
