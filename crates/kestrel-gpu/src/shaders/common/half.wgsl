// half(b): the IEEE half in the low 16 bits of b.
// The IEEE half in the low 16 bits of b, decoded by hand: an
// implementation may flush subnormal halves to zero in unpack2x16float.
fn half(b: u32) -> f32 {
    let e = (b >> 10u) & 31u;
    let m = b & 1023u;
    var v: f32;
    if (e == 0u) {
        v = f32(m) * 5.9604644775390625e-08;
    } else if (e == 31u) {
        v = bitcast<f32>(0x7f800000u | (m << 13u));
    } else {
        v = bitcast<f32>(((e + 112u) << 23u) | (m << 13u));
    }
    return select(v, -v, (b & 0x8000u) != 0u);
}
