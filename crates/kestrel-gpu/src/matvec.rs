//! Quantized matrix-vector products in WGSL: y = W x with W in its GGUF
//! block format (read as raw bytes) and x in f32; and the matrix-matrix
//! case, several activation rows through one dispatch
//! ([`MatVec::run_batch`]), each row summed exactly as it would be alone.
//!
//! The quantized types compute what the CPU computes: x is first rounded
//! on the device to the 8-bit format ggml pairs with the weight type (Q8_0,
//! Q8_1 or Q8_K; [`ActQuant`]), bit for bit as the CPU rounds it, and each
//! 32-value unit's products are summed as exact integers (`dot4I8Packed`)
//! before its scales are applied in f32. The legacy types (Q4_0, Q4_1,
//! Q5_0, Q5_1, Q8_0) then add those in ggml's order (`MAIN_LANES`) and
//! give the CPU's bits; the others differ from it in the order of the f32
//! additions only. F16 weights take x rounded to f16, as ggml does; F32
//! weights take x as it is.
//!
//! Layout: `TPR` threads per weight row (a power of two up to 64) share a
//! row's units and add their sums in a tree; a workgroup of 64 threads
//! covers 64 / TPR rows. A software rasterizer (lavapipe) runs best with a
//! row per thread and no barriers; a GPU wants the threads of a row to read
//! neighbouring blocks.
//!
//! A matrix larger than the adapter's largest storage binding is uploaded
//! in parts of whole rows ([`GpuMatrix::parts`]); a product runs one
//! dispatch per part, each writing its rows of y.

use kestrel_gguf::GgmlType;

use crate::shaders::{EXACT_DIV, F16_ROUND, HALF};
use crate::{Gpu, GpuError, GRID_X};

/// A weight matrix on the GPU, in its block format.
pub struct GpuMatrix {
    /// The rows in pieces that each fit one binding (one piece unless the
    /// matrix is bigger than the adapter's [`Gpu::max_binding`]).
    pub parts: Vec<MatrixPart>,
    pub ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
    pub row_bytes: usize,
}

/// Rows `row0..row0 + rows` of a [`GpuMatrix`], in a buffer of their own.
pub struct MatrixPart {
    pub buf: wgpu::Buffer,
    pub row0: usize,
    pub rows: usize,
}

impl Gpu {
    /// Uploads `rows` rows of `cols` values of type `ty` (`bytes` is the
    /// tensor's data), split into parts of whole rows where it exceeds the
    /// largest binding. Rows must be whole 32-value units.
    pub fn upload_matrix(
        &self,
        name: &str,
        ty: GgmlType,
        rows: usize,
        cols: usize,
        bytes: &[u8],
    ) -> Result<GpuMatrix, GpuError> {
        if !cols.is_multiple_of(32) || !cols.is_multiple_of(ty.block_size()) {
            return Err(GpuError::Shape(format!(
                "{name}: {cols} columns is not a whole number of {ty} blocks of 32-value units"
            )));
        }
        let row_bytes = ty
            .row_bytes(cols as u64)
            .ok_or_else(|| GpuError::Shape(format!("{name}: bad row of {cols} {ty} values")))?
            as usize;
        if bytes.len() != rows * row_bytes {
            return Err(GpuError::Shape(format!(
                "{name}: {} bytes for {rows} rows of {row_bytes}",
                bytes.len()
            )));
        }
        let part_rows = if bytes.len() as u64 <= self.max_binding {
            rows.max(1)
        } else {
            (self.max_binding / row_bytes.max(1) as u64) as usize
        };
        if part_rows == 0 {
            return Err(GpuError::TooLarge {
                what: format!("{name}: one row"),
                need: row_bytes as u64,
                limit: self.max_binding,
            });
        }
        let parts = (0..rows.max(1))
            .step_by(part_rows)
            .map(|row0| {
                let n = part_rows.min(rows - row0.min(rows));
                let data = &bytes[row0 * row_bytes..(row0 + n) * row_bytes];
                Ok(MatrixPart {
                    buf: self.upload(name, data)?,
                    row0,
                    rows: n,
                })
            })
            .collect::<Result<Vec<_>, GpuError>>()?;
        Ok(GpuMatrix {
            parts,
            ty,
            rows,
            cols,
            row_bytes,
        })
    }
}

/// The 8-bit activation format ggml pairs with weight type `ty`, or None
/// for the float types.
pub fn act_type(ty: GgmlType) -> Option<GgmlType> {
    use GgmlType as T;
    match ty {
        T::Q4_0 | T::Q5_0 | T::Q8_0 => Some(T::Q8_0),
        T::Q4_1 | T::Q5_1 => Some(T::Q8_1),
        T::Q4_K | T::Q6_K => Some(T::Q8_K),
        _ => None,
    }
}

/// Words of scale data per block of an activation format: Q8_0 keeps d,
/// Q8_1 d and s (both rounded to f16, held as f32), Q8_K d (f32) and the
/// sixteen 16-value sums (i32).
fn meta_words(act: GgmlType) -> usize {
    match act {
        GgmlType::Q8_0 => 1,
        GgmlType::Q8_1 => 2,
        _ => 17,
    }
}

/// x rounded to an 8-bit activation format on the device: `q` holds the
/// quants, four to a word in value order; `meta` the per-block scales
/// (1, 2 or 17 words per block of 32 values, or of 256 for Q8_K).
pub struct ActQuant {
    pipeline: wgpu::ComputePipeline,
    pub ty: GgmlType,
    pub q: wgpu::Buffer,
    pub meta: wgpu::Buffer,
    cap: usize,
}

impl ActQuant {
    /// A quantizer to `ty` (Q8_0, Q8_1 or Q8_K) for rows of up to `cap`
    /// values.
    pub fn new(gpu: &Gpu, ty: GgmlType, cap: usize) -> Result<ActQuant, GpuError> {
        let body = match ty {
            GgmlType::Q8_0 | GgmlType::Q8_1 => Q8_32,
            GgmlType::Q8_K => Q8_K,
            _ => return Err(GpuError::Unsupported(ty)),
        };
        let src = format!("{QUANT_HEADER}\n{EXACT_DIV}\n{HALF}\n{F16_ROUND}\n{body}")
            .replace("META", &meta_words(ty).to_string());
        let block = if ty == GgmlType::Q8_K { 256 } else { 32 };
        let blocks = cap.div_ceil(block).max(1);
        Ok(ActQuant {
            pipeline: gpu.pipeline(&format!("quantize {ty}"), &src),
            ty,
            q: gpu.scratch_f32("activation quants", blocks * block / 4),
            meta: gpu.scratch_f32("activation scales", blocks * meta_words(ty)),
            cap,
        })
    }

    /// Rounds the first `n` values of `x` (a whole number of blocks).
    pub fn run(&self, gpu: &Gpu, x: &wgpu::Buffer, n: usize) -> Result<(), GpuError> {
        let block = if self.ty == GgmlType::Q8_K { 256 } else { 32 };
        if n > self.cap || !n.is_multiple_of(block) || x.size() < (n * 4) as u64 {
            return Err(GpuError::Shape(format!(
                "quantizing {n} values to {} (room for {}, x holds {} bytes)",
                self.ty,
                self.cap,
                x.size()
            )));
        }
        let blocks = (n / block) as u32;
        let params = gpu.params(&[blocks, u32::from(self.ty == GgmlType::Q8_1), 0, 0]);
        let bind = gpu.bind(&self.pipeline, &[x, &self.q, &self.meta, &params]);
        gpu.run(&self.pipeline, &bind, blocks.div_ceil(64));
        Ok(())
    }
}

/// How a product spreads over the threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Threads per weight row: a power of two, at most 64.
    pub tpr: u32,
    /// Four-byte integer dots with `dot4I8Packed` (one instruction on a
    /// GPU), or by unpacking the bytes (lavapipe's `dot4I8Packed` is twice
    /// as slow as that). Both give the same integers.
    pub native_dot: bool,
    /// Add a row's partial sums across the lanes of a subgroup
    /// (`subgroupShuffleXor`) where the adapter has subgroups laid out in
    /// thread order ([`Gpu::subgroups`]), through workgroup memory for
    /// the rest: the same pairs in the same order either way, so the same
    /// bits, with fewer barriers.
    pub subgroups: bool,
}

impl Layout {
    /// A row per thread and unpacked dots on a CPU adapter (a software
    /// rasterizer runs SIMD lanes as rows and pays for every barrier); 32
    /// threads per row and native dots on a GPU. `KESTREL_GPU_TPR`
    /// overrides the threads per row.
    pub fn for_adapter(gpu: &Gpu) -> Layout {
        let cpu = gpu.adapter.kind == "Cpu";
        let tpr = std::env::var("KESTREL_GPU_TPR")
            .ok()
            .and_then(|v| v.parse::<u32>().ok())
            .filter(|t| t.is_power_of_two() && *t <= 64)
            .unwrap_or(if cpu { 1 } else { 32 });
        Layout {
            tpr,
            native_dot: !cpu,
            subgroups: gpu.subgroups,
        }
    }
}

/// The compiled product for one weight type.
pub struct MatVec {
    pipeline: wgpu::ComputePipeline,
    ty: GgmlType,
    tpr: u32,
    act: Option<ActQuant>,
}

impl MatVec {
    /// The product for `ty` weights of up to `max_cols` columns, laid out
    /// for the adapter ([`Layout::for_adapter`]).
    pub fn new(gpu: &Gpu, ty: GgmlType, max_cols: usize) -> Result<MatVec, GpuError> {
        MatVec::with_layout(gpu, ty, max_cols, Layout::for_adapter(gpu))
    }

    /// As [`MatVec::new`] with a given layout.
    pub fn with_layout(
        gpu: &Gpu,
        ty: GgmlType,
        max_cols: usize,
        layout: Layout,
    ) -> Result<MatVec, GpuError> {
        if !layout.tpr.is_power_of_two() || layout.tpr > 64 {
            return Err(GpuError::Shape(format!(
                "{} threads per row: must be a power of two up to 64",
                layout.tpr
            )));
        }
        // The legacy block types sum in ggml's lanes: eight chains per row,
        // so at most eight threads share one.
        let lanes = lane_fn(ty);
        let tpr = if lanes.is_some() {
            layout.tpr.min(8)
        } else {
            layout.tpr
        };
        let (unit, main) = match lanes {
            Some(l) => (l, MAIN_LANES),
            None => (unit_fn(ty).ok_or(GpuError::Unsupported(ty))?, MAIN),
        };
        let finish = if matches!(ty, GgmlType::Q4_1 | GgmlType::Q5_1) {
            "s + summs"
        } else {
            "s"
        };
        let act = match act_type(ty) {
            Some(a) => Some(ActQuant::new(gpu, a, max_cols * MAX_BATCH)?),
            None => None,
        };
        let bindings = if act.is_some() {
            format!("{QUANT_BINDINGS}\n{QUANT_ACCESS}")
        } else {
            format!("{BINDINGS}\n{FLOAT_ACCESS}")
        };
        // A row per thread needs no shared memory (and a software
        // rasterizer runs a workgroup that has none faster).
        let subgroups = layout.subgroups && tpr > 1;
        if subgroups && !gpu.subgroups {
            return Err(GpuError::Shape(
                "subgroup reductions on an adapter without ordered subgroups".into(),
            ));
        }
        let (shared, reduce) = if tpr == 1 {
            ("", REDUCE_NONE)
        } else {
            (include_str!("shaders/matvec/reduce_part.wgsl"), REDUCE_TREE)
        };
        // Below the subgroup size the pairs are exchanged in registers.
        let (enable, sg_param, sg, shuffle) = if subgroups {
            (
                // (naga takes subgroup builtins without an `enable`.)
                "",
                ", @builtin(subgroup_size) sg_size: u32",
                "sg_size",
                include_str!("shaders/matvec/reduce_shuffle.wgsl"),
            )
        } else {
            ("", "", "1u", "")
        };
        let dot4 = if layout.native_dot {
            DOT4_NATIVE
        } else {
            DOT4_UNPACKED
        };
        let fma = gpu.fma_wgsl();
        let src = format!(
            "{enable}\n{bindings}\n{shared}\n{HALF}\n{HELPERS}\n{dot4}\n{F16_ROUND}\n{fma}\n{unit}\n{main}\n"
        )
        .replace("REDUCE", reduce)
        .replace("FINISH", finish)
        .replace("SG_PARAM", sg_param)
        .replace("SG_SIZE", sg)
        .replace("SHUFFLE", shuffle)
        .replace("GRID_X", &format!("{GRID_X}u"))
        .replace("TPR", &format!("{tpr}u"))
        .replace("RPG", &format!("{}u", 64 / tpr));
        Ok(MatVec {
            pipeline: gpu.pipeline(&format!("matvec {ty}"), &src),
            ty,
            tpr,
            act,
        })
    }

    /// The activation quantizer this product runs first (None for F16 and
    /// F32 weights).
    pub fn activations(&self) -> Option<&ActQuant> {
        self.act.as_ref()
    }

    /// `y[r] = dot(row r of m, x)` for every row: `x` holds `m.cols` f32
    /// values, `y` room for `m.rows`.
    pub fn run(
        &self,
        gpu: &Gpu,
        m: &GpuMatrix,
        x: &wgpu::Buffer,
        y: &wgpu::Buffer,
    ) -> Result<(), GpuError> {
        self.run_batch(gpu, m, (x, y), 1)
    }

    /// The product with `n` activation rows (up to [`MAX_BATCH`]): `x`
    /// holds `n` rows of `m.cols` values, `y` gets `n` rows of `m.rows`.
    /// Each row's result has the bits [`MatVec::run`] gives it alone.
    pub fn run_batch(
        &self,
        gpu: &Gpu,
        m: &GpuMatrix,
        (x, y): (&wgpu::Buffer, &wgpu::Buffer),
        n: usize,
    ) -> Result<(), GpuError> {
        if m.ty != self.ty {
            return Err(GpuError::Shape(format!(
                "a {} kernel was given a {} matrix",
                self.ty, m.ty
            )));
        }
        if n == 0
            || n > MAX_BATCH
            || x.size() < (n * m.cols * 4) as u64
            || y.size() < (n * m.rows * 4) as u64
        {
            return Err(GpuError::Shape(format!(
                "x holds {} bytes and y {} for {n} rows (at most {MAX_BATCH}) through a {}x{} matrix",
                x.size(),
                y.size(),
                m.rows,
                m.cols
            )));
        }
        let params = gpu.params(&[
            m.rows as u32,
            m.cols as u32,
            m.row_bytes as u32,
            (m.cols / 32) as u32,
        ]);
        let cols = match &self.act {
            Some(act) => {
                act.run(gpu, x, n * m.cols)?;
                let block = if act.ty == GgmlType::Q8_K { 256 } else { 32 };
                gpu.params(&[
                    n as u32,
                    (m.cols / 4) as u32,
                    (m.cols / block * meta_words(act.ty)) as u32,
                    0,
                ])
            }
            None => gpu.params(&[n as u32, 0, 0, 0]),
        };
        gpu.note_bytes((m.rows * m.row_bytes) as u64);
        let rows_per_group = 64 / self.tpr as usize;
        // ggml repacks Q4_0 matrices of whole groups of 8 rows, whose
        // kernels sum each row in one chain (as the CPU's `dot_path`).
        let chain = u32::from(m.ty == GgmlType::Q4_0 && m.rows.is_multiple_of(8));
        for part in &m.parts {
            let at = gpu.params(&[part.row0 as u32, part.rows as u32, chain, 0]);
            let bind = match &self.act {
                Some(act) => gpu.bind_at(
                    &self.pipeline,
                    &[
                        (0, &part.buf),
                        (1, &act.q),
                        (2, y),
                        (3, &params),
                        (4, &act.meta),
                        (6, &cols),
                        (7, &at),
                    ],
                ),
                None => gpu.bind_at(
                    &self.pipeline,
                    &[
                        (0, &part.buf),
                        (1, x),
                        (2, y),
                        (3, &params),
                        (6, &cols),
                        (7, &at),
                    ],
                ),
            };
            gpu.run(
                &self.pipeline,
                &bind,
                part.rows.div_ceil(rows_per_group) as u32,
            );
        }
        Ok(())
    }
}

/// The most activation rows one [`MatVec::run_batch`] takes.
pub const MAX_BATCH: usize = 16;

/// Bindings of the float products and the embedding lookup: weights, x,
/// y, and (rows, cols, bytes per row, 32-value units per row).
pub(crate) const BINDINGS: &str = include_str!("shaders/matvec/bindings.wgsl");

/// The quantized products read x as 8-bit quants and per-block scales.
const QUANT_BINDINGS: &str = include_str!("shaders/matvec/quant_bindings.wgsl");

/// The activations of the row being multiplied (`run_batch` walks the
/// rows; `col` is set per row).
const QUANT_ACCESS: &str = include_str!("shaders/matvec/quant_access.wgsl");

const FLOAT_ACCESS: &str = include_str!("shaders/matvec/float_access.wgsl");

/// Byte-level reads of the weight blocks (GGUF blocks are not all
/// word-aligned: Q8_0 is 34 bytes, Q6_K 210).
pub(crate) const HELPERS: &str = include_str!("shaders/matvec/weight_bytes.wgsl");

const DOT4_NATIVE: &str = include_str!("shaders/matvec/dot4_native.wgsl");

const DOT4_UNPACKED: &str = include_str!("shaders/matvec/dot4_unpacked.wgsl");

const QUANT_HEADER: &str = include_str!("shaders/quantize/bindings.wgsl");

/// Q8_0 and Q8_1, one thread per 32-value block, as ggml's AVX2 code
/// rounds: d = amax / 127, quants round(x * (127 / amax)) to even, s = d
/// times the quants' sum, both scales then rounded to f16.
const Q8_32: &str = include_str!("shaders/quantize/q8_32.wgsl");

/// Q8_K, one thread per 256-value block, as ggml's reference code rounds:
/// the scale comes from the value of largest magnitude (its sign kept),
/// quants round(x * -127 / max) to even, capped at 127, and d = 1 / iscale
/// stays f32; each 16 values' quant sum is kept for the K-quant minimums.
const Q8_K: &str = include_str!("shaders/quantize/q8_k.wgsl");

const MAIN: &str = include_str!("shaders/matvec/main.wgsl");

/// The legacy block types in ggml's AVX2 order, which the CPU follows
/// bit for bit: lane l of a row (l < 8) sums, block after block, the
/// exact integer sum of the block's elements 4l..4l+3 times the block's
/// scale (d_w * d_a), one fused multiply-add each (`fmaf`); the eight
/// lanes are then added as `hsum_float_8` adds them; Q4_1 and Q5_1 add
/// their own fused chain of m_w * s_a at the end. With `TPR` threads per
/// row (1, 2, 4 or 8) thread `lane` runs lanes lane, lane + TPR, ..., adds
/// its own ones in the sum's first stages, and the butterfly does the
/// rest: the same pairs in the same order. Repacked Q4_0 (p3.z set) is
/// one chain of the blocks' whole integer sums instead.
const MAIN_LANES: &str = include_str!("shaders/matvec/main_lanes.wgsl");

/// `lane_sum(base, u, l)`: the exact integer sum of elements 4l..4l+3 of
/// block `u` of the row at byte `base` times the activations'; `scale`:
/// d_w * d_a; `min_term(base, u, summs)`: the affine types' next fused
/// m_w * s_a (the others return summs). Nibble words hold elements
/// 4k..4k+3 in their low nibbles and 16+4k.. in their high ones; xq word
/// 8u + l holds activations 4l..4l+3 of block u.
fn lane_fn(ty: GgmlType) -> Option<&'static str> {
    use GgmlType as T;
    Some(match ty {
        T::Q8_0 => include_str!("shaders/matvec/lanes_q8_0.wgsl"),
        T::Q4_0 => include_str!("shaders/matvec/lanes_q4_0.wgsl"),
        // 20-byte blocks in rows of whole blocks: always word-aligned.
        T::Q4_1 => include_str!("shaders/matvec/lanes_q4_1.wgsl"),
        T::Q5_0 => include_str!("shaders/matvec/lanes_q5_0.wgsl"),
        T::Q5_1 => include_str!("shaders/matvec/lanes_q5_1.wgsl"),
        _ => return None,
    })
}

const REDUCE_NONE: &str = include_str!("shaders/matvec/reduce_none.wgsl");

/// A butterfly over the row's lanes: at each distance k, from TPR / 2
/// down to one, every lane adds its partner's sum (lane ^ k), through
/// workgroup memory while k is at least the subgroup size (`SG_SIZE`, one
/// without subgroups), in registers below it. IEEE addition commutes, so lane 0
/// ends with the bits a tree gives, whichever way each stage went.
const REDUCE_TREE: &str = include_str!("shaders/matvec/reduce_tree.wgsl");

/// `fn unit(base, u) -> f32`: the dot of 32-value unit `u` of the row
/// starting at byte `base` with the activations' unit `u`, for the types
/// whose units are summed in any order (the float and K-quant types; the
/// legacy ones go through [`lane_fn`]). xq word 8u + k holds activation
/// values 4k..4k+3 of unit u.
fn unit_fn(ty: GgmlType) -> Option<&'static str> {
    use GgmlType as T;
    Some(match ty {
        T::F32 => include_str!("shaders/matvec/unit_f32.wgsl"),
        T::F16 => include_str!("shaders/matvec/unit_f16.wgsl"),
        // 256-value blocks: d, dmin, 12 bytes of 6-bit scales and mins,
        // 128 bytes of nibbles (sub-blocks 2k and 2k+1 share 32 bytes).
        // ggml applies d * dx to the scaled quant sum and dmin * dx to the
        // scaled 16-value activation sums.
        T::Q4_K => include_str!("shaders/matvec/unit_q4_k.wgsl"),
        // 256-value blocks: 128 bytes of low nibbles, 64 of high 2-bit
        // pairs, 16 signed scales (one per 16 values), d.
        T::Q6_K => include_str!("shaders/matvec/unit_q6_k.wgsl"),
        _ => return None,
    })
}
