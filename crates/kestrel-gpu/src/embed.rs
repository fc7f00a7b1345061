//! The embedding lookup that starts a decode step on the device: the token
//! id is read from the history buffer (where the previous step's sampler
//! wrote it), and that row of the embedding matrix is dequantized into x,
//! times a scale (Gemma multiplies by sqrt(n_embd)). One thread per value;
//! a matrix uploaded in parts takes one dispatch per part, and only the
//! part holding the row writes.

use kestrel_gguf::GgmlType;

use crate::matvec::{GpuMatrix, BINDINGS, HALF, HELPERS};
use crate::{Gpu, GpuError};

pub struct Embed {
    pipeline: wgpu::ComputePipeline,
    ty: GgmlType,
}

const MAIN: &str = r#"
@group(0) @binding(4) var<storage, read> history: array<u32>;
// rows in the part, cols, bytes per row, position; scale bits, the
// part's first row, rows in the matrix
@group(0) @binding(5) var<uniform> q: vec4<u32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let e = gid.x;
    if (e >= p.y) { return; }
    let tok = history[p.w];
    if (tok >= q.z) {
        if (q.y == 0u) { y[e] = 0.0; }
        return;
    }
    if (tok < q.y || tok - q.y >= p.x) { return; }
    y[e] = val((tok - q.y) * p.z, e / 32u, e % 32u) * bitcast<f32>(q.x);
}
"#;

/// `fn val(base, u, l) -> f32`: value `l` of 32-value unit `u` of the row
/// at byte `base`, as the CPU's dequantization computes it.
fn val_fn(ty: GgmlType) -> Option<&'static str> {
    use GgmlType as T;
    Some(match ty {
        T::F32 => "fn val(base: u32, u: u32, l: u32) -> f32 { return bitcast<f32>(w[(base >> 2u) + u * 32u + l]); }",
        T::F16 => "fn val(base: u32, u: u32, l: u32) -> f32 { return h16(base + (u * 32u + l) * 2u); }",
        T::Q8_0 => "fn val(base: u32, u: u32, l: u32) -> f32 { let o = base + u * 34u; return h16(o) * i8v(b8(o + 2u + l)); }",
        T::Q4_0 => {
            r#"fn val(base: u32, u: u32, l: u32) -> f32 {
    let o = base + u * 18u;
    let q = (b8(o + 2u + l % 16u) >> (4u * (l / 16u))) & 15u;
    return h16(o) * (f32(q) - 8.0);
}"#
        }
        T::Q4_1 => {
            r#"fn val(base: u32, u: u32, l: u32) -> f32 {
    let o = base + u * 20u;
    let q = (b8(o + 4u + l % 16u) >> (4u * (l / 16u))) & 15u;
    return h16(o) * f32(q) + h16(o + 2u);
}"#
        }
        T::Q5_0 => {
            r#"fn val(base: u32, u: u32, l: u32) -> f32 {
    let o = base + u * 22u;
    let qh = u32_at(o + 2u);
    let q = ((b8(o + 6u + l % 16u) >> (4u * (l / 16u))) & 15u) | (((qh >> l) & 1u) << 4u);
    return h16(o) * (f32(q) - 16.0);
}"#
        }
        T::Q5_1 => {
            r#"fn val(base: u32, u: u32, l: u32) -> f32 {
    let o = base + u * 24u;
    let qh = u32_at(o + 4u);
    let q = ((b8(o + 8u + l % 16u) >> (4u * (l / 16u))) & 15u) | (((qh >> l) & 1u) << 4u);
    return h16(o) * f32(q) + h16(o + 2u);
}"#
        }
        T::Q4_K => {
            r#"fn val(base: u32, u: u32, l: u32) -> f32 {
    let o = base + (u / 8u) * 144u;
    let j = u % 8u;
    let sm = q4k_scale_min(o, j);
    let sc = sm.x;
    let m = sm.y;
    let q = (b8(o + 16u + 32u * (j / 2u) + l) >> (4u * (j % 2u))) & 15u;
    return h16(o) * f32(sc) * f32(q) - h16(o + 2u) * f32(m);
}"#
        }
        T::Q6_K => {
            r#"fn val(base: u32, u: u32, l: u32) -> f32 {
    let o = base + (u / 8u) * 210u;
    let e = (u % 8u) * 32u;
    let n = e / 128u;
    let grp = (e % 128u) / 32u;
    let ql = o + 64u * n + 32u * (grp % 2u);
    let qh = o + 128u + 32u * n;
    let q = ((b8(ql + l) >> (4u * (grp / 2u))) & 15u) | (((b8(qh + l) >> (2u * grp)) & 3u) << 4u);
    let sc = i8v(b8(o + 192u + 8u * n + 2u * grp + l / 16u));
    return h16(o + 208u) * sc * (f32(q) - 32.0);
}"#
        }
        _ => return None,
    })
}

impl Embed {
    pub fn new(gpu: &Gpu, ty: GgmlType) -> Result<Embed, GpuError> {
        let val = val_fn(ty).ok_or(GpuError::Unsupported(ty))?;
        // The matvec bindings declare w, x (unused here), y and p.
        let src = format!("{BINDINGS}\n{HALF}\n{HELPERS}\n{val}\n{MAIN}");
        Ok(Embed {
            pipeline: gpu.pipeline(&format!("embed {ty}"), &src),
            ty,
        })
    }

    /// y = scale * row `history[pos]` of `m` (zeros for an id outside the
    /// matrix: the sampler never writes one).
    pub fn run(
        &self,
        gpu: &Gpu,
        m: &GpuMatrix,
        (history, y): (&wgpu::Buffer, &wgpu::Buffer),
        pos: usize,
        scale: f32,
    ) -> Result<(), GpuError> {
        if m.ty != self.ty
            || history.size() < ((pos + 1) * 4) as u64
            || y.size() < (m.cols * 4) as u64
        {
            return Err(GpuError::Shape(format!(
                "embedding of a {} matrix ({} kernel), position {pos}: history {} bytes, y {} bytes",
                m.ty,
                self.ty,
                history.size(),
                y.size()
            )));
        }
        for part in &m.parts {
            let p = gpu.params(&[
                part.rows as u32,
                m.cols as u32,
                m.row_bytes as u32,
                pos as u32,
            ]);
            let q = gpu.params(&[scale.to_bits(), part.row0 as u32, m.rows as u32, 0]);
            // Binding 1 (x) of the shared header is unused here, so not bound.
            let bind = gpu.bind_at(
                &self.pipeline,
                &[(0, &part.buf), (2, y), (3, &p), (4, history), (5, &q)],
            );
            gpu.run(&self.pipeline, &bind, (m.cols as u32).div_ceil(64));
        }
        Ok(())
    }
}
