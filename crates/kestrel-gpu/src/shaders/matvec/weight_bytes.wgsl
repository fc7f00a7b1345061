// Byte-level reads of the weight blocks (needs `half`).
// Byte o of the weights.
fn b8(o: u32) -> u32 { return (w[o >> 2u] >> ((o & 3u) * 8u)) & 0xffu; }
// The IEEE half at byte o.
fn h16(o: u32) -> f32 { return half(b8(o) | (b8(o + 1u) << 8u)); }
// A byte as a signed value.
fn i8v(v: u32) -> f32 { return f32(bitcast<i32>(v << 24u) >> 24u); }
fn i8i(v: u32) -> i32 { return bitcast<i32>(v << 24u) >> 24u; }
// Four bytes at o, little-endian, at any alignment.
fn u32_at(o: u32) -> u32 {
    let i = o >> 2u;
    let sh = (o & 3u) * 8u;
    if (sh == 0u) { return w[i]; }
    return (w[i] >> sh) | (w[i + 1u] << (32u - sh));
}
// Q4_K sub-block j's 6-bit scale and min, from the 12 bytes at o + 4.
fn q4k_scale_min(o: u32, j: u32) -> vec2<u32> {
    if (j < 4u) {
        return vec2<u32>(b8(o + 4u + j) & 63u, b8(o + 8u + j) & 63u);
    }
    return vec2<u32>(
        (b8(o + 8u + j) & 15u) | ((b8(o + j) >> 6u) << 4u),
        (b8(o + 8u + j) >> 4u) | ((b8(o + 4u + j) >> 6u) << 4u),
    );
}
// Four unsigned bytes minus k each (k < 128, bytes < 128), as signed bytes:
// the high bit set first stops a borrow from crossing into the next byte.
fn sub_bytes(v: u32, k: u32) -> u32 { return ((v | 0x80808080u) - k * 0x01010101u) ^ 0x80808080u; }
// Bits 0-3 of b moved to bit 0 of bytes 0-3.
fn spread4(b: u32) -> u32 { return (b & 1u) | ((b & 2u) << 7u) | ((b & 4u) << 14u) | ((b & 8u) << 21u); }
