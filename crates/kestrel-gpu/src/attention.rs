//! Decode attention on the device: one query per head against the f16 KV
//! cache, grouped-query heads, optional sliding window; and the write of a
//! step's keys and values into the cache. One workgroup per head, in three
//! passes over the cached positions (scores, softmax weights, the weighted
//! sum of values per output dimension) through a scratch buffer, so any
//! context length fits. The query is rounded to f16 first, as the CPU's
//! (ggml's) one-query path does; the CPU then accumulates values in f16
//! while the GPU sums in f32, which bounds how far the two may differ.

use crate::{Gpu, GpuError};

const ATTEND: &str = r#"
@group(0) @binding(0) var<storage, read> q: array<f32>;
@group(0) @binding(1) var<storage, read> kc: array<u32>;
@group(0) @binding(2) var<storage, read> vc: array<u32>;
@group(0) @binding(3) var<storage, read_write> scratch: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;
// n_head, n_head_kv, head_dim_k, head_dim_v; position, window, scale bits, scratch stride
@group(0) @binding(5) var<uniform> p: array<vec4<u32>, 2>;

var<workgroup> red: array<f32, 64>;

// Half i of a cache row array.
fn h(buf: u32, i: u32) -> f32 {
    var word: u32;
    if (buf == 0u) { word = kc[i >> 1u]; } else { word = vc[i >> 1u]; }
    let v = unpack2x16float(word);
    return select(v.x, v.y, (i & 1u) == 1u);
}

fn reduce(t: u32, v: f32, is_max: bool) -> f32 {
    red[t] = v;
    workgroupBarrier();
    for (var k = 32u; k > 0u; k >>= 1u) {
        if (t < k) {
            if (is_max) { red[t] = max(red[t], red[t + k]); } else { red[t] = red[t] + red[t + k]; }
        }
        workgroupBarrier();
    }
    let r = red[0];
    workgroupBarrier();
    return r;
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
    // Scores, with the query rounded to f16.
    var m = -3.0e38;
    for (var j = lo + t; j <= pos; j += 64u) {
        var s = 0.0;
        for (var d = 0u; d < dk; d++) {
            let qd = unpack2x16float(pack2x16float(vec2<f32>(q[head * dk + d], 0.0))).x;
            s += qd * h(0u, j * k_w + kvh * dk + d);
        }
        s *= scale;
        scratch[sbase + j] = s;
        m = max(m, s);
    }
    let mx = reduce(t, m, true);
    storageBarrier();
    var sum = 0.0;
    for (var j = lo + t; j <= pos; j += 64u) {
        let w = exp(scratch[sbase + j] - mx);
        scratch[sbase + j] = w;
        sum += w;
    }
    let total = reduce(t, sum, false);
    storageBarrier();
    workgroupBarrier();
    for (var d = t; d < dv; d += 64u) {
        var acc = 0.0;
        for (var j = lo; j <= pos; j++) {
            acc += scratch[sbase + j] * h(1u, j * v_w + kvh * dv + d);
        }
        out[head * dv + d] = acc / total;
    }
}
"#;

const STORE: &str = r#"
@group(0) @binding(0) var<storage, read> src: array<f32>;
@group(0) @binding(1) var<storage, read_write> cache: array<u32>;
// values per row (even), position
@group(0) @binding(2) var<uniform> p: vec4<u32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    if (2u * i >= p.x) { return; }
    cache[(p.y * p.x) / 2u + i] = pack2x16float(vec2<f32>(src[2u * i], src[2u * i + 1u]));
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
            attend: gpu.pipeline("attention", ATTEND),
            store: gpu.pipeline("kv store", STORE),
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
