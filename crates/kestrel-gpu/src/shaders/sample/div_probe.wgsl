// Test probe: the penalty's exact division of each pair.
@group(0) @binding(0) var<storage, read_write> io: array<u32>;
@group(0) @binding(1) var<uniform> q: vec4<u32>;

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) t: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let i = gid(wg, t);
    if (i < q.x) {
        io[2u * i] = div_exact(io[2u * i], io[2u * i + 1u]);
    }
}
