//! Hand-written AVX2/FMA/F16C dot kernels for the weight types that carry
//! most of the bytes of the test models (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K,
//! Q6_K), for every kernel path ggml takes with them. Each computes the same
//! exact integer lanes as its portable original and then the same f32
//! operations in the same order, so results are bit-identical (a unit test in
//! lib.rs compares every one with its portable twin on random blocks).
//!
//! Every function here is reached only through the AVX2 kernel table or
//! [`path_dot`], both used only after `cpu_features::avx2_available()` confirmed the
//! CPU features; that is the safety argument for each `unsafe` call below.

use std::arch::x86_64::*;

use crate::{
    Chunk32, Dot4, DotPath, GgmlType as T, Prepare4Fn, Unpacked8, VecDot2Fn, VecDot4Fn,
    VecDot4x4Band2Fn, VecDot4x4BandFn, VecDot4x4Fn, VecDot8Fn, VecDotFn, VecDotRows4Fn,
};

pub(crate) mod wide;

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

/// Declares a safe entry point for a four-row AVX2 kernel body.
macro_rules! entry4 {
    ($name:ident => $body:ident) => {
        fn $name(w: &[u8], a: [&[u8]; 4], pre: &[Chunk32]) -> [f32; 4] {
            // SAFETY: as `entry!`.
            unsafe { $body(w, a, pre) }
        }
    };
}

entry4!(dot4_q4_k_gemm => q4_k_gemm_x4);
entry4!(dot4_q6_k_tiled => q6_k_tiled_x4);

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

macro_rules! entry2 {
    ($name:ident => $body:ident) => {
        fn $name(w0: &[u8], w1: &[u8], a: &[u8]) -> [f32; 2] {
            // SAFETY: as `entry!`.
            unsafe { $body(w0, w1, a) }
        }
    };
    ($name:ident => legacy $f:ty) => {
        fn $name(w0: &[u8], w1: &[u8], a: &[u8]) -> [f32; 2] {
            #[target_feature(enable = "avx2,fma,f16c")]
            unsafe fn body(rows: [&[u8]; 2], a: &[u8]) -> [f32; 2] {
                unsafe { legacy_rows::<$f, Avx2Lanes, 2>(rows, a) }
            }
            // SAFETY: as `entry!`.
            unsafe { body([w0, w1], a) }
        }
    };
    ($name:ident => rows $body:ident) => {
        fn $name(w0: &[u8], w1: &[u8], a: &[u8]) -> [f32; 2] {
            // SAFETY: as `entry!`.
            unsafe { $body::<2>([w0, w1], a) }
        }
    };
}

entry2!(dot2_q4_0 => legacy Q40);
entry2!(dot2_q4_1 => legacy Q41);
entry2!(dot2_q5_0 => legacy Q50);
entry2!(dot2_q5_1 => legacy Q51);
entry2!(dot2_q8_0 => legacy Q80);
entry2!(dot2_q4_k_gemv => rows q4_k_gemv_rows);
entry2!(dot2_q6_k => rows q6_k_vec_dot_rows);

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

legacy_bands! {
    band_q4_0, bandv_q4_0 => Q40;
    band_q4_1, bandv_q4_1 => Q41;
    band_q5_0, bandv_q5_0 => Q50;
    band_q5_1, bandv_q5_1 => Q51;
    band_q8_0, bandv_q8_0 => Q80;
}
// The same with AVX-512's EVEX `vpdpbusd` on 256-bit registers, for the
// formats the AVX-512 builds leave to these (CPUs with AVX-512 VNNI but no
// AVX-VNNI: Zen 4, Ice Lake, Cascade Lake).
band!(
    bande_q4_0,
    "avx2,fma,f16c,avx512f,avx512vl,avx512vnni",
    legacy_rows::<Q40, EvexLanes, 4>
);
band!(
    bande_q5_1,
    "avx2,fma,f16c,avx512f,avx512vl,avx512vnni",
    legacy_rows::<Q51, EvexLanes, 4>
);
band!(
    bande_q8_0,
    "avx2,fma,f16c,avx512f,avx512vl,avx512vnni",
    legacy_rows::<Q80, EvexLanes, 4>
);
band!(band_q4_k_gemv, "avx2,fma,f16c", q4_k_gemv_rows::<4>);
band!(band_q6_k, "avx2,fma,f16c", q6_k_vec_dot_rows::<4>);

macro_rules! entry_rows4 {
    ($name:ident => $f:ty) => {
        fn $name(rows: [&[u8]; 4], a: &[u8]) -> [f32; 4] {
            #[target_feature(enable = "avx2,fma,f16c")]
            unsafe fn body(rows: [&[u8]; 4], a: &[u8]) -> [f32; 4] {
                unsafe { legacy_rows::<$f, Avx2Lanes, 4>(rows, a) }
            }
            // SAFETY: as `entry!`.
            unsafe { body(rows, a) }
        }
    };
    ($name:ident => vnni $f:ty) => {
        fn $name(rows: [&[u8]; 4], a: &[u8]) -> [f32; 4] {
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
        fn $name(rows: [&[u8]; 4], a: &[u8]) -> [f32; 4] {
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
        fn $name(rows: [&[u8]; 4], a: &[u8]) -> [f32; 4] {
            // SAFETY: as `entry!`.
            unsafe { $body::<4>(rows, a) }
        }
    };
}

entry_rows4!(rows4_q4_k_gemv => rows q4_k_gemv_rows);
entry_rows4!(rows4_q6_k => rows q6_k_vec_dot_rows);

entry_rows4!(rows4_q4_0 => Q40);
entry_rows4!(rows4_q4_1 => Q41);
entry_rows4!(rows4_q5_0 => Q50);
entry_rows4!(rows4_q5_1 => Q51);
entry_rows4!(rows4_q8_0 => Q80);
entry_rows4!(rows4v_q4_0 => vnni Q40);
entry_rows4!(rows4v_q4_1 => vnni Q41);
entry_rows4!(rows4v_q5_0 => vnni Q50);
entry_rows4!(rows4v_q5_1 => vnni Q51);
entry_rows4!(rows4v_q8_0 => vnni Q80);
entry_rows4!(rows4e_q4_0 => evex Q40);
entry_rows4!(rows4e_q5_1 => evex Q51);
entry_rows4!(rows4e_q8_0 => evex Q80);

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

/// Declares a safe entry point for an AVX2 kernel body.
macro_rules! entry {
    ($name:ident => $body:ident) => {
        fn $name(_n: usize, w: &[u8], a: &[u8]) -> f32 {
            // SAFETY: reached only after AVX2, FMA and F16C were detected
            // (module comment); slice lengths were checked by the caller.
            unsafe { $body(w, a) }
        }
    };
}

entry!(dot_q4_0 => q4_0);
entry!(dot_q4_0_repacked => q4_0_repacked);
entry!(dot_q4_1 => q4_1);
entry!(dot_q5_0 => q5_0);
entry!(dot_q5_1 => q5_1);
entry!(dot_q8_0 => q8_0);
entry!(dot_q4_k => q4_k_vec_dot);
entry!(dot_q4_k_gemv => q4_k_gemv);
entry!(dot_q4_k_gemm => q4_k_gemm);
entry!(dot_q4_k_tiled => q4_k_tiled);
entry!(dot_q6_k => q6_k_vec_dot);
entry!(dot_q6_k_tiled => q6_k_tiled);

// ---------------------------------------------------------------------------
// Shared pieces.
// ---------------------------------------------------------------------------

/// `v` unchanged, but opaque to the optimiser. Where only some lanes of a
/// half-to-float conversion are used, LLVM narrows the zero-extending move
/// into a `vpinsrw` that merges into whatever register is free, often a
/// loop's accumulator; the false dependency then serialises the loop.
#[inline(always)]
fn opaque(v: __m128i) -> __m128i {
    let mut v = v;
    // SAFETY: an empty asm block that only claims to modify `v`.
    unsafe {
        std::arch::asm!("/* {0} */", inout(xmm_reg) v, options(pure, nomem, nostack, preserves_flags));
    }
    v
}

/// The IEEE half at `at`, widened with F16C (exact, as every conversion).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn f16_at(b: &[u8], at: usize) -> f32 {
    let bits = u16::from_le_bytes([b[at], b[at + 1]]);
    _mm_cvtss_f32(_mm_cvtph_ps(opaque(_mm_cvtsi32_si128(i32::from(bits)))))
}

/// The halves at `bw[at_w]` and `ba[at_a]`, widened together.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn f16_pair(bw: &[u8], at_w: usize, ba: &[u8], at_a: usize) -> (f32, f32) {
    let w = u32::from(u16::from_le_bytes([bw[at_w], bw[at_w + 1]]));
    let a = u32::from(u16::from_le_bytes([ba[at_a], ba[at_a + 1]]));
    let v = _mm_cvtph_ps(_mm_cvtsi32_si128((w | (a << 16)) as i32));
    (_mm_cvtss_f32(v), _mm_cvtss_f32(_mm_movehdup_ps(v)))
}

/// The two adjacent halves at `b[at..at + 4]`, widened together.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn f16x2_at(b: &[u8], at: usize) -> (f32, f32) {
    let bits = u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
    let v = _mm_cvtph_ps(opaque(_mm_cvtsi32_si128(bits as i32)));
    (_mm_cvtss_f32(v), _mm_cvtss_f32(_mm_movehdup_ps(v)))
}

/// The product of the halves at `bw[at_w]` and `ba[at_a]`, in f32.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn f16_product(bw: &[u8], at_w: usize, ba: &[u8], at_a: usize) -> f32 {
    let (w, a) = f16_pair(bw, at_w, ba, at_a);
    w * a
}

/// 32 bytes at `at` (the caller guarantees `at + 32 <= b.len()`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load32(b: &[u8], at: usize) -> __m256i {
    debug_assert!(at + 32 <= b.len());
    // SAFETY: in bounds per the caller; unaligned load.
    unsafe { _mm256_loadu_si256(b.as_ptr().add(at) as *const __m256i) }
}

/// Lane l = sum of w[j] * a[j] for j in 4l..4l+4, both signed bytes, exact
/// (ggml's sign trick: |w| times a with w's sign, pairs in i16 then i32).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn lanes_signed(w: __m256i, a: __m256i) -> __m256i {
    let p = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w));
    _mm256_madd_epi16(p, _mm256_set1_epi16(1))
}

/// As [`lanes_signed`] for unsigned weight bytes (below 128).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn lanes_unsigned(w: __m256i, a: __m256i) -> __m256i {
    _mm256_madd_epi16(_mm256_maddubs_epi16(w, a), _mm256_set1_epi16(1))
}

/// As [`lanes_unsigned`], each i16 pair sum scaled by `scale` first (still
/// exact: the pair sums are below 2^14 and the scales below 2^7).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn lanes_scaled(w: __m256i, a: __m256i, scale: __m256i) -> __m256i {
    _mm256_madd_epi16(_mm256_maddubs_epi16(w, a), scale)
}

/// The 8 f32 lanes reduced in `hsum_float_8`'s order.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn hsum_ps(v: __m256) -> f32 {
    let mut x = [0f32; 8];
    // SAFETY: x holds 8 floats.
    unsafe { _mm256_storeu_ps(x.as_mut_ptr(), v) };
    crate::lanes::hsum8(&x)
}

/// Sum of the 8 i32 lanes (exact: integer adds in any order).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn hsum_epi32(v: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01_00_11_10>(s));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s));
    _mm_cvtsi128_si32(s)
}

/// 16 nibble bytes at `at` as 32 bytes: low nibbles are elements 0..16,
/// high nibbles 16..32.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn nibbles32(b: &[u8], at: usize) -> __m256i {
    debug_assert!(at + 16 <= b.len());
    unsafe {
        // SAFETY: 16 bytes in bounds per the block layout.
        // Both halves from one broadcast load, the upper one shifted by a
        // nibble: no cross-lane shuffle (those queue on one port).
        let lo = _mm_loadu_si128(b.as_ptr().add(at) as *const __m128i);
        let both = _mm256_broadcastsi128_si256(lo);
        let shifted = _mm256_srlv_epi32(both, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4));
        _mm256_and_si256(shifted, _mm256_set1_epi8(0x0f))
    }
}

/// 0xff in byte j where bit j of `qh` is set, else 0.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn bit_mask(qh: u32) -> __m256i {
    let spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32(qh as i32),
        _mm256_setr_epi64x(
            0x0000_0000_0000_0000,
            0x0101_0101_0101_0101,
            0x0202_0202_0202_0202,
            0x0303_0303_0303_0303,
        ),
    );
    let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
    _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit)
}

/// 0x10 in byte j where bit j of `qh` is set, else 0.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn fifth_bits(qh: u32) -> __m256i {
    _mm256_and_si256(bit_mask(qh), _mm256_set1_epi8(0x10))
}

/// Q5_0 quants minus 16 as signed bytes: a nibble whose fifth bit is clear
/// gets 0xf0 or-ed in, which is the nibble minus 16 in two's complement.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q5_0_quants(bw: &[u8]) -> __m256i {
    let high = _mm256_andnot_si256(bit_mask(qh_at(bw, 2)), _mm256_set1_epi8(0xf0u8 as i8));
    _mm256_or_si256(unsafe { nibbles32(bw, 6) }, high)
}

fn qh_at(b: &[u8], at: usize) -> u32 {
    // One four-byte load (byte by byte, LLVM assembled it with shifts).
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

// ---------------------------------------------------------------------------
// Legacy formats (see legacy.rs for layouts and the lane order).
// ---------------------------------------------------------------------------

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_0(w: &[u8], a: &[u8]) -> f32 {
    let mut acc = _mm256_setzero_ps();
    for (bw, ba) in w.chunks_exact(18).zip(a.chunks_exact(34)) {
        let d = f16_product(bw, 0, ba, 0);
        unsafe {
            let q = _mm256_sub_epi8(nibbles32(bw, 2), _mm256_set1_epi8(8));
            let s = _mm256_cvtepi32_ps(lanes_signed(q, load32(ba, 2)));
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d), s, acc);
        }
    }
    unsafe { hsum_ps(acc) }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_0_repacked(w: &[u8], a: &[u8]) -> f32 {
    let mut acc = 0f32;
    for (bw, ba) in w.chunks_exact(18).zip(a.chunks_exact(34)) {
        let s = unsafe {
            let q = _mm256_sub_epi8(nibbles32(bw, 2), _mm256_set1_epi8(8));
            hsum_epi32(lanes_signed(q, load32(ba, 2)))
        };
        acc = (s as f32).mul_add(f16_product(bw, 0, ba, 0), acc);
    }
    acc
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_1(w: &[u8], a: &[u8]) -> f32 {
    let mut acc = _mm256_setzero_ps();
    let mut summs = 0f32;
    for (bw, ba) in w.chunks_exact(20).zip(a.chunks_exact(36)) {
        let ((dw, m), (da, sa)) = (f16x2_at(bw, 0), f16x2_at(ba, 0));
        summs = m.mul_add(sa, summs);
        let d = dw * da;
        unsafe {
            let s = _mm256_cvtepi32_ps(lanes_unsigned(nibbles32(bw, 4), load32(ba, 4)));
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d), s, acc);
        }
    }
    unsafe { hsum_ps(acc) + summs }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q5_0(w: &[u8], a: &[u8]) -> f32 {
    let mut acc = _mm256_setzero_ps();
    for (bw, ba) in w.chunks_exact(22).zip(a.chunks_exact(34)) {
        let d = f16_product(bw, 0, ba, 0);
        unsafe {
            let q = q5_0_quants(bw);
            let s = _mm256_cvtepi32_ps(lanes_signed(q, load32(ba, 2)));
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d), s, acc);
        }
    }
    unsafe { hsum_ps(acc) }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q5_1(w: &[u8], a: &[u8]) -> f32 {
    let mut acc = _mm256_setzero_ps();
    let mut summs = 0f32;
    for (bw, ba) in w.chunks_exact(24).zip(a.chunks_exact(36)) {
        let ((dw, m), (da, sa)) = (f16x2_at(bw, 0), f16x2_at(ba, 0));
        summs = m.mul_add(sa, summs);
        let d = dw * da;
        unsafe {
            let q = _mm256_or_si256(nibbles32(bw, 8), fifth_bits(qh_at(bw, 4)));
            let s = _mm256_cvtepi32_ps(lanes_unsigned(q, load32(ba, 4)));
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d), s, acc);
        }
    }
    unsafe { hsum_ps(acc) + summs }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q8_0(w: &[u8], a: &[u8]) -> f32 {
    let mut acc = _mm256_setzero_ps();
    for (bw, ba) in w.chunks_exact(34).zip(a.chunks_exact(34)) {
        let d = f16_product(bw, 0, ba, 0);
        unsafe {
            let s = _mm256_cvtepi32_ps(lanes_signed(load32(bw, 2), load32(ba, 2)));
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d), s, acc);
        }
    }
    unsafe { hsum_ps(acc) }
}

/// A legacy block format as the several-row decode kernels see it.
trait Legacy {
    /// Bytes per weight block.
    const WB: usize;
    /// Quants are signed (Q8_0 activations; else unsigned with Q8_1's m*s).
    const SIGNED: bool;
    /// The 32 quants of block `bw` as bytes.
    unsafe fn unpack(bw: &[u8]) -> __m256i;
    /// Signed formats stored as unsigned codes minus a constant (Q4_0: 8,
    /// Q5_0: 16): the constant, and the codes as bytes.
    const OFFSET: i8 = 0;
    unsafe fn unpack_codes(bw: &[u8]) -> __m256i {
        // SAFETY: as `unpack`.
        unsafe { Self::unpack(bw) }
    }
}

struct Q40;
struct Q41;
struct Q50;
struct Q51;
struct Q80;

impl Legacy for Q40 {
    const WB: usize = 18;
    const SIGNED: bool = true;
    #[inline(always)]
    unsafe fn unpack(bw: &[u8]) -> __m256i {
        // SAFETY: AVX2 is enabled in every caller (the kernels below).
        unsafe { _mm256_sub_epi8(nibbles32(bw, 2), _mm256_set1_epi8(8)) }
    }
    const OFFSET: i8 = 8;
    #[inline(always)]
    unsafe fn unpack_codes(bw: &[u8]) -> __m256i {
        unsafe { nibbles32(bw, 2) }
    }
}

impl Legacy for Q41 {
    const WB: usize = 20;
    const SIGNED: bool = false;
    #[inline(always)]
    unsafe fn unpack(bw: &[u8]) -> __m256i {
        unsafe { nibbles32(bw, 4) }
    }
}

impl Legacy for Q50 {
    const WB: usize = 22;
    const SIGNED: bool = true;
    #[inline(always)]
    unsafe fn unpack(bw: &[u8]) -> __m256i {
        unsafe { q5_0_quants(bw) }
    }
    const OFFSET: i8 = 16;
    #[inline(always)]
    unsafe fn unpack_codes(bw: &[u8]) -> __m256i {
        unsafe { _mm256_or_si256(nibbles32(bw, 6), fifth_bits(qh_at(bw, 2))) }
    }
}

/// Q5_0 for CPUs with AVX-512 BW/VL: the fifth bits go in with one
/// masked add of 16 (the nibbles are below 16), `qh` itself the mask,
/// instead of a byte shuffle, an and, a compare and another and. Same
/// bytes.
pub(crate) struct Q50Bw;

impl Legacy for Q50Bw {
    const WB: usize = 22;
    const SIGNED: bool = true;
    #[inline(always)]
    unsafe fn unpack(bw: &[u8]) -> __m256i {
        // SAFETY: as `unpack_codes`.
        unsafe {
            let nib = nibbles32(bw, 6);
            _mm256_mask_sub_epi8(nib, !qh_at(bw, 2), nib, _mm256_set1_epi8(0x10))
        }
    }
    const OFFSET: i8 = 16;
    #[inline(always)]
    unsafe fn unpack_codes(bw: &[u8]) -> __m256i {
        // SAFETY: AVX-512 BW/VL are enabled in every caller (the entries
        // that use this format, handed out after they were detected).
        unsafe {
            let nib = nibbles32(bw, 6);
            _mm256_mask_add_epi8(nib, qh_at(bw, 2), nib, _mm256_set1_epi8(0x10))
        }
    }
}

impl Legacy for Q51 {
    const WB: usize = 24;
    const SIGNED: bool = false;
    #[inline(always)]
    unsafe fn unpack(bw: &[u8]) -> __m256i {
        unsafe { _mm256_or_si256(nibbles32(bw, 8), fifth_bits(qh_at(bw, 4))) }
    }
}

impl Legacy for Q80 {
    const WB: usize = 34;
    const SIGNED: bool = true;
    #[inline(always)]
    unsafe fn unpack(bw: &[u8]) -> __m256i {
        unsafe { load32(bw, 2) }
    }
}

/// A several-row legacy-format decode call's block count (the first row's)
/// and activation block bytes (Q8_1's 36 with the unsigned formats, else
/// Q8_0's 34), once checked against every row and the activation row: one
/// check stands for the kernel's reads.
#[inline(always)]
fn legacy_shape<F: Legacy>(rows: &[&[u8]], a: &[u8]) -> (usize, usize) {
    let ab = if F::SIGNED { 34 } else { 36 };
    let blocks = rows[0].len() / F::WB;
    assert!(
        rows.iter().all(|r| r.len() >= blocks * F::WB),
        "weight rows"
    );
    assert!(a.len() >= blocks * ab, "activation row");
    (blocks, ab)
}

/// A legacy-format dot of `N` weight rows against one activation row
/// (decode): each row's f32 steps are its one-row kernel's, while the
/// activation block and its scale are loaded once for all rows.
/// With one-instruction lane sums (VNNI) the offset formats multiply
/// their unsigned codes and start each lane at -offset x the activations'
/// lane sums (shared by the rows): the same exact sums, fewer steps.
/// Always inlined into entries that enable AVX2 (and AVX-VNNI for
/// `VnniLanes`).
#[inline(always)]
unsafe fn legacy_rows<F: Legacy, L: Lanes, const N: usize>(rows: [&[u8]; N], a: &[u8]) -> [f32; N] {
    let (blocks, ab) = legacy_shape::<F>(&rows, a);
    let starts = rows.map(|r| r.as_ptr());
    let mut acc = [_mm256_setzero_ps(); N];
    let mut summs = [0f32; N];
    for i in 0..blocks {
        let ba = &a[i * ab..(i + 1) * ab];
        let act = unsafe { load32(ba, ab - 32) };
        let (da, sa) = if F::SIGNED {
            (f16_at(ba, 0), 0.0)
        } else {
            f16x2_at(ba, 0)
        };
        // Four rows of a signed format: their scales widened by one
        // conversion and multiplied by one instruction (each product
        // rounded as the one-row kernel rounds it), then each spread from
        // memory by a load. Converting and spreading row by row kept the
        // shuffle port the busiest (Q5_0, one thread, L2-resident rows:
        // 11.4 -> 15.3 GB/s). The unsigned formats' (d, m) pairs cost more
        // to gather than they save.
        let by4 = N == 4 && F::SIGNED;
        let d4 = if by4 {
            let mut bits = 0u64;
            for (r, start) in starts.iter().enumerate() {
                // SAFETY: the first two bytes of block i (i < blocks).
                let h = unsafe {
                    u16::from_le_bytes([*start.add(i * F::WB), *start.add(i * F::WB + 1)])
                };
                bits |= u64::from(h) << (16 * r);
            }
            let dw = _mm_cvtph_ps(_mm_cvtsi64_si128(bits as i64));
            let mut d = [0f32; 4];
            // SAFETY: d holds four floats.
            unsafe { _mm_storeu_ps(d.as_mut_ptr(), _mm_mul_ps(dw, _mm_set1_ps(da))) };
            // Kept in memory, so that the spreads below are loads.
            std::hint::black_box(d)
        } else {
            [0f32; 4]
        };
        let offset_form = L::FUSED_ADD && F::OFFSET != 0;
        let start = if offset_form {
            let s = unsafe { L::lanes(_mm256_set1_epi8(F::OFFSET), act) };
            _mm256_sub_epi32(_mm256_setzero_si256(), s)
        } else {
            _mm256_setzero_si256()
        };
        for r in 0..N {
            let bw = if by4 {
                // SAFETY: i < blocks and every row holds blocks * WB bytes
                // (asserted above): the slice is in bounds. (Slicing the
                // row kept two compares and branches per row and block;
                // Q4_1's loop ran slower without them, so it keeps them.)
                unsafe { std::slice::from_raw_parts(starts[r].add(i * F::WB), F::WB) }
            } else {
                &rows[r][i * F::WB..(i + 1) * F::WB]
            };
            let l = if offset_form {
                unsafe { L::lanes_plus(start, F::unpack_codes(bw), act) }
            } else if F::SIGNED {
                let q = unsafe { F::unpack(bw) };
                unsafe { L::lanes(_mm256_sign_epi8(q, q), _mm256_sign_epi8(act, q)) }
            } else {
                unsafe { L::lanes(F::unpack(bw), act) }
            };
            let d = if by4 {
                _mm256_broadcast_ss(&d4[r])
            } else if F::SIGNED {
                _mm256_set1_ps(f16_at(bw, 0) * da)
            } else {
                let (dw, m) = f16x2_at(bw, 0);
                summs[r] = m.mul_add(sa, summs[r]);
                _mm256_set1_ps(dw * da)
            };
            acc[r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(l), acc[r]);
        }
    }
    let mut out = [0f32; N];
    for r in 0..N {
        out[r] = unsafe { hsum_ps(acc[r]) } + summs[r];
    }
    out
}

// ---------------------------------------------------------------------------
// K-quants against Q8_K (see kquants/ for layouts and orders).
// ---------------------------------------------------------------------------

const Q8K: usize = crate::q8k::BLOCK;
const Q8K_QS: usize = 4;
const Q8K_BSUMS: usize = 260;

fn q8k_d(ba: &[u8]) -> f32 {
    crate::q8k::d(ba)
}

const Q4K: usize = 144;

/// Q4_K's eight 6-bit sub-block scales and mins, one byte each (as
/// `k4_scale_min` unpacks them), with whole-word masks instead of per-byte
/// shifts.
#[inline(always)]
fn q4k_scale_min(bw: &[u8]) -> (u64, u64) {
    let word = |at: usize| u32::from_le_bytes([bw[at], bw[at + 1], bw[at + 2], bw[at + 3]]);
    let (u0, u1, u2) = (word(4), word(8), word(12));
    let (low6, low4, top2) = (0x3f3f_3f3fu32, 0x0f0f_0f0fu32, 0x0303_0303u32);
    let sc_hi = (u2 & low4) | (((u0 >> 6) & top2) << 4);
    let m_hi = ((u2 >> 4) & low4) | (((u1 >> 6) & top2) << 4);
    (
        u64::from(u0 & low6) | (u64::from(sc_hi) << 32),
        u64::from(u1 & low6) | (u64::from(m_hi) << 32),
    )
}

/// Eight packed bytes as i16 in both 128-bit lanes, for [`splat_i16`].
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn bytes_i16_both_lanes(v: u64) -> __m256i {
    _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(v as i64)))
}

/// Byte-shuffle masks that copy i16 element k of each 128-bit lane to the
/// whole lane (`SPLAT[k]`), or element 2m to the low lane and 2m + 1 to the
/// high lane (`PAIR[m]`). Tables, so a mask is one load even where the
/// index is not a compile-time constant.
const fn shuffle_masks() -> ([[u8; 32]; 8], [[u8; 32]; 4]) {
    let mut splat = [[0u8; 32]; 8];
    let mut pair = [[0u8; 32]; 4];
    let mut k = 0;
    while k < 8 {
        let mut i = 0;
        while i < 16 {
            splat[k][2 * i] = (2 * k) as u8;
            splat[k][2 * i + 1] = (2 * k + 1) as u8;
            let e = if i < 8 { 2 * (k % 4) } else { 2 * (k % 4) + 1 };
            pair[k % 4][2 * i] = (2 * e) as u8;
            pair[k % 4][2 * i + 1] = (2 * e + 1) as u8;
            i += 1;
        }
        k += 1;
    }
    (splat, pair)
}

static MASKS: ([[u8; 32]; 8], [[u8; 32]; 4]) = shuffle_masks();

/// A mask of [`MASKS`] as a vector.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn mask(m: &[u8; 32]) -> __m256i {
    // SAFETY: m holds 32 bytes.
    unsafe { _mm256_loadu_si256(m.as_ptr() as *const __m256i) }
}

/// Element `k` of eight i16 (as `bytes_i16_both_lanes` lays them out) in
/// all 16 lanes: one byte shuffle instead of a scalar extract and broadcast.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn splat_i16(v: __m256i, k: usize) -> __m256i {
    _mm256_shuffle_epi8(v, mask(&MASKS.0[k]))
}

/// Eight per-sub-block bytes as 16 i16 lanes, one per 16-element run.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn runs_of_sub_blocks(v: u64) -> __m256i {
    let b = _mm_cvtsi64_si128(v as i64);
    _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(b, b))
}

/// Q6_K's 16 signed run scales as i16 lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q6k_runs(bw: &[u8]) -> __m256i {
    assert!(bw.len() >= 208);
    // SAFETY: bytes 192..208 are in bounds (checked).
    unsafe { _mm256_cvtepi8_epi16(_mm_loadu_si128(bw.as_ptr().add(192) as *const __m128i)) }
}

/// Lane k = run[2k] * bsums[2k] + run[2k + 1] * bsums[2k + 1] for the Q8_K
/// block `ba` (exact), so lane k covers elements 32k..32k+32.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn bsum_lanes(ba: &[u8], runs: __m256i) -> __m256i {
    unsafe { _mm256_madd_epi16(load32(ba, Q8K_BSUMS), runs) }
}

/// [lanes 0+1, 2+3, 4+5, 6+7]: sub-block sums by pairs of sub-blocks.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn pair_sums(l: __m256i) -> __m128i {
    let h = _mm256_hadd_epi32(l, l);
    _mm_unpacklo_epi64(_mm256_castsi256_si128(h), _mm256_extracti128_si256::<1>(h))
}

/// The scaled integer lanes of one Q4_K block, one vector per pair of
/// sub-blocks (64 elements): lane l sums scale * q * a over elements with
/// index % 32 in 4l..4l+4.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4k_pair_lanes(bw: &[u8], ba: &[u8], sc: u64) -> [__m256i; 4] {
    let scales = bytes_i16_both_lanes(sc);
    let mut out = [_mm256_setzero_si256(); 4];
    for (p, o) in out.iter_mut().enumerate() {
        unsafe {
            let raw = load32(bw, 16 + 32 * p);
            let lo = _mm256_and_si256(raw, _mm256_set1_epi8(0x0f));
            let hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), _mm256_set1_epi8(0x0f));
            let a_lo = load32(ba, Q8K_QS + 64 * p);
            let a_hi = load32(ba, Q8K_QS + 64 * p + 32);
            let s_lo = splat_i16(scales, 2 * p);
            let s_hi = splat_i16(scales, 2 * p + 1);
            *o = _mm256_add_epi32(lanes_scaled(lo, a_lo, s_lo), lanes_scaled(hi, a_hi, s_hi));
        }
    }
    out
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_k_vec_dot(w: &[u8], a: &[u8]) -> f32 {
    let mut acc = _mm256_setzero_ps();
    let mut acc_m = _mm_setzero_ps();
    for (bw, ba) in w.chunks_exact(Q4K).zip(a.chunks_exact(Q8K)) {
        let da = q8k_d(ba);
        let d = da * f16_at(bw, 0);
        let dmin = -da * f16_at(bw, 2);
        let (sc, m) = q4k_scale_min(bw);
        unsafe {
            let p = q4k_pair_lanes(bw, ba, sc);
            let sum = _mm256_add_epi32(_mm256_add_epi32(p[0], p[1]), _mm256_add_epi32(p[2], p[3]));
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sum), acc);
            let mins = pair_sums(bsum_lanes(ba, runs_of_sub_blocks(m)));
            acc_m = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(mins), acc_m);
        }
    }
    let mut am = [0f32; 4];
    // SAFETY: am holds 4 floats.
    unsafe { _mm_storeu_ps(am.as_mut_ptr(), acc_m) };
    let m = (am[0] + am[2]) + (am[1] + am[3]);
    unsafe { hsum_ps(acc) + m }
}

/// The repacked-Q4_K order (see `q4k::dot_repacked`): one FMA per `group`
/// sub-blocks, 8 for gemv and 2 for gemm.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_k_repacked(w: &[u8], a: &[u8], group: usize) -> f32 {
    let (mut acc, mut acc_min) = (0f32, 0f32);
    for (bw, ba) in w.chunks_exact(Q4K).zip(a.chunks_exact(Q8K)) {
        let da = q8k_d(ba);
        let (d, dmin) = f16x2_at(bw, 0);
        let (scale_d, scale_min) = (d * da, dmin * da);
        let (sc, m) = q4k_scale_min(bw);
        let pairs = unsafe { q4k_pair_lanes(bw, ba, sc) };
        let min_lanes = unsafe { bsum_lanes(ba, runs_of_sub_blocks(m)) };
        if group == 8 {
            // One sum for the whole block: add the lanes first (exact).
            let all = _mm256_add_epi32(
                _mm256_add_epi32(pairs[0], pairs[1]),
                _mm256_add_epi32(pairs[2], pairs[3]),
            );
            acc = (hsum_epi32(all) as f32).mul_add(scale_d, acc);
            acc_min = (hsum_epi32(min_lanes) as f32).mul_add(scale_min, acc_min);
        } else {
            let mut mins = [0i32; 4];
            // SAFETY: mins holds 4 i32.
            unsafe { _mm_storeu_si128(mins.as_mut_ptr() as *mut __m128i, pair_sums(min_lanes)) };
            for (v, sum_min) in pairs.into_iter().zip(mins) {
                acc = (hsum_epi32(v) as f32).mul_add(scale_d, acc);
                acc_min = (sum_min as f32).mul_add(scale_min, acc_min);
            }
        }
    }
    acc - acc_min
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_k_gemv(w: &[u8], a: &[u8]) -> f32 {
    unsafe { q4_k_repacked(w, a, 8) }
}

/// One block of `q4_k_gemv` (the `group == 8` case of `q4_k_repacked`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_k_gemv_step(bw: &[u8], ba: &[u8], acc: &mut (f32, f32)) {
    let da = q8k_d(ba);
    let (d, dmin) = f16x2_at(bw, 0);
    let (sc, m) = q4k_scale_min(bw);
    let pairs = unsafe { q4k_pair_lanes(bw, ba, sc) };
    let all = _mm256_add_epi32(
        _mm256_add_epi32(pairs[0], pairs[1]),
        _mm256_add_epi32(pairs[2], pairs[3]),
    );
    let min_lanes = unsafe { bsum_lanes(ba, runs_of_sub_blocks(m)) };
    acc.0 = (hsum_epi32(all) as f32).mul_add(d * da, acc.0);
    acc.1 = (hsum_epi32(min_lanes) as f32).mul_add(dmin * da, acc.1);
}

/// `q4_k_gemv` of `N` rows at once (see [`crate::VecDotRows4Fn`]).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_k_gemv_rows<const N: usize>(rows: [&[u8]; N], a: &[u8]) -> [f32; N] {
    let blocks = a.len() / Q8K;
    assert!(rows.iter().all(|r| r.len() >= blocks * Q4K), "weight rows");
    let mut acc = [(0f32, 0f32); N];
    for (i, ba) in a.chunks_exact(Q8K).enumerate() {
        for (r, acc) in acc.iter_mut().enumerate() {
            unsafe { q4_k_gemv_step(&rows[r][i * Q4K..(i + 1) * Q4K], ba, acc) };
        }
    }
    acc.map(|(sum, min)| sum - min)
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_k_gemm(w: &[u8], a: &[u8]) -> f32 {
    unsafe { q4_k_repacked(w, a, 2) }
}

/// The tiled order (see `kquants::dot_tiled`).
#[inline(always)]
fn tiled_step(acc: f32, d: f32, dmin: f32, sum: i32, sum_min: i32, da: f32) -> f32 {
    let r = (-dmin).mul_add(sum_min as f32, d * sum as f32);
    r.mul_add(da, acc)
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_k_tiled(w: &[u8], a: &[u8]) -> f32 {
    let mut acc = 0f32;
    for (bw, ba) in w.chunks_exact(Q4K).zip(a.chunks_exact(Q8K)) {
        let (sc, m) = q4k_scale_min(bw);
        let (sum, sum_min) = unsafe {
            let p = q4k_pair_lanes(bw, ba, sc);
            (
                hsum_epi32(_mm256_add_epi32(
                    _mm256_add_epi32(p[0], p[1]),
                    _mm256_add_epi32(p[2], p[3]),
                )),
                hsum_epi32(bsum_lanes(ba, runs_of_sub_blocks(m))),
            )
        };
        acc = tiled_step(acc, f16_at(bw, 0), f16_at(bw, 2), sum, sum_min, q8k_d(ba));
    }
    acc
}

const Q6K: usize = 210;

/// A Q6_K block's 16 run scales as i16, each half (runs 8n..8n+8) in both
/// 128-bit lanes, so one byte shuffle gives any run pair's scale vector.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q6k_scale_halves(bw: &[u8]) -> [__m256i; 2] {
    let s = unsafe { q6k_runs(bw) };
    [
        _mm256_broadcastsi128_si256(_mm256_castsi256_si128(s)),
        _mm256_broadcastsi128_si256(_mm256_extracti128_si256::<1>(s)),
    ]
}

/// The scale vector for the 32 quants of runs 8n + 2k and 8n + 2k + 1
/// (i16 scale of the first run in the low lane, of the second in the
/// high lane), from `q6k_scale_halves`' half n.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn q6k_pair_scale(half: __m256i, k: usize) -> __m256i {
    _mm256_shuffle_epi8(half, mask(&MASKS.1[k]))
}

/// 32 * (the run scales times the bsums), per lane as [`bsum_lanes`]: what
/// taking the quants unsigned added.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q6k_offset(bw: &[u8], ba: &[u8]) -> __m256i {
    unsafe { _mm256_slli_epi32::<5>(bsum_lanes(ba, q6k_runs(bw))) }
}

/// Lanes of one Q6_K block with the quants taken unsigned (0..=63): lane l
/// sums scale * q * a over elements with index % 32 in 4l..4l+4.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q6k_unsigned_lanes(bw: &[u8], ba: &[u8]) -> __m256i {
    unsafe {
        let halves = q6k_scale_halves(bw);
        let m4 = _mm256_set1_epi8(0x0f);
        let m3 = _mm256_set1_epi8(0x03);
        let mut sum = _mm256_setzero_si256();
        for (n, half) in halves.into_iter().enumerate() {
            let ql0 = load32(bw, 64 * n);
            let ql1 = load32(bw, 64 * n + 32);
            let qh = load32(bw, 128 + 32 * n);
            let quants = [
                _mm256_or_si256(
                    _mm256_and_si256(ql0, m4),
                    _mm256_slli_epi16(_mm256_and_si256(qh, m3), 4),
                ),
                _mm256_or_si256(
                    _mm256_and_si256(ql1, m4),
                    _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m3), 4),
                ),
                _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                    _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m3), 4),
                ),
                _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                    _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m3), 4),
                ),
            ];
            for (k, q) in quants.into_iter().enumerate() {
                let sc = q6k_pair_scale(half, k);
                let act = load32(ba, Q8K_QS + 128 * n + 32 * k);
                sum = _mm256_add_epi32(sum, lanes_scaled(q, act, sc));
            }
        }
        sum
    }
}

/// One block of `q6_k_vec_dot`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q6_k_vec_dot_step(bw: &[u8], ba: &[u8], acc: &mut __m256) {
    let d = q8k_d(ba) * f16_at(bw, 208);
    unsafe {
        let lanes = q6k_unsigned_lanes(bw, ba);
        let s = _mm256_cvtepi32_ps(_mm256_sub_epi32(lanes, q6k_offset(bw, ba)));
        *acc = _mm256_fmadd_ps(_mm256_set1_ps(d), s, *acc);
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q6_k_vec_dot(w: &[u8], a: &[u8]) -> f32 {
    let mut acc = _mm256_setzero_ps();
    for (bw, ba) in w.chunks_exact(Q6K).zip(a.chunks_exact(Q8K)) {
        unsafe { q6_k_vec_dot_step(bw, ba, &mut acc) };
    }
    unsafe { hsum_ps(acc) }
}

/// Blocks ahead that the several-row Q6_K kernels ask for: 2.5 KiB, about
/// the legacy kernels' distance (`wide::ROWS4_PREFETCH`). Two blocks (420
/// bytes) left decode's Q6_K products short of the bandwidth the others
/// reach (Qwen2.5, `kestrel profile`: Q6_K 23-27 GB/s against Q5_0's
/// 32-41): a Qwen2.5 ffn_down-shaped product (896 x 24 rows of 4864, two
/// threads) read 17-29 GB/s at 2 blocks, 32-37 at 6, 36-47 at 12 (one
/// run each, alternated, three rounds), and 24 was slower again.
const Q6K_PREFETCH: usize = 12;

/// Asks for the cache lines of `len` bytes at `at` in `row` (past its end is
/// allowed: a prefetch never faults, and the address is never dereferenced).
#[inline(always)]
fn prefetch_block(row: &[u8], at: usize, len: usize) {
    let p = row.as_ptr().wrapping_add(at);
    for off in (0..len).step_by(64).chain([len - 1]) {
        // SAFETY: a prefetch hint does not access memory architecturally.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(off) as *const i8) };
    }
}

/// `q6_k_vec_dot` of `N` rows at once (see [`crate::VecDotRows4Fn`]).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q6_k_vec_dot_rows<const N: usize>(rows: [&[u8]; N], a: &[u8]) -> [f32; N] {
    let blocks = a.len() / Q8K;
    assert!(rows.iter().all(|r| r.len() >= blocks * Q6K), "weight rows");
    let mut acc = [_mm256_setzero_ps(); N];
    for (i, ba) in a.chunks_exact(Q8K).enumerate() {
        for (r, acc) in acc.iter_mut().enumerate() {
            if N >= 4 {
                prefetch_block(rows[r], (i + Q6K_PREFETCH) * Q6K, Q6K);
            }
            unsafe { q6_k_vec_dot_step(&rows[r][i * Q6K..(i + 1) * Q6K], ba, acc) };
        }
    }
    let mut out = [0f32; N];
    for (o, a) in out.iter_mut().zip(acc) {
        *o = unsafe { hsum_ps(a) };
    }
    out
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q6_k_tiled(w: &[u8], a: &[u8]) -> f32 {
    let mut acc = 0f32;
    for (bw, ba) in w.chunks_exact(Q6K).zip(a.chunks_exact(Q8K)) {
        let sum = unsafe {
            hsum_epi32(_mm256_sub_epi32(
                q6k_unsigned_lanes(bw, ba),
                q6k_offset(bw, ba),
            ))
        };
        acc = tiled_step(acc, f16_at(bw, 208), 0.0, sum, 0, q8k_d(ba));
    }
    acc
}

// ---------------------------------------------------------------------------
// Four activation rows at a time (prefill): the same per-row operations, with
// each weight block unpacked once.
// ---------------------------------------------------------------------------

/// Four Q8_0 or Q8_1 activation rows rearranged for a legacy four-row
/// kernel, once per product instead of once per weight row: per block, one
/// chunk with the four rows' scales d (and for Q8_1 then their sums s)
/// widened to f32, then each row's 32 quants in an aligned chunk of its own
/// (in the GGUF layout they straddle cache lines).
fn prepare_legacy(a: [&[u8]; 4], block: usize, out: &mut Vec<Chunk32>) {
    let blocks = a[0].len() / block;
    out.clear();
    out.reserve(blocks * 5);
    for i in 0..blocks {
        let mut head = [0f32; 8];
        for (t, row) in a.iter().enumerate() {
            let b = &row[i * block..(i + 1) * block];
            head[t] = crate::f16_to_f32(u16::from_le_bytes([b[0], b[1]]));
            if block == 36 {
                head[4 + t] = crate::f16_to_f32(u16::from_le_bytes([b[2], b[3]]));
            }
        }
        let mut chunk = Chunk32([0; 32]);
        for (k, v) in head.iter().enumerate() {
            chunk.0[4 * k..4 * k + 4].copy_from_slice(&v.to_le_bytes());
        }
        out.push(chunk);
        for row in a {
            let q = &row[(i + 1) * block - 32..(i + 1) * block];
            out.push(Chunk32(q.try_into().expect("32 quants")));
        }
    }
}

pub(crate) fn prepare_q8_0(a: [&[u8]; 4], out: &mut Vec<Chunk32>) {
    prepare_legacy(a, 34, out);
}

pub(crate) fn prepare_q8_1(a: [&[u8]; 4], out: &mut Vec<Chunk32>) {
    prepare_legacy(a, 36, out);
}

/// K-quant activations (Q8_K) carry f32 scales already.
pub(crate) fn prepare_none(_a: [&[u8]; 4], out: &mut Vec<Chunk32>) {
    out.clear();
}

/// Where a legacy four-row kernel takes its weight blocks from: the GGUF
/// row itself, or the row unpacked beforehand (`unpack_legacy`).
trait LegacyRow {
    fn blocks(&self) -> usize;
    /// Block `i`'s quants as bytes and its (d, m) widened (m: 0 where the
    /// format has none). The caller keeps `i < self.blocks()`.
    unsafe fn block(&self, i: usize) -> (__m256i, f32, f32);
}

struct Packed<'a, F> {
    w: &'a [u8],
    format: std::marker::PhantomData<F>,
}

impl<F: Legacy> LegacyRow for Packed<'_, F> {
    fn blocks(&self) -> usize {
        self.w.len() / F::WB
    }
    #[inline(always)]
    unsafe fn block(&self, i: usize) -> (__m256i, f32, f32) {
        let bw = &self.w[i * F::WB..(i + 1) * F::WB];
        // SAFETY: AVX2 and F16C are enabled in every caller (the kernels).
        unsafe {
            let (d, m) = f16x2_at(bw, 0);
            (F::unpack(bw), d, m)
        }
    }
}

/// A row as `unpack_legacy` left it: each block's quants in a chunk, then
/// the blocks' (d, m) pairs as f32, four blocks to a chunk.
struct Unpacked<'a> {
    uw: &'a [Chunk32],
    blocks: usize,
}

impl LegacyRow for Unpacked<'_> {
    fn blocks(&self) -> usize {
        self.blocks
    }
    #[inline(always)]
    unsafe fn block(&self, i: usize) -> (__m256i, f32, f32) {
        let scales = &self.uw[self.blocks + i / 4].0[8 * (i % 4)..8 * (i % 4) + 8];
        // SAFETY: chunk i exists (the kernel checked the length) and is
        // 32-aligned; AVX2 is enabled in every caller.
        unsafe {
            (
                _mm256_load_si256(self.uw.as_ptr().add(i) as *const __m256i),
                f32::from_le_bytes(scales[..4].try_into().unwrap_unchecked()),
                f32::from_le_bytes(scales[4..].try_into().unwrap_unchecked()),
            )
        }
    }
}

/// A legacy row unpacked for `Unpacked`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn unpack_legacy<F: Legacy>(w: &[u8], out: &mut Vec<Chunk32>) {
    let blocks = w.len() / F::WB;
    out.clear();
    out.resize(blocks + blocks.div_ceil(4), Chunk32([0; 32]));
    for (i, bw) in w.chunks_exact(F::WB).enumerate() {
        // SAFETY: chunk i is in bounds (resized above) and 32-aligned.
        unsafe { _mm256_store_si256(out.as_mut_ptr().add(i) as *mut __m256i, F::unpack(bw)) };
        let (d, m) = f16x2_at(bw, 0);
        let at = 8 * (i % 4);
        let chunk = &mut out[blocks + i / 4].0;
        chunk[at..at + 4].copy_from_slice(&d.to_le_bytes());
        chunk[at + 4..at + 8].copy_from_slice(&m.to_le_bytes());
    }
}

/// How a kernel forms the eight i32 lanes of a block (lane l: the exact
/// sum of products 4l..4l+3 of unsigned weight bytes and signed
/// activations): AVX2's pairwise i16 multiply-add then i32 add, or one
/// VNNI `vpdpbusd`. The sums are exact either way, so the f32 steps that
/// follow, and the results, are the same bits.
trait Lanes {
    /// Whether `lanes_plus` is one instruction (so the offset form of the
    /// signed formats pays).
    const FUSED_ADD: bool;
    unsafe fn lanes(u: __m256i, a: __m256i) -> __m256i;
    /// c + lanes(u, a).
    unsafe fn lanes_plus(c: __m256i, u: __m256i, a: __m256i) -> __m256i;
}

struct Avx2Lanes;
struct VnniLanes;
/// VNNI's lane sums by AVX-512 VL's EVEX form of `vpdpbusd`.
struct EvexLanes;

impl Lanes for Avx2Lanes {
    const FUSED_ADD: bool = false;
    #[inline(always)]
    unsafe fn lanes(u: __m256i, a: __m256i) -> __m256i {
        // SAFETY: AVX2 is enabled in every caller.
        unsafe { _mm256_madd_epi16(_mm256_maddubs_epi16(u, a), _mm256_set1_epi16(1)) }
    }
    #[inline(always)]
    unsafe fn lanes_plus(c: __m256i, u: __m256i, a: __m256i) -> __m256i {
        // SAFETY: as `lanes`.
        unsafe { _mm256_add_epi32(c, Self::lanes(u, a)) }
    }
}

impl Lanes for VnniLanes {
    const FUSED_ADD: bool = true;
    #[inline(always)]
    unsafe fn lanes(u: __m256i, a: __m256i) -> __m256i {
        // SAFETY: AVX-VNNI is enabled in every caller (the VNNI entries).
        unsafe { _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u, a) }
    }
    #[inline(always)]
    unsafe fn lanes_plus(c: __m256i, u: __m256i, a: __m256i) -> __m256i {
        // SAFETY: as `lanes`.
        unsafe { _mm256_dpbusd_avx_epi32(c, u, a) }
    }
}

impl Lanes for EvexLanes {
    const FUSED_ADD: bool = true;
    #[inline(always)]
    unsafe fn lanes(u: __m256i, a: __m256i) -> __m256i {
        // SAFETY: AVX-512 VL and VNNI are enabled in every caller (the
        // EVEX entries).
        unsafe { _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, a) }
    }
    #[inline(always)]
    unsafe fn lanes_plus(c: __m256i, u: __m256i, a: __m256i) -> __m256i {
        // SAFETY: as `lanes`.
        unsafe { _mm256_dpbusd_epi32(c, u, a) }
    }
}

/// A legacy-format dot of one weight row against `G` groups of four
/// activation rows, each group prepared by `prepare_legacy`: the weight
/// block is unpacked once for all `4 * G` rows, and each row's f32 steps are
/// its one-row kernel's. Always inlined into its entry points, which enable
/// AVX2 (and AVX-VNNI for `VnniLanes`).
#[inline(always)]
unsafe fn legacy_groups<F: Legacy, R: LegacyRow, L: Lanes, const G: usize>(
    w: R,
    pre: [&[Chunk32]; G],
) -> [[f32; 4]; G] {
    let blocks = w.blocks();
    // One check here stands for the raw reads in the loop.
    assert!(
        pre.iter().all(|p| p.len() >= blocks * 5),
        "prepared activations"
    );
    let mut acc = [[_mm256_setzero_ps(); 4]; G];
    let mut summs = [_mm_setzero_ps(); G];
    for i in 0..blocks {
        // SAFETY: i < blocks.
        let (q, dw, mw) = unsafe { w.block(i) };
        // |w| once per block; each row then needs only a's sign fix.
        let q_abs = if F::SIGNED { _mm256_sign_epi8(q, q) } else { q };
        for g in 0..G {
            // SAFETY: i < blocks, and each group holds 5 chunks per block.
            let p = unsafe { pre[g].as_ptr().add(5 * i) };
            let head = p as *const f32;
            if !F::SIGNED {
                // The four rows' m*s terms in one fused op per lane, as the
                // one-row kernel's scalar mul_add.
                summs[g] = _mm_fmadd_ps(
                    _mm_set1_ps(mw),
                    unsafe { _mm_load_ps(head.add(4)) },
                    summs[g],
                );
            }
            // dw * da for the four rows at once, rounded to f32 as the
            // one-row kernel rounds each; lane t is spread to row t below.
            let d4 =
                _mm256_zextps128_ps256(_mm_mul_ps(_mm_set1_ps(dw), unsafe { _mm_load_ps(head) }));
            for (t, acc) in acc[g].iter_mut().enumerate() {
                // SAFETY: chunk 1 + t of this block (checked above); chunks are 32-aligned.
                let act = unsafe { _mm256_load_si256(p.add(1 + t) as *const __m256i) };
                let l = if F::SIGNED {
                    unsafe { L::lanes(q_abs, _mm256_sign_epi8(act, q)) }
                } else {
                    unsafe { L::lanes(q_abs, act) }
                };
                let d = _mm256_permutevar8x32_ps(d4, _mm256_set1_epi32(t as i32));
                *acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(l), *acc);
            }
        }
    }
    let mut out = [[0f32; 4]; G];
    for g in 0..G {
        let mut sm = [0f32; 4];
        // SAFETY: sm holds 4 floats.
        unsafe { _mm_storeu_ps(sm.as_mut_ptr(), summs[g]) };
        for t in 0..4 {
            out[g][t] = unsafe { hsum_ps(acc[g][t]) };
            if !F::SIGNED {
                out[g][t] += sm[t];
            }
        }
    }
    out
}

/// The packed four- and eight-row entries of a legacy format, for one
/// lane-sum build; `$feat` are the features `path_dot4` detected before
/// handing them out.
macro_rules! legacy_x4 {
    ($x4:ident, $x8:ident, $f:ty, $lanes:ty, $feat:literal) => {
        fn $x4(w: &[u8], _a: [&[u8]; 4], pre: &[Chunk32]) -> [f32; 4] {
            #[target_feature(enable = $feat)]
            unsafe fn body(w: Packed<'_, $f>, pre: [&[Chunk32]; 1]) -> [[f32; 4]; 1] {
                unsafe { legacy_groups::<$f, _, $lanes, 1>(w, pre) }
            }
            let w = Packed::<$f> {
                w,
                format: std::marker::PhantomData,
            };
            // SAFETY: `$feat` were detected (see above).
            let [out] = unsafe { body(w, [pre]) };
            out
        }

        fn $x8(w: &[u8], pre0: &[Chunk32], pre1: &[Chunk32]) -> [f32; 8] {
            #[target_feature(enable = $feat)]
            unsafe fn body(w: Packed<'_, $f>, pre: [&[Chunk32]; 2]) -> [[f32; 4]; 2] {
                unsafe { legacy_groups::<$f, _, $lanes, 2>(w, pre) }
            }
            let w = Packed::<$f> {
                w,
                format: std::marker::PhantomData,
            };
            // SAFETY: `$feat` were detected (see above).
            let [a, b] = unsafe { body(w, [pre0, pre1]) };
            [a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3]]
        }
    };
    ($unpack:ident, $x8u:ident, $x8v:ident, unpacked $f:ty) => {
        fn $unpack(w: &[u8], out: &mut Vec<Chunk32>) {
            // SAFETY: as `entry!`.
            unsafe { unpack_legacy::<$f>(w, out) }
        }

        // uw holds B + ceil(B / 4) chunks, so B = floor(4 len / 5); the
        // activations' length is checked inside.
        fn $x8u(uw: &[Chunk32], pre0: &[Chunk32], pre1: &[Chunk32]) -> [f32; 8] {
            #[target_feature(enable = "avx2,fma,f16c")]
            unsafe fn body(w: Unpacked<'_>, pre: [&[Chunk32]; 2]) -> [[f32; 4]; 2] {
                unsafe { legacy_groups::<$f, _, Avx2Lanes, 2>(w, pre) }
            }
            let blocks = uw.len() * 4 / 5;
            // SAFETY: as `entry!`.
            let [a, b] = unsafe { body(Unpacked { uw, blocks }, [pre0, pre1]) };
            [a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3]]
        }

        /// As the AVX2 twin, with VNNI's one-instruction lane sums (only
        /// where `avxvnni` was detected).
        fn $x8v(uw: &[Chunk32], pre0: &[Chunk32], pre1: &[Chunk32]) -> [f32; 8] {
            #[target_feature(enable = "avx2,fma,f16c,avxvnni")]
            unsafe fn body(w: Unpacked<'_>, pre: [&[Chunk32]; 2]) -> [[f32; 4]; 2] {
                unsafe { legacy_groups::<$f, _, VnniLanes, 2>(w, pre) }
            }
            let blocks = uw.len() * 4 / 5;
            // SAFETY: AVX2, FMA, F16C and AVX-VNNI were detected before
            // this kernel was handed out (`path_dot4`).
            let [a, b] = unsafe { body(Unpacked { uw, blocks }, [pre0, pre1]) };
            [a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3]]
        }
    };
}

legacy_x4!(dot4_q4_1, dot8_q4_1, Q41, Avx2Lanes, "avx2,fma,f16c");
legacy_x4!(dot4_q5_0, dot8_q5_0, Q50, Avx2Lanes, "avx2,fma,f16c");
legacy_x4!(dot4_q8_0, dot8_q8_0, Q80, Avx2Lanes, "avx2,fma,f16c");
legacy_x4!(
    dot4v_q4_1,
    dot8v_q4_1p,
    Q41,
    VnniLanes,
    "avx2,fma,f16c,avxvnni"
);
legacy_x4!(
    dot4v_q5_0,
    dot8v_q5_0p,
    Q50,
    VnniLanes,
    "avx2,fma,f16c,avxvnni"
);
legacy_x4!(
    dot4v_q8_0,
    dot8v_q8_0p,
    Q80,
    VnniLanes,
    "avx2,fma,f16c,avxvnni"
);
legacy_x4!(unpack_q4_1, dot8u_q4_1, dot8v_q4_1, unpacked Q41);
legacy_x4!(unpack_q5_0, dot8u_q5_0, dot8v_q5_0, unpacked Q50);

/// [hsum(l[0]), hsum(l[1]), hsum(l[2]), hsum(l[3])]: four rows' integer
/// lanes reduced together (exact), so the f32 steps after run lane-wise
/// for all four rows at once.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn hsum4_epi32(l: [__m256i; 4]) -> __m128i {
    let h = _mm256_hadd_epi32(_mm256_hadd_epi32(l[0], l[1]), _mm256_hadd_epi32(l[2], l[3]));
    _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256::<1>(h))
}

/// The four rows' Q8_K scales of block `i` (SSE only, so it can be forced
/// inline into the kernels).
#[inline(always)]
fn q8k_d4(a: [&[u8]; 4], i: usize) -> __m128 {
    // SAFETY: SSE is part of the x86-64 baseline.
    unsafe {
        _mm_setr_ps(
            q8k_d(&a[0][i * Q8K..]),
            q8k_d(&a[1][i * Q8K..]),
            q8k_d(&a[2][i * Q8K..]),
            q8k_d(&a[3][i * Q8K..]),
        )
    }
}

/// Block `i` of a Q4_K row against four Q8_K rows, as both four-token
/// kernels begin it: the four activation blocks, the packed sub-block
/// scales, d x da and dmin x da per row, and the min sums per pair of
/// sub-blocks (vector p for pair p, the rows in its lanes; exact).
pub(crate) struct Q4kGemmBlock<'a> {
    pub(crate) rows: [&'a [u8]; 4],
    pub(crate) sc: u64,
    pub(crate) scale_d: __m128,
    pub(crate) scale_min: __m128,
    pub(crate) min_sums: [__m128i; 4],
}

/// See [`Q4kGemmBlock`]; `bw` is the weight block `i`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn q4k_gemm_block<'a>(bw: &[u8], a: [&'a [u8]; 4], i: usize) -> Q4kGemmBlock<'a> {
    let (sc, m) = q4k_scale_min(bw);
    let rows = [
        &a[0][i * Q8K..(i + 1) * Q8K],
        &a[1][i * Q8K..(i + 1) * Q8K],
        &a[2][i * Q8K..(i + 1) * Q8K],
        &a[3][i * Q8K..(i + 1) * Q8K],
    ];
    let (d, dmin) = f16x2_at(bw, 0);
    let da = q8k_d4(a, i);
    Q4kGemmBlock {
        rows,
        sc,
        scale_d: _mm_mul_ps(_mm_set1_ps(d), da),
        scale_min: _mm_mul_ps(_mm_set1_ps(dmin), da),
        min_sums: unsafe { q4k_pair_min_sums(rows, m) },
    }
}

/// The min sums of [`Q4kGemmBlock`]: after the two hadds, even = [p0 |
/// p2] and odd = [p1 | p3] for rows 0..4.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4k_pair_min_sums(rows: [&[u8]; 4], m: u64) -> [__m128i; 4] {
    let mins = runs_of_sub_blocks(m);
    let m = rows.map(|ba| unsafe { bsum_lanes(ba, mins) });
    let x = _mm256_hadd_epi32(m[0], m[1]);
    let y = _mm256_hadd_epi32(m[2], m[3]);
    let even = _mm256_castps_si256(_mm256_shuffle_ps::<0x88>(
        _mm256_castsi256_ps(x),
        _mm256_castsi256_ps(y),
    ));
    let odd = _mm256_castps_si256(_mm256_shuffle_ps::<0xdd>(
        _mm256_castsi256_ps(x),
        _mm256_castsi256_ps(y),
    ));
    [
        _mm256_castsi256_si128(even),
        _mm256_castsi256_si128(odd),
        _mm256_extracti128_si256::<1>(even),
        _mm256_extracti128_si256::<1>(odd),
    ]
}

/// `q4_k_gemm` for four rows: the integer sums of each pair of sub-blocks
/// are reduced for all four rows together, and its two FMAs run lane-wise
/// (lane t = row t), in the same order per row.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_k_gemm_x4(w: &[u8], a: [&[u8]; 4], _pre: &[Chunk32]) -> [f32; 4] {
    let blocks = w.len() / Q4K;
    assert!(a.iter().all(|r| r.len() >= blocks * Q8K), "activation rows");
    let (mut acc, mut acc_min) = (_mm_setzero_ps(), _mm_setzero_ps());
    for (i, bw) in w.chunks_exact(Q4K).enumerate() {
        let blk = unsafe { q4k_gemm_block(bw, a, i) };
        let scales = bytes_i16_both_lanes(blk.sc);
        for (p, min_sum) in blk.min_sums.into_iter().enumerate() {
            let raw = unsafe { load32(bw, 16 + 32 * p) };
            let lo = _mm256_and_si256(raw, _mm256_set1_epi8(0x0f));
            let hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), _mm256_set1_epi8(0x0f));
            let s_lo = splat_i16(scales, 2 * p);
            let s_hi = splat_i16(scales, 2 * p + 1);
            let lanes = blk.rows.map(|ba| unsafe {
                _mm256_add_epi32(
                    lanes_scaled(lo, load32(ba, Q8K_QS + 64 * p), s_lo),
                    lanes_scaled(hi, load32(ba, Q8K_QS + 64 * p + 32), s_hi),
                )
            });
            let sums = _mm_cvtepi32_ps(hsum4_epi32(lanes));
            acc = _mm_fmadd_ps(sums, blk.scale_d, acc);
            acc_min = _mm_fmadd_ps(_mm_cvtepi32_ps(min_sum), blk.scale_min, acc_min);
        }
    }
    let mut out = [0f32; 4];
    // SAFETY: out holds 4 floats.
    unsafe { _mm_storeu_ps(out.as_mut_ptr(), _mm_sub_ps(acc, acc_min)) };
    out
}

/// `q6_k_tiled` for four rows: the -32 offset is taken off in the integer
/// lanes (bsums times scales), the four rows reduced together, and the
/// tiled step (d * sum, then one FMA with the row's scale) run lane-wise.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q6_k_tiled_x4(w: &[u8], a: [&[u8]; 4], _pre: &[Chunk32]) -> [f32; 4] {
    let blocks = w.len() / Q6K;
    assert!(a.iter().all(|r| r.len() >= blocks * Q8K), "activation rows");
    let mut acc = _mm_setzero_ps();
    let m4 = _mm256_set1_epi8(0x0f);
    let m3 = _mm256_set1_epi8(0x03);
    for (i, bw) in w.chunks_exact(Q6K).enumerate() {
        let rows = [
            &a[0][i * Q8K..(i + 1) * Q8K],
            &a[1][i * Q8K..(i + 1) * Q8K],
            &a[2][i * Q8K..(i + 1) * Q8K],
            &a[3][i * Q8K..(i + 1) * Q8K],
        ];
        let halves = unsafe { q6k_scale_halves(bw) };
        let mut lanes = [_mm256_setzero_si256(); 4];
        for (l, ba) in lanes.iter_mut().zip(rows) {
            *l = _mm256_sub_epi32(_mm256_setzero_si256(), unsafe { q6k_offset(bw, ba) });
        }
        // Each quant vector (unsigned, 0..=63) is built once and used by
        // all four rows before the next: few live registers.
        for (n, half) in halves.into_iter().enumerate() {
            let (ql0, ql1, qh) = unsafe {
                (
                    load32(bw, 64 * n),
                    load32(bw, 64 * n + 32),
                    load32(bw, 128 + 32 * n),
                )
            };
            for k in 0..4 {
                let low = match k {
                    0 => _mm256_and_si256(ql0, m4),
                    1 => _mm256_and_si256(ql1, m4),
                    2 => _mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                    _ => _mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                };
                let high =
                    _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * k as i32)), m3);
                let q = _mm256_or_si256(low, _mm256_slli_epi16(high, 4));
                let sc = q6k_pair_scale(half, k);
                let g = 4 * n + k;
                for (l, ba) in lanes.iter_mut().zip(rows) {
                    let act = unsafe { load32(ba, Q8K_QS + 32 * g) };
                    *l = _mm256_add_epi32(*l, lanes_scaled(q, act, sc));
                }
            }
        }
        let sums = _mm_cvtepi32_ps(hsum4_epi32(lanes));
        let r = _mm_mul_ps(_mm_set1_ps(f16_at(bw, 208)), sums);
        acc = _mm_fmadd_ps(r, q8k_d4(a, i), acc);
    }
    let mut out = [0f32; 4];
    // SAFETY: out holds 4 floats.
    unsafe { _mm_storeu_ps(out.as_mut_ptr(), acc) };
    out
}

// ---------------------------------------------------------------------------
// f16 rows (see f16row.rs for the operations and their rounding).
// ---------------------------------------------------------------------------

/// Eight f16 at `i` widened.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn ph8(x: &[u16], i: usize) -> __m256 {
    debug_assert!(i + 8 <= x.len());
    // SAFETY: 8 u16 in bounds per the caller.
    unsafe { _mm256_cvtph_ps(_mm_loadu_si128(x.as_ptr().add(i) as *const __m128i)) }
}

/// Stores eight f32 at `i` as f16, nearest-even.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn store_ph8(x: &mut [u16], i: usize, v: __m256) {
    debug_assert!(i + 8 <= x.len());
    let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v);
    // SAFETY: 8 u16 in bounds per the caller.
    unsafe { _mm_storeu_si128(x.as_mut_ptr().add(i) as *mut __m128i, h) }
}

/// Declares a safe wrapper around an AVX2 f16-row body.
macro_rules! row_entry {
    ($name:ident($($arg:ident: $ty:ty),*) $(-> $ret:ty)? => $body:ident) => {
        pub(crate) fn $name($($arg: $ty),*) $(-> $ret)? {
            // SAFETY: called only after `avx2_available()` (see f16row.rs).
            unsafe { $body($($arg),*) }
        }
    };
}

row_entry!(f16_dot(a: &[u16], b: &[u16]) -> f32 => f16_dot_avx2);
row_entry!(f16_mad(acc: &mut [u16], v: &[u16], s: f32) => f16_mad_avx2);
row_entry!(f16_scale(acc: &mut [u16], s: f32) => f16_scale_avx2);
row_entry!(f32_mad_f16(acc: &mut [f32], v: &[u16], s: f32) => f32_mad_f16_avx2);
row_entry!(f16_to_f32_row(src: &[u16], dst: &mut [f32]) => f16_to_f32_row_avx2);
row_entry!(f32_to_f16_row(src: &[f32], dst: &mut [u16]) => f32_to_f16_row_avx2);

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn f16_dot_avx2(a: &[u16], b: &[u16]) -> f32 {
    let n = a.len().min(b.len());
    let np = n / 32 * 32;
    let mut acc = [_mm256_setzero_ps(); 4];
    for i in (0..np).step_by(32) {
        for (j, accj) in acc.iter_mut().enumerate() {
            unsafe {
                *accj = _mm256_fmadd_ps(ph8(a, i + 8 * j), ph8(b, i + 8 * j), *accj);
            }
        }
    }
    let mut lanes = [[0f32; 8]; 4];
    for (l, v) in lanes.iter_mut().zip(acc) {
        // SAFETY: l holds 8 floats.
        unsafe { _mm256_storeu_ps(l.as_mut_ptr(), v) };
    }
    crate::f16row::f16_dot_finish(&lanes, &a[np..n], &b[np..n])
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn f16_mad_avx2(acc: &mut [u16], v: &[u16], s: f32) {
    let n = acc.len().min(v.len());
    let n8 = n / 8 * 8;
    let vs = _mm256_set1_ps(s);
    for i in (0..n8).step_by(8) {
        unsafe {
            let y = _mm256_fmadd_ps(ph8(v, i), vs, ph8(acc, i));
            store_ph8(acc, i, y);
        }
    }
    crate::f16row::f16_mad_portable(&mut acc[n8..n], &v[n8..n], s);
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn f16_scale_avx2(acc: &mut [u16], s: f32) {
    let n8 = acc.len() / 8 * 8;
    let vs = _mm256_set1_ps(s);
    for i in (0..n8).step_by(8) {
        unsafe { store_ph8(acc, i, _mm256_mul_ps(ph8(acc, i), vs)) };
    }
    crate::f16row::f16_scale_portable(&mut acc[n8..], s);
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn f32_mad_f16_avx2(acc: &mut [f32], v: &[u16], s: f32) {
    let n = acc.len().min(v.len());
    let n8 = n / 8 * 8;
    let vs = _mm256_set1_ps(s);
    for i in (0..n8).step_by(8) {
        // SAFETY: i + 8 <= n8 <= both lengths.
        unsafe {
            let p = acc.as_mut_ptr().add(i);
            _mm256_storeu_ps(p, _mm256_fmadd_ps(ph8(v, i), vs, _mm256_loadu_ps(p)));
        }
    }
    crate::f16row::f32_mad_f16_portable(&mut acc[n8..n], &v[n8..n], s);
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn f16_to_f32_row_avx2(src: &[u16], dst: &mut [f32]) {
    let n = src.len().min(dst.len());
    let n8 = n / 8 * 8;
    for i in (0..n8).step_by(8) {
        // SAFETY: i + 8 <= n8 <= both lengths.
        unsafe { _mm256_storeu_ps(dst.as_mut_ptr().add(i), ph8(src, i)) };
    }
    for (d, &s) in dst[n8..n].iter_mut().zip(&src[n8..n]) {
        *d = crate::float::f16_to_f32(s);
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn f32_to_f16_row_avx2(src: &[f32], dst: &mut [u16]) {
    let n = src.len().min(dst.len());
    let n8 = n / 8 * 8;
    for i in (0..n8).step_by(8) {
        // SAFETY: i + 8 <= n8 <= both lengths.
        unsafe { store_ph8(dst, i, _mm256_loadu_ps(src.as_ptr().add(i))) };
    }
    for (d, &s) in dst[n8..n].iter_mut().zip(&src[n8..n]) {
        *d = crate::float::f32_to_f16(s);
    }
}

// ---------------------------------------------------------------------------
// Q8_0 / Q8_1 activation quantizers: ggml's AVX2 `quantize_row_q8_0/_1`,
// instruction for instruction (max-abs by `max_ps`, `127 / amax`, round to
// nearest-even, saturating packs, and for Q8_1 `d * sum` rounded once).
// ---------------------------------------------------------------------------

fn quantize_q8_0(src: &[f32], dst: &mut [u8]) {
    // SAFETY: as `entry!`.
    unsafe { quantize_q8(src, dst, false) }
}

fn quantize_q8_1(src: &[f32], dst: &mut [u8]) {
    // SAFETY: as `entry!`.
    unsafe { quantize_q8(src, dst, true) }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn quantize_q8(src: &[f32], dst: &mut [u8], with_sum: bool) {
    let bb = if with_sum { 36 } else { 34 };
    let qs_at = bb - 32;
    for (x, b) in src.chunks_exact(32).zip(dst.chunks_exact_mut(bb)) {
        // SAFETY: x holds 32 floats, b holds 32 quant bytes after its header.
        unsafe {
            let p = x.as_ptr();
            let v = [
                _mm256_loadu_ps(p),
                _mm256_loadu_ps(p.add(8)),
                _mm256_loadu_ps(p.add(16)),
                _mm256_loadu_ps(p.add(24)),
            ];
            let sign = _mm256_set1_ps(-0.0);
            let mut max = _mm256_andnot_ps(sign, v[0]);
            for vk in &v[1..] {
                max = _mm256_max_ps(max, _mm256_andnot_ps(sign, *vk));
            }
            let mut m4 = _mm_max_ps(_mm256_extractf128_ps::<1>(max), _mm256_castps256_ps128(max));
            m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
            m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
            let amax = _mm_cvtss_f32(m4);
            let d = amax / 127.0;
            let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
            let mul = _mm256_set1_ps(id);
            let q: [__m256i; 4] = [
                _mm256_cvtps_epi32(_mm256_round_ps::<_MM_FROUND_TO_NEAREST_INT>(_mm256_mul_ps(
                    v[0], mul,
                ))),
                _mm256_cvtps_epi32(_mm256_round_ps::<_MM_FROUND_TO_NEAREST_INT>(_mm256_mul_ps(
                    v[1], mul,
                ))),
                _mm256_cvtps_epi32(_mm256_round_ps::<_MM_FROUND_TO_NEAREST_INT>(_mm256_mul_ps(
                    v[2], mul,
                ))),
                _mm256_cvtps_epi32(_mm256_round_ps::<_MM_FROUND_TO_NEAREST_INT>(_mm256_mul_ps(
                    v[3], mul,
                ))),
            ];
            // f32 -> f16 by F16C in place: `float::f32_to_f16` (the `half`
            // crate) checks the CPU and calls out of line each time (four
            // rows of 576 values through `quantize_rows`, three alternated
            // runs: 695-947 -> 655-674 ns). Same rounding (nearest-even),
            // so the same bits.
            let f16_bits = |x: f32| {
                _mm_extract_epi16::<0>(_mm_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm_set_ss(x)))
                    as u16
            };
            b[0..2].copy_from_slice(&f16_bits(d).to_le_bytes());
            if with_sum {
                let s =
                    _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
                let sum = hsum_epi32(s);
                b[2..4].copy_from_slice(&f16_bits(d * sum as f32).to_le_bytes());
            }
            let packed = _mm256_packs_epi16(
                _mm256_packs_epi32(q[0], q[1]),
                _mm256_packs_epi32(q[2], q[3]),
            );
            let ordered =
                _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            _mm256_storeu_si256(b.as_mut_ptr().add(qs_at) as *mut __m256i, ordered);
        }
    }
}
