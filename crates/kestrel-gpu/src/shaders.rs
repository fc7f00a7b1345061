//! WGSL snippets that several kernels' shaders share, each written once
//! (in `shaders/common/`) and concatenated into every shader that calls
//! it.
//!
//! Every shader piece lives in a `.wgsl` file under `shaders/`, loaded with
//! `include_str!` by the module that builds its pipeline. Some pieces hold
//! upper-case placeholders (`TPR`, `GRID_X`, `WG`, ...) that the Rust side
//! replaces when it builds the source, in the text it has composed so far:
//! so no comment in a piece names a placeholder, which would be replaced
//! there too.

/// `half(b)`: the IEEE half in the low 16 bits of `b`.
pub(crate) const HALF: &str = include_str!("shaders/common/half.wgsl");

/// `f16bits(x)` and `f16r(x)`: x rounded to the nearest f16 (ties to
/// even), as its bits or as an f32 (with [`HALF`]). WGSL leaves the
/// rounding of its own f16 conversions to the implementation, and the CPU
/// rounds to even.
pub(crate) const F16_ROUND: &str = include_str!("shaders/common/f16_round.wgsl");

/// `div_exact(a_bits, b_bits)` and `div(a, b)`: IEEE division, rounded
/// to nearest even as the CPU's division is, in integers: WGSL's division
/// may be off by an ulp or two and its fma need not be fused (lavapipe's
/// is not), so neither can correct the other.
pub(crate) const EXACT_DIV: &str = include_str!("shaders/common/exact_div.wgsl");
