// Q4_0 weights: lane_sum, scale and min_term.
fn lane_sum(base: u32, u: u32, l: u32) -> i32 {
    let q = (u32_at(base + u * 18u + 2u + 4u * (l % 4u)) >> (4u * (l / 4u))) & 0x0f0f0f0fu;
    return dot4(sub_bytes(q, 8u), aq(8u * u + l));
}
fn scale(base: u32, u: u32) -> f32 { return h16(base + u * 18u) * bitcast<f32>(am(u)); }
fn min_term(base: u32, u: u32, summs: f32) -> f32 { return summs; }
