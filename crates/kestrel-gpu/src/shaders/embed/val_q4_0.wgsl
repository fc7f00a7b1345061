// Q4_0 rows: val, one dequantized value.
fn val(base: u32, u: u32, l: u32) -> f32 {
    let o = base + u * 18u;
    let q = (b8(o + 2u + l % 16u) >> (4u * (l / 16u))) & 15u;
    return h16(o) * (f32(q) - 8.0);
}
