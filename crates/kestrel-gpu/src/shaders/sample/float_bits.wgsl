// Float bits as the samplers handle them: -inf and f32::MAX, sanitizing and
// an order-preserving key.
const NEG_INF: u32 = 0xff800000u;
const MAX_F: u32 = 0x7f7fffffu;

// NaN -> -inf, +inf -> f32::MAX, on the bits.
fn sanitize(b: u32) -> u32 {
    if ((b & 0x7fffffffu) > 0x7f800000u) { return NEG_INF; }
    if (b == 0x7f800000u) { return MAX_F; }
    return b;
}

// An order-preserving u32 for a non-NaN float.
fn key(b: u32) -> u32 {
    if ((b & 0x80000000u) != 0u) { return ~b; }
    return b | 0x80000000u;
}
