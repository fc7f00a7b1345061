// Probe: each thread's subgroup lane and the subgroup size.

@group(0) @binding(0) var<storage, read_write> out: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>,
        @builtin(subgroup_invocation_id) lane: u32,
        @builtin(subgroup_size) size: u32) {
    out[2u * id.x] = lane;
    out[2u * id.x + 1u] = size;
}
