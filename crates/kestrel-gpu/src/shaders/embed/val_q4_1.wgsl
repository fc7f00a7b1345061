// Q4_1 rows: val, one dequantized value.
fn val(base: u32, u: u32, l: u32) -> f32 {
    let o = base + u * 20u;
    let q = (b8(o + 4u + l % 16u) >> (4u * (l / 16u))) & 15u;
    return h16(o) * f32(q) + h16(o + 2u);
}
