// Exclusive prefix sums over a range of `buf` by one workgroup.
var<workgroup> part: array<u32, 256>;
var<workgroup> total_wg: u32;

fn scan_range(t: u32, off: u32, len: u32) -> u32 {
    let chunk = (len + 255u) / 256u;
    let s = min(t * chunk, len);
    let e = min(s + chunk, len);
    var sum = 0u;
    for (var i = s; i < e; i++) { sum += buf[off + i]; }
    part[t] = sum;
    workgroupBarrier();
    if (t == 0u) {
        var acc = 0u;
        for (var j = 0u; j < 256u; j++) {
            let v = part[j];
            part[j] = acc;
            acc += v;
        }
        total_wg = acc;
    }
    workgroupBarrier();
    var acc = part[t];
    for (var i = s; i < e; i++) {
        let v = buf[off + i];
        buf[off + i] = acc;
        acc += v;
    }
    let total = total_wg;
    workgroupBarrier();
    return total;
}
