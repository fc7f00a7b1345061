// fmaf and fma_int through the adapter's own fma (where it is fused).
fn fmaf(a: f32, b: f32, c: f32) -> f32 { return fma(a, b, c); }
fn fma_int(d: f32, n: i32, c: f32) -> f32 { return fma(d, f32(n), c); }
