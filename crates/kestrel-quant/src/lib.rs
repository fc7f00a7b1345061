//! kestrel-quant: ggml's tensor block formats. It owns the byte layouts of
//! every supported [`GgmlType`], converting rows to and from f32, quantizing
//! activations the way ggml-cpu does on x86-64 (AVX2), and the weight x
//! activation dot products that matrix multiplication is built from.
//!
//! The kernels are portable code that reproduces, bit for bit, the f32 order
//! of the ggml-cpu kernel llama.cpp would run for the same product on an
//! AVX2 machine ([`DotPath`] names which one). Each type's kernels are
//! collected in a [`Kernels`] table; the free functions dispatch through
//! [`kernels`], which on x86-64 picks builds of the same code with AVX2/FMA
//! enabled (see `twins`; the choice is `cpu_features`'), so faster implementations slot in per type without
//! changing callers.
//!
//! Kernel files, one per block family: `float` (F32/F16/BF16), `legacy`
//! (Q4_0..Q8_1), `kquants/` (Q2_K..Q6_K) and `q8k` (Q8_K).

mod cpu_features;
mod f16row;
mod float;
mod kquants;
mod lanes;
mod legacy;
mod q8k;
#[macro_use]
mod twins;
#[cfg(target_arch = "x86_64")]
mod x86;

pub use cpu_features::{avx2_in_use, avx512_in_use, vnni_in_use};
pub use f16row::{f16_dot, f16_mad, f16_scale, f16_to_f32_row, f32_mad_f16, f32_to_f16_row};
pub use float::{bf16_to_f32, f16_to_f32, f32_to_bf16, f32_to_f16, gelu_f16_table};
pub use kestrel_gguf::GgmlType;

/// Dequantize a whole number of blocks into f32 (`dst.len()` elements).
pub type DequantizeFn = fn(src: &[u8], dst: &mut [f32]);
/// Quantize a whole number of blocks from f32.
pub type QuantizeFn = fn(src: &[f32], dst: &mut [u8]);
/// Dot product of `n` weights with `n` activations in the paired format.
/// Slice lengths are already validated by the caller.
pub type VecDotFn = fn(n: usize, w: &[u8], a: &[u8]) -> f32;

/// The kernels for one element type.
#[derive(Clone, Copy, Debug)]
pub struct Kernels {
    pub ty: GgmlType,
    pub dequantize: DequantizeFn,
    pub quantize: QuantizeFn,
    /// The format activations must be in for [`Kernels::vec_dot`].
    pub vec_dot_type: GgmlType,
    pub vec_dot: VecDotFn,
}

const fn k(
    ty: GgmlType,
    dequantize: DequantizeFn,
    quantize: QuantizeFn,
    vec_dot_type: GgmlType,
    vec_dot: VecDotFn,
) -> Kernels {
    Kernels {
        ty,
        dequantize,
        quantize,
        vec_dot_type,
        vec_dot,
    }
}

use GgmlType as T;

/// Declares the kernel tables from one list: the portable kernels, indexed in
/// [`GgmlType::ALL`] order, and (on x86-64) the same kernels with their dots
/// rebuilt for AVX2/FMA/F16C. The pairings follow ggml-cpu's
/// `type_traits_cpu`; Q8_1 and Q8_K have no weight dot in ggml, so they are
/// paired with themselves here for completeness.
macro_rules! kernel_tables {
    ($($ty:ident: $deq:path, $quant:path, $vt:ident, $dot:path;)*) => {
        static PORTABLE: [Kernels; 15] = [$(k(T::$ty, $deq, $quant, T::$vt, $dot)),*];
        #[cfg(target_arch = "x86_64")]
        static AVX2: [Kernels; 15] = [$(k(
            T::$ty, $deq, x86::quant_for(T::$ty, avx2_quant_twin!($quant)), T::$vt,
            x86::dot_for(T::$ty, avx2_twin!($dot))
        )),*];
    };
}

kernel_tables! {
    F32: float::dequantize_f32, float::quantize_f32, F32, float::vec_dot_f32;
    F16: float::dequantize_f16, float::quantize_f16, F16, float::vec_dot_f16;
    Q4_0: legacy::dequantize_q4_0, legacy::quantize_q4_0, Q8_0, legacy::vec_dot_q4_0_q8_0;
    Q4_1: legacy::dequantize_q4_1, legacy::quantize_q4_1, Q8_1, legacy::vec_dot_q4_1_q8_1;
    Q5_0: legacy::dequantize_q5_0, legacy::quantize_q5_0, Q8_0, legacy::vec_dot_q5_0_q8_0;
    Q5_1: legacy::dequantize_q5_1, legacy::quantize_q5_1, Q8_1, legacy::vec_dot_q5_1_q8_1;
    Q8_0: legacy::dequantize_q8_0, legacy::quantize_q8_0, Q8_0, legacy::vec_dot_q8_0_q8_0;
    Q8_1: legacy::dequantize_q8_1, legacy::quantize_q8_1, Q8_1, legacy::vec_dot_q8_1_q8_1;
    Q2_K: kquants::q2k::dequantize, kquants::q2k::quantize, Q8_K, kquants::q2k::vec_dot;
    Q3_K: kquants::q3k::dequantize, kquants::q3k::quantize, Q8_K, kquants::q3k::vec_dot;
    Q4_K: kquants::q4k::dequantize, kquants::q4k::quantize, Q8_K, kquants::q4k::vec_dot;
    Q5_K: kquants::q5k::dequantize, kquants::q5k::quantize, Q8_K, kquants::q5k::vec_dot;
    Q6_K: kquants::q6k::dequantize, kquants::q6k::quantize, Q8_K, kquants::q6k::vec_dot;
    Q8_K: q8k::dequantize_q8_k, q8k::quantize_q8_k, Q8_K, q8k::vec_dot_q8_k_q8_k;
    BF16: float::dequantize_bf16, float::quantize_bf16, BF16, float::vec_dot_bf16;
}

/// The portable scalar kernels for `ty`: the reference every accelerated
/// kernel must agree with.
pub fn portable_kernels(ty: GgmlType) -> &'static Kernels {
    let i = GgmlType::ALL
        .iter()
        .position(|&t| t == ty)
        .expect("every GgmlType is in GgmlType::ALL");
    let kern = &PORTABLE[i];
    debug_assert_eq!(kern.ty, ty);
    kern
}

/// The kernels used for `ty` on this machine: the AVX2 builds where the CPU
/// has AVX2, FMA and F16C, else the portable ones. Both compute the same
/// bits (tested).
pub fn kernels(ty: GgmlType) -> &'static Kernels {
    simd_kernels(ty).unwrap_or_else(|| portable_kernels(ty))
}

/// The SIMD build of `ty`'s kernels, if this CPU runs one.
pub fn simd_kernels(ty: GgmlType) -> Option<&'static Kernels> {
    #[cfg(target_arch = "x86_64")]
    if crate::cpu_features::avx2_available() {
        let i = GgmlType::ALL.iter().position(|&t| t == ty)?;
        return Some(&AVX2[i]);
    }
    let _ = ty;
    None
}

/// Bytes for `n` elements of `ty`, panicking (with the type in the message)
/// when `n` is not a whole number of blocks.
fn bytes_for(ty: GgmlType, n: usize) -> usize {
    match ty.row_bytes(n as u64) {
        Some(b) => usize::try_from(b).expect("row size fits in usize"),
        None => panic!(
            "{n} elements is not a whole number of {ty} blocks ({} each)",
            ty.block_size()
        ),
    }
}

/// Dequantize a whole number of blocks: `src.len() == row_bytes(dst.len())`.
/// Panics on length mismatch (callers validate).
pub fn dequantize_row(ty: GgmlType, src: &[u8], dst: &mut [f32]) {
    let want = bytes_for(ty, dst.len());
    assert_eq!(
        src.len(),
        want,
        "{ty}: {} bytes for {} elements",
        src.len(),
        dst.len()
    );
    (kernels(ty).dequantize)(src, dst);
}

/// Quantize: `dst.len() == row_bytes(src.len())`; `src.len()` a multiple of
/// the block size. Panics otherwise.
///
/// For Q8_0, Q8_1 and Q8_K this is the activation quantizer and matches
/// ggml-cpu on x86-64 bit for bit. For the other quantized types it is a
/// simple weight quantizer producing valid blocks, not llama.cpp's.
pub fn quantize_row(ty: GgmlType, src: &[f32], dst: &mut [u8]) {
    let want = bytes_for(ty, src.len());
    assert_eq!(
        dst.len(),
        want,
        "{ty}: {} bytes for {} elements",
        dst.len(),
        src.len()
    );
    (kernels(ty).quantize)(src, dst);
}

/// The type activations are quantized to before a dot with weights of type
/// `ty`, as ggml-cpu pairs them: Q4_0/Q5_0/Q8_0 -> Q8_0, Q4_1/Q5_1 -> Q8_1,
/// K-quants -> Q8_K, F16 -> F16, BF16 -> BF16, F32 -> F32 (and Q8_1 -> Q8_1).
pub fn vec_dot_type(ty: GgmlType) -> GgmlType {
    kernels(ty).vec_dot_type
}

/// Dot product of one weight row (`n` elements of type `ty`) with one
/// activation row already quantized to [`vec_dot_type`]`(ty)`.
///
/// Quantized types sum exact integer products per block and scale each block
/// in f32, as ggml does, so results agree with ggml-cpu up to the order of
/// the f32 additions. Panics if a slice length does not match `n`.
pub fn vec_dot(ty: GgmlType, n: usize, w: &[u8], a: &[u8]) -> f32 {
    (checked(ty, n, w, a).vec_dot)(n, w, a)
}

/// The kernels of `ty` after checking both slice lengths against `n`.
fn checked(ty: GgmlType, n: usize, w: &[u8], a: &[u8]) -> &'static Kernels {
    let kern = kernels(ty);
    assert_eq!(
        w.len(),
        bytes_for(ty, n),
        "{ty}: weight row length for n={n}"
    );
    assert_eq!(
        a.len(),
        bytes_for(kern.vec_dot_type, n),
        "{}: activation row length for n={n}",
        kern.vec_dot_type
    );
    kern
}

/// Quantize f32 activations into `vec_dot_type(ty)` format.
pub fn quantize_activations(ty: GgmlType, x: &[f32]) -> Vec<u8> {
    let at = vec_dot_type(ty);
    let mut out = vec![0u8; bytes_for(at, x.len())];
    quantize_row(at, x, &mut out);
    out
}

/// Which of ggml-cpu's x86-64 (AVX2) kernel families computes one weight row
/// x activation row product. They sum the same exact integers but order the
/// f32 work differently, and matching llama.cpp token for token needs the
/// same order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DotPath {
    /// `ggml_vec_dot_*`, as [`vec_dot`].
    VecDot,
    /// A weight repacked eight rows at a time against a lone activation
    /// row (`ggml_gemv_*_8x8`).
    RepackGemv,
    /// A repacked weight against activation rows taken four at a time
    /// (`ggml_gemm_*_8x8`).
    RepackGemm,
    /// The tiled K-quant matmul (`ggml-cpu/tiled`).
    Tiled,
}

/// The path ggml-cpu takes for token `tok` of an `n_tok`-token product with
/// a `ty` weight of `weight_rows` rows:
/// - Q4_0 and Q4_K weights whose row count is a multiple of 8 are repacked;
///   a product runs its first `n_tok - n_tok % 4` tokens through the gemm
///   kernel and the rest through the gemv kernel;
/// - other K-quant weights go through the tiled matmul when the product has
///   at least 8 tokens;
/// - everything else is a plain vec_dot.
pub fn dot_path(ty: GgmlType, weight_rows: usize, tok: usize, n_tok: usize) -> DotPath {
    let k_quant = matches!(ty, T::Q2_K | T::Q3_K | T::Q4_K | T::Q5_K | T::Q6_K);
    if matches!(ty, T::Q4_0 | T::Q4_K) && weight_rows.is_multiple_of(8) {
        if tok < n_tok - n_tok % 4 {
            DotPath::RepackGemm
        } else {
            DotPath::RepackGemv
        }
    } else if k_quant && n_tok >= 8 {
        DotPath::Tiled
    } else {
        DotPath::VecDot
    }
}

/// The dot kernel [`vec_dot_on`] runs for `path` and `ty` (the SIMD build
/// where this CPU has one), to call once per weight row without re-resolving
/// it. It takes `(n, weight row, activation row)`; lengths are the caller's
/// to check (a mismatch gives a wrong number or a panic, never undefined
/// behaviour: kernels walk whole blocks of both slices).
pub fn dot_kernel(path: DotPath, ty: GgmlType) -> VecDotFn {
    let kern = kernels(ty);
    #[cfg(target_arch = "x86_64")]
    if crate::cpu_features::avx2_available() {
        return x86::path_dot(path, ty)
            .or_else(|| path_dot!(path, ty, avx2_twin))
            .unwrap_or(kern.vec_dot);
    }
    path_dot!(path, ty, plain).unwrap_or(kern.vec_dot)
}

/// Four activation rows against one weight row: `(weight row, [rows],
/// the rows as the kernel's [`Prepare4Fn`] rearranged them)`.
pub type VecDot4Fn = fn(w: &[u8], a: [&[u8]; 4], pre: &[Chunk32]) -> [f32; 4];

/// Fills `out` with four activation rows in the layout a [`VecDot4Fn`]
/// reads fastest (scales widened, quants aligned), once for all weight rows.
pub type Prepare4Fn = fn(a: [&[u8]; 4], out: &mut Vec<Chunk32>);

/// 32 bytes on a 32-byte boundary: one SIMD register's worth.
#[derive(Clone, Copy, Debug)]
#[repr(C, align(32))]
pub struct Chunk32(pub [u8; 32]);

/// One weight row against two prepared groups of four activation rows
/// (eight rows: the first group's four results, then the second's).
pub type VecDot8Fn = fn(w: &[u8], pre0: &[Chunk32], pre1: &[Chunk32]) -> [f32; 8];

/// Unpacks one weight row into `out` in the layout an
/// [`VecDot8UnpackedFn`] reads (quants as bytes, scales widened), so that a
/// prompt's many token groups do not each unpack it again.
pub type UnpackRowFn = fn(w: &[u8], out: &mut Vec<Chunk32>);

/// As [`VecDot8Fn`] on a row unpacked by the paired [`UnpackRowFn`].
pub type VecDot8UnpackedFn = fn(uw: &[Chunk32], pre0: &[Chunk32], pre1: &[Chunk32]) -> [f32; 8];
/// [`VecDot8UnpackedFn`] on two unpacked rows.
pub type VecDot16UnpackedFn =
    fn(uw: [&[Chunk32]; 2], pre0: &[Chunk32], pre1: &[Chunk32]) -> [[f32; 8]; 2];

/// A four-row kernel and the preparation of its activation rows; `dot8`,
/// where present, takes two prepared groups at once (each weight block
/// unpacked once for eight rows), with the same results as `dot` twice;
/// `unpacked`, where present, is `dot8` on rows unpacked beforehand.
#[derive(Clone, Copy)]
pub struct Dot4 {
    pub dot: VecDot4Fn,
    pub prepare: Prepare4Fn,
    pub dot8: Option<VecDot8Fn>,
    pub unpacked: Option<Unpacked8>,
    /// Four weight rows against the prepared group at once, where there is
    /// such a kernel (for batches too small to unpack rows for).
    pub rows4: Option<VecDot4x4Fn>,
    /// The activation layout that `rows4`, `rows4_two` and their band
    /// builds read: `prepare` itself for most formats, its own where the
    /// four-row kernel loads better from another.
    pub rows4_prepare: Prepare4Fn,
    /// `rows4` for the group's first two tokens only (the other two
    /// results are 0): a group of two real rows and two copies.
    pub rows4_two: Option<VecDot4x4Fn>,
    /// `rows4` and `rows4_two` over a whole band in one call, where there
    /// are such builds (batched decode with one group).
    pub rows4_band: Option<VecDot4x4BandFn>,
    pub rows4_two_band: Option<VecDot4x4BandFn>,
    /// `rows4` over a whole band for two groups at once (six to eight
    /// sequences decoding), where there is such a build.
    pub rows4_band2: Option<VecDot4x4Band2Fn>,
}

/// Four weight rows against four activation rows prepared by the
/// [`Dot4`]'s `prepare`: `[row][token]`, each with the bits of `dot`. Take
/// the rows from four streams, as [`VecDotRows4Fn`].
pub type VecDot4x4Fn = fn(rows: [&[u8]; 4], pre: &[Chunk32]) -> [[f32; 4]; 4];

/// A [`VecDot4x4Fn`] over a band of `4q` weight rows (`w`, one after
/// another) in one call: `out[t][i]` = token t's result for row i, the
/// bits of the four-row kernel's, with rows i, q + i, 2q + i and 3q + i
/// going together as [`VecDotBandFn`] takes them; `out[0]` holds the 4q
/// results, each other token's slice as many or none (a token not wanted).
/// One call per four rows spent a tenth of a four-sequence step outside
/// the arithmetic: the call, the kernel's setup, the wait on its
/// reductions, the stores.
pub type VecDot4x4BandFn = fn(w: &[u8], pre: &[Chunk32], out: [&mut [f32]; 4]);

/// A [`VecDot4x4BandFn`] for two prepared groups: `out[4g + j]` = group
/// g's token j, each the bits of the four-row kernel's; group 0's four
/// slices hold the band's 4q results, group 1's as many or none. Each four
/// weight rows serve both groups while they are in L1.
pub type VecDot4x4Band2Fn = fn(w: &[u8], pre: [&[Chunk32]; 2], out: [&mut [f32]; 8]);

/// An eight-row kernel on unpacked weight rows, with the row unpacking and
/// the activation layout it reads (its own: the AVX-512 build lays groups
/// out for two-token loads).
#[derive(Clone, Copy)]
pub struct Unpacked8 {
    pub prepare: Prepare4Fn,
    pub unpack: UnpackRowFn,
    pub dot8: VecDot8UnpackedFn,
    /// `dot8` on two rows at once, where a build has it: `[row][token]`,
    /// each row's results the bits `dot8` gives it.
    pub dot16: Option<VecDot16UnpackedFn>,
}

impl Dot4 {
    /// Prepares `a` and runs the kernel once (tests and one-off products;
    /// a matmul prepares once per group of rows).
    pub fn once(&self, w: &[u8], a: [&[u8]; 4]) -> [f32; 4] {
        let mut pre = Vec::new();
        (self.prepare)(a, &mut pre);
        (self.dot)(w, a, &pre)
    }
}

/// The four-row kernel for `path` and `ty`, where there is one (prefill);
/// its results have the bits of [`dot_kernel`]'s, row by row.
pub fn dot4_kernel(path: DotPath, ty: GgmlType) -> Option<Dot4> {
    #[cfg(target_arch = "x86_64")]
    if crate::cpu_features::avx2_available() {
        return x86::path_dot4(path, ty);
    }
    let _ = (path, ty);
    None
}

/// Two weight rows against one activation row: each result has the bits of
/// the plain dot of its row. The rows should be far apart (say, from the
/// two halves of a band): two adjacent rows read together break the
/// hardware prefetchers' streams at every row, which halved the speed from
/// DRAM.
pub type VecDot2Fn = fn(w0: &[u8], w1: &[u8], a: &[u8]) -> [f32; 2];

/// The two-row decode kernel for `path` and `ty`, where there is one (on
/// AVX2: the legacy formats, Q4_K's gemv and Q6_K's vec_dot).
pub fn dot2_kernel(path: DotPath, ty: GgmlType) -> Option<VecDot2Fn> {
    #[cfg(target_arch = "x86_64")]
    if crate::cpu_features::avx2_available() {
        return x86::rows2_dot(path, ty);
    }
    let _ = (path, ty);
    None
}

/// Four weight rows against one activation row, as [`VecDot2Fn`] (each
/// result has the bits of its row's plain dot; take the rows from four
/// streams, e.g. the four quarters of a band).
pub type VecDotRows4Fn = fn(rows: [&[u8]; 4], a: &[u8]) -> [f32; 4];

/// The four-row decode kernel for `path` and `ty`, where there is one (on
/// AVX2: the legacy formats' plain dot, Q4_K's gemv and Q6_K's vec_dot).
pub fn dot_rows4_kernel(path: DotPath, ty: GgmlType) -> Option<VecDotRows4Fn> {
    #[cfg(target_arch = "x86_64")]
    if crate::cpu_features::avx2_available() {
        return x86::rows4_dot(path, ty);
    }
    let _ = (path, ty);
    None
}

/// A band of `4q` weight rows (`w`, one after another, `out.len()` of them)
/// against one activation row: `out[i]` = the plain dot of row i, with the
/// bits of [`dot_rows4_kernel`]'s. Rows i, q + i, 2q + i and 3q + i go
/// together (four streams, as decode reads a band), all in one call.
pub type VecDotBandFn = fn(w: &[u8], a: &[u8], out: &mut [f32]);

/// The band kernel for `path` and `ty`, where there is one (wherever
/// [`dot_rows4_kernel`] has one).
pub fn dot_band_kernel(path: DotPath, ty: GgmlType) -> Option<VecDotBandFn> {
    #[cfg(target_arch = "x86_64")]
    if crate::cpu_features::avx2_available() {
        return x86::band_dot(path, ty);
    }
    let _ = (path, ty);
    None
}

/// Bytes of one row of `n` elements of `ty` (a whole number of blocks),
/// for checking a product's slices once.
pub fn row_bytes(ty: GgmlType, n: usize) -> usize {
    bytes_for(ty, n)
}

/// [`vec_dot`] in the f32 order of `path`; a path that does not exist for
/// `ty` falls back to [`DotPath::VecDot`].
pub fn vec_dot_on(path: DotPath, ty: GgmlType, n: usize, w: &[u8], a: &[u8]) -> f32 {
    checked(ty, n, w, a);
    dot_kernel(path, ty)(n, w, a)
}

/// The kernel of a non-default `DotPath`, built by `$build` (`plain` or
/// `avx2_twin`), or `None` for the plain vec_dot.
macro_rules! path_dot {
    ($path:expr, $ty:expr, $build:ident) => {{
        use kquants::{q2k, q3k, q4k, q5k, q6k};
        match ($path, $ty) {
            (DotPath::RepackGemv | DotPath::RepackGemm, T::Q4_0) => {
                Some($build!(legacy::dot_q4_0_repacked))
            }
            (DotPath::RepackGemv, T::Q4_K) => Some($build!(q4k::dot_repack_gemv)),
            (DotPath::RepackGemm, T::Q4_K) => Some($build!(q4k::dot_repack_gemm)),
            (DotPath::Tiled, T::Q2_K) => Some($build!(q2k::dot_tiled)),
            (DotPath::Tiled, T::Q3_K) => Some($build!(q3k::dot_tiled)),
            (DotPath::Tiled, T::Q4_K) => Some($build!(q4k::dot_tiled)),
            (DotPath::Tiled, T::Q5_K) => Some($build!(q5k::dot_tiled)),
            (DotPath::Tiled, T::Q6_K) => Some($build!(q6k::dot_tiled)),
            _ => None,
        }
    }};
}
use path_dot;

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    /// The AVX-512 builds follow the features they use (AVX-512 F, BW, VL,
    /// VNNI on top of AVX2), whether or not the CPU also has AVX-VNNI: a
    /// Zen 4 without it ran every product on the AVX2 kernels, and each
    /// decode path takes the AVX-512 kernel of Q4_1 where they run.
    #[test]
    fn avx512_builds_follow_the_features_they_use() {
        let off = |var: &str| std::env::var_os(var).is_some_and(|v| v == "1");
        if off("KESTREL_PORTABLE") || off("KESTREL_NO_VNNI") || off("KESTREL_NO_AVX512") {
            eprintln!("a kernel build is turned off by the environment: nothing to check");
            return;
        }
        let has = [
            std::arch::is_x86_feature_detected!("avx2"),
            std::arch::is_x86_feature_detected!("fma"),
            std::arch::is_x86_feature_detected!("f16c"),
            std::arch::is_x86_feature_detected!("avx512f"),
            std::arch::is_x86_feature_detected!("avx512bw"),
            std::arch::is_x86_feature_detected!("avx512vl"),
            std::arch::is_x86_feature_detected!("avx512vnni"),
        ];
        let wide = has.iter().all(|&h| h);
        assert_eq!(
            avx512_in_use(),
            wide,
            "AVX2/FMA/F16C, AVX-512 F/BW/VL/VNNI: {has:?}, AVX-VNNI: {}",
            std::arch::is_x86_feature_detected!("avxvnni")
        );
        let q4_1 = dot_band_kernel(DotPath::VecDot, GgmlType::Q4_1).map(|f| f as usize);
        assert_eq!(
            q4_1 == Some(x86::wide::banda_q4_1 as VecDotBandFn as usize),
            wide,
            "Q4_1's decode band kernel"
        );
    }

    /// Every AVX2 twin returns the bits of its portable original, for every
    /// type and kernel path, on random blocks (random bytes with sane half
    /// scales, activations from random floats) of odd block counts.
    #[test]
    fn avx2_twins_equal_portable_bit_for_bit() {
        if !crate::cpu_features::avx2_available() {
            eprintln!("no AVX2/FMA/F16C here: nothing to compare");
            return;
        }
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        let paths = [
            DotPath::VecDot,
            DotPath::RepackGemv,
            DotPath::RepackGemm,
            DotPath::Tiled,
        ];
        let mut checked4 = 0;
        let mut gemm4 = 0;
        let mut unpacked8 = 0;
        let mut unpacked16 = 0;
        let mut checked2 = 0;
        for (i, &ty) in GgmlType::ALL.iter().enumerate() {
            // Quantizers: same bytes, including exact ties and zero blocks.
            for blocks in [1usize, 4] {
                let n = blocks * ty.block_size();
                let mut x: Vec<f32> = (0..n)
                    .map(|_| (next() % 20001) as f32 / 100.0 - 100.0)
                    .collect();
                x[..ty.block_size().min(n)]
                    .iter_mut()
                    .for_each(|v| *v = v.round() / 2.0);
                if blocks > 1 {
                    x[n - ty.block_size()..].iter_mut().for_each(|v| *v = 0.0);
                }
                let mut p = vec![0u8; bytes_for(ty, n)];
                let mut v = p.clone();
                (PORTABLE[i].quantize)(&x, &mut p);
                (AVX2[i].quantize)(&x, &mut v);
                assert_eq!(p, v, "{ty} quantize n={n}");
            }
            for blocks in [1usize, 3, 5] {
                let n = blocks * ty.block_size();
                let mut w = vec![0u8; bytes_for(ty, n)];
                let wf: Vec<f32> = (0..n)
                    .map(|_| (next() % 2001) as f32 / 1000.0 - 1.0)
                    .collect();
                quantize_row(ty, &wf, &mut w);
                let xf: Vec<f32> = (0..n)
                    .map(|_| (next() % 2001) as f32 / 100.0 - 10.0)
                    .collect();
                let a = quantize_activations(ty, &xf);
                for path in paths {
                    let p = path_dot!(path, ty, plain).unwrap_or(PORTABLE[i].vec_dot)(n, &w, &a);
                    let v = x86::path_dot(path, ty)
                        .or_else(|| path_dot!(path, ty, avx2_twin))
                        .unwrap_or(AVX2[i].vec_dot)(n, &w, &a);
                    assert_eq!(p.to_bits(), v.to_bits(), "{ty} {path:?} n={n}: {p} vs {v}");
                    if let Some(f4) = x86::path_dot4(path, ty) {
                        // Four different rows: this one and three more.
                        let rows: Vec<Vec<u8>> = (0..3)
                            .map(|_| {
                                let xf: Vec<f32> = (0..n)
                                    .map(|_| (next() % 2001) as f32 / 50.0 - 20.0)
                                    .collect();
                                quantize_activations(ty, &xf)
                            })
                            .collect();
                        let four = f4.once(&w, [&a, &rows[0], &rows[1], &rows[2]]);
                        if path == DotPath::VecDot {
                            // Every build of the packed kernel gives these bits.
                            // Every build of the packed kernels gives these
                            // bits, each on its own activation layout;
                            // eight rows are the four, then them reversed.
                            let kernels = x86::packed_kernels(ty);
                            assert!(!kernels.is_empty(), "{ty}: its packed kernels");
                            for (k, (prepare, f4b, f8b)) in kernels.into_iter().enumerate() {
                                let (mut q0, mut q1) = (Vec::new(), Vec::new());
                                prepare([&a, &rows[0], &rows[1], &rows[2]], &mut q0);
                                prepare([&rows[2], &rows[1], &rows[0], &a], &mut q1);
                                let got = f4b(&w, [&a, &rows[0], &rows[1], &rows[2]], &q0);
                                assert_eq!(
                                    got.map(f32::to_bits),
                                    four.map(f32::to_bits),
                                    "{ty} x4 build #{k} n={n}"
                                );
                                let f = four.map(f32::to_bits);
                                assert_eq!(
                                    f8b(&w, &q0, &q1).map(f32::to_bits),
                                    [f[0], f[1], f[2], f[3], f[3], f[2], f[1], f[0]],
                                    "{ty} x8 build #{k} n={n}"
                                );
                            }
                        }
                        if let Some(f8) = f4.dot8 {
                            // Eight rows: the same four twice, the second
                            // group reversed.
                            let (mut p0, mut p1) = (Vec::new(), Vec::new());
                            (f4.prepare)([&a, &rows[0], &rows[1], &rows[2]], &mut p0);
                            (f4.prepare)([&rows[2], &rows[1], &rows[0], &a], &mut p1);
                            let eight = f8(&w, &p0, &p1).map(f32::to_bits);
                            let f = four.map(f32::to_bits);
                            assert_eq!(
                                eight,
                                [f[0], f[1], f[2], f[3], f[3], f[2], f[1], f[0]],
                                "{ty} x8 n={n}"
                            );
                        }
                        if f4.unpacked.is_some() {
                            // The same eight rows (Q4_K and Q6_K have no
                            // packed eight-row kernel to compare with).
                            let f = four.map(f32::to_bits);
                            let eight = [f[0], f[1], f[2], f[3], f[3], f[2], f[1], f[0]];
                            // Every build (AVX2; AVX-VNNI and AVX-512
                            // where detected), each with its own row
                            // and activation layouts.
                            let kernels = x86::unpacked_kernels(ty);
                            assert!(!kernels.is_empty(), "{ty}: its unpacked kernels");
                            for (k, u) in kernels.into_iter().enumerate() {
                                let (mut uw, mut q0, mut q1) = (Vec::new(), Vec::new(), Vec::new());
                                (u.unpack)(&w, &mut uw);
                                (u.prepare)([&a, &rows[0], &rows[1], &rows[2]], &mut q0);
                                (u.prepare)([&rows[2], &rows[1], &rows[0], &a], &mut q1);
                                let got = (u.dot8)(&uw, &q0, &q1).map(f32::to_bits);
                                assert_eq!(got, eight, "{ty} x8 unpacked #{k} n={n}");
                                if let Some(dot16) = u.dot16 {
                                    // Beside another row: each row's bits.
                                    let wf2: Vec<f32> = wf.iter().rev().map(|v| -0.7 * v).collect();
                                    let mut w2 = vec![0u8; bytes_for(ty, n)];
                                    quantize_row(ty, &wf2, &mut w2);
                                    let mut uw2 = Vec::new();
                                    (u.unpack)(&w2, &mut uw2);
                                    let second = (u.dot8)(&uw2, &q0, &q1).map(f32::to_bits);
                                    let both =
                                        dot16([&uw, &uw2], &q0, &q1).map(|r| r.map(f32::to_bits));
                                    assert_eq!(both, [got, second], "{ty} x16 #{k} n={n}");
                                    unpacked16 += 1;
                                }
                            }
                            unpacked8 += 1;
                        }
                        for (r, got) in [&a, &rows[0], &rows[1], &rows[2]].iter().zip(four) {
                            let one =
                                path_dot!(path, ty, plain).unwrap_or(PORTABLE[i].vec_dot)(n, &w, r);
                            assert_eq!(one.to_bits(), got.to_bits(), "{ty} {path:?} x4 n={n}");
                        }
                        // Every build, where a path has several.
                        for (k, f) in x86::gemm4_builds(path, ty).into_iter().enumerate() {
                            let got = f(&w, [&a, &rows[0], &rows[1], &rows[2]], &[]);
                            assert_eq!(
                                got.map(f32::to_bits),
                                four.map(f32::to_bits),
                                "{ty} {path:?} x4 build #{k} n={n}"
                            );
                            gemm4 += 1;
                        }
                        checked4 += 1;
                    }
                    if let Some(f2) = x86::rows2_dot(path, ty) {
                        // Two rows: this one and another, each against `a`.
                        let wf2: Vec<f32> = (0..n)
                            .map(|_| (next() % 2001) as f32 / 300.0 - 3.0)
                            .collect();
                        let mut w2 = vec![0u8; bytes_for(ty, n)];
                        quantize_row(ty, &wf2, &mut w2);
                        let two = f2(&w, &w2, &a);
                        for (r, got) in [&w, &w2].iter().zip(two) {
                            let one =
                                path_dot!(path, ty, plain).unwrap_or(PORTABLE[i].vec_dot)(n, r, &a);
                            assert_eq!(one.to_bits(), got.to_bits(), "{ty} two rows n={n}");
                        }
                        checked2 += 1;
                        // Every build of the four-row kernel (AVX2's and,
                        // where the CPU has it, AVX-VNNI's).
                        let mut builds = x86::rows4_kernels(ty);
                        builds.extend(x86::rows4_dot(path, ty));
                        for (k, f4) in builds.into_iter().enumerate() {
                            let four = f4([&w, &w2, &w2, &w], &a).map(f32::to_bits);
                            let [x, y] = two.map(f32::to_bits);
                            assert_eq!(four, [x, y, y, x], "{ty} four rows #{k} n={n}");
                        }
                    }
                }
            }
        }
        assert_eq!(checked4, 5 * 3, "every four-row kernel, three lengths");
        let q4k_builds = if crate::cpu_features::avx512_available() {
            2
        } else {
            1
        };
        assert_eq!(
            gemm4,
            q4k_builds * 3,
            "Q4_K's four-token builds, three lengths"
        );
        // Q8_0 has an unpacked kernel only in the AVX-512 build.
        let q8_0_wide = if crate::cpu_features::avx512_available() {
            3
        } else {
            0
        };
        assert_eq!(
            unpacked8,
            2 * 3 + 3 * q8_0_wide,
            "Q4_1's and Q5_0's unpacked kernels (and Q8_0's, Q4_K's and Q6_K's), three lengths"
        );
        assert_eq!(
            unpacked16,
            q8_0_wide * 3,
            "the AVX-512 two-row kernels (Q4_1, Q5_0, Q8_0), three lengths"
        );
        assert_eq!(checked2, 7 * 3, "every two-row kernel, three lengths");
    }

    /// Values in [-20, 20] in steps of 1/50 from an xorshift seeded with
    /// `seed`.
    fn values(seed: u64) -> impl FnMut() -> f32 {
        let mut s = seed;
        move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s % 2001) as f32 / 50.0 - 20.0
        }
    }

    /// Every build of the four-row decode kernel gives each of four
    /// distinct rows the bits of the portable dot (odd block counts), so a
    /// kernel that puts two rows in one register cannot swap or mix them.
    #[test]
    fn rows4_decode_kernels_keep_each_row_apart() {
        if !crate::cpu_features::avx2_available() {
            eprintln!("no AVX2 build in use here: nothing to compare");
            return;
        }
        let mut next = values(0x9e37_79b9_7f4a_7c15);
        let mut checked = 0;
        for ty in [
            GgmlType::Q4_0,
            GgmlType::Q4_1,
            GgmlType::Q5_0,
            GgmlType::Q5_1,
            GgmlType::Q8_0,
            GgmlType::Q6_K,
            GgmlType::Q4_K,
        ] {
            // Q4_K decodes in the repacked-gemv order: its kernels follow
            // that portable dot.
            let reference: VecDotFn = if ty == GgmlType::Q4_K {
                kquants::q4k::dot_repack_gemv
            } else {
                portable_kernels(ty).vec_dot
            };
            let per = ty.block_size();
            for blocks in [1usize, 3, 7, 28] {
                let n = blocks * per;
                let w: Vec<Vec<u8>> = (0..4)
                    .map(|r| {
                        // Row 3 all zero weights except one block: lanes
                        // that pick up another row's sums show at once.
                        let wf: Vec<f32> = (0..n)
                            .map(|j| {
                                if r == 3 && j >= per {
                                    0.0
                                } else {
                                    next() / 20.0
                                }
                            })
                            .collect();
                        let mut q = vec![0u8; bytes_for(ty, n)];
                        quantize_row(ty, &wf, &mut q);
                        q
                    })
                    .collect();
                let a = quantize_activations(ty, &(0..n).map(|_| next()).collect::<Vec<_>>());
                let want: Vec<u32> = (0..4).map(|r| reference(n, &w[r], &a).to_bits()).collect();
                for (k, f4) in x86::rows4_kernels(ty).into_iter().enumerate() {
                    let got = f4([&w[0], &w[1], &w[2], &w[3]], &a).map(f32::to_bits);
                    assert_eq!(got[..], want[..], "{ty} build #{k} n={n}");
                    checked += 1;
                }
            }
        }
        // The builds this CPU runs: AVX2's for all seven formats; AVX-VNNI's
        // for the five legacy ones; AVX-512's for all seven.
        let (vnni, wide) = (
            usize::from(crate::cpu_features::vnni_available()),
            usize::from(crate::cpu_features::avx512_available()),
        );
        let builds = 5 * (1 + vnni + wide) + 2 * (1 + wide);
        assert_eq!(
            checked,
            4 * builds,
            "four lengths of every build this CPU runs (AVX2, AVX-VNNI {vnni}, AVX-512 {wide})"
        );
    }

    /// A band kernel gives row i of its band the bits of the four-row
    /// kernel's result for it (rows i, q + i, 2q + i, 3q + i taken
    /// together), for bands of one to five rows a quarter: a mixed-up
    /// quarter or row shows as another row's value.
    #[test]
    fn band_kernels_equal_rows4_kernels() {
        let mut next = values(0x51_7cc1_b727_220a);
        let mut checked = 0;
        for (path, ty) in [
            (DotPath::VecDot, GgmlType::Q4_0),
            (DotPath::VecDot, GgmlType::Q4_1),
            (DotPath::VecDot, GgmlType::Q5_0),
            (DotPath::VecDot, GgmlType::Q5_1),
            (DotPath::VecDot, GgmlType::Q8_0),
            (DotPath::VecDot, GgmlType::Q6_K),
            (DotPath::RepackGemv, GgmlType::Q4_K),
        ] {
            let Some(four) = dot_rows4_kernel(path, ty) else {
                assert!(
                    dot_band_kernel(path, ty).is_none(),
                    "{ty}: band without rows4"
                );
                continue;
            };
            let band = dot_band_kernel(path, ty).expect("a band kernel beside rows4");
            for (blocks, q) in [(1usize, 1usize), (3, 2), (2, 5)] {
                let n = blocks * ty.block_size();
                let rb = bytes_for(ty, n);
                let mut w = vec![0u8; 4 * q * rb];
                for row in w.chunks_exact_mut(rb) {
                    let wf: Vec<f32> = (0..n).map(|_| next() / 8.0).collect();
                    quantize_row(ty, &wf, row);
                }
                let a = quantize_activations(ty, &(0..n).map(|_| next()).collect::<Vec<_>>());
                let row = |i: usize| &w[i * rb..(i + 1) * rb];
                let mut want = vec![0u32; 4 * q];
                for k in 0..q {
                    let v = four([row(k), row(q + k), row(2 * q + k), row(3 * q + k)], &a);
                    for (j, v) in v.into_iter().enumerate() {
                        want[j * q + k] = v.to_bits();
                    }
                }
                let mut out = vec![0f32; 4 * q];
                band(&w, &a, &mut out);
                let got: Vec<u32> = out.iter().map(|v| v.to_bits()).collect();
                assert_eq!(
                    got, want,
                    "{ty} {path:?}: {q} rows a quarter of {blocks} blocks"
                );
                checked += 1;
            }
        }
        if crate::cpu_features::avx2_available() {
            assert_eq!(checked, 7 * 3, "every format's band kernel");
        }
    }

    /// The four-row kernels over a prepared group of four tokens (and of its
    /// first two) give every (row, token) the bits of the portable dot, for
    /// odd and even block counts (Q4_1 takes blocks two at a time while four
    /// remain, then one at a time) and rows that differ from each other.
    #[test]
    fn rows4x4_kernels_equal_portable_bit_for_bit() {
        let mut next = values(0x2545_f491_4f6c_dd1d);
        let mut checked = 0;
        for ty in [GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q8_0] {
            let Some(rows4) =
                dot4_kernel(DotPath::VecDot, ty).and_then(|k| k.rows4.map(|r| (k, r)))
            else {
                eprintln!("{ty}: no four-row group kernel on this CPU");
                continue;
            };
            let (kern, rows4) = rows4;
            for blocks in [1usize, 3, 4, 5, 8, 18] {
                let n = blocks * 32;
                let w: Vec<Vec<u8>> = (0..4)
                    .map(|_| {
                        let wf: Vec<f32> = (0..n).map(|_| next() / 20.0).collect();
                        let mut q = vec![0u8; bytes_for(ty, n)];
                        quantize_row(ty, &wf, &mut q);
                        q
                    })
                    .collect();
                let a: Vec<Vec<u8>> = (0..4)
                    .map(|_| quantize_activations(ty, &(0..n).map(|_| next()).collect::<Vec<_>>()))
                    .collect();
                let a4 = [&a[0][..], &a[1], &a[2], &a[3]];
                let mut pre = Vec::new();
                (kern.rows4_prepare)(a4, &mut pre);
                let w4 = [&w[0][..], &w[1], &w[2], &w[3]];
                let got = rows4(w4, &pre);
                let two = kern.rows4_two.expect("a two-token build beside the four")(w4, &pre);
                for r in 0..4 {
                    for t in 0..4 {
                        let want = (portable_kernels(ty).vec_dot)(n, &w[r], &a[t]);
                        assert_eq!(
                            got[r][t].to_bits(),
                            want.to_bits(),
                            "{ty} n={n} row {r} token {t}: {} vs {want}",
                            got[r][t]
                        );
                        let want2 = if t < 2 { want } else { 0.0 };
                        assert_eq!(
                            two[r][t].to_bits(),
                            want2.to_bits(),
                            "{ty} n={n} two tokens: row {r} token {t}"
                        );
                    }
                }
                checked += 1;
            }
        }
        if crate::avx512_in_use() {
            assert_eq!(checked, 3 * 6, "every format's kernel, six lengths");
        }
    }

    /// The four-row kernels' band builds give every (row, token) of a band
    /// of 4q rows the portable dot's bits at `out[t][row]` (the two-token
    /// build, asked for two tokens: the other two slices untouched), with
    /// the rows of each quarter distinct so that a mixed-up row order
    /// shows.
    #[test]
    fn rows4_band_kernels_equal_portable_bit_for_bit() {
        let mut next = values(0x6a09_e667_f3bc_c908);
        let mut checked = 0;
        for ty in [GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q8_0] {
            let Some(kern) = dot4_kernel(DotPath::VecDot, ty).filter(|k| k.rows4_band.is_some())
            else {
                eprintln!("{ty}: no four-row band kernel on this CPU");
                continue;
            };
            let builds = [
                (kern.rows4_band.expect("checked"), 4),
                (
                    kern.rows4_two_band
                        .expect("a two-token build beside the four"),
                    2,
                ),
            ];
            for (blocks, q) in [(1usize, 1usize), (5, 3), (18, 2)] {
                let n = blocks * 32;
                let rb = bytes_for(ty, n);
                let rows = 4 * q;
                let mut w = vec![0u8; rows * rb];
                for r in w.chunks_exact_mut(rb) {
                    let wf: Vec<f32> = (0..n).map(|_| next() / 20.0).collect();
                    quantize_row(ty, &wf, r);
                }
                let a: Vec<Vec<u8>> = (0..4)
                    .map(|_| quantize_activations(ty, &(0..n).map(|_| next()).collect::<Vec<_>>()))
                    .collect();
                let mut pre = Vec::new();
                (kern.rows4_prepare)([&a[0][..], &a[1], &a[2], &a[3]], &mut pre);
                for (band, real) in builds {
                    // Four tokens: all four slices; two: the first two
                    // (the others empty, as a group of two real tokens
                    // asks).
                    let mut out: [Vec<f32>; 4] = std::array::from_fn(|_| vec![f32::NAN; rows]);
                    let [o0, o1, o2, o3] = out.each_mut().map(|o| o.as_mut_slice());
                    let (o2, o3) = if real == 4 {
                        (o2, o3)
                    } else {
                        (&mut o2[..0], &mut o3[..0])
                    };
                    band(&w, &pre, [o0, o1, o2, o3]);
                    for (r, row) in w.chunks_exact(rb).enumerate() {
                        for (t, a) in a.iter().enumerate() {
                            let want = if t < real {
                                (portable_kernels(ty).vec_dot)(n, row, a)
                            } else {
                                f32::NAN
                            };
                            let got = out[t][r];
                            assert_eq!(
                                got.to_bits(),
                                want.to_bits(),
                                "{ty} n={n} {real} tokens: row {r} token {t}: {got} vs {want}"
                            );
                        }
                    }
                }
                checked += 1;
            }
        }
        if crate::avx512_in_use() {
            assert_eq!(checked, 3 * 3, "every format's band, three shapes");
        }
    }
}
