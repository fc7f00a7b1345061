//! Element-wise kernels of the forward pass: RoPE (from a cos/sin table
//! the host builds once with `kestrel_model::rope::rope_cache`, as the CPU
//! does, so both devices rotate by the same angles; GPU cos/sin are far
//! from correctly rounded), SwiGLU / GeGLU (GELU through ggml's f16 table,
//! as the CPU), softcap, and the residual add.
//! One thread per value (per rotated pair for RoPE).

use crate::{Gpu, GpuError, GRID_X};

const ROPE: &str = r#"
@group(0) @binding(0) var<storage, read_write> v: array<f32>;
@group(0) @binding(1) var<storage, read> table: array<f32>;
@group(0) @binding(2) var<storage, read> pos: array<u32>;
// tokens, heads per token, head dim, rotated dims; neox
@group(0) @binding(3) var<uniform> p: array<vec4<u32>, 2>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) g: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let half = p[0].w / 2u;
    let i = (g.y * GRID_X + g.x) * 64u + t;
    if (i >= p[0].x * p[0].y * half) { return; }
    let pair = i % half;
    let head = i / half;
    let tok = head / p[0].y;
    let base = head * p[0].z;
    var a = base + 2u * pair;
    var b = a + 1u;
    if (p[1].x != 0u) {
        a = base + pair;
        b = a + half;
    }
    let c = table[pos[tok] * p[0].w + 2u * pair];
    let s = table[pos[tok] * p[0].w + 2u * pair + 1u];
    let x0 = v[a];
    let x1 = v[b];
    // The CPU's fused forms (as ggml's compiler contracts them).
    v[a] = fmaf(x0, c, -(x1 * s));
    v[b] = fmaf(x0, s, x1 * c);
}
"#;

const ELEMENTWISE: &str = r#"
@group(0) @binding(0) var<storage, read_write> y: array<f32>;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
// n, op, f32 parameter bits
@group(0) @binding(3) var<uniform> p: vec4<u32>;
// ggml's GELU of every f16 input as f16, two to a word
// (`kestrel_quant::gelu_f16_table`).
@group(0) @binding(4) var<storage, read> gelu_table: array<u32>;

HALF
F16_ROUND

// GELU as ggml computes it on the CPU: the table entry of x rounded to f16.
fn gelu(x: f32) -> f32 {
    if (x <= -10.0) { return 0.0; }
    if (x >= 10.0) { return x; }
    let h = f16bits(x);
    return half((gelu_table[h >> 1u] >> (16u * (h & 1u))) & 0xffffu);
}

// ggml's vectorised expf (ggml_v_expf), step for step as the CPU's twin
// computes it (`fmaf` rounding once, as its fused instructions do), so SiLU
// agrees with the CPU's to the last bit.
fn v_expf(x: f32) -> f32 {
    // ggml rounds x·log2(e) to an integer by adding 1.5·2^23 in one fused
    // step (the product is never rounded on its own) and subtracting it
    // again; rounding the product first differs where it lands on a half.
    // `fmaf` is exact by construction, so no compiler folds the sum away.
    let r = bitcast<f32>(0x4b400000u);
    let z = fmaf(x, bitcast<f32>(0x3fb8aa3bu), r);
    let n = z - r;
    let b = fmaf(-n, bitcast<f32>(0x35bfbe8eu), fmaf(-n, bitcast<f32>(0x3f317200u), x));
    // The integer's low bits, shifted into the exponent field.
    let e = bitcast<u32>(z) << 23u;
    let k = bitcast<f32>(e + bitcast<u32>(1.0));
    let u = b * b;
    let j = fmaf(
        fmaf(fmaf(bitcast<f32>(0x3c072010u), b, bitcast<f32>(0x3d2b9f17u)), u,
            fmaf(bitcast<f32>(0x3e2aaf33u), b, bitcast<f32>(0x3efffedbu))),
        u,
        bitcast<f32>(0x3f7ffff6u) * b);
    if (abs(n) <= 126.0) { return fmaf(j, k, k); }
    var g = 0u;
    if (n <= 0.0) { g = 0x82000000u; }
    let s1 = bitcast<f32>(g + 0x7f000000u);
    let s2 = bitcast<f32>(e - g);
    if (abs(n) > 192.0) { return s1 * s1; }
    return fmaf(s2, j, s2) * s1;
}

EXACT_DIV
FMA_SRC
EXPF_SRC

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) g: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let i = (g.y * GRID_X + g.x) * 64u + t;
    if (i >= p.x) { return; }
    switch (p.y) {
        // y = silu(a) * b, as ggml: its SIMD exp for whole groups of 8 of a
        // row (p.w values), libm's for the row's tail (glibc's, emulated).
        case 0u: {
            let x = a[i];
            var e: f32;
            if (i % p.w < p.w / 8u * 8u) { e = v_expf(-x); } else { e = expf_glibc(-x); }
            y[i] = div(x, 1.0 + e) * b[i];
        }
        // y = gelu(a) * b (a >= 10 passes through, as ggml's table path)
        case 1u: { y[i] = gelu(a[i]) * b[i]; }
        // y = cap * tanh(y / cap)
        case 2u: { let cap = bitcast<f32>(p.z); y[i] = tanh(y[i] * (1.0 / cap)) * cap; }
        // y *= c
        case 4u: { y[i] = y[i] * bitcast<f32>(p.z); }
        // y += a
        default: { y[i] = y[i] + a[i]; }
    }
}
"#;

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
                    .replace("EXACT_DIV", crate::matvec::EXACT_DIV)
                    .replace("F16_ROUND", crate::matvec::F16_ROUND)
                    .replace("HALF", crate::matvec::HALF)
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
