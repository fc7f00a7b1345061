// Bindings of the quantized products: weights, 8-bit activations and their scales, y.
@group(0) @binding(0) var<storage, read> w: array<u32>;
@group(0) @binding(1) var<storage, read> xq: array<u32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<uniform> p: vec4<u32>;
@group(0) @binding(4) var<storage, read> xm: array<u32>;
