//! The horizontal sum ggml's AVX2 kernels end with (`hsum_float_8`), shared
//! by the block dots that reproduce ggml's lane-wise float accumulation.

/// ((x0+x4) + (x2+x6)) + ((x1+x5) + (x3+x7)), the order of `hsum_float_8`.
pub(crate) fn hsum8(x: &[f32; 8]) -> f32 {
    let r = [x[0] + x[4], x[1] + x[5], x[2] + x[6], x[3] + x[7]];
    (r[0] + r[2]) + (r[1] + r[3])
}
