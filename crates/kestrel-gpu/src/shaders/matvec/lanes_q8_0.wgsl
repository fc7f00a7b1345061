// Q8_0 weights: lane_sum, scale and min_term.
fn lane_sum(base: u32, u: u32, l: u32) -> i32 {
    return dot4(u32_at(base + u * 34u + 2u + 4u * l), aq(8u * u + l));
}
fn scale(base: u32, u: u32) -> f32 { return h16(base + u * 34u) * bitcast<f32>(am(u)); }
fn min_term(base: u32, u: u32, summs: f32) -> f32 { return summs; }
