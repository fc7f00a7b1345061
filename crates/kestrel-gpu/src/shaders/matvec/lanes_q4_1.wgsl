// Q4_1 weights: lane_sum, scale and min_term.
fn lane_sum(base: u32, u: u32, l: u32) -> i32 {
    let q = (w[((base + u * 20u) >> 2u) + 1u + l % 4u] >> (4u * (l / 4u))) & 0x0f0f0f0fu;
    return dot4(q, aq(8u * u + l));
}
fn scale(base: u32, u: u32) -> f32 {
    return half(w[(base + u * 20u) >> 2u] & 0xffffu) * bitcast<f32>(am(2u * u));
}
fn min_term(base: u32, u: u32, summs: f32) -> f32 {
    return fmaf(half(w[(base + u * 20u) >> 2u] >> 16u), bitcast<f32>(am(2u * u + 1u)), summs);
}
