//! Float operations that WGSL leaves loose, made exact: `fmaf(a, b, c)`,
//! a multiply-add rounded once, as the CPU's fused `mul_add` (and ggml's
//! compiler-contracted code) rounds it. WGSL's `fma` may round the product
//! first, and lavapipe's does, so where a probe at start-up finds the
//! adapter's `fma` unfused ([`Gpu::fused_fma`]) the shaders get an integer
//! emulation instead. Without it one bit differs now and then, and one bit
//! can move an 8-bit activation quant and then the next token.

use crate::{Gpu, GpuError};

/// `fmaf` as the adapter's own `fma` (where the probe found it fused).
pub const FMA_NATIVE: &str = "fn fmaf(a: f32, b: f32, c: f32) -> f32 { return fma(a, b, c); }\n";

/// `fmaf` in integers: the 48-bit product and the addend placed in a
/// 96-bit window (the larger one's top bit at bit 93, the smaller one
/// shifted right with every lost bit kept as a sticky bit 0), added or
/// subtracted exactly, then rounded once to nearest even, subnormals
/// included. Infinities and NaNs go through the plain expression, as does
/// a zero product (whose sum with c rounds once anyway).
pub const FMA_EMULATED: &str = r#"
// 96-bit integers as vec3<u32>, x the low word.
fn shl96(v: vec3<u32>, s: u32) -> vec3<u32> {
    var w = v;
    if (s >= 64u) {
        w = vec3<u32>(0u, 0u, w.x);
    } else if (s >= 32u) {
        w = vec3<u32>(0u, w.x, w.y);
    }
    let r = s & 31u;
    if (r != 0u) {
        w = vec3<u32>(w.x << r, (w.y << r) | (w.x >> (32u - r)), (w.z << r) | (w.y >> (32u - r)));
    }
    return w;
}

// v >> s with the bits shifted out ORed into bit 0.
fn shr96_jam(v: vec3<u32>, s: u32) -> vec3<u32> {
    if (s == 0u) { return v; }
    let nonzero = (v.x | v.y | v.z) != 0u;
    if (s >= 96u) { return vec3<u32>(select(0u, 1u, nonzero), 0u, 0u); }
    var w = v;
    var lost = 0u;
    if (s >= 64u) {
        lost = w.x | w.y;
        w = vec3<u32>(w.z, 0u, 0u);
    } else if (s >= 32u) {
        lost = w.x;
        w = vec3<u32>(w.y, w.z, 0u);
    }
    let r = s & 31u;
    if (r != 0u) {
        lost |= w.x << (32u - r);
        w = vec3<u32>((w.x >> r) | (w.y << (32u - r)), (w.y >> r) | (w.z << (32u - r)), w.z >> r);
    }
    if (lost != 0u) { w.x |= 1u; }
    return w;
}

fn add96(a: vec3<u32>, b: vec3<u32>) -> vec3<u32> {
    let x = a.x + b.x;
    let y0 = a.y + b.y;
    let y = y0 + select(0u, 1u, x < a.x);
    let cy = select(0u, 1u, y0 < a.y) + select(0u, 1u, y < y0);
    return vec3<u32>(x, y, a.z + b.z + cy);
}

// a - b for a >= b.
fn sub96(a: vec3<u32>, b: vec3<u32>) -> vec3<u32> {
    let x = a.x - b.x;
    let y0 = a.y - b.y;
    let bx = select(0u, 1u, a.x < b.x);
    let y = y0 - bx;
    let by = select(0u, 1u, a.y < b.y) + select(0u, 1u, y0 < bx);
    return vec3<u32>(x, y, a.z - b.z - by);
}

fn lt96(a: vec3<u32>, b: vec3<u32>) -> bool {
    if (a.z != b.z) { return a.z < b.z; }
    if (a.y != b.y) { return a.y < b.y; }
    return a.x < b.x;
}

fn clz96(v: vec3<u32>) -> u32 {
    if (v.z != 0u) { return countLeadingZeros(v.z); }
    if (v.y != 0u) { return 32u + countLeadingZeros(v.y); }
    return 64u + countLeadingZeros(v.x);
}

// The float nearest to sign * r * 2^l (r nonzero), ties to even.
fn round96(r: vec3<u32>, l: i32, sign: u32) -> f32 {
    let lz = clz96(r);
    var w = shl96(r, lz);
    var biased = l + 95i - i32(lz) + 127i;
    if (biased >= 255i) { return bitcast<f32>(sign | 0x7f800000u); }
    if (biased < 1i) {
        // A subnormal: its last place is 2^-149.
        w = shr96_jam(w, u32(1i - biased));
        biased = 0i;
    }
    let m = w.z >> 8u;
    let round_bit = (w.z >> 7u) & 1u;
    let sticky = ((w.z & 0x7fu) | w.y | w.x) != 0u;
    var bits = m;
    if (biased > 0i) { bits = (u32(biased) << 23u) | (m & 0x7fffffu); }
    // A carry out of the mantissa steps the exponent (up to infinity).
    if (round_bit == 1u && (sticky || (bits & 1u) == 1u)) { bits += 1u; }
    return bitcast<f32>(sign | bits);
}

// The significand and the exponent of its last place of a finite nonzero
// magnitude: |x| = m * 2^e.
fn fx_m(b: u32) -> u32 {
    let f = b & 0x7fffffu;
    return select(f, f | 0x800000u, ((b >> 23u) & 255u) != 0u);
}
fn fx_e(b: u32) -> i32 {
    let e = i32((b >> 23u) & 255u);
    return select(e, 1i, e == 0i) - 150i;
}

fn fmaf(a: f32, b: f32, c: f32) -> f32 {
    let ab = bitcast<u32>(a);
    let bb = bitcast<u32>(b);
    let cb = bitcast<u32>(c);
    let aa = ab & 0x7fffffffu;
    let ba = bb & 0x7fffffffu;
    let ca = cb & 0x7fffffffu;
    if (aa >= 0x7f800000u || ba >= 0x7f800000u) { return a * b + c; }
    // A finite product plus an infinite or NaN c is c.
    if (ca >= 0x7f800000u) { return c; }
    if (aa == 0u || ba == 0u) { return a * b + c; }
    // The exact product: up to 48 bits in two words.
    let ma = fx_m(ab);
    let mb = fx_m(bb);
    let al = ma & 0xffffu;
    let ah = ma >> 16u;
    let bl = mb & 0xffffu;
    let bh = mb >> 16u;
    let mid = ah * bl + al * bh;
    let lo0 = al * bl;
    let lo = lo0 + (mid << 16u);
    let hi = ah * bh + (mid >> 16u) + select(0u, 1u, lo < lo0);
    let prod = vec3<u32>(lo, hi, 0u);
    let ep = fx_e(ab) + fx_e(bb);
    let sp = (ab ^ bb) & 0x80000000u;
    if (ca == 0u) { return round96(prod, ep, sp); }
    let add = vec3<u32>(fx_m(cb), 0u, 0u);
    let ec = fx_e(cb);
    let sc = cb & 0x80000000u;
    // The window's last place: the larger top bit lands on bit 93.
    let top_p = ep + 95i - i32(clz96(prod));
    let top_c = ec + 95i - i32(clz96(add));
    let l = max(top_p, top_c) - 93i;
    var wp: vec3<u32>;
    if (ep >= l) { wp = shl96(prod, u32(ep - l)); } else { wp = shr96_jam(prod, u32(l - ep)); }
    var wc: vec3<u32>;
    if (ec >= l) { wc = shl96(add, u32(ec - l)); } else { wc = shr96_jam(add, u32(l - ec)); }
    if (sp == sc) { return round96(add96(wp, wc), l, sp); }
    if (lt96(wp, wc)) { return round96(sub96(wc, wp), l, sc); }
    if (lt96(wc, wp)) { return round96(sub96(wp, wc), l, sp); }
    // Exact cancellation rounds to +0.
    return 0.0;
}
"#;

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
        let n = a.len();
        if b.len() != n || c.len() != n {
            return Err(GpuError::Shape(format!(
                "fma of {n}, {} and {} values",
                b.len(),
                c.len()
            )));
        }
        let shader = format!(
            r#"
@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> c: array<f32>;
{src}
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {{
    let i = id.y * {stride}u + id.x;
    if (i < arrayLength(&a)) {{ c[i] = fmaf(a[i], b[i], c[i]); }}
}}
"#,
            stride = 64 * crate::GRID_X
        );
        let p = self.pipeline("fma", &shader);
        let (ab, bb, cb) = (
            self.upload_f32("fma a", a)?,
            self.upload_f32("fma b", b)?,
            self.upload_f32("fma c", c)?,
        );
        let bind = self.bind(&p, &[&ab, &bb, &cb]);
        self.run(&p, &bind, n.div_ceil(64) as u32);
        self.read_f32(&cb, n)
    }
}

/// Triples whose fused and unfused results differ: a = 1 + 2^-12 + k ulps,
/// b = a, c = -(a * b rounded): the fused result is the product's rounding
/// error, the unfused one 0.
fn fma_probe_cases() -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let a: Vec<f32> = (0..64u32)
        .map(|k| f32::from_bits((1.0f32 + 2f32.powi(-12)).to_bits() + 3 * k))
        .collect();
    let c = a.iter().map(|x| -(x * x)).collect();
    (a.clone(), a, c)
}
