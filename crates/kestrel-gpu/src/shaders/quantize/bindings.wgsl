// Bindings of the activation quantizers.
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> q: array<u32>;
@group(0) @binding(2) var<storage, read_write> m: array<u32>;
// blocks, with s (Q8_1)
@group(0) @binding(3) var<uniform> p: vec4<u32>;

