// The pool threshold of the compaction kernels.
fn plan() -> vec2<u32> {
    let nfin = st[NFIN];
    if (nfin == 0u) { return vec2<u32>(0xffffffffu, 0u); }
    let mode = p.v[2].y;
    if (mode == 1u && p.v[2].x < nfin) {
        return vec2<u32>(st[SEL_PREFIX], st[SEL_REM]);
    }
    if (mode == 2u) {
        // Every logit >= max + ln(min_p), and at least the maximum; the
        // finishing kernel trims exactly.
        let maxk = st[MAXK];
        let lnb = p.v[3].y;
        if (lnb == 0x7f800000u) { return vec2<u32>(maxk, 0xffffffffu); }
        let thr = bitcast<f32>(unkey(maxk)) + bitcast<f32>(lnb);
        return vec2<u32>(min(cmp_key(bitcast<u32>(thr)), maxk), 0xffffffffu);
    }
    return vec2<u32>(key(NEG_INF), 0u);
}
