// Q5_1 weights: lane_sum, scale and min_term.
fn lane_sum(base: u32, u: u32, l: u32) -> i32 {
    let o = base + u * 24u;
    let q = (u32_at(o + 8u + 4u * (l % 4u)) >> (4u * (l / 4u))) & 0x0f0f0f0fu;
    let hb = spread4(u32_at(o + 4u) >> (16u * (l / 4u) + 4u * (l % 4u))) << 4u;
    return dot4(q | hb, aq(8u * u + l));
}
fn scale(base: u32, u: u32) -> f32 { return h16(base + u * 24u) * bitcast<f32>(am(2u * u)); }
fn min_term(base: u32, u: u32, summs: f32) -> f32 {
    return fmaf(h16(base + u * 24u + 2u), bitcast<f32>(am(2u * u + 1u)), summs);
}
