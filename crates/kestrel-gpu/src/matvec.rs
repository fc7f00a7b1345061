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
            ("var<workgroup> part: array<f32, 64>;", REDUCE_TREE)
        };
        // Below the subgroup size the pairs are exchanged in registers.
        let (enable, sg_param, sg, shuffle) = if subgroups {
            (
                // (naga takes subgroup builtins without an `enable`.)
                "",
                ", @builtin(subgroup_size) sg_size: u32",
                "sg_size",
                "while (k > 0u) {\n        s = s + subgroupShuffleXor(s, k);\n        k >>= 1u;\n    }",
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
pub(crate) const BINDINGS: &str = r#"
@group(0) @binding(0) var<storage, read> w: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<uniform> p: vec4<u32>;
"#;

/// The quantized products read x as 8-bit quants and per-block scales.
const QUANT_BINDINGS: &str = r#"
@group(0) @binding(0) var<storage, read> w: array<u32>;
@group(0) @binding(1) var<storage, read> xq: array<u32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<uniform> p: vec4<u32>;
@group(0) @binding(4) var<storage, read> xm: array<u32>;
"#;

/// The activations of the row being multiplied (`run_batch` walks the
/// rows; `col` is set per row).
const QUANT_ACCESS: &str = r#"
// rows in the batch, quant words per row, scale words per row
@group(0) @binding(6) var<uniform> p2: vec4<u32>;
var<private> col_q: u32;
var<private> col_m: u32;
fn set_col(c: u32) {
    col_q = c * p2.y;
    col_m = c * p2.z;
}
fn aq(i: u32) -> u32 { return xq[col_q + i]; }
fn am(i: u32) -> u32 { return xm[col_m + i]; }
"#;

const FLOAT_ACCESS: &str = r#"
// rows in the batch
@group(0) @binding(6) var<uniform> p2: vec4<u32>;
var<private> col_x: u32;
fn set_col(c: u32) { col_x = c * p.y; }
fn ax(i: u32) -> f32 { return x[col_x + i]; }
"#;

/// Byte-level reads of the weight blocks (GGUF blocks are not all
/// word-aligned: Q8_0 is 34 bytes, Q6_K 210).
pub(crate) const HELPERS: &str = r#"
// Byte o of the weights.
fn b8(o: u32) -> u32 { return (w[o >> 2u] >> ((o & 3u) * 8u)) & 0xffu; }
// The IEEE half at byte o.
fn h16(o: u32) -> f32 { return half(b8(o) | (b8(o + 1u) << 8u)); }
// A byte as a signed value.
fn i8v(v: u32) -> f32 { return f32(bitcast<i32>(v << 24u) >> 24u); }
fn i8i(v: u32) -> i32 { return bitcast<i32>(v << 24u) >> 24u; }
// Four bytes at o, little-endian, at any alignment.
fn u32_at(o: u32) -> u32 {
    let i = o >> 2u;
    let sh = (o & 3u) * 8u;
    if (sh == 0u) { return w[i]; }
    return (w[i] >> sh) | (w[i + 1u] << (32u - sh));
}
// Q4_K sub-block j's 6-bit scale and min, from the 12 bytes at o + 4.
fn q4k_scale_min(o: u32, j: u32) -> vec2<u32> {
    if (j < 4u) {
        return vec2<u32>(b8(o + 4u + j) & 63u, b8(o + 8u + j) & 63u);
    }
    return vec2<u32>(
        (b8(o + 8u + j) & 15u) | ((b8(o + j) >> 6u) << 4u),
        (b8(o + 8u + j) >> 4u) | ((b8(o + 4u + j) >> 6u) << 4u),
    );
}
// Four unsigned bytes minus k each (k < 128, bytes < 128), as signed bytes:
// the high bit set first stops a borrow from crossing into the next byte.
fn sub_bytes(v: u32, k: u32) -> u32 { return ((v | 0x80808080u) - k * 0x01010101u) ^ 0x80808080u; }
// Bits 0-3 of b moved to bit 0 of bytes 0-3.
fn spread4(b: u32) -> u32 { return (b & 1u) | ((b & 2u) << 7u) | ((b & 4u) << 14u) | ((b & 8u) << 21u); }
"#;

const DOT4_NATIVE: &str = "fn dot4(a: u32, b: u32) -> i32 { return dot4I8Packed(a, b); }";

const DOT4_UNPACKED: &str = r#"
fn bytes4(a: u32) -> vec4<i32> {
    return vec4<i32>(bitcast<i32>(a << 24u), bitcast<i32>(a << 16u), bitcast<i32>(a << 8u), bitcast<i32>(a)) >> vec4<u32>(24u);
}
fn dot4(a: u32, b: u32) -> i32 { return dot(bytes4(a), bytes4(b)); }
"#;

/// `half(b)`: the IEEE half in the low 16 bits of `b`.
pub(crate) const HALF: &str = r#"
// The IEEE half in the low 16 bits of b, decoded by hand: an
// implementation may flush subnormal halves to zero in unpack2x16float.
fn half(b: u32) -> f32 {
    let e = (b >> 10u) & 31u;
    let m = b & 1023u;
    var v: f32;
    if (e == 0u) {
        v = f32(m) * 5.9604644775390625e-08;
    } else if (e == 31u) {
        v = bitcast<f32>(0x7f800000u | (m << 13u));
    } else {
        v = bitcast<f32>(((e + 112u) << 23u) | (m << 13u));
    }
    return select(v, -v, (b & 0x8000u) != 0u);
}
"#;

/// `f16bits(x)` and `f16r(x)`: x rounded to the nearest f16 (ties to
/// even), as its bits or as an f32 (with [`HALF`]). WGSL leaves the
/// rounding of its own f16 conversions to the implementation, and the CPU
/// rounds to even.
pub(crate) const F16_ROUND: &str = r#"
// The f16 bits of x, rounded to nearest even as the CPU rounds: WGSL
// leaves pack2x16float's rounding to the implementation.
fn f16bits(x: f32) -> u32 {
    let b = bitcast<u32>(x);
    let sign = (b >> 16u) & 0x8000u;
    let a = b & 0x7fffffffu;
    if (a > 0x7f800000u) { return sign | 0x7e00u; }
    if (a >= 0x477ff000u) { return sign | 0x7c00u; }
    if (a >= 0x38800000u) {
        return sign | ((a + 0xfffu + ((a >> 13u) & 1u) - 0x38000000u) >> 13u);
    }
    // Below the smallest normal half: multiples of 2^-24, ties to even.
    return sign | u32(round(bitcast<f32>(a) * 16777216.0));
}

// x rounded to the nearest f16, as an f32 (needs `half`).
fn f16r(x: f32) -> f32 { return half(f16bits(x)); }
"#;

/// `div_exact(a_bits, b_bits)` and `div(a, b)`: IEEE division, rounded
/// to nearest even as the CPU's division is, in integers: WGSL's division
/// may be off by an ulp or two and its fma need not be fused (lavapipe's
/// is not), so neither can correct the other.
pub(crate) const EXACT_DIV: &str = r#"
// a / b rounded to nearest even as IEEE division does, for a positive
// finite a, in integers: WGSL's division need not be correctly rounded.
fn div_exact(ab: u32, bb: u32) -> u32 {
    let sign = bb & 0x80000000u;
    let bm = bb & 0x7fffffffu;
    if (bm > 0x7f800000u) { return 0x7fc00000u; }
    if (bm == 0x7f800000u) { return sign; }
    if (bm == 0u) { return sign | 0x7f800000u; }
    var ea = i32(ab >> 23u);
    var ma = ab & 0x7fffffu;
    if (ea == 0i) {
        ea = 1i;
        while ((ma & 0x800000u) == 0u) { ma <<= 1u; ea -= 1i; }
    } else {
        ma |= 0x800000u;
    }
    var eb = i32(bm >> 23u);
    var mb = bm & 0x7fffffu;
    if (eb == 0i) {
        eb = 1i;
        while ((mb & 0x800000u) == 0u) { mb <<= 1u; eb -= 1i; }
    } else {
        mb |= 0x800000u;
    }
    var e = ea - eb + 127i;
    if (ma < mb) {
        ma <<= 1u;
        e -= 1i;
    }
    // 26 quotient bits (the leading one at bit 25), then a sticky bit.
    var q = 0u;
    var r = ma;
    for (var i = 0u; i < 26u; i++) {
        q <<= 1u;
        if (r >= mb) {
            r -= mb;
            q |= 1u;
        }
        r <<= 1u;
    }
    let sticky = r != 0u;
    // Bits below the result's last place: 2 for a normal result, more
    // for a subnormal one.
    var drop = 2u;
    if (e < 1i) {
        if (e < -25i) { return sign; }
        drop = u32(3i - e);
        e = 0i;
    }
    var m = q >> drop;
    let rest = q & ((1u << drop) - 1u);
    let halfway = 1u << (drop - 1u);
    if (rest > halfway || (rest == halfway && (sticky || (m & 1u) != 0u))) {
        m += 1u;
    }
    if (e == 0i) {
        // A subnormal (or, rounded up, the smallest normal: m = 2^23).
        return sign | m;
    }
    if (m == 0x1000000u) {
        m >>= 1u;
        e += 1i;
    }
    if (e >= 255i) { return sign | 0x7f800000u; }
    return sign | (u32(e) << 23u) | (m & 0x7fffffu);
}

// a / b for finite a (0 / b is a signed zero).
fn div(a: f32, b: f32) -> f32 {
    let ab = bitcast<u32>(a);
    if ((ab & 0x7fffffffu) == 0u) {
        return bitcast<f32>((ab ^ bitcast<u32>(b)) & 0x80000000u);
    }
    return bitcast<f32>(div_exact(ab & 0x7fffffffu, bitcast<u32>(b)) ^ (ab & 0x80000000u));
}
"#;

const QUANT_HEADER: &str = r#"
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> q: array<u32>;
@group(0) @binding(2) var<storage, read_write> m: array<u32>;
// blocks, with s (Q8_1)
@group(0) @binding(3) var<uniform> p: vec4<u32>;

"#;

/// Q8_0 and Q8_1, one thread per 32-value block, as ggml's AVX2 code
/// rounds: d = amax / 127, quants round(x * (127 / amax)) to even, s = d
/// times the quants' sum, both scales then rounded to f16.
const Q8_32: &str = r#"
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let b = gid.x;
    if (b >= p.x) { return; }
    var amax = 0.0;
    for (var j = 0u; j < 32u; j++) { amax = max(amax, abs(x[32u * b + j])); }
    let d = div(amax, 127.0);
    var id = 0.0;
    if (amax != 0.0) { id = div(127.0, amax); }
    var sum = 0i;
    for (var k = 0u; k < 8u; k++) {
        var word = 0u;
        for (var i = 0u; i < 4u; i++) {
            let v = i32(round(x[32u * b + 4u * k + i] * id));
            sum += v;
            word |= (u32(clamp(v, -128i, 127i)) & 0xffu) << (8u * i);
        }
        q[8u * b + k] = word;
    }
    m[META * b] = bitcast<u32>(f16r(d));
    if (p.y != 0u) {
        m[META * b + 1u] = bitcast<u32>(f16r(d * f32(sum)));
    }
}
"#;

/// Q8_K, one thread per 256-value block, as ggml's reference code rounds:
/// the scale comes from the value of largest magnitude (its sign kept),
/// quants round(x * -127 / max) to even, capped at 127, and d = 1 / iscale
/// stays f32; each 16 values' quant sum is kept for the K-quant minimums.
const Q8_K: &str = r#"
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let b = gid.x;
    if (b >= p.x) { return; }
    var amax = 0.0;
    var mx = 0.0;
    for (var j = 0u; j < 256u; j++) {
        let v = x[256u * b + j];
        if (abs(v) > amax) {
            amax = abs(v);
            mx = v;
        }
    }
    var iscale = 0.0;
    if (amax != 0.0) { iscale = div(-127.0, mx); }
    for (var g = 0u; g < 16u; g++) {
        var bs = 0i;
        for (var k = 0u; k < 4u; k++) {
            var word = 0u;
            for (var i = 0u; i < 4u; i++) {
                let v = min(i32(round(iscale * x[256u * b + 16u * g + 4u * k + i])), 127i);
                bs += v;
                word |= (u32(v) & 0xffu) << (8u * i);
            }
            q[64u * b + 4u * g + k] = word;
        }
        m[META * b + 1u + g] = bitcast<u32>(bs);
    }
    var d = 0.0;
    if (amax != 0.0) { d = div(1.0, iscale); }
    m[META * b] = bitcast<u32>(d);
}
"#;

const MAIN: &str = r#"
// the part's first row in the matrix, its rows (`row` counts within it)
@group(0) @binding(7) var<uniform> p3: vec4<u32>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) g: vec3<u32>, @builtin(local_invocation_index) t: u32SG_PARAM) {
    let row = (g.y * GRID_X + g.x) * RPG + t / TPR;
    let lane = t % TPR;
    // One activation row after the other, each summed exactly as alone
    // (the weights come from cache after the first).
    for (var c = 0u; c < p2.x; c++) {
        set_col(c);
        var s = 0.0;
        if (row < p3.y) {
            let base = row * p.z;
            for (var u = lane; u < p.w; u += TPR) {
                s += unit(base, u);
            }
        }
        REDUCE
    }
}
"#;

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
const MAIN_LANES: &str = r#"
// the part's first row in the matrix, its rows (`row` counts within it),
// one chain per row (repacked Q4_0)
@group(0) @binding(7) var<uniform> p3: vec4<u32>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) g: vec3<u32>, @builtin(local_invocation_index) t: u32SG_PARAM) {
    let row = (g.y * GRID_X + g.x) * RPG + t / TPR;
    let lane = t % TPR;
    for (var c = 0u; c < p2.x; c++) {
        set_col(c);
        var s = 0.0;
        var summs = 0.0;
        if (row < p3.y) {
            let base = row * p.z;
            if (p3.z != 0u) {
                if (lane == 0u) {
                    for (var u = 0u; u < p.w; u++) {
                        var isum = 0i;
                        for (var l = 0u; l < 8u; l++) { isum += lane_sum(base, u, l); }
                        s = fma_int(scale(base, u), isum, s);
                    }
                }
            } else {
                var acc = array<f32, 8>(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
                for (var u = 0u; u < p.w; u++) {
                    let d = scale(base, u);
                    for (var l = lane; l < 8u; l += TPR) {
                        acc[l] = fma_int(d, lane_sum(base, u, l), acc[l]);
                    }
                    if (lane == 0u) { summs = min_term(base, u, summs); }
                }
                for (var k = 4u; k >= TPR; k >>= 1u) {
                    for (var l = lane; l < k; l += TPR) { acc[l] = acc[l] + acc[l + k]; }
                }
                s = acc[lane];
            }
        }
        REDUCE
    }
}
"#;

/// `lane_sum(base, u, l)`: the exact integer sum of elements 4l..4l+3 of
/// block `u` of the row at byte `base` times the activations'; `scale`:
/// d_w * d_a; `min_term(base, u, summs)`: the affine types' next fused
/// m_w * s_a (the others return summs). Nibble words hold elements
/// 4k..4k+3 in their low nibbles and 16+4k.. in their high ones; xq word
/// 8u + l holds activations 4l..4l+3 of block u.
fn lane_fn(ty: GgmlType) -> Option<&'static str> {
    use GgmlType as T;
    Some(match ty {
        T::Q8_0 => {
            r#"
fn lane_sum(base: u32, u: u32, l: u32) -> i32 {
    return dot4(u32_at(base + u * 34u + 2u + 4u * l), aq(8u * u + l));
}
fn scale(base: u32, u: u32) -> f32 { return h16(base + u * 34u) * bitcast<f32>(am(u)); }
fn min_term(base: u32, u: u32, summs: f32) -> f32 { return summs; }"#
        }
        T::Q4_0 => {
            r#"
fn lane_sum(base: u32, u: u32, l: u32) -> i32 {
    let q = (u32_at(base + u * 18u + 2u + 4u * (l % 4u)) >> (4u * (l / 4u))) & 0x0f0f0f0fu;
    return dot4(sub_bytes(q, 8u), aq(8u * u + l));
}
fn scale(base: u32, u: u32) -> f32 { return h16(base + u * 18u) * bitcast<f32>(am(u)); }
fn min_term(base: u32, u: u32, summs: f32) -> f32 { return summs; }"#
        }
        // 20-byte blocks in rows of whole blocks: always word-aligned.
        T::Q4_1 => {
            r#"
fn lane_sum(base: u32, u: u32, l: u32) -> i32 {
    let q = (w[((base + u * 20u) >> 2u) + 1u + l % 4u] >> (4u * (l / 4u))) & 0x0f0f0f0fu;
    return dot4(q, aq(8u * u + l));
}
fn scale(base: u32, u: u32) -> f32 {
    return half(w[(base + u * 20u) >> 2u] & 0xffffu) * bitcast<f32>(am(2u * u));
}
fn min_term(base: u32, u: u32, summs: f32) -> f32 {
    return fmaf(half(w[(base + u * 20u) >> 2u] >> 16u), bitcast<f32>(am(2u * u + 1u)), summs);
}"#
        }
        T::Q5_0 => {
            r#"
fn lane_sum(base: u32, u: u32, l: u32) -> i32 {
    let o = base + u * 22u;
    let q = (u32_at(o + 6u + 4u * (l % 4u)) >> (4u * (l / 4u))) & 0x0f0f0f0fu;
    let hb = spread4(u32_at(o + 2u) >> (16u * (l / 4u) + 4u * (l % 4u))) << 4u;
    return dot4(sub_bytes(q | hb, 16u), aq(8u * u + l));
}
fn scale(base: u32, u: u32) -> f32 { return h16(base + u * 22u) * bitcast<f32>(am(u)); }
fn min_term(base: u32, u: u32, summs: f32) -> f32 { return summs; }"#
        }
        T::Q5_1 => {
            r#"
fn lane_sum(base: u32, u: u32, l: u32) -> i32 {
    let o = base + u * 24u;
    let q = (u32_at(o + 8u + 4u * (l % 4u)) >> (4u * (l / 4u))) & 0x0f0f0f0fu;
    let hb = spread4(u32_at(o + 4u) >> (16u * (l / 4u) + 4u * (l % 4u))) << 4u;
    return dot4(q | hb, aq(8u * u + l));
}
fn scale(base: u32, u: u32) -> f32 { return h16(base + u * 24u) * bitcast<f32>(am(2u * u)); }
fn min_term(base: u32, u: u32, summs: f32) -> f32 {
    return fmaf(h16(base + u * 24u + 2u), bitcast<f32>(am(2u * u + 1u)), summs);
}"#
        }
        _ => return None,
    })
}

const REDUCE_NONE: &str = "if (row < p3.y) { y[c * p.x + p3.x + row] = FINISH; }";

/// A butterfly over the row's lanes: at each distance k, from TPR / 2
/// down to one, every lane adds its partner's sum (lane ^ k), through
/// workgroup memory while k is at least the subgroup size (`SG_SIZE`, one
/// without subgroups), in registers below it. IEEE addition commutes, so lane 0
/// ends with the bits a tree gives, whichever way each stage went.
const REDUCE_TREE: &str = r#"var k = TPR / 2u;
    while (k >= SG_SIZE && k > 0u) {
        part[t] = s;
        workgroupBarrier();
        s = s + part[t ^ k];
        workgroupBarrier();
        k >>= 1u;
    }
    SHUFFLE
    if (lane == 0u && row < p3.y) {
        y[c * p.x + p3.x + row] = FINISH;
    }"#;

/// `fn unit(base, u) -> f32`: the dot of 32-value unit `u` of the row
/// starting at byte `base` with the activations' unit `u`, for the types
/// whose units are summed in any order (the float and K-quant types; the
/// legacy ones go through [`lane_fn`]). xq word 8u + k holds activation
/// values 4k..4k+3 of unit u.
fn unit_fn(ty: GgmlType) -> Option<&'static str> {
    use GgmlType as T;
    Some(match ty {
        T::F32 => {
            r#"
fn unit(base: u32, u: u32) -> f32 {
    let o = (base >> 2u) + u * 32u;
    let xi = u * 32u;
    var s = 0.0;
    for (var j = 0u; j < 32u; j++) { s += bitcast<f32>(w[o + j]) * ax(xi + j); }
    return s;
}"#
        }
        T::F16 => {
            r#"
fn unit(base: u32, u: u32) -> f32 {
    let o = (base >> 2u) + u * 16u;
    let xi = u * 32u;
    var s = 0.0;
    for (var j = 0u; j < 16u; j++) {
        let v = w[o + j];
        s += half(v & 0xffffu) * f16r(ax(xi + 2u * j)) + half(v >> 16u) * f16r(ax(xi + 2u * j + 1u));
    }
    return s;
}"#
        }
        // 256-value blocks: d, dmin, 12 bytes of 6-bit scales and mins,
        // 128 bytes of nibbles (sub-blocks 2k and 2k+1 share 32 bytes).
        // ggml applies d * dx to the scaled quant sum and dmin * dx to the
        // scaled 16-value activation sums.
        T::Q4_K => {
            r#"
fn unit(base: u32, u: u32) -> f32 {
    let sb = u / 8u;
    let j = u % 8u;
    let o = base + sb * 144u;
    let sm = q4k_scale_min(o, j);
    let q0 = o + 16u + 32u * (j / 2u);
    let shift = 4u * (j % 2u);
    var s = 0i;
    for (var k = 0u; k < 8u; k++) {
        s += dot4((u32_at(q0 + 4u * k) >> shift) & 0x0f0f0f0fu, aq(8u * u + k));
    }
    let mb = 17u * sb;
    let dx = bitcast<f32>(am(mb));
    let bs = bitcast<i32>(am(mb + 1u + 2u * j)) + bitcast<i32>(am(mb + 2u + 2u * j));
    return dx * h16(o) * f32(i32(sm.x) * s) - dx * h16(o + 2u) * f32(i32(sm.y) * bs);
}"#
        }
        // 256-value blocks: 128 bytes of low nibbles, 64 of high 2-bit
        // pairs, 16 signed scales (one per 16 values), d.
        T::Q6_K => {
            r#"
fn unit(base: u32, u: u32) -> f32 {
    let sb = u / 8u;
    let o = base + sb * 210u;
    let e = (u % 8u) * 32u;
    let n = e / 128u;
    let grp = (e % 128u) / 32u;
    let ql = o + 64u * n + 32u * (grp % 2u);
    let qh = o + 128u + 32u * n;
    let nib = 4u * (grp / 2u);
    var s0 = 0i;
    var s1 = 0i;
    for (var k = 0u; k < 8u; k++) {
        let lo = (u32_at(ql + 4u * k) >> nib) & 0x0f0f0f0fu;
        let hi = ((u32_at(qh + 4u * k) >> (2u * grp)) & 0x03030303u) << 4u;
        let d = dot4(sub_bytes(lo | hi, 32u), aq(8u * u + k));
        if (k < 4u) { s0 += d; } else { s1 += d; }
    }
    let sc = o + 192u + 8u * n + 2u * grp;
    let isum = i8i(b8(sc)) * s0 + i8i(b8(sc + 1u)) * s1;
    return bitcast<f32>(am(17u * sb)) * h16(o + 208u) * f32(isum);
}"#
        }
        _ => return None,
    })
}
