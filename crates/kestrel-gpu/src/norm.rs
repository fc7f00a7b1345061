//! RMSNorm in WGSL: y = x / sqrt(mean(x^2) + eps) * w, one workgroup of 256
//! threads per row (strided partial sums of squares, a tree in workgroup
//! memory, then every thread scales its share of the row).

use crate::{Gpu, GpuError, GRID_X};

pub struct RmsNorm {
    pipeline: wgpu::ComputePipeline,
}

const SRC: &str = r#"
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> wt: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
// rows, width, eps bits
@group(0) @binding(3) var<uniform> p: vec4<u32>;

var<workgroup> part: array<f32, 256>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) g: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let row = g.y * GRID_X + g.x;
    let n = p.y;
    let base = row * n;
    var s = 0.0;
    if (row < p.x) {
        for (var i = t; i < n; i += 256u) {
            let v = x[base + i];
            s += v * v;
        }
    }
    part[t] = s;
    workgroupBarrier();
    for (var k = 128u; k > 0u; k >>= 1u) {
        if (t < k) {
            part[t] += part[t + k];
        }
        workgroupBarrier();
    }
    if (row < p.x) {
        let scale = 1.0 / sqrt(part[0] / f32(n) + bitcast<f32>(p.z));
        for (var i = t; i < n; i += 256u) {
            y[base + i] = x[base + i] * scale * wt[i];
        }
    }
}
"#;

impl RmsNorm {
    pub fn new(gpu: &Gpu) -> RmsNorm {
        RmsNorm {
            pipeline: gpu.pipeline("rms_norm", &SRC.replace("GRID_X", &format!("{GRID_X}u"))),
        }
    }

    /// Normalizes `rows` rows of `width` values from `x` into `y`
    /// (`(rows, width) = shape`), scaling by `weight`.
    pub fn run(
        &self,
        gpu: &Gpu,
        (x, weight, y): (&wgpu::Buffer, &wgpu::Buffer, &wgpu::Buffer),
        (rows, width): (usize, usize),
        eps: f32,
    ) -> Result<(), GpuError> {
        let need = (rows * width * 4) as u64;
        if x.size() < need || y.size() < need || weight.size() < (width * 4) as u64 {
            return Err(GpuError::Shape(format!(
                "rms_norm of {rows} rows of {width}: buffers of {}, {} and {} bytes",
                x.size(),
                weight.size(),
                y.size()
            )));
        }
        let params = gpu.params(&[rows as u32, width as u32, eps.to_bits(), 0]);
        let bind = gpu.bind(&self.pipeline, &[x, weight, y, &params]);
        gpu.run(&self.pipeline, &bind, rows as u32);
        Ok(())
    }
}
