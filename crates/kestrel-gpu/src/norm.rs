//! RMSNorm in WGSL, y = x * (1 / sqrt(mean(x^2) + eps)) * w, bit for bit
//! as the CPU computes it: one workgroup per row (up to 1024 threads on a
//! GPU, 64 on a CPU adapter), x and w read as vec4.
//!
//! The CPU (as ggml) sums the squares in f64. Here each square is added
//! exactly into a 96-bit fixed-point sum placed 56 bits below the largest
//! square, so the threads may add in any order and still agree; the mean
//! is then the sum divided by the width in integers, rounded once to f32.
//! Those two differ only where the f64 sum's own roundings cross an f32
//! rounding boundary (about 2^-19 of rows). The square root is rounded
//! correctly in integers and the reciprocal by the exact division, since
//! WGSL promises neither.

use crate::shaders::EXACT_DIV;
use crate::{Gpu, GpuError, GRID_X};

pub struct RmsNorm {
    pipeline: wgpu::ComputePipeline,
}

const SRC: &str = include_str!("shaders/norm/rms_norm.wgsl");

impl RmsNorm {
    pub fn new(gpu: &Gpu) -> RmsNorm {
        // A software rasterizer runs a workgroup's threads as loops and
        // pays for every barrier; a GPU wants a wide row.
        let wg: u32 = if gpu.adapter.kind == "Cpu" {
            64
        } else {
            // The largest power of two the adapter allows, up to 1024.
            1 << gpu.max_workgroup.clamp(64, 1024).ilog2()
        };
        let src = format!("{EXACT_DIV}\n{SRC}")
            .replace("GRID_X", &format!("{GRID_X}u"))
            .replace("WG", &format!("{wg}u"));
        RmsNorm {
            pipeline: gpu.pipeline("rms_norm", &src),
        }
    }

    /// Normalizes `rows` rows of `width` values (a multiple of 4) from `x`
    /// into `y` (`(rows, width) = shape`), scaling by `weight`.
    pub fn run(
        &self,
        gpu: &Gpu,
        (x, weight, y): (&wgpu::Buffer, &wgpu::Buffer, &wgpu::Buffer),
        (rows, width): (usize, usize),
        eps: f32,
    ) -> Result<(), GpuError> {
        let need = (rows * width * 4) as u64;
        if !width.is_multiple_of(4)
            || width >= 1 << 16
            || x.size() < need
            || y.size() < need
            || weight.size() < (width * 4) as u64
        {
            return Err(GpuError::Shape(format!(
                "rms_norm of {rows} rows of {width} (a multiple of 4 below 65536): buffers of {}, {} and {} bytes",
                x.size(),
                weight.size(),
                y.size()
            )));
        }
        let params = gpu.params(&[rows as u32, (width / 4) as u32, eps.to_bits(), width as u32]);
        let bind = gpu.bind(&self.pipeline, &[x, weight, y, &params]);
        gpu.run(&self.pipeline, &bind, rows as u32);
        Ok(())
    }
}
