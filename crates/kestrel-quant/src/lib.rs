//! kestrel-quant: ggml's tensor block formats. It owns the byte layouts of
//! every supported [`GgmlType`], converting rows to and from f32, quantizing
//! activations the way ggml-cpu does on x86-64 (AVX2), and the weight x
//! activation dot products that matrix multiplication is built from.
//!
//! Everything here is portable scalar code, meant as the readable reference
//! that SIMD kernels get tested against. Each type's kernels are collected in
//! a [`Kernels`] table; the free functions dispatch through [`kernels`], so a
//! faster implementation can later be swapped in per type without changing
//! callers.
//!
//! Kernel files, one per block family: `float` (F32/F16/BF16), `legacy`
//! (Q4_0..Q8_1), `kquants/` (Q2_K..Q6_K) and `q8k` (Q8_K).

mod float;
mod kquants;
mod lanes;
mod legacy;
mod q8k;

pub use float::{bf16_to_f32, f16_to_f32, f32_to_bf16, f32_to_f16};
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

/// The portable kernels, indexed in [`GgmlType::ALL`] order. The pairings
/// follow ggml-cpu's `type_traits_cpu`; Q8_1 and Q8_K have no weight dot in
/// ggml, so they are paired with themselves here for completeness.
static PORTABLE: [Kernels; 15] = [
    k(
        T::F32,
        float::dequantize_f32,
        float::quantize_f32,
        T::F32,
        float::vec_dot_f32,
    ),
    k(
        T::F16,
        float::dequantize_f16,
        float::quantize_f16,
        T::F16,
        float::vec_dot_f16,
    ),
    k(
        T::Q4_0,
        legacy::dequantize_q4_0,
        legacy::quantize_q4_0,
        T::Q8_0,
        legacy::vec_dot_q4_0_q8_0,
    ),
    k(
        T::Q4_1,
        legacy::dequantize_q4_1,
        legacy::quantize_q4_1,
        T::Q8_1,
        legacy::vec_dot_q4_1_q8_1,
    ),
    k(
        T::Q5_0,
        legacy::dequantize_q5_0,
        legacy::quantize_q5_0,
        T::Q8_0,
        legacy::vec_dot_q5_0_q8_0,
    ),
    k(
        T::Q5_1,
        legacy::dequantize_q5_1,
        legacy::quantize_q5_1,
        T::Q8_1,
        legacy::vec_dot_q5_1_q8_1,
    ),
    k(
        T::Q8_0,
        legacy::dequantize_q8_0,
        legacy::quantize_q8_0,
        T::Q8_0,
        legacy::vec_dot_q8_0_q8_0,
    ),
    k(
        T::Q8_1,
        legacy::dequantize_q8_1,
        legacy::quantize_q8_1,
        T::Q8_1,
        legacy::vec_dot_q8_1_q8_1,
    ),
    k(
        T::Q2_K,
        kquants::q2k::dequantize,
        kquants::q2k::quantize,
        T::Q8_K,
        kquants::q2k::vec_dot,
    ),
    k(
        T::Q3_K,
        kquants::q3k::dequantize,
        kquants::q3k::quantize,
        T::Q8_K,
        kquants::q3k::vec_dot,
    ),
    k(
        T::Q4_K,
        kquants::q4k::dequantize,
        kquants::q4k::quantize,
        T::Q8_K,
        kquants::q4k::vec_dot,
    ),
    k(
        T::Q5_K,
        kquants::q5k::dequantize,
        kquants::q5k::quantize,
        T::Q8_K,
        kquants::q5k::vec_dot,
    ),
    k(
        T::Q6_K,
        kquants::q6k::dequantize,
        kquants::q6k::quantize,
        T::Q8_K,
        kquants::q6k::vec_dot,
    ),
    k(
        T::Q8_K,
        q8k::dequantize_q8_k,
        q8k::quantize_q8_k,
        T::Q8_K,
        q8k::vec_dot_q8_k_q8_k,
    ),
    k(
        T::BF16,
        float::dequantize_bf16,
        float::quantize_bf16,
        T::BF16,
        float::vec_dot_bf16,
    ),
];

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

/// The kernels used for `ty` on this machine. For now always the portable
/// ones; SIMD variants will be selected here.
pub fn kernels(ty: GgmlType) -> &'static Kernels {
    portable_kernels(ty)
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
    (kern.vec_dot)(n, w, a)
}

/// Quantize f32 activations into `vec_dot_type(ty)` format.
pub fn quantize_activations(ty: GgmlType, x: &[f32]) -> Vec<u8> {
    let at = vec_dot_type(ty);
    let mut out = vec![0u8; bytes_for(at, x.len())];
    quantize_row(at, x, &mut out);
    out
}
