// Activations to Q8_0 or Q8_1, one thread per 32-value block.
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let b = gid.x;
    if (b >= p.x) { return; }
    var amax = 0.0;
    for (var j = 0u; j < 32u; j++) { amax = max(amax, abs(x[32u * b + j])); }
    let d = div(amax, 127.0);
    var id = 0.0;
    if (amax != 0.0) { id = div(127.0, amax); }
    var sum = 0i;
    for (var k = 0u; k < 8u; k++) {
        var word = 0u;
        for (var i = 0u; i < 4u; i++) {
            let v = i32(round(x[32u * b + 4u * k + i] * id));
            sum += v;
            word |= (u32(clamp(v, -128i, 127i)) & 0xffu) << (8u * i);
        }
        q[8u * b + k] = word;
    }
    m[META * b] = bitcast<u32>(f16r(d));
    if (p.y != 0u) {
        m[META * b + 1u] = bitcast<u32>(f16r(d * f32(sum)));
    }
}
