// F32 rows: val, one dequantized value.
fn val(base: u32, u: u32, l: u32) -> f32 { return bitcast<f32>(w[(base >> 2u) + u * 32u + l]); }
