//! Float operations that WGSL leaves loose, made exact: `fmaf(a, b, c)`,
//! a multiply-add rounded once, as the CPU's fused `mul_add` (and ggml's
//! compiler-contracted code) rounds it. WGSL's `fma` may round the product
//! first, and lavapipe's does, so where a probe at start-up finds the
//! adapter's `fma` unfused ([`Gpu::fused_fma`]) the shaders get an integer
//! emulation instead. Without it one bit differs now and then, and one bit
//! can move an 8-bit activation quant and then the next token.

use crate::{Gpu, GpuError};

/// `fmaf` as the adapter's own `fma` (where the probe found it fused).
pub const FMA_NATIVE: &str = include_str!("shaders/exact/fma_native.wgsl");

/// `fmaf` in integers: the exact product (up to 48 bits) and the addend,
/// each normalized to its top bit at bit 61 of a 64-bit window, the
/// smaller shifted right by the exponent difference with every lost bit
/// kept as a sticky bit 0, added or subtracted exactly, then rounded once
/// to nearest even, subnormals included. 64 bits are enough: the two
/// operands only cancel deeply when their tops are within a bit, and then
/// nothing was shifted out. Branch-light, as a CPU adapter runs threads
/// in SIMD lanes and pays for both sides of a branch. Infinities and NaNs
/// go through the plain expression, as does a zero product (whose sum
/// with c rounds once anyway).
pub const FMA_EMULATED: &str = include_str!("shaders/exact/fma_emulated.wgsl");

/// `expf_glibc(x)`: glibc's `expf` (2.27 and later, the build for CPUs with
/// FMA, which `f32::exp` calls on x86-64 Linux) step for step, its double
/// arithmetic done in integers: the CPU takes libm's expf in attention's
/// softmax (as ggml does) and in SiLU's row tails. Its steps, all in
/// double: n = x * 32/ln2 rounded to an integer (fused with 1.5 * 2^52),
/// r = x * 32/ln2 - n (fused), z = C0 r + C1, r2 = r r, y = C2 r + 1,
/// y = z r2 + y (all three fused), times 2^(n/32) from a 32-entry table,
/// rounded to f32 once.
pub const EXPF_GLIBC: &str = include_str!("shaders/exact/expf_glibc.wgsl");

/// Whether this host's `f32::exp` is glibc's build for CPUs with FMA, the
/// one [`EXPF_GLIBC`] was written from. Where the CPU takes its exps from
/// libm (SiLU's tail, attention), the GPU matches its bits only there;
/// tests hold bits on such hosts and a tolerance elsewhere (saying so).
pub fn host_expf_is_glibc_fma() -> bool {
    #[cfg(all(target_arch = "x86_64", target_os = "linux", target_env = "gnu"))]
    {
        std::arch::is_x86_feature_detected!("fma") && std::arch::is_x86_feature_detected!("avx2")
    }
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

impl Gpu {
    /// WGSL defining `fn fmaf(a: f32, b: f32, c: f32) -> f32`, a
    /// multiply-add rounded once: the adapter's `fma` where it is fused,
    /// else the integer emulation.
    pub fn fma_wgsl(&self) -> &'static str {
        if self.fused_fma {
            FMA_NATIVE
        } else {
            FMA_EMULATED
        }
    }

    /// Whether the adapter's WGSL `fma` rounds once, on triples where
    /// rounding the product first gives another result (checked against
    /// the CPU's fused `mul_add`).
    pub(crate) fn fma_is_fused(&self) -> Result<bool, GpuError> {
        let (a, b, c) = fma_probe_cases();
        Ok(self
            .run_fma(FMA_NATIVE, &a, &b, &c)?
            .iter()
            .zip(a.iter().zip(&b).zip(&c))
            .all(|(got, ((a, b), c))| got.to_bits() == a.mul_add(*b, *c).to_bits()))
    }

    /// `fmaf` of each triple through `src` (a definition of `fmaf`): the
    /// probe's kernel, and the tests' way to hold the emulation to the CPU.
    pub fn run_fma(
        &self,
        src: &str,
        a: &[f32],
        b: &[f32],
        c: &[f32],
    ) -> Result<Vec<f32>, GpuError> {
        self.map3(src, "fmaf(a[i], b[i], c[i])", a, b, c)
    }

    /// `fma_int(d, n, c)` of each triple through `src` (which defines it).
    pub fn run_fma_int(
        &self,
        src: &str,
        d: &[f32],
        n: &[i32],
        c: &[f32],
    ) -> Result<Vec<f32>, GpuError> {
        let n: Vec<f32> = n.iter().map(|&v| f32::from_bits(v as u32)).collect();
        self.map3(src, "fma_int(a[i], bitcast<i32>(b[i]), c[i])", d, &n, c)
    }

    /// [`EXPF_GLIBC`] of each value (for the tests).
    pub fn run_expf(&self, x: &[f32]) -> Result<Vec<f32>, GpuError> {
        // (b is read only to keep all three bindings in the layout.)
        self.map3(
            EXPF_GLIBC,
            "select(expf_glibc(a[i]), b[i], i > n_max)",
            x,
            x,
            x,
        )
    }

    /// `c[i] = expr` over three equal-length inputs, with `src` defining
    /// what `expr` calls.
    fn map3(
        &self,
        src: &str,
        expr: &str,
        a: &[f32],
        b: &[f32],
        c: &[f32],
    ) -> Result<Vec<f32>, GpuError> {
        let n = a.len();
        if b.len() != n || c.len() != n {
            return Err(GpuError::Shape(format!(
                "{expr} of {n}, {} and {} values",
                b.len(),
                c.len()
            )));
        }
        // The definitions go in last, so no placeholder is looked for in them.
        let shader = MAP3
            .replace("STRIDE", &format!("{}u", 64 * crate::GRID_X))
            .replace("EXPR", expr)
            .replace("DEFINITIONS", src);
        let p = self.pipeline(expr, &shader);
        let (ab, bb, cb) = (
            self.upload_f32("a", a)?,
            self.upload_f32("b", b)?,
            self.upload_f32("c", c)?,
        );
        let bind = self.bind(&p, &[&ab, &bb, &cb]);
        self.run(&p, &bind, n.div_ceil(64) as u32);
        self.read_f32(&cb, n)
    }
}

/// The kernel of [`Gpu::map3`]: `c[i] = EXPR` after `DEFINITIONS` (what
/// `EXPR` calls), `STRIDE` threads per row of the grid.
const MAP3: &str = include_str!("shaders/exact/map3.wgsl");

/// Triples whose fused and unfused results differ: a = 1 + 2^-12 + k ulps,
/// b = a, c = -(a * b rounded): the fused result is the product's rounding
/// error, the unfused one 0.
fn fma_probe_cases() -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let mut a: Vec<f32> = (0..64u32)
        .map(|k| f32::from_bits((1.0f32 + 2f32.powi(-12)).to_bits() + 3 * k))
        .collect();
    // The same scaled by 2^-55: the products stay normal but what their
    // rounding dropped is subnormal, so an fma that flushes subnormal
    // results (ggml's CPU never does) fails the probe too.
    let small: Vec<f32> = a[..16].iter().map(|x| x * 2f32.powi(-55)).collect();
    a.extend(small);
    let c = a.iter().map(|x| -(x * x)).collect();
    (a.clone(), a, c)
}
