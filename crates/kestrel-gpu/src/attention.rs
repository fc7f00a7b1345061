//! Decode attention on the device: one query per head against the f16 KV
//! cache, grouped-query heads, optional sliding window; and the write of a
//! step's keys and values into the cache. One workgroup per head, in the
//! CPU's (ggml's one-query path's) rounding step for step, so the two
//! devices give the same bits (head sizes a multiple of 32, a host libm
//! that is glibc's FMA build; the CPU's tiled path for prompt chunks of 64
//! or more adds in another order): the threads score the cached positions in
//! parallel (Q rounded to f16, ggml's lanes), one thread runs the online
//! softmax's maximum, the threads take every position's exp (glibc's
//! expf, emulated in [`crate::exact`]), then each thread walks the
//! positions in order for its output dimensions, the running value sum
//! rounded to f16 after every fused step.

use crate::{Gpu, GpuError};

const ATTEND: &str = include_str!("shaders/attention/attend.wgsl");

const STORE: &str = include_str!("shaders/attention/store.wgsl");

/// The shape of one layer's attention (as the CPU's `AttnShape`).
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub n_head: usize,
    pub n_head_kv: usize,
    pub head_dim_k: usize,
    pub head_dim_v: usize,
    pub scale: f32,
    /// Sliding window in tokens (0 = none).
    pub window: usize,
}

pub struct Attention {
    attend: wgpu::ComputePipeline,
    store: wgpu::ComputePipeline,
}

impl Attention {
    pub fn new(gpu: &Gpu) -> Attention {
        Attention {
            attend: gpu.pipeline(
                "attention",
                &ATTEND.replace(
                    "F16_ROUND",
                    &format!(
                        "{}{}{}{}{}",
                        crate::shaders::F16_ROUND,
                        crate::shaders::EXACT_DIV,
                        crate::shaders::HALF,
                        gpu.fma_wgsl(),
                        crate::exact::EXPF_GLIBC
                    ),
                ),
            ),
            store: gpu.pipeline(
                "kv store",
                &STORE.replace(
                    "F16_ROUND",
                    &format!("{}{}", crate::shaders::F16_ROUND, crate::shaders::HALF),
                ),
            ),
        }
    }

    /// Writes one position's row (`width` f32 values, even) into an f16
    /// cache at `pos`.
    pub fn store(
        &self,
        gpu: &Gpu,
        (src, cache): (&wgpu::Buffer, &wgpu::Buffer),
        width: usize,
        pos: usize,
    ) -> Result<(), GpuError> {
        if !width.is_multiple_of(2)
            || src.size() < (width * 4) as u64
            || cache.size() < ((pos + 1) * width * 2) as u64
        {
            return Err(GpuError::Shape(format!(
                "kv store of {width} values at position {pos}: source {} bytes, cache {} bytes",
                src.size(),
                cache.size()
            )));
        }
        let params = gpu.params(&[width as u32, pos as u32, 0, 0]);
        let bind = gpu.bind(&self.store, &[src, cache, &params]);
        gpu.run(&self.store, &bind, (width as u32 / 2).div_ceil(64));
        Ok(())
    }

    /// Attention of the query `q` (n_head heads) at position `pos` over
    /// cache positions up to `pos` (within the window); `scratch` holds
    /// `n_head * (pos + 1)` f32 or more.
    pub fn attend(
        &self,
        gpu: &Gpu,
        (q, kc, vc, scratch, out): (
            &wgpu::Buffer,
            &wgpu::Buffer,
            &wgpu::Buffer,
            &wgpu::Buffer,
            &wgpu::Buffer,
        ),
        s: &Shape,
        pos: usize,
    ) -> Result<(), GpuError> {
        let stride = scratch.size() as usize / 4 / s.n_head.max(1);
        let ok = s.n_head_kv > 0
            && s.n_head.is_multiple_of(s.n_head_kv)
            && stride > pos
            && q.size() >= (s.n_head * s.head_dim_k * 4) as u64
            && out.size() >= (s.n_head * s.head_dim_v * 4) as u64
            && kc.size() >= ((pos + 1) * s.n_head_kv * s.head_dim_k * 2) as u64
            && vc.size() >= ((pos + 1) * s.n_head_kv * s.head_dim_v * 2) as u64;
        if !ok {
            return Err(GpuError::Shape(format!(
                "attention at position {pos} of {s:?}: buffers too small or heads uneven"
            )));
        }
        let params = gpu.params(&[
            s.n_head as u32,
            s.n_head_kv as u32,
            s.head_dim_k as u32,
            s.head_dim_v as u32,
            pos as u32,
            s.window as u32,
            s.scale.to_bits(),
            stride as u32,
        ]);
        let bind = gpu.bind(&self.attend, &[q, kc, vc, scratch, out, &params]);
        gpu.run(&self.attend, &bind, s.n_head as u32);
        Ok(())
    }
}
