// Activations to Q8_K, one thread per 256-value block.
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let b = gid.x;
    if (b >= p.x) { return; }
    var amax = 0.0;
    var mx = 0.0;
    for (var j = 0u; j < 256u; j++) {
        let v = x[256u * b + j];
        if (abs(v) > amax) {
            amax = abs(v);
            mx = v;
        }
    }
    var iscale = 0.0;
    if (amax != 0.0) { iscale = div(-127.0, mx); }
    for (var g = 0u; g < 16u; g++) {
        var bs = 0i;
        for (var k = 0u; k < 4u; k++) {
            var word = 0u;
            for (var i = 0u; i < 4u; i++) {
                let v = min(i32(round(iscale * x[256u * b + 16u * g + 4u * k + i])), 127i);
                bs += v;
                word |= (u32(v) & 0xffu) << (8u * i);
            }
            q[64u * b + 4u * g + k] = word;
        }
        m[META * b + 1u + g] = bitcast<u32>(bs);
    }
    var d = 0.0;
    if (amax != 0.0) { d = div(1.0, iscale); }
    m[META * b] = bitcast<u32>(d);
}
