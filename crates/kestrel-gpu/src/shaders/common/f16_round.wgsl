// f16bits(x) and f16r(x): x rounded to the nearest f16, ties to even.
// The f16 bits of x, rounded to nearest even as the CPU rounds: WGSL
// leaves pack2x16float's rounding to the implementation.
fn f16bits(x: f32) -> u32 {
    let b = bitcast<u32>(x);
    let sign = (b >> 16u) & 0x8000u;
    let a = b & 0x7fffffffu;
    if (a > 0x7f800000u) { return sign | 0x7e00u; }
    if (a >= 0x477ff000u) { return sign | 0x7c00u; }
    if (a >= 0x38800000u) {
        return sign | ((a + 0xfffu + ((a >> 13u) & 1u) - 0x38000000u) >> 13u);
    }
    // Below the smallest normal half: multiples of 2^-24, ties to even.
    return sign | u32(round(bitcast<f32>(a) * 16777216.0));
}

// x rounded to the nearest f16, as an f32 (needs `half`).
fn f16r(x: f32) -> f32 { return half(f16bits(x)); }
