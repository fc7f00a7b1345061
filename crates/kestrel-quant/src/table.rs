//! The kernel table: for every [`GgmlType`], the kernels this machine runs
//! (the portable ones, or their AVX2, AVX-VNNI and AVX-512 builds as far as
//! `cpu_features` allows), chosen once per process into one
//! [`TypeKernels`] per type: its block kernels ([`Kernels`]) and, for each
//! [`DotPath`], that path's dot kernels ([`PathKernels`]). The crate's
//! kernel look-ups all read this table; the x86 module only says which
//! build exists for a path and type.

use std::sync::OnceLock;

#[cfg(target_arch = "x86_64")]
use crate::{cpu_features, x86};
use crate::{
    float, kquants, legacy, q8k, DequantizeFn, Dot4, DotPath, GgmlType, Kernels, QuantizeFn,
    VecDot2Fn, VecDotBandFn, VecDotFn, VecDotRows4Fn,
};

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
    type_kernels(ty).base
}

/// The SIMD build of `ty`'s kernels, if this CPU runs one.
pub fn simd_kernels(ty: GgmlType) -> Option<&'static Kernels> {
    #[cfg(target_arch = "x86_64")]
    if cpu_features::avx2_available() {
        let i = GgmlType::ALL.iter().position(|&t| t == ty)?;
        return Some(&AVX2[i]);
    }
    let _ = ty;
    None
}

/// The dot kernels of one [`DotPath`] for one type, as this machine runs
/// them.
#[derive(Clone, Copy)]
pub struct PathKernels {
    /// One weight row against one activation row.
    pub dot: VecDotFn,
    /// Two weight rows against one activation row (decode), where there
    /// is such a build.
    pub dot2: Option<VecDot2Fn>,
    /// Four weight rows against one activation row (decode), where there
    /// is such a build.
    pub rows4: Option<VecDotRows4Fn>,
    /// `rows4` over a whole band in one call (beside every `rows4`).
    pub band: Option<VecDotBandFn>,
    /// One weight row against four activation rows (prefill), where there
    /// is such a build.
    pub dot4: Option<Dot4>,
}

/// The paths in the order [`TypeKernels`] keeps them (`DotPath as usize`).
const PATHS: [DotPath; 4] = [
    DotPath::VecDot,
    DotPath::RepackGemv,
    DotPath::RepackGemm,
    DotPath::Tiled,
];

// `TypeKernels::path` indexes by `DotPath as usize`: the order must match.
const _: () = {
    let mut i = 0;
    while i < PATHS.len() {
        assert!(PATHS[i] as usize == i, "PATHS in DotPath's order");
        i += 1;
    }
};

/// Everything one type runs on this machine: its block kernels and each
/// path's dot kernels.
#[derive(Clone, Copy)]
pub struct TypeKernels {
    /// Dequantize, quantize, the activation type and the plain dot.
    pub base: &'static Kernels,
    paths: [PathKernels; 4],
}

impl TypeKernels {
    /// The dot kernels of `path` (a path `ty` does not have runs the plain
    /// dot's order).
    pub fn path(&self, path: DotPath) -> &PathKernels {
        &self.paths[path as usize]
    }

    fn select(ty: GgmlType) -> TypeKernels {
        let base = simd_kernels(ty).unwrap_or_else(|| portable_kernels(ty));
        TypeKernels {
            base,
            paths: PATHS.map(|path| PathKernels::select(path, ty, base)),
        }
    }
}

impl PathKernels {
    fn select(path: DotPath, ty: GgmlType, base: &'static Kernels) -> PathKernels {
        #[cfg(target_arch = "x86_64")]
        if cpu_features::avx2_available() {
            return PathKernels {
                dot: x86::path_dot(path, ty)
                    .or_else(|| path_dot!(path, ty, avx2_twin))
                    .unwrap_or(base.vec_dot),
                dot2: x86::rows2_dot(path, ty),
                rows4: x86::rows4_dot(path, ty),
                band: x86::band_dot(path, ty),
                dot4: x86::path_dot4(path, ty),
            };
        }
        PathKernels {
            dot: path_dot!(path, ty, plain).unwrap_or(base.vec_dot),
            dot2: None,
            rows4: None,
            band: None,
            dot4: None,
        }
    }
}

/// The kernels `ty` runs on this machine (the table is filled on first
/// use; the CPU features and switches it follows do not change).
pub fn type_kernels(ty: GgmlType) -> &'static TypeKernels {
    static TABLE: OnceLock<[TypeKernels; 15]> = OnceLock::new();
    let table = TABLE.get_or_init(|| GgmlType::ALL.map(TypeKernels::select));
    let i = GgmlType::ALL
        .iter()
        .position(|&t| t == ty)
        .expect("every GgmlType is in GgmlType::ALL");
    &table[i]
}

/// The dot kernel [`vec_dot_on`](crate::vec_dot_on) runs for `path` and `ty` (the SIMD build
/// where this CPU has one), to call once per weight row without re-resolving
/// it. It takes `(n, weight row, activation row)`; lengths are the caller's
/// to check (a mismatch gives a wrong number or a panic, never undefined
/// behaviour: kernels walk whole blocks of both slices).
pub fn dot_kernel(path: DotPath, ty: GgmlType) -> VecDotFn {
    type_kernels(ty).path(path).dot
}

/// The four-row kernel for `path` and `ty`, where there is one (prefill);
/// its results have the bits of [`dot_kernel`]'s, row by row.
pub fn dot4_kernel(path: DotPath, ty: GgmlType) -> Option<Dot4> {
    type_kernels(ty).path(path).dot4
}

/// The two-row decode kernel for `path` and `ty`, where there is one (on
/// AVX2: the legacy formats, Q4_K's gemv and Q6_K's vec_dot).
pub fn dot2_kernel(path: DotPath, ty: GgmlType) -> Option<VecDot2Fn> {
    type_kernels(ty).path(path).dot2
}

/// The four-row decode kernel for `path` and `ty`, where there is one (on
/// AVX2: the legacy formats' plain dot, Q4_K's gemv and Q6_K's vec_dot).
pub fn dot_rows4_kernel(path: DotPath, ty: GgmlType) -> Option<VecDotRows4Fn> {
    type_kernels(ty).path(path).rows4
}

/// The band kernel for `path` and `ty`, where there is one (wherever
/// [`dot_rows4_kernel`] has one).
pub fn dot_band_kernel(path: DotPath, ty: GgmlType) -> Option<VecDotBandFn> {
    type_kernels(ty).path(path).band
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
mod tests;
