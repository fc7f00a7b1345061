// A step's keys or values written into the f16 cache.
@group(0) @binding(0) var<storage, read> src: array<f32>;
@group(0) @binding(1) var<storage, read_write> cache: array<u32>;
// values per row (even), position
@group(0) @binding(2) var<uniform> p: vec4<u32>;

F16_ROUND

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    if (2u * i >= p.x) { return; }
    cache[(p.y * p.x) / 2u + i] = f16bits(src[2u * i]) | (f16bits(src[2u * i + 1u]) << 16u);
}
