//! Quantized matrix-vector products in WGSL: y = W x with W in its GGUF
//! block format (read as raw bytes) and x, y in f32. One workgroup of 64
//! threads per weight row; each thread takes 32-value units of the row (a
//! legacy block, or a K-quant sub-block), dequantizes them as the format
//! defines and sums against x in f32; the workgroup adds the threads' sums
//! in a tree.
//!
//! The CPU quantizes activations to 8 bits; the GPU does not, so the two
//! differ by that rounding; the tests bound the GPU's error against an f64
//! product of the dequantized weights instead.

use kestrel_gguf::GgmlType;

use crate::{Gpu, GpuError, GRID_X};

/// A weight matrix on the GPU, in its block format.
pub struct GpuMatrix {
    pub buf: wgpu::Buffer,
    pub ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
    pub row_bytes: usize,
}

impl Gpu {
    /// Uploads `rows` rows of `cols` values of type `ty` (`bytes` is the
    /// tensor's data). Rows must be whole 32-value units.
    pub fn upload_matrix(
        &self,
        name: &str,
        ty: GgmlType,
        rows: usize,
        cols: usize,
        bytes: &[u8],
    ) -> Result<GpuMatrix, GpuError> {
        if !cols.is_multiple_of(32) || !cols.is_multiple_of(ty.block_size()) {
            return Err(GpuError::Shape(format!(
                "{name}: {cols} columns is not a whole number of {ty} blocks of 32-value units"
            )));
        }
        let row_bytes = ty
            .row_bytes(cols as u64)
            .ok_or_else(|| GpuError::Shape(format!("{name}: bad row of {cols} {ty} values")))?
            as usize;
        if bytes.len() != rows * row_bytes {
            return Err(GpuError::Shape(format!(
                "{name}: {} bytes for {rows} rows of {row_bytes}",
                bytes.len()
            )));
        }
        Ok(GpuMatrix {
            buf: self.upload(name, bytes)?,
            ty,
            rows,
            cols,
            row_bytes,
        })
    }
}

/// The compiled product for one weight type.
pub struct MatVec {
    pipeline: wgpu::ComputePipeline,
    ty: GgmlType,
}

impl MatVec {
    pub fn new(gpu: &Gpu, ty: GgmlType) -> Result<MatVec, GpuError> {
        let unit = unit_fn(ty).ok_or(GpuError::Unsupported(ty))?;
        let src = format!("{HEADER}\n{unit}\n{MAIN}").replace("GRID_X", &format!("{GRID_X}u"));
        Ok(MatVec {
            pipeline: gpu.pipeline(&format!("matvec {ty}"), &src),
            ty,
        })
    }

    /// y[r] = dot(row r of `m`, x) for every row: `x` holds `m.cols` f32
    /// values, `y` room for `m.rows`.
    pub fn run(
        &self,
        gpu: &Gpu,
        m: &GpuMatrix,
        x: &wgpu::Buffer,
        y: &wgpu::Buffer,
    ) -> Result<(), GpuError> {
        if m.ty != self.ty {
            return Err(GpuError::Shape(format!(
                "a {} kernel was given a {} matrix",
                self.ty, m.ty
            )));
        }
        if x.size() < (m.cols * 4) as u64 || y.size() < (m.rows * 4) as u64 {
            return Err(GpuError::Shape(format!(
                "x holds {} bytes and y {} for a {}x{} matrix",
                x.size(),
                y.size(),
                m.rows,
                m.cols
            )));
        }
        let params = gpu.params(&[
            m.rows as u32,
            m.cols as u32,
            m.row_bytes as u32,
            (m.cols / 32) as u32,
        ]);
        let bind = gpu.bind(&self.pipeline, &[&m.buf, x, y, &params]);
        gpu.run(&self.pipeline, &bind, m.rows as u32);
        Ok(())
    }
}

pub(crate) const HEADER: &str = r#"
@group(0) @binding(0) var<storage, read> w: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
// rows, cols, bytes per row, 32-value units per row
@group(0) @binding(3) var<uniform> p: vec4<u32>;

var<workgroup> part: array<f32, 64>;

// Byte o of the weights.
fn b8(o: u32) -> u32 { return (w[o >> 2u] >> ((o & 3u) * 8u)) & 0xffu; }
// The IEEE half at byte o.
fn h16(o: u32) -> f32 { return unpack2x16float(b8(o) | (b8(o + 1u) << 8u)).x; }
// A byte as a signed value.
fn i8v(v: u32) -> f32 { return f32(bitcast<i32>(v << 24u) >> 24u); }
// Four bytes at o, little-endian.
fn u32_at(o: u32) -> u32 { return b8(o) | (b8(o + 1u) << 8u) | (b8(o + 2u) << 16u) | (b8(o + 3u) << 24u); }
// Q4_K sub-block j's 6-bit scale and min, from the 12 bytes at o + 4.
fn q4k_scale_min(o: u32, j: u32) -> vec2<u32> {
    if (j < 4u) {
        return vec2<u32>(b8(o + 4u + j) & 63u, b8(o + 8u + j) & 63u);
    }
    return vec2<u32>(
        (b8(o + 8u + j) & 15u) | ((b8(o + j) >> 6u) << 4u),
        (b8(o + 8u + j) >> 4u) | ((b8(o + 4u + j) >> 6u) << 4u),
    );
}
"#;

const MAIN: &str = r#"
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) g: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let row = g.y * GRID_X + g.x;
    var s = 0.0;
    if (row < p.x) {
        let base = row * p.z;
        for (var u = t; u < p.w; u += 64u) {
            s += unit(base, u, u * 32u);
        }
    }
    part[t] = s;
    workgroupBarrier();
    for (var k = 32u; k > 0u; k >>= 1u) {
        if (t < k) {
            part[t] += part[t + k];
        }
        workgroupBarrier();
    }
    if (t == 0u && row < p.x) {
        y[row] = part[0];
    }
}
"#;

/// `fn unit(base, u, xi) -> f32`: the dot of 32-value unit `u` of the row
/// starting at byte `base` with x[xi..xi + 32], in each format's layout.
fn unit_fn(ty: GgmlType) -> Option<&'static str> {
    use GgmlType as T;
    Some(match ty {
        T::F32 => {
            r#"
fn unit(base: u32, u: u32, xi: u32) -> f32 {
    let o = (base + u * 128u) >> 2u;
    var s = 0.0;
    for (var j = 0u; j < 32u; j++) { s += bitcast<f32>(w[o + j]) * x[xi + j]; }
    return s;
}"#
        }
        T::F16 => {
            r#"
fn unit(base: u32, u: u32, xi: u32) -> f32 {
    let o = (base + u * 64u) >> 2u;
    var s = 0.0;
    for (var j = 0u; j < 16u; j++) {
        let v = unpack2x16float(w[o + j]);
        s += v.x * x[xi + 2u * j] + v.y * x[xi + 2u * j + 1u];
    }
    return s;
}"#
        }
        T::Q8_0 => {
            r#"
fn unit(base: u32, u: u32, xi: u32) -> f32 {
    let o = base + u * 34u;
    var s = 0.0;
    for (var j = 0u; j < 32u; j++) { s += i8v(b8(o + 2u + j)) * x[xi + j]; }
    return h16(o) * s;
}"#
        }
        T::Q4_0 => {
            r#"
fn unit(base: u32, u: u32, xi: u32) -> f32 {
    let o = base + u * 18u;
    var s = 0.0;
    for (var j = 0u; j < 16u; j++) {
        let q = b8(o + 2u + j);
        s += (f32(q & 15u) - 8.0) * x[xi + j] + (f32(q >> 4u) - 8.0) * x[xi + 16u + j];
    }
    return h16(o) * s;
}"#
        }
        T::Q4_1 => {
            r#"
fn unit(base: u32, u: u32, xi: u32) -> f32 {
    let o = base + u * 20u;
    var s = 0.0;
    var sx = 0.0;
    for (var j = 0u; j < 16u; j++) {
        let q = b8(o + 4u + j);
        let a = x[xi + j];
        let b = x[xi + 16u + j];
        s += f32(q & 15u) * a + f32(q >> 4u) * b;
        sx += a + b;
    }
    return h16(o) * s + h16(o + 2u) * sx;
}"#
        }
        T::Q5_0 => {
            r#"
fn unit(base: u32, u: u32, xi: u32) -> f32 {
    let o = base + u * 22u;
    let qh = u32_at(o + 2u);
    var s = 0.0;
    for (var j = 0u; j < 16u; j++) {
        let q = b8(o + 6u + j);
        let lo = (q & 15u) | (((qh >> j) & 1u) << 4u);
        let hi = (q >> 4u) | (((qh >> (j + 16u)) & 1u) << 4u);
        s += (f32(lo) - 16.0) * x[xi + j] + (f32(hi) - 16.0) * x[xi + 16u + j];
    }
    return h16(o) * s;
}"#
        }
        T::Q5_1 => {
            r#"
fn unit(base: u32, u: u32, xi: u32) -> f32 {
    let o = base + u * 24u;
    let qh = u32_at(o + 4u);
    var s = 0.0;
    var sx = 0.0;
    for (var j = 0u; j < 16u; j++) {
        let q = b8(o + 8u + j);
        let lo = (q & 15u) | (((qh >> j) & 1u) << 4u);
        let hi = (q >> 4u) | (((qh >> (j + 16u)) & 1u) << 4u);
        let a = x[xi + j];
        let b = x[xi + 16u + j];
        s += f32(lo) * a + f32(hi) * b;
        sx += a + b;
    }
    return h16(o) * s + h16(o + 2u) * sx;
}"#
        }
        // 256-value blocks: d, dmin, 12 bytes of 6-bit scales and mins,
        // 128 bytes of nibbles (sub-blocks 2k and 2k+1 share 32 bytes).
        T::Q4_K => {
            r#"
fn unit(base: u32, u: u32, xi: u32) -> f32 {
    let o = base + (u / 8u) * 144u;
    let j = u % 8u;
    let sm = q4k_scale_min(o, j);
    let sc = sm.x;
    let m = sm.y;
    let q0 = o + 16u + 32u * (j / 2u);
    let shift = 4u * (j % 2u);
    var s = 0.0;
    var sx = 0.0;
    for (var l = 0u; l < 32u; l++) {
        let a = x[xi + l];
        s += f32((b8(q0 + l) >> shift) & 15u) * a;
        sx += a;
    }
    return h16(o) * f32(sc) * s - h16(o + 2u) * f32(m) * sx;
}"#
        }
        // 256-value blocks: 128 bytes of low nibbles, 64 of high 2-bit
        // pairs, 16 signed scales (one per 16 values), d.
        T::Q6_K => {
            r#"
fn unit(base: u32, u: u32, xi: u32) -> f32 {
    let o = base + (u / 8u) * 210u;
    let e = (u % 8u) * 32u;
    let n = e / 128u;
    let grp = (e % 128u) / 32u;
    let ql = o + 64u * n + 32u * (grp % 2u);
    let qh = o + 128u + 32u * n;
    let nib = 4u * (grp / 2u);
    var s0 = 0.0;
    var s1 = 0.0;
    for (var l = 0u; l < 32u; l++) {
        let q = ((b8(ql + l) >> nib) & 15u) | (((b8(qh + l) >> (2u * grp)) & 3u) << 4u);
        let v = (f32(q) - 32.0) * x[xi + l];
        if (l < 16u) { s0 += v; } else { s1 += v; }
    }
    let sc = o + 192u + 8u * n + 2u * grp;
    return h16(o + 208u) * (i8v(b8(sc)) * s0 + i8v(b8(sc + 1u)) * s1);
}"#
        }
        _ => return None,
    })
}
