//! The embedding lookup that starts a decode step on the device: the token
//! id is read from the history buffer (where the previous step's sampler
//! wrote it), and that row of the embedding matrix is dequantized into x,
//! times a scale (Gemma multiplies by sqrt(n_embd)). One thread per value;
//! a matrix uploaded in parts takes one dispatch per part, and only the
//! part holding the row writes.

use kestrel_gguf::GgmlType;

use crate::matvec::{GpuMatrix, BINDINGS, HELPERS};
use crate::shaders::HALF;
use crate::{Gpu, GpuError};

pub struct Embed {
    pipeline: wgpu::ComputePipeline,
    ty: GgmlType,
}

const MAIN: &str = include_str!("shaders/embed/main.wgsl");

/// `fn val(base, u, l) -> f32`: value `l` of 32-value unit `u` of the row
/// at byte `base`, as the CPU's dequantization computes it.
fn val_fn(ty: GgmlType) -> Option<&'static str> {
    use GgmlType as T;
    Some(match ty {
        T::F32 => include_str!("shaders/embed/val_f32.wgsl"),
        T::F16 => include_str!("shaders/embed/val_f16.wgsl"),
        T::Q8_0 => include_str!("shaders/embed/val_q8_0.wgsl"),
        T::Q4_0 => include_str!("shaders/embed/val_q4_0.wgsl"),
        T::Q4_1 => include_str!("shaders/embed/val_q4_1.wgsl"),
        T::Q5_0 => include_str!("shaders/embed/val_q5_0.wgsl"),
        T::Q5_1 => include_str!("shaders/embed/val_q5_1.wgsl"),
        T::Q4_K => include_str!("shaders/embed/val_q4_k.wgsl"),
        T::Q6_K => include_str!("shaders/embed/val_q6_k.wgsl"),
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
