//! Element-wise kernels of the forward pass: RoPE (from a cos/sin table
//! the host builds once with `kestrel_model::rope::rope_cache`, as the CPU
//! does, so both devices rotate by the same angles; GPU cos/sin are far
//! from correctly rounded), SwiGLU / GeGLU (GELU through ggml's f16 table,
//! as the CPU), softcap, and the residual add.
//! One thread per value (per rotated pair for RoPE).

use crate::{Gpu, GpuError, GRID_X};

const ROPE: &str = include_str!("shaders/ops/rope.wgsl");

const ELEMENTWISE: &str = include_str!("shaders/ops/elementwise.wgsl");

/// The activation of a gated feed-forward block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Glu {
    Silu,
    Gelu,
}

pub struct Ops {
    rope: wgpu::ComputePipeline,
    elementwise: wgpu::ComputePipeline,
    /// Bound where an op leaves an input unused (a buffer may not be bound
    /// both read-only and writable in one dispatch).
    unused: wgpu::Buffer,
    gelu_table: wgpu::Buffer,
}

fn check(what: &str, bufs: &[(&wgpu::Buffer, usize)]) -> Result<(), GpuError> {
    for (i, (b, n)) in bufs.iter().enumerate() {
        if b.size() < (*n * 4) as u64 {
            return Err(GpuError::Shape(format!(
                "{what}: buffer {i} holds {} bytes, {n} values needed",
                b.size()
            )));
        }
    }
    Ok(())
}

impl Ops {
    pub fn new(gpu: &Gpu) -> Ops {
        let grid = format!("{GRID_X}u");
        Ops {
            rope: gpu.pipeline(
                "rope",
                &format!("{}{}", ROPE.replace("GRID_X", &grid), gpu.fma_wgsl()),
            ),
            elementwise: gpu.pipeline(
                "elementwise",
                &ELEMENTWISE
                    .replace("GRID_X", &grid)
                    .replace("EXACT_DIV", crate::shaders::EXACT_DIV)
                    .replace("F16_ROUND", crate::shaders::F16_ROUND)
                    .replace("HALF", crate::shaders::HALF)
                    .replace("FMA_SRC", gpu.fma_wgsl())
                    .replace("EXPF_SRC", crate::exact::EXPF_GLIBC),
            ),
            unused: gpu.scratch_f32("unused", 1),
            gelu_table: {
                let table = kestrel_quant::gelu_f16_table();
                let buf = gpu.scratch_f32("gelu table", table.len() / 2);
                gpu.queue.write_buffer(&buf, 0, bytemuck::cast_slice(table));
                buf
            },
        }
    }

    /// Rotates the first `n_rot` dims of every head of `v` (`n_tok` rows of
    /// `n_head` heads of `head_dim`), token t at position `pos[t]`, by the
    /// table's cos/sin (row p: `rope_cache(p, ..)`). `neox` pairs (i, i +
    /// n_rot/2), else (2i, 2i + 1).
    #[allow(clippy::too_many_arguments)]
    pub fn rope(
        &self,
        gpu: &Gpu,
        (v, table, pos): (&wgpu::Buffer, &wgpu::Buffer, &wgpu::Buffer),
        n_tok: usize,
        n_head: usize,
        head_dim: usize,
        n_rot: usize,
        neox: bool,
    ) -> Result<(), GpuError> {
        if n_rot > head_dim || !n_rot.is_multiple_of(2) {
            return Err(GpuError::Shape(format!(
                "rope: {n_rot} rotated dims of a {head_dim}-wide head"
            )));
        }
        check("rope", &[(v, n_tok * n_head * head_dim), (pos, n_tok)])?;
        let params = gpu.params(&[
            n_tok as u32,
            n_head as u32,
            head_dim as u32,
            n_rot as u32,
            u32::from(neox),
            0,
            0,
            0,
        ]);
        let bind = gpu.bind(&self.rope, &[v, table, pos, &params]);
        let n = n_tok * n_head * n_rot / 2;
        gpu.run(&self.rope, &bind, (n as u32).div_ceil(64));
        Ok(())
    }

    fn elementwise(
        &self,
        gpu: &Gpu,
        (y, a, b): (&wgpu::Buffer, &wgpu::Buffer, &wgpu::Buffer),
        (n, row): (usize, usize),
        op: u32,
        param: f32,
    ) {
        let params = gpu.params(&[n as u32, op, param.to_bits(), row.max(1) as u32]);
        let bind = gpu.bind(&self.elementwise, &[y, a, b, &params, &self.gelu_table]);
        gpu.run(&self.elementwise, &bind, (n as u32).div_ceil(64));
    }

    /// y = act(gate) * up over `n` values in rows of `row` (ggml's SiLU
    /// splits each row between SIMD groups of 8 and a tail).
    pub fn glu(
        &self,
        gpu: &Gpu,
        act: Glu,
        (gate, up, y): (&wgpu::Buffer, &wgpu::Buffer, &wgpu::Buffer),
        (n, row): (usize, usize),
    ) -> Result<(), GpuError> {
        check("glu", &[(gate, n), (up, n), (y, n)])?;
        if row == 0 || !n.is_multiple_of(row) {
            return Err(GpuError::Shape(format!(
                "glu over {n} values in rows of {row}"
            )));
        }
        let op = match act {
            Glu::Silu => 0,
            Glu::Gelu => 1,
        };
        self.elementwise(gpu, (y, gate, up), (n, row), op, 0.0);
        Ok(())
    }

    /// y = cap * tanh(y / cap) over `n` values (Gemma's final logits).
    pub fn softcap(&self, gpu: &Gpu, y: &wgpu::Buffer, n: usize, cap: f32) -> Result<(), GpuError> {
        check("softcap", &[(y, n)])?;
        self.elementwise(gpu, (y, &self.unused, &self.unused), (n, n), 2, cap);
        Ok(())
    }

    /// y *= c over `n` values.
    pub fn scale(&self, gpu: &Gpu, y: &wgpu::Buffer, n: usize, c: f32) -> Result<(), GpuError> {
        check("scale", &[(y, n)])?;
        self.elementwise(gpu, (y, &self.unused, &self.unused), (n, n), 4, c);
        Ok(())
    }

    /// y += a over `n` values (the residual stream).
    pub fn add(
        &self,
        gpu: &Gpu,
        y: &wgpu::Buffer,
        a: &wgpu::Buffer,
        n: usize,
    ) -> Result<(), GpuError> {
        check("add", &[(y, n), (a, n)])?;
        self.elementwise(gpu, (y, a, &self.unused), (n, n), 3, 0.0);
        Ok(())
    }
}
