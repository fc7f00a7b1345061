// Q8_0 rows: val, one dequantized value.
fn val(base: u32, u: u32, l: u32) -> f32 { let o = base + u * 34u; return h16(o) * i8v(b8(o + 2u + l)); }
