// The probes' and tests' kernel: one expression of three f32 arrays, element by element.
@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> c: array<f32>;
const n_max = 0xffffffffu;
DEFINITIONS
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.y * STRIDE + id.x;
    if (i < arrayLength(&a)) { c[i] = EXPR; }
}
