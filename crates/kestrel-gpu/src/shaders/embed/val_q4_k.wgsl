// Q4_K rows: val, one dequantized value.
fn val(base: u32, u: u32, l: u32) -> f32 {
    let o = base + (u / 8u) * 144u;
    let j = u % 8u;
    let sm = q4k_scale_min(o, j);
    let sc = sm.x;
    let m = sm.y;
    let q = (b8(o + 16u + 32u * (j / 2u) + l) >> (4u * (j % 2u))) & 15u;
    return h16(o) * f32(sc) * f32(q) - h16(o + 2u) * f32(m);
}
