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

const ATTEND: &str = r#"
@group(0) @binding(0) var<storage, read> q: array<f32>;
@group(0) @binding(1) var<storage, read> kc: array<u32>;
@group(0) @binding(2) var<storage, read> vc: array<u32>;
@group(0) @binding(3) var<storage, read_write> scratch: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;
// n_head, n_head_kv, head_dim_k, head_dim_v; position, window, scale bits, scratch stride
@group(0) @binding(5) var<uniform> p: array<vec4<u32>, 2>;

// Half i of a cache row array.
fn h(buf: u32, i: u32) -> f32 {
    var word: u32;
    if (buf == 0u) { word = kc[i >> 1u]; } else { word = vc[i >> 1u]; }
    return half(select(word & 0xffffu, word >> 16u, (i & 1u) == 1u));
}

F16_ROUND

// The score of query head `head` against cached key position j, as the
// CPU's (ggml's) f16 dot: Q rounded to f16, four accumulators of eight
// lanes over each 32 dimensions, then GGML_F32x8_REDUCE's order. A
// product of two halves is exact in f32, so the unfused add rounds as
// the CPU's fused one. (A head width that is not a multiple of 32 sums
// its tail in the same lanes, which the CPU does not.)
fn score(head: u32, j: u32, kbase: u32, dk: u32) -> f32 {
    var acc: array<f32, 32>;
    for (var i = 0u; i < 32u; i++) { acc[i] = 0.0; }
    for (var d = 0u; d < dk; d++) {
        let l = d % 32u;
        acc[l] = acc[l] + f16r(q[head * dk + d]) * h(0u, kbase + d);
    }
    var x: array<f32, 8>;
    for (var l = 0u; l < 8u; l++) {
        x[l] = (acc[l] + acc[16u + l]) + (acc[8u + l] + acc[24u + l]);
    }
    return ((x[0] + x[4]) + (x[1] + x[5])) + ((x[2] + x[6]) + (x[3] + x[7]));
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) g: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let head = g.x;
    let n_head = p[0].x;
    let dk = p[0].z;
    let dv = p[0].w;
    let kvh = head / (n_head / p[0].y);
    let pos = p[1].x;
    var lo = 0u;
    if (p[1].y > 0u && pos + 1u > p[1].y) { lo = pos + 1u - p[1].y; }
    let scale = bitcast<f32>(p[1].z);
    let sbase = head * p[1].w;
    let k_w = p[0].y * dk;
    let v_w = p[0].y * dv;
    for (var j = lo + t; j <= pos; j += 64u) {
        scratch[sbase + j] = score(head, j, j * k_w + kvh * dk, dk) * scale;
    }
    storageBarrier();
    workgroupBarrier();
    // The online softmax's steps, as the CPU takes them: where a score
    // raises the running maximum m the sum so far is scaled by
    // exp(m - s) (and the new value weighs 1), else the value weighs
    // exp(s - m). One thread finds each step's s - m (above 0 exactly
    // where the step rescales; the first position rescales the empty sum
    // by exp(-inf) = 0)...
    if (t == 0u) {
        var m = bitcast<f32>(0xff800000u);
        for (var j = lo; j <= pos; j++) {
            let s = scratch[sbase + j];
            scratch[sbase + j] = s - m;
            m = max(m, s);
        }
    }
    storageBarrier();
    workgroupBarrier();
    // ... then every thread takes its positions' exps (glibc's expf, as
    // the CPU's libm), a rescaling factor stored with its sign bit set...
    for (var j = lo + t; j <= pos; j += 64u) {
        let a = scratch[sbase + j];
        if (a > 0.0) {
            scratch[sbase + j] = bitcast<f32>(bitcast<u32>(expf_glibc(-a)) | 0x80000000u);
        } else {
            scratch[sbase + j] = expf_glibc(a);
        }
    }
    storageBarrier();
    workgroupBarrier();
    // ... and each thread walks them in order for its output dimensions.
    for (var d = t; d < dv; d += 64u) {
        var sum = 0.0;
        var acc = 0.0;
        for (var j = lo; j <= pos; j++) {
            let e = bitcast<u32>(scratch[sbase + j]);
            var ms = 1.0;
            var vs = 1.0;
            if ((e & 0x80000000u) != 0u) {
                ms = bitcast<f32>(e & 0x7fffffffu);
            } else {
                vs = bitcast<f32>(e);
            }
            if (ms != 1.0) { acc = f16r(acc * ms); }
            acc = f16r(fmaf(h(1u, j * v_w + kvh * dv + d), vs, acc));
            sum = fmaf(sum, ms, vs);
        }
        var inv = 0.0;
        if (sum != 0.0) { inv = div(1.0, sum); }
        out[head * dv + d] = acc * inv;
    }
}
"#;

const STORE: &str = r#"
@group(0) @binding(0) var<storage, read> src: array<f32>;
@group(0) @binding(1) var<storage, read_write> cache: array<u32>;
// values per row (even), position
@group(0) @binding(2) var<uniform> p: vec4<u32>;

F16_ROUND

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    if (2u * i >= p.x) { return; }
    cache[(p.y * p.x) / 2u + i] = f16bits(src[2u * i]) | (f16bits(src[2u * i + 1u]) << 16u);
}
"#;

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
                        crate::matvec::F16_ROUND,
                        crate::matvec::EXACT_DIV,
                        crate::matvec::HALF,
                        gpu.fma_wgsl(),
                        crate::exact::EXPF_GLIBC
                    ),
                ),
            ),
            store: gpu.pipeline(
                "kv store",
                &STORE.replace(
                    "F16_ROUND",
                    &format!("{}{}", crate::matvec::F16_ROUND, crate::matvec::HALF),
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
