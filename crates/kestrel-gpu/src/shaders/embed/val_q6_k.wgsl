// Q6_K rows: val, one dequantized value.
fn val(base: u32, u: u32, l: u32) -> f32 {
    let o = base + (u / 8u) * 210u;
    let e = (u % 8u) * 32u;
    let n = e / 128u;
    let grp = (e % 128u) / 32u;
    let ql = o + 64u * n + 32u * (grp % 2u);
    let qh = o + 128u + 32u * n;
    let q = ((b8(ql + l) >> (4u * (grp / 2u))) & 15u) | (((b8(qh + l) >> (2u * grp)) & 3u) << 4u);
    let sc = i8v(b8(o + 192u + 8u * n + 2u * grp + l / 16u));
    return h16(o + 208u) * sc * (f32(q) - 32.0);
}
