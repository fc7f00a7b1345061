// dot4 with the bytes unpacked (adapters without packed dot products).
fn bytes4(a: u32) -> vec4<i32> {
    return vec4<i32>(bitcast<i32>(a << 24u), bitcast<i32>(a << 16u), bitcast<i32>(a << 8u), bitcast<i32>(a)) >> vec4<u32>(24u);
}
fn dot4(a: u32, b: u32) -> i32 { return dot(bytes4(a), bytes4(b)); }
