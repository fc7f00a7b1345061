//! The GPU backend on wgpu (Vulkan, Metal, DX12; Mesa's lavapipe runs it on
//! a machine with no GPU). This module owns the device: adapter choice,
//! what the adapter offers (f16, subgroups, the largest storage binding),
//! buffers, readback, and the timing of passes for profiling. [`matvec`] owns the quantized matrix-vector
//! kernels and the on-device rounding of activations to 8 bits,
//! [`embed`] the embedding lookup from the history buffer, [`norm`]
//! RMSNorm, [`ops`] RoPE, GLUs, softcap and the residual add,
//! [`attention`] decode attention over the f16 KV cache, [`sample`] token
//! selection on the device. Each kernel is held to its CPU twin in the
//! tests, with a stated error bound.
//!
//! Numerics follow the CPU backend's (and so ggml's) rounding points where
//! both take the same path: 8-bit activations rounded bit for bit as the
//! CPU rounds them, RMSNorm bit for bit but in about 2^-19 of rows (an
//! exact sum standing in for ggml's f64 one), the legacy block
//! types' products in ggml's lane order, RoPE and ggml's SIMD exp in SiLU
//! with fused multiply-adds rounding once ([`exact`] emulates them where
//! the adapter's `fma` is not fused, as lavapipe's is not), f16 value sums
//! in attention with the CPU's score order and glibc's expf (the FMA
//! build; another host libm can differ by an ulp). On SmolLM2 every logit
//! is the CPU's bits, so greedy text is the same on both devices
//! (`examples/logitdiff.rs` measures it). What still adds in another order:
//! the K-quant products (Q4_K, Q6_K), F16 and F32 weights, attention over
//! prompt chunks of 64 tokens or more (the CPU's tiled prefill) and head
//! sizes not a multiple of 32; one such bit can move an 8-bit activation
//! quant.
//!
//! [`model`] runs a whole model, a step for one sequence or several
//! together and a prompt in chunks of positions (weights read once per
//! step or chunk; each row gets the bits it gets alone): the forward pass
//! and token selection (the CPU sampler's whole chain, drawing its tokens
//! bit for bit from the same logits and seed) recorded into one
//! submission, read back one step behind. The server's continuous batch
//! drives it (`kestrel_engine::Batch::on_gpu`).
//!
//! Subgroups, where the adapter has them in thread order (probed at
//! start), carry the products' row reductions in registers, with the bits
//! of the workgroup-memory fallback. Shader f16 is detected but not used:
//! the kernels decode and round halves by hand, as WGSL leaves subnormal
//! halves and f16 rounding to the implementation.

pub mod attention;
pub mod embed;
pub mod exact;
pub mod matvec;
pub mod model;
pub mod norm;
pub mod ops;
pub mod sample;
mod shaders;

use std::fmt;

use wgpu::util::DeviceExt;

/// Why the GPU could not be used; each names what was missing.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    #[error(
        "no GPU adapter found (on Linux without a GPU, install Mesa's software \
         Vulkan: apt-get install mesa-vulkan-drivers libvulkan1)"
    )]
    NoAdapter,
    #[error("the GPU adapter '{adapter}' refused a device: {err}")]
    Device { adapter: String, err: String },
    #[error("{0}")]
    Shape(String),
    #[error("{what} needs {need} bytes in one binding; this adapter allows {limit}")]
    TooLarge { what: String, need: u64, limit: u64 },
    #[error("weight type {0} has no GPU kernel yet")]
    Unsupported(kestrel_gguf::GgmlType),
    #[error("the GPU failed: {0}")]
    Failed(String),
}

/// A GPU adapter as the `devices` listing shows it.
#[derive(Clone, Debug)]
pub struct AdapterSummary {
    pub name: String,
    pub backend: String,
    pub kind: String,
    pub driver: String,
}

impl fmt::Display for AdapterSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}, {}", self.name, self.backend, self.kind)?;
        if !self.driver.is_empty() {
            write!(f, ", {}", self.driver)?;
        }
        write!(f, ")")
    }
}

fn summary(info: &wgpu::AdapterInfo) -> AdapterSummary {
    AdapterSummary {
        name: info.name.clone(),
        backend: format!("{:?}", info.backend),
        kind: format!("{:?}", info.device_type),
        driver: [info.driver.as_str(), info.driver_info.as_str()]
            .iter()
            .filter(|s| !s.is_empty())
            .copied()
            .collect::<Vec<_>>()
            .join(" "),
    }
}

/// Vulkan, Metal and DX12 only (OpenGL has no compute path worth using),
/// unless `WGPU_BACKEND` names others.
fn instance() -> wgpu::Instance {
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle_from_env();
    if std::env::var_os("WGPU_BACKEND").is_none() {
        desc.backends = wgpu::Backends::PRIMARY;
    }
    wgpu::Instance::new(desc)
}

/// Every adapter wgpu finds, best first as [`Gpu::new`] ranks them.
pub fn adapters() -> Vec<AdapterSummary> {
    ranked_adapters()
        .iter()
        .map(|a| summary(&a.get_info()))
        .collect()
}

fn ranked_adapters() -> Vec<wgpu::Adapter> {
    let mut all = pollster::block_on(instance().enumerate_adapters(wgpu::Backends::all()));
    all.sort_by_key(|a| rank(&a.get_info()));
    all
}

/// Lower is better: a real GPU before a software one, and a compute API
/// (Vulkan, Metal, DX12) before OpenGL.
fn rank(info: &wgpu::AdapterInfo) -> (u8, u8) {
    let kind = match info.device_type {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Cpu => 3,
        wgpu::DeviceType::Other => 4,
    };
    let api = match info.backend {
        wgpu::Backend::Vulkan | wgpu::Backend::Metal | wgpu::Backend::Dx12 => 0,
        _ => 1,
    };
    (kind, api)
}

/// An open GPU: the device and queue, and what the adapter offers.
pub struct Gpu {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub adapter: AdapterSummary,
    /// The adapter has `shader-f16` (enabled on the device).
    pub has_f16: bool,
    /// The adapter has subgroup operations (enabled on the device).
    pub has_subgroups: bool,
    /// Subgroup operations are used: the adapter has them and a probe
    /// found its subgroups laid out in thread order within a workgroup
    /// (lane = thread index mod the subgroup size), which the reductions
    /// that exchange sums between lanes rely on. Tests may turn it off.
    pub subgroups: bool,
    /// The adapter's WGSL `fma` rounds once (a probe at start-up); where it
    /// does not, shaders take an exact emulation ([`Gpu::fma_wgsl`]).
    /// Tests may turn it off.
    pub fused_fma: bool,
    /// The adapter can time passes ([`Gpu::set_profiling`]).
    pub has_timestamps: bool,
    /// The largest storage buffer one binding may hold: weights bigger than
    /// this are split.
    pub max_binding: u64,
    /// The most threads one workgroup may have (along x).
    pub max_workgroup: u32,
    /// While a step is being recorded, the encoder every dispatch goes into.
    recording: std::sync::Mutex<Option<wgpu::CommandEncoder>>,
    cache: std::sync::Mutex<Cache>,
    /// While profiling: the query set the passes write their start and end
    /// times into, and what each pass was.
    profiler: std::sync::Mutex<Option<Profiler>>,
    /// Each pipeline's label, which names a profiled pass.
    labels: std::sync::Mutex<std::collections::HashMap<wgpu::ComputePipeline, String>>,
    submissions: std::sync::atomic::AtomicU64,
    readback_bytes: std::sync::atomic::AtomicU64,
}

impl Gpu {
    /// Opens the best adapter (see [`adapters`]), asking for the adapter's
    /// own limits rather than WebGPU's defaults (larger bindings and
    /// buffers), and for f16 and subgroups where it has them.
    pub fn new() -> Result<Gpu, GpuError> {
        let adapter = ranked_adapters()
            .into_iter()
            .next()
            .ok_or(GpuError::NoAdapter)?;
        let info = summary(&adapter.get_info());
        let offered = adapter.features();
        let wanted =
            wgpu::Features::SHADER_F16 | wgpu::Features::SUBGROUP | wgpu::Features::TIMESTAMP_QUERY;
        let features = offered & wanted;
        let limits = adapter.limits();
        let desc = wgpu::DeviceDescriptor {
            label: Some("kestrel"),
            required_features: features,
            required_limits: limits.clone(),
            ..Default::default()
        };
        let (device, queue) =
            pollster::block_on(adapter.request_device(&desc)).map_err(|e| GpuError::Device {
                adapter: info.to_string(),
                err: e.to_string(),
            })?;
        let mut gpu = Gpu {
            device,
            queue,
            adapter: info,
            has_f16: features.contains(wgpu::Features::SHADER_F16),
            has_subgroups: features.contains(wgpu::Features::SUBGROUP),
            subgroups: false,
            fused_fma: false,
            has_timestamps: features.contains(wgpu::Features::TIMESTAMP_QUERY),
            max_binding: limits
                .max_storage_buffer_binding_size
                .min(limits.max_buffer_size),
            max_workgroup: limits
                .max_compute_invocations_per_workgroup
                .min(limits.max_compute_workgroup_size_x),
            recording: Default::default(),
            profiler: Default::default(),
            labels: Default::default(),
            cache: Default::default(),
            submissions: Default::default(),
            readback_bytes: Default::default(),
        };
        gpu.subgroups = gpu.has_subgroups && gpu.subgroups_in_thread_order()?;
        gpu.fused_fma = gpu.fma_is_fused()?;
        Ok(gpu)
    }

    /// Whether, in two 64-thread workgroups, every thread's subgroup lane
    /// is its index mod one power-of-two subgroup size no larger than the
    /// workgroup (Vulkan and Metal do not promise it; lane exchanges in
    /// the reductions assume it).
    fn subgroups_in_thread_order(&self) -> Result<bool, GpuError> {
        const PROBE: &str = include_str!("shaders/probe/subgroup_order.wgsl");
        let p = self.pipeline("subgroup probe", PROBE);
        let out = self.scratch_f32("subgroup probe", 256);
        let bind = self.bind(&p, &[&out]);
        self.run(&p, &bind, 2);
        let v = self.read_u32(&out, 256)?;
        let size = v[1];
        let ordered = size.is_power_of_two()
            && size <= 64
            && (0..128).all(|t| v[2 * t + 1] == size && v[2 * t] == t as u32 % size);
        Ok(ordered)
    }

    /// A storage buffer holding `bytes` (padded to a multiple of 4, as
    /// shaders read whole words).
    pub fn upload(&self, what: &str, bytes: &[u8]) -> Result<wgpu::Buffer, GpuError> {
        let padded = bytes.len().div_ceil(4) * 4;
        if padded as u64 > self.max_binding {
            return Err(GpuError::TooLarge {
                what: what.to_owned(),
                need: padded as u64,
                limit: self.max_binding,
            });
        }
        let mut data = bytes.to_vec();
        data.resize(padded.max(4), 0);
        Ok(self
            .device
            .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some(what),
                contents: &data,
                usage: wgpu::BufferUsages::STORAGE
                    | wgpu::BufferUsages::COPY_SRC
                    | wgpu::BufferUsages::COPY_DST,
            }))
    }

    pub fn upload_f32(&self, what: &str, v: &[f32]) -> Result<wgpu::Buffer, GpuError> {
        self.upload(what, bytemuck::cast_slice(v))
    }

    /// An uninitialised f32 storage buffer of `n` values.
    pub fn scratch_f32(&self, what: &str, n: usize) -> wgpu::Buffer {
        self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(what),
            size: (n.max(1) * 4) as u64,
            usage: wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_SRC
                | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        })
    }

    /// A u32 storage buffer holding `v`.
    pub fn upload_u32(&self, what: &str, v: &[u32]) -> Result<wgpu::Buffer, GpuError> {
        self.upload(what, bytemuck::cast_slice(v))
    }

    /// Copies `n` u32 values out of `buf` and waits for them.
    pub fn read_u32(&self, buf: &wgpu::Buffer, n: usize) -> Result<Vec<u32>, GpuError> {
        Ok(self
            .read_f32(buf, n)?
            .into_iter()
            .map(f32::to_bits)
            .collect())
    }

    /// Copies `n` f32 values out of `buf` and waits for them (tests and
    /// one-off results; the decode loop reads back one step behind).
    pub fn read_f32(&self, buf: &wgpu::Buffer, n: usize) -> Result<Vec<f32>, GpuError> {
        let size = (n * 4) as u64;
        let staging = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("readback"),
            size: size.max(4),
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut enc = self.device.create_command_encoder(&Default::default());
        enc.copy_buffer_to_buffer(buf, 0, &staging, 0, size);
        self.submit(enc);
        self.map_read(&staging, n)
    }

    /// Waits for `staging` (a MAP_READ buffer whose copy was submitted) and
    /// returns its first `n` f32 values.
    pub(crate) fn map_read(&self, staging: &wgpu::Buffer, n: usize) -> Result<Vec<f32>, GpuError> {
        self.readback_bytes
            .fetch_add((n * 4) as u64, std::sync::atomic::Ordering::Relaxed);
        let (tx, rx) = std::sync::mpsc::channel();
        staging
            .slice(..)
            .map_async(wgpu::MapMode::Read, move |r| drop(tx.send(r)));
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| GpuError::Failed(e.to_string()))?;
        rx.recv()
            .map_err(|e| GpuError::Failed(e.to_string()))?
            .map_err(|e| GpuError::Failed(e.to_string()))?;
        let out = {
            let view = staging
                .slice(..)
                .get_mapped_range()
                .map_err(|e| GpuError::Failed(format!("{e:?}")))?;
            bytemuck::cast_slice(&view[..n * 4]).to_vec()
        };
        staging.unmap();
        Ok(out)
    }

    /// A compute pipeline from WGSL source, entry point `main`.
    pub(crate) fn pipeline(&self, label: &str, src: &str) -> wgpu::ComputePipeline {
        let module = self
            .device
            .create_shader_module(wgpu::ShaderModuleDescriptor {
                label: Some(label),
                source: wgpu::ShaderSource::Wgsl(src.into()),
            });
        let p = self
            .device
            .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(label),
                layout: None,
                module: &module,
                entry_point: Some("main"),
                compilation_options: Default::default(),
                cache: None,
            });
        self.labels
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(p.clone(), label.to_owned());
        p
    }

    /// A uniform buffer of u32 parameters: made once per distinct content
    /// (see [`Cache`]).
    pub(crate) fn params(&self, v: &[u32]) -> wgpu::Buffer {
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(b) = cache.params.get(v) {
            return b.clone();
        }
        let b = self
            .device
            .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some("params"),
                contents: bytemuck::cast_slice(v),
                usage: wgpu::BufferUsages::UNIFORM,
            });
        cache.make_room();
        cache.params.insert(v.to_vec(), b.clone());
        b
    }

    /// Binds `buffers` (binding i = buffers[i]) to group 0 of `p`.
    pub(crate) fn bind(
        &self,
        p: &wgpu::ComputePipeline,
        buffers: &[&wgpu::Buffer],
    ) -> wgpu::BindGroup {
        let numbered: Vec<(u32, &wgpu::Buffer)> = buffers
            .iter()
            .enumerate()
            .map(|(i, b)| (i as u32, *b))
            .collect();
        self.bind_at(p, &numbered)
    }

    /// Binds each `(binding, buffer)` to group 0 of `p` (a shader's layout
    /// holds only the bindings it uses).
    pub(crate) fn bind_at(
        &self,
        p: &wgpu::ComputePipeline,
        buffers: &[(u32, &wgpu::Buffer)],
    ) -> wgpu::BindGroup {
        let key = (
            p.clone(),
            buffers.iter().map(|&(i, b)| (i, b.clone())).collect(),
        );
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(g) = cache.binds.get(&key) {
            return g.clone();
        }
        let entries: Vec<wgpu::BindGroupEntry<'_>> = buffers
            .iter()
            .map(|&(binding, b)| wgpu::BindGroupEntry {
                binding,
                resource: b.as_entire_binding(),
            })
            .collect();
        let g = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &p.get_bind_group_layout(0),
            entries: &entries,
        });
        cache.make_room();
        cache.binds.insert(key, g.clone());
        g
    }

    /// Records one dispatch of `groups` workgroups (split over x and y when
    /// there are more than one dimension allows) and submits it.
    pub(crate) fn run(&self, p: &wgpu::ComputePipeline, bind: &wgpu::BindGroup, groups: u32) {
        let timed = self.profile_slot(p);
        self.with_encoder(|enc| {
            let writes = timed
                .as_ref()
                .map(|(set, i)| wgpu::ComputePassTimestampWrites {
                    query_set: set,
                    beginning_of_pass_write_index: Some(2 * i),
                    end_of_pass_write_index: Some(2 * i + 1),
                });
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: None,
                timestamp_writes: writes,
            });
            pass.set_pipeline(p);
            pass.set_bind_group(0, bind, &[]);
            let (x, y) = grid(groups);
            pass.dispatch_workgroups(x, y, 1);
        });
    }

    /// Starts (or stops) timing every pass: each records its start and end
    /// on the device, [`Gpu::take_profile`] reads them. A no-op where the
    /// adapter has no timestamp queries.
    pub fn set_profiling(&self, on: bool) {
        let mut prof = self.profiler.lock().unwrap_or_else(|e| e.into_inner());
        *prof = (on && self.has_timestamps).then(|| Profiler {
            set: self.device.create_query_set(&wgpu::QuerySetDescriptor {
                label: Some("pass times"),
                ty: wgpu::QueryType::Timestamp,
                count: 2 * Profiler::PASSES,
            }),
            passes: Vec::new(),
            bytes: 0,
        });
    }

    /// While profiling, the bytes of weights the next pass reads (its
    /// achieved GB/s is reported).
    pub(crate) fn note_bytes(&self, bytes: u64) {
        if let Some(p) = self
            .profiler
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_mut()
        {
            p.bytes = bytes;
        }
    }

    /// The query set and pass index for a pass of `p`, while profiling and
    /// while the set has room.
    fn profile_slot(&self, p: &wgpu::ComputePipeline) -> Option<(wgpu::QuerySet, u32)> {
        let mut prof = self.profiler.lock().unwrap_or_else(|e| e.into_inner());
        let prof = prof.as_mut()?;
        if prof.passes.len() >= Profiler::PASSES as usize {
            return None;
        }
        let label = self
            .labels
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(p)
            .cloned()
            .unwrap_or_default();
        prof.passes.push((label, std::mem::take(&mut prof.bytes)));
        Some((prof.set.clone(), prof.passes.len() as u32 - 1))
    }

    /// The passes timed since profiling started or since the last take, in
    /// order (waits for the device). Empty when not profiling.
    pub fn take_profile(&self) -> Result<Vec<PassTime>, GpuError> {
        let (set, passes) = {
            let mut prof = self.profiler.lock().unwrap_or_else(|e| e.into_inner());
            match prof.as_mut() {
                Some(p) if !p.passes.is_empty() => (p.set.clone(), std::mem::take(&mut p.passes)),
                _ => return Ok(Vec::new()),
            }
        };
        let n = passes.len();
        let size = (16 * n) as u64;
        let resolve = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("pass times"),
            size,
            usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        let staging = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("pass times readback"),
            size,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut enc = self.device.create_command_encoder(&Default::default());
        enc.resolve_query_set(&set, 0..2 * n as u32, &resolve, 0);
        enc.copy_buffer_to_buffer(&resolve, 0, &staging, 0, size);
        self.submit(enc);
        let words: Vec<u32> = self
            .map_read(&staging, 4 * n)?
            .into_iter()
            .map(f32::to_bits)
            .collect();
        let tick = f64::from(self.queue.get_timestamp_period());
        let at = |i: usize| u64::from(words[2 * i]) | (u64::from(words[2 * i + 1]) << 32);
        Ok(passes
            .into_iter()
            .enumerate()
            .map(|(i, (label, bytes))| PassTime {
                label,
                ns: at(2 * i + 1).saturating_sub(at(2 * i)) as f64 * tick,
                bytes,
            })
            .collect())
    }

    /// Copies `bytes` bytes from `src` at `from` to `dst` at `to`, in order
    /// with the dispatches.
    pub(crate) fn copy(
        &self,
        (src, from): (&wgpu::Buffer, u64),
        (dst, to): (&wgpu::Buffer, u64),
        bytes: u64,
    ) {
        self.with_encoder(|enc| enc.copy_buffer_to_buffer(src, from, dst, to, bytes));
    }

    /// Runs `f` on the step being recorded, or on an encoder of its own
    /// that is submitted at once.
    fn with_encoder(&self, f: impl FnOnce(&mut wgpu::CommandEncoder)) {
        let mut rec = self.recording.lock().unwrap_or_else(|e| e.into_inner());
        match rec.as_mut() {
            Some(enc) => f(enc),
            None => {
                drop(rec);
                let mut enc = self.device.create_command_encoder(&Default::default());
                f(&mut enc);
                self.submit(enc);
            }
        }
    }

    fn submit(&self, enc: wgpu::CommandEncoder) {
        self.submissions
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.queue.submit([enc.finish()]);
    }

    /// From here until [`Gpu::finish_step`], every kernel is recorded into
    /// one encoder instead of being submitted on its own.
    pub fn begin_step(&self) {
        let enc = self.device.create_command_encoder(&Default::default());
        *self.recording.lock().unwrap_or_else(|e| e.into_inner()) = Some(enc);
    }

    /// Submits everything recorded since [`Gpu::begin_step`], once; does
    /// not wait for it.
    pub fn finish_step(&self) {
        let enc = self
            .recording
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(enc) = enc {
            self.submit(enc);
        }
    }

    /// Command submissions so far (tests count them per step).
    pub fn submissions(&self) -> u64 {
        self.submissions.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Bytes read back to the host so far.
    pub fn readback_bytes(&self) -> u64 {
        self.readback_bytes
            .load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// One timed pass: its pipeline's label, its time on the device, and the
/// weight bytes it read (0 where not noted).
#[derive(Clone, Debug)]
pub struct PassTime {
    pub label: String,
    pub ns: f64,
    pub bytes: u64,
}

struct Profiler {
    set: wgpu::QuerySet,
    passes: Vec<(String, u64)>,
    /// Bytes noted for the next pass.
    bytes: u64,
}

impl Profiler {
    /// Passes timed between takes (two queries each; wgpu allows 4096 per
    /// set).
    const PASSES: u32 = 2048;
}

/// Uniform buffers and bind groups already made, so that a decode step,
/// which binds the same weights and scratch buffers with the same shapes
/// every time, does not create hundreds of objects per step (on lavapipe
/// that was 39 ms of host time per SmolLM2 step). Keys hold the buffers
/// they name, which keeps them alive; entries that differ per position
/// would grow the maps without end, so they are emptied at a bound.
#[derive(Default)]
struct Cache {
    params: std::collections::HashMap<Vec<u32>, wgpu::Buffer>,
    binds: std::collections::HashMap<BindKey, wgpu::BindGroup>,
}

type BindKey = (wgpu::ComputePipeline, Vec<(u32, wgpu::Buffer)>);

impl Cache {
    const MAX_ENTRIES: usize = 1 << 14;

    fn make_room(&mut self) {
        if self.params.len() + self.binds.len() >= Self::MAX_ENTRIES {
            self.params.clear();
            self.binds.clear();
        }
    }
}

/// Workgroups per grid row: shaders number a workgroup `y * GRID_X + x`.
pub(crate) const GRID_X: u32 = 32768;

fn grid(groups: u32) -> (u32, u32) {
    if groups <= GRID_X {
        (groups.max(1), 1)
    } else {
        (GRID_X, groups.div_ceil(GRID_X))
    }
}
