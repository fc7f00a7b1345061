//! Hand-written x86-64 kernels for the weight types that carry most of the
//! bytes of the test models (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q6_K), for
//! every kernel path ggml takes with them, and which of them exists for a
//! path and type on this CPU (the functions below, which fill the crate's
//! kernel table). Each computes the same exact integer lanes as its
//! portable original and then the same f32 operations in the same order, so
//! results are bit-identical (the table's tests compare every one with its
//! portable twin on random blocks).
//!
//! Files by block family and instruction set: `shared` (AVX2 helpers),
//! `legacy_avx2`, `legacy_vnni` (the lane sums by instruction set and the
//! AVX-VNNI/EVEX decode builds), `legacy_prompt`, `kquants_avx2`,
//! `float_avx2`, and `wide/` (AVX-512).
//!
//! Every function here is reached only through the kernel table, filled
//! only after `cpu_features` confirmed the CPU features each build needs;
//! that is the safety argument for each `unsafe` call.

use crate::{
    Chunk32, Dot4, DotPath, GgmlType as T, Prepare4Fn, Unpacked8, VecDot2Fn, VecDot4Fn,
    VecDot4x4Band2Fn, VecDot4x4BandFn, VecDot4x4Fn, VecDot8Fn, VecDotFn, VecDotRows4Fn,
};

/// Declares a safe entry point for a four-row AVX2 kernel body.
macro_rules! entry4 {
    ($name:ident => $body:ident) => {
        pub(super) fn $name(w: &[u8], a: [&[u8]; 4], pre: &[Chunk32]) -> [f32; 4] {
            // SAFETY: as `entry!`.
            unsafe { $body(w, a, pre) }
        }
    };
}

macro_rules! entry2 {
    ($name:ident => $body:ident) => {
        pub(super) fn $name(w0: &[u8], w1: &[u8], a: &[u8]) -> [f32; 2] {
            // SAFETY: as `entry!`.
            unsafe { $body(w0, w1, a) }
        }
    };
    ($name:ident => legacy $f:ty) => {
        pub(super) fn $name(w0: &[u8], w1: &[u8], a: &[u8]) -> [f32; 2] {
            #[target_feature(enable = "avx2,fma,f16c")]
            unsafe fn body(rows: [&[u8]; 2], a: &[u8]) -> [f32; 2] {
                unsafe { legacy_rows::<$f, Avx2Lanes, 2>(rows, a) }
            }
            // SAFETY: as `entry!`.
            unsafe { body([w0, w1], a) }
        }
    };
    ($name:ident => rows $body:ident) => {
        pub(super) fn $name(w0: &[u8], w1: &[u8], a: &[u8]) -> [f32; 2] {
            // SAFETY: as `entry!`.
            unsafe { $body::<2>([w0, w1], a) }
        }
    };
}

/// A band kernel (see [`crate::VecDotBandFn`]) from a four-row body that
/// is inlined into it: the loop over the band's quarters runs inside one
/// call with the target features, so the per-call setup and the latency of
/// each result's reduction overlap the next rows' work instead of ending
/// every call (kbench, one thread, rows in L2: Q5_0's four-row calls on
/// 28-block rows ran at ~90% of their rate on rows four times as long).
macro_rules! band {
    ($name:ident, $features:literal, $body:expr) => {
        pub(crate) fn $name(w: &[u8], a: &[u8], out: &mut [f32]) {
            #[target_feature(enable = $features)]
            unsafe fn body(w: &[u8], a: &[u8], out: &mut [f32]) {
                // SAFETY: this function has the body's target features.
                $crate::x86::band_loop!(w, out, |rows| unsafe { $body(rows, a) });
            }
            // SAFETY: handed out only after the features were detected
            // (`band_dot`).
            unsafe { body(w, a, out) }
        }
    };
}
pub(crate) use band;

/// The loop of a band kernel, written out in the caller (which has the
/// kernel's target features): for every k, rows k, q + k, 2q + k and
/// 3q + k of `w`'s four quarters through `$four`, whose four results go to
/// the same places of `out`.
macro_rules! band_loop {
    ($w:expr, $out:expr, |$rows:ident| $four:expr) => {{
        let (w, out): (&[u8], &mut [f32]) = ($w, $out);
        let q = out.len() / 4;
        let rb = w.len().checked_div(out.len()).unwrap_or(0);
        assert!(
            out.len() == 4 * q && w.len() == rb * out.len(),
            "a band of four quarters"
        );
        for k in 0..q {
            let row = |j: usize| &w[(j * q + k) * rb..(j * q + k + 1) * rb];
            let $rows = [row(0), row(1), row(2), row(3)];
            let v: [f32; 4] = $four;
            for (j, v) in v.into_iter().enumerate() {
                out[j * q + k] = v;
            }
        }
    }};
}
pub(crate) use band_loop;

/// The legacy formats' band kernels (AVX2, and AVX-VNNI's lane sums).
macro_rules! legacy_bands {
    ($($avx2:ident, $vnni:ident => $f:ty;)*) => {
        $(
            band!($avx2, "avx2,fma,f16c", legacy_rows::<$f, Avx2Lanes, 4>);
            band!($vnni, "avx2,fma,f16c,avxvnni", legacy_rows::<$f, VnniLanes, 4>);
        )*
    };
}

macro_rules! entry_rows4 {
    ($name:ident => $f:ty) => {
        pub(super) fn $name(rows: [&[u8]; 4], a: &[u8]) -> [f32; 4] {
            #[target_feature(enable = "avx2,fma,f16c")]
            unsafe fn body(rows: [&[u8]; 4], a: &[u8]) -> [f32; 4] {
                unsafe { legacy_rows::<$f, Avx2Lanes, 4>(rows, a) }
            }
            // SAFETY: as `entry!`.
            unsafe { body(rows, a) }
        }
    };
    ($name:ident => vnni $f:ty) => {
        pub(super) fn $name(rows: [&[u8]; 4], a: &[u8]) -> [f32; 4] {
            #[target_feature(enable = "avx2,fma,f16c,avxvnni")]
            unsafe fn body(rows: [&[u8]; 4], a: &[u8]) -> [f32; 4] {
                unsafe { legacy_rows::<$f, VnniLanes, 4>(rows, a) }
            }
            // SAFETY: AVX2, FMA, F16C and AVX-VNNI were detected before
            // this kernel was handed out (`rows4_dot`).
            unsafe { body(rows, a) }
        }
    };
    ($name:ident => evex $f:ty) => {
        pub(super) fn $name(rows: [&[u8]; 4], a: &[u8]) -> [f32; 4] {
            #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512vnni")]
            unsafe fn body(rows: [&[u8]; 4], a: &[u8]) -> [f32; 4] {
                unsafe { legacy_rows::<$f, EvexLanes, 4>(rows, a) }
            }
            // SAFETY: AVX2, FMA, F16C and AVX-512 F/VL/VNNI were detected
            // before this kernel was handed out (`rows4_dot`).
            unsafe { body(rows, a) }
        }
    };
    ($name:ident => rows $body:ident) => {
        pub(super) fn $name(rows: [&[u8]; 4], a: &[u8]) -> [f32; 4] {
            // SAFETY: as `entry!`.
            unsafe { $body::<4>(rows, a) }
        }
    };
}

/// Declares a safe entry point for an AVX2 kernel body.
macro_rules! entry {
    ($name:ident => $body:ident) => {
        pub(super) fn $name(_n: usize, w: &[u8], a: &[u8]) -> f32 {
            // SAFETY: reached only after AVX2, FMA and F16C were detected
            // (module comment); slice lengths were checked by the caller.
            unsafe { $body(w, a) }
        }
    };
}

// The entry-point macros above are textual: the kernel files come after.
mod float_avx2;
mod kquants_avx2;
mod legacy_avx2;
mod legacy_prompt;
mod legacy_vnni;
mod shared;
pub(crate) mod wide;

pub(crate) use float_avx2::*;
pub(crate) use kquants_avx2::*;
pub(crate) use legacy_avx2::*;
pub(crate) use legacy_prompt::*;
pub(crate) use legacy_vnni::*;
use shared::*;

/// The hand-written kernel for `ty`'s plain dot, else `twin`.
pub(crate) const fn dot_for(ty: T, twin: VecDotFn) -> VecDotFn {
    match ty {
        T::Q4_0 => dot_q4_0,
        T::Q4_1 => dot_q4_1,
        T::Q5_0 => dot_q5_0,
        T::Q5_1 => dot_q5_1,
        T::Q8_0 => dot_q8_0,
        T::Q4_K => dot_q4_k,
        T::Q6_K => dot_q6_k,
        _ => twin,
    }
}

/// The hand-written activation quantizer for `ty`, else `twin`.
pub(crate) const fn quant_for(ty: T, twin: crate::QuantizeFn) -> crate::QuantizeFn {
    match ty {
        T::Q8_0 => quantize_q8_0,
        T::Q8_1 => quantize_q8_1,
        _ => twin,
    }
}

/// The hand-written kernel for a non-default path, if there is one.
pub(crate) fn path_dot(path: DotPath, ty: T) -> Option<VecDotFn> {
    Some(match (path, ty) {
        (DotPath::RepackGemv | DotPath::RepackGemm, T::Q4_0) => dot_q4_0_repacked,
        (DotPath::RepackGemv, T::Q4_K) => dot_q4_k_gemv,
        (DotPath::RepackGemm, T::Q4_K) => dot_q4_k_gemm,
        (DotPath::Tiled, T::Q4_K) => dot_q4_k_tiled,
        (DotPath::Tiled, T::Q6_K) => dot_q6_k_tiled,
        _ => return None,
    })
}

/// The four-row kernel for `path` and `ty`, if there is one.
pub(crate) fn path_dot4(path: DotPath, ty: T) -> Option<Dot4> {
    let vnni = crate::cpu_features::vnni_available();
    let wide = crate::cpu_features::avx512_available();
    let (dot, prepare, dot8, unpacked): (
        VecDot4Fn,
        Prepare4Fn,
        Option<VecDot8Fn>,
        Option<Unpacked8>,
    ) = match (path, ty) {
        // The AVX-512 builds share one activation layout across their
        // packed and unpacked kernels.
        (DotPath::VecDot, T::Q4_1) if wide => (
            wide::dot4p_q4_1,
            wide::prepare_q4_1,
            Some(wide::dot8p_q4_1),
            Some(WIDE_Q4_1),
        ),
        (DotPath::VecDot, T::Q5_0) if wide => (
            wide::dot4p_q5_0,
            wide::prepare_signed,
            Some(wide::dot8p_q5_0),
            Some(WIDE_Q5_0),
        ),
        (DotPath::VecDot, T::Q8_0) if wide => (
            wide::dot4p_q8_0,
            wide::prepare_signed,
            Some(wide::dot8p_q8_0),
            Some(WIDE_Q8_0),
        ),
        (DotPath::VecDot, T::Q4_1) if vnni => {
            (dot4v_q4_1, prepare_q8_1, Some(dot8v_q4_1p), Some(VNNI_Q4_1))
        }
        (DotPath::VecDot, T::Q5_0) if vnni => {
            (dot4v_q5_0, prepare_q8_0, Some(dot8v_q5_0p), Some(VNNI_Q5_0))
        }
        (DotPath::VecDot, T::Q8_0) if vnni => (dot4v_q8_0, prepare_q8_0, Some(dot8v_q8_0p), None),
        (DotPath::VecDot, T::Q4_1) => (dot4_q4_1, prepare_q8_1, Some(dot8_q4_1), Some(AVX2_Q4_1)),
        (DotPath::VecDot, T::Q5_0) => (dot4_q5_0, prepare_q8_0, Some(dot8_q5_0), Some(AVX2_Q5_0)),
        (DotPath::VecDot, T::Q8_0) => (dot4_q8_0, prepare_q8_0, Some(dot8_q8_0), None),
        (DotPath::RepackGemm, T::Q4_K) if wide => {
            (wide::dot4_q4_k_gemm, prepare_none, None, Some(WIDE_Q4_K))
        }
        (DotPath::RepackGemm, T::Q4_K) => (dot4_q4_k_gemm, prepare_none, None, None),
        (DotPath::Tiled, T::Q6_K) if wide => (dot4_q6_k_tiled, prepare_none, None, Some(WIDE_Q6_K)),
        (DotPath::Tiled, T::Q6_K) => (dot4_q6_k_tiled, prepare_none, None, None),
        _ => return None,
    };
    // The four-row group kernels: four tokens, and the first two only.
    let (rows4, rows4_two): (Option<VecDot4x4Fn>, Option<VecDot4x4Fn>) = match (path, ty) {
        (DotPath::VecDot, T::Q4_1) if wide => (Some(wide::rows4x4_q4_1), Some(wide::rows4x2_q4_1)),
        (DotPath::VecDot, T::Q5_0) if wide => (Some(wide::rows4x4_q5_0), Some(wide::rows4x2_q5_0)),
        (DotPath::VecDot, T::Q8_0) if wide => (Some(wide::rows4x4_q8_0), Some(wide::rows4x2_q8_0)),
        _ => (None, None),
    };
    let (rows4_band, rows4_two_band): (Option<VecDot4x4BandFn>, Option<VecDot4x4BandFn>) =
        match (path, ty) {
            (DotPath::VecDot, T::Q4_1) if wide => {
                (Some(wide::band4x4_q4_1), Some(wide::band4x2_q4_1))
            }
            (DotPath::VecDot, T::Q5_0) if wide => {
                (Some(wide::band4x4_q5_0), Some(wide::band4x2_q5_0))
            }
            (DotPath::VecDot, T::Q8_0) if wide => {
                (Some(wide::band4x4_q8_0), Some(wide::band4x2_q8_0))
            }
            _ => (None, None),
        };
    let rows4_band2: Option<VecDot4x4Band2Fn> = match (path, ty) {
        (DotPath::VecDot, T::Q4_1) if wide => Some(wide::band8x4_q4_1),
        (DotPath::VecDot, T::Q5_0) if wide => Some(wide::band8x4_q5_0),
        (DotPath::VecDot, T::Q8_0) if wide => Some(wide::band8x4_q8_0),
        _ => None,
    };
    let rows4_prepare = match (path, ty) {
        (DotPath::VecDot, T::Q4_1) if wide => wide::prepare_q4_1_across,
        (DotPath::VecDot, T::Q8_0) if wide => wide::prepare_q8_0_across,
        _ => prepare,
    };
    Some(Dot4 {
        dot,
        prepare,
        dot8,
        unpacked,
        rows4,
        rows4_prepare,
        rows4_two,
        rows4_band,
        rows4_two_band,
        rows4_band2,
    })
}

/// The builds of one kernel this CPU runs: AVX2's, then AVX-VNNI's where
/// detected (for the tests, which hold every build to the same bits).
#[cfg(test)]
fn builds<K>(avx2: K, vnni: K) -> Vec<K> {
    if crate::cpu_features::vnni_available() {
        vec![avx2, vnni]
    } else {
        vec![avx2]
    }
}

/// The eight-row kernels on unpacked rows: AVX2's, AVX-VNNI's (the same
/// layouts), and AVX-512's (its own).
const AVX2_Q4_1: Unpacked8 = Unpacked8 {
    prepare: prepare_q8_1,
    unpack: unpack_q4_1,
    dot8: dot8u_q4_1,
    dot16: None,
};
const AVX2_Q5_0: Unpacked8 = Unpacked8 {
    prepare: prepare_q8_0,
    unpack: unpack_q5_0,
    dot8: dot8u_q5_0,
    dot16: None,
};
const VNNI_Q4_1: Unpacked8 = Unpacked8 {
    dot8: dot8v_q4_1,
    ..AVX2_Q4_1
};
const VNNI_Q5_0: Unpacked8 = Unpacked8 {
    dot8: dot8v_q5_0,
    ..AVX2_Q5_0
};
const WIDE_Q4_1: Unpacked8 = Unpacked8 {
    prepare: wide::prepare_q4_1,
    unpack: unpack_q4_1,
    dot8: wide::dot8_q4_1,
    dot16: Some(wide::dot16_q4_1),
};
const WIDE_Q5_0: Unpacked8 = Unpacked8 {
    prepare: wide::prepare_signed,
    unpack: wide::unpack_q5_0,
    dot8: wide::dot8_q5_0,
    dot16: Some(wide::dot16_q5_0),
};
/// Q4_K's prompt kernel on unpacked rows (AVX-512 only; no packed
/// eight-token kernel beside it: groups pair up only for this one).
const WIDE_Q4_K: Unpacked8 = Unpacked8 {
    prepare: wide::prepare_q4_k,
    unpack: wide::unpack_q4_k,
    dot8: wide::dot8_q4_k_unpacked,
    dot16: None,
};
/// Q6_K's prompt kernel on unpacked rows (AVX-512 only, as Q4_K's).
const WIDE_Q6_K: Unpacked8 = Unpacked8 {
    prepare: wide::prepare_q6_k,
    unpack: wide::unpack_q6_k,
    dot8: wide::dot8_q6_k_unpacked,
    dot16: None,
};
/// Q8_0 has only this one: its rows are bytes already, so unpacking pays
/// only where it lets one instruction serve two tokens.
const WIDE_Q8_0: Unpacked8 = Unpacked8 {
    prepare: wide::prepare_signed,
    unpack: wide::unpack_q8_0,
    dot8: wide::dot8_q8_0,
    dot16: Some(wide::dot16_q8_0),
};

/// Every build of `ty`'s eight-row kernel on unpacked rows that this CPU
/// runs (AVX2's; AVX-VNNI's and AVX-512's where detected), for the tests.
#[cfg(test)]
pub(crate) fn unpacked_kernels(ty: T) -> Vec<Unpacked8> {
    let (mut all, wide) = match ty {
        T::Q4_1 => (builds(AVX2_Q4_1, VNNI_Q4_1), WIDE_Q4_1),
        T::Q5_0 => (builds(AVX2_Q5_0, VNNI_Q5_0), WIDE_Q5_0),
        T::Q8_0 => (Vec::new(), WIDE_Q8_0),
        T::Q4_K => (Vec::new(), WIDE_Q4_K),
        T::Q6_K => (Vec::new(), WIDE_Q6_K),
        _ => return Vec::new(),
    };
    if crate::cpu_features::avx512_available() {
        all.push(wide);
    }
    all
}

/// The two-row decode kernel for `path` and `ty`, if there is one.
pub(crate) fn rows2_dot(path: DotPath, ty: T) -> Option<VecDot2Fn> {
    Some(match (path, ty) {
        (DotPath::VecDot, T::Q4_0) => dot2_q4_0,
        (DotPath::VecDot, T::Q4_1) => dot2_q4_1,
        (DotPath::VecDot, T::Q5_0) => dot2_q5_0,
        (DotPath::VecDot, T::Q5_1) => dot2_q5_1,
        (DotPath::VecDot, T::Q8_0) => dot2_q8_0,
        (DotPath::RepackGemv, T::Q4_K) => dot2_q4_k_gemv,
        (DotPath::VecDot, T::Q6_K) => dot2_q6_k,
        _ => return None,
    })
}

/// The four-row decode kernel for `path` and `ty`, if there is one.
pub(crate) fn rows4_dot(path: DotPath, ty: T) -> Option<VecDotRows4Fn> {
    decode_kernels(path, ty).map(|(rows4, _)| rows4)
}

/// The band kernel for `path` and `ty`: the same body as [`rows4_dot`]'s.
pub(crate) fn band_dot(path: DotPath, ty: T) -> Option<crate::VecDotBandFn> {
    decode_kernels(path, ty).map(|(_, band)| band)
}

/// Each four-row decode kernel beside the band kernel built from its body
/// (one table, so the two always agree).
fn decode_kernels(path: DotPath, ty: T) -> Option<(VecDotRows4Fn, crate::VecDotBandFn)> {
    let vnni = crate::cpu_features::vnni_available();
    let wide = crate::cpu_features::avx512_available();
    Some(match (path, ty) {
        (DotPath::VecDot, T::Q4_1) if wide => (wide::rows4a_q4_1, wide::banda_q4_1),
        (DotPath::VecDot, T::Q5_0) if wide => (wide::rows4z_q5_0, wide::band_q5_0),
        (DotPath::VecDot, T::Q4_0) if vnni => (rows4v_q4_0, bandv_q4_0),
        (DotPath::VecDot, T::Q4_1) if vnni => (rows4v_q4_1, bandv_q4_1),
        (DotPath::VecDot, T::Q5_0) if vnni => (rows4v_q5_0, bandv_q5_0),
        (DotPath::VecDot, T::Q5_1) if vnni => (rows4v_q5_1, bandv_q5_1),
        (DotPath::VecDot, T::Q8_0) if vnni => (rows4v_q8_0, bandv_q8_0),
        (DotPath::VecDot, T::Q4_0) if wide => (rows4e_q4_0, bande_q4_0),
        (DotPath::VecDot, T::Q5_1) if wide => (rows4e_q5_1, bande_q5_1),
        (DotPath::VecDot, T::Q8_0) if wide => (rows4e_q8_0, bande_q8_0),
        (DotPath::VecDot, T::Q4_0) => (rows4_q4_0, band_q4_0),
        (DotPath::VecDot, T::Q4_1) => (rows4_q4_1, band_q4_1),
        (DotPath::VecDot, T::Q5_0) => (rows4_q5_0, band_q5_0),
        (DotPath::VecDot, T::Q5_1) => (rows4_q5_1, band_q5_1),
        (DotPath::VecDot, T::Q8_0) => (rows4_q8_0, band_q8_0),
        (DotPath::RepackGemv, T::Q4_K) if wide => (wide::rows4z_q4_k_gemv, wide::band_q4_k_gemv),
        (DotPath::RepackGemv, T::Q4_K) => (rows4_q4_k_gemv, band_q4_k_gemv),
        (DotPath::VecDot, T::Q6_K) if wide => (wide::rows4z_q6_k, wide::band_q6_k),
        (DotPath::VecDot, T::Q6_K) => (rows4_q6_k, band_q6_k),
        _ => return None,
    })
}

/// A build of a format's packed prompt kernels: the preparation they
/// read, four tokens, eight tokens.
#[cfg(test)]
pub(crate) type PackedBuild = (Prepare4Fn, VecDot4Fn, VecDot8Fn);

/// Every build of the packed four- and eight-token prompt kernels for
/// `ty` this CPU runs (AVX2's; AVX-VNNI's and AVX-512's where detected),
/// each with the preparation it reads, for the tests.
#[cfg(test)]
pub(crate) fn packed_kernels(ty: T) -> Vec<PackedBuild> {
    let (avx2, vnni, wide): (PackedBuild, PackedBuild, PackedBuild) = match ty {
        T::Q4_1 => (
            (prepare_q8_1, dot4_q4_1, dot8_q4_1),
            (prepare_q8_1, dot4v_q4_1, dot8v_q4_1p),
            (wide::prepare_q4_1, wide::dot4p_q4_1, wide::dot8p_q4_1),
        ),
        T::Q5_0 => (
            (prepare_q8_0, dot4_q5_0, dot8_q5_0),
            (prepare_q8_0, dot4v_q5_0, dot8v_q5_0p),
            (wide::prepare_signed, wide::dot4p_q5_0, wide::dot8p_q5_0),
        ),
        T::Q8_0 => (
            (prepare_q8_0, dot4_q8_0, dot8_q8_0),
            (prepare_q8_0, dot4v_q8_0, dot8v_q8_0p),
            (wide::prepare_signed, wide::dot4p_q8_0, wide::dot8p_q8_0),
        ),
        _ => return Vec::new(),
    };
    let mut all = builds(avx2, vnni);
    if crate::cpu_features::avx512_available() {
        all.push(wide);
    }
    all
}

/// Every build of the packed four-token kernel of a K-quant path that has
/// more than one (AVX2's; AVX-512's where detected), for the tests.
#[cfg(test)]
pub(crate) fn gemm4_builds(path: DotPath, ty: T) -> Vec<crate::VecDot4Fn> {
    match (path, ty) {
        (DotPath::RepackGemm, T::Q4_K) if crate::cpu_features::avx512_available() => {
            vec![dot4_q4_k_gemm, wide::dot4_q4_k_gemm]
        }
        (DotPath::RepackGemm, T::Q4_K) => vec![dot4_q4_k_gemm],
        _ => Vec::new(),
    }
}

/// Every build of the four-row decode kernel for `ty` this CPU runs
/// (AVX2's; AVX-VNNI's where detected), for the tests.
#[cfg(test)]
pub(crate) fn rows4_kernels(ty: T) -> Vec<VecDotRows4Fn> {
    if matches!(ty, T::Q6_K | T::Q4_K) {
        // One AVX2 build (Q4_K's in the repacked-gemv order, its decode
        // path), and AVX-512's.
        let (avx2, avx512): (VecDotRows4Fn, VecDotRows4Fn) = if ty == T::Q6_K {
            (rows4_q6_k, wide::rows4z_q6_k)
        } else {
            (rows4_q4_k_gemv, wide::rows4z_q4_k_gemv)
        };
        let mut all = vec![avx2];
        if crate::cpu_features::avx512_available() {
            all.push(avx512);
        }
        return all;
    }
    let (avx2, vnni): (VecDotRows4Fn, VecDotRows4Fn) = match ty {
        T::Q4_0 => (rows4_q4_0, rows4v_q4_0),
        T::Q4_1 => (rows4_q4_1, rows4v_q4_1),
        T::Q5_0 => (rows4_q5_0, rows4v_q5_0),
        T::Q5_1 => (rows4_q5_1, rows4v_q5_1),
        T::Q8_0 => (rows4_q8_0, rows4v_q8_0),
        _ => return Vec::new(),
    };
    let mut all = builds(avx2, vnni);
    if crate::cpu_features::avx512_available() {
        match ty {
            T::Q4_0 => all.push(rows4e_q4_0),
            T::Q4_1 => all.push(wide::rows4a_q4_1),
            T::Q5_0 => all.push(wide::rows4z_q5_0),
            T::Q5_1 => all.push(rows4e_q5_1),
            T::Q8_0 => all.push(rows4e_q8_0),
            _ => {}
        }
    }
    all
}
