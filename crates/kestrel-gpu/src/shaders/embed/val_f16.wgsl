// F16 rows: val, one dequantized value.
fn val(base: u32, u: u32, l: u32) -> f32 { return h16(base + (u * 32u + l) * 2u); }
