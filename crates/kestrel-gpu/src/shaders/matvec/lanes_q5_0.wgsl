// Q5_0 weights: lane_sum, scale and min_term.
fn lane_sum(base: u32, u: u32, l: u32) -> i32 {
    let o = base + u * 22u;
    let q = (u32_at(o + 6u + 4u * (l % 4u)) >> (4u * (l / 4u))) & 0x0f0f0f0fu;
    let hb = spread4(u32_at(o + 2u) >> (16u * (l / 4u) + 4u * (l % 4u))) << 4u;
    return dot4(sub_bytes(q | hb, 16u), aq(8u * u + l));
}
fn scale(base: u32, u: u32) -> f32 { return h16(base + u * 22u) * bitcast<f32>(am(u)); }
fn min_term(base: u32, u: u32, summs: f32) -> f32 { return summs; }
