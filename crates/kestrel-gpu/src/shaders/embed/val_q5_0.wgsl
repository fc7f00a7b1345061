// Q5_0 rows: val, one dequantized value.
fn val(base: u32, u: u32, l: u32) -> f32 {
    let o = base + u * 22u;
    let qh = u32_at(o + 2u);
    let q = ((b8(o + 6u + l % 16u) >> (4u * (l / 16u))) & 15u) | (((qh >> l) & 1u) << 4u);
    return h16(o) * (f32(q) - 16.0);
}
