//! RoPE angles, shared by the backends so that every device rotates by the
//! same bits.

/// Precomputed cos/sin for one position: `cache[2i] = cos θ_i`, `cache[2i+1] = sin θ_i`,
/// with θ_i = pos · freq_scale · base^(-2i/n_rot), the power built by repeated
/// multiplication in f32 as ggml builds it.
#[inline]
pub fn rope_cache(pos: usize, n_rot: usize, base: f32, freq_scale: f32, cache: &mut Vec<f32>) {
    cache.clear();
    let theta_scale = base.powf(-2.0 / n_rot as f32);
    let mut theta = pos as f32;
    for _ in 0..n_rot / 2 {
        let t = freq_scale * theta;
        cache.push(t.cos());
        cache.push(t.sin());
        theta *= theta_scale;
    }
}
