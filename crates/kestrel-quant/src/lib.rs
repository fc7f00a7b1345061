//! kestrel-quant: ggml's tensor block formats. It owns the byte layouts of
//! every supported [`GgmlType`], converting rows to and from f32, quantizing
//! activations the way ggml-cpu does on x86-64 (AVX2), and the weight x
//! activation dot products that matrix multiplication is built from.
//!
//! The kernels are portable code that reproduces, bit for bit, the f32 order
//! of the ggml-cpu kernel llama.cpp would run for the same product on an
//! AVX2 machine ([`DotPath`] names which one). Which build of them runs is
//! chosen once per type in one table (`table`: a [`TypeKernels`] per type,
//! a [`PathKernels`] per path), from the CPU features and environment
//! switches that `cpu_features` owns; on x86-64 it picks builds of the same
//! code with AVX2/FMA enabled (`twins`) or hand-written ones (`x86`), so
//! faster implementations slot in per type without changing callers.
//!
//! Kernel files, one per block family: `float` (F32/F16/BF16), `legacy`
//! (Q4_0..Q8_1), `kquants/` (Q2_K..Q6_K) and `q8k` (Q8_K); their signatures
//! are in `signatures`.

// The twins' macros are textual: declared before the modules that use them.
#[macro_use]
mod twins;

mod cpu_features;
mod f16row;
mod float;
mod kquants;
mod lanes;
mod legacy;
mod q8k;
mod signatures;
mod table;
#[cfg(target_arch = "x86_64")]
mod x86;

pub use cpu_features::{avx2_in_use, avx512_in_use, vnni_in_use};
pub use f16row::{f16_dot, f16_mad, f16_scale, f16_to_f32_row, f32_mad_f16, f32_to_f16_row};
pub use float::{bf16_to_f32, f16_to_f32, f32_to_bf16, f32_to_f16, gelu_f16_table};
pub use kestrel_gguf::GgmlType;
pub use signatures::{
    Chunk32, DequantizeFn, Dot4, Kernels, Prepare4Fn, QuantizeFn, UnpackRowFn, Unpacked8,
    VecDot16UnpackedFn, VecDot2Fn, VecDot4Fn, VecDot4x4Band2Fn, VecDot4x4BandFn, VecDot4x4Fn,
    VecDot8Fn, VecDot8UnpackedFn, VecDotBandFn, VecDotFn, VecDotRows4Fn,
};
pub use table::{
    dot2_kernel, dot4_kernel, dot_band_kernel, dot_kernel, dot_rows4_kernel, kernels,
    portable_kernels, simd_kernels, type_kernels, PathKernels, TypeKernels,
};

use GgmlType as T;

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
