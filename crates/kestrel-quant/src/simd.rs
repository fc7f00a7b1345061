//! Run-time selection of SIMD builds of the kernels. On x86-64 every dot is
//! compiled a second time with AVX2, FMA and F16C enabled
//! ([`avx2_twin!`]): the portable code is written over fixed-size integer
//! arrays that LLVM vectorizes there, while each f32 operation stays as
//! written (LLVM never reassociates floats), so a twin returns the same bits
//! as its portable original. The twins are reached only after the CPU was
//! checked for those features.

/// The function pointer of a portable dot, as is.
macro_rules! plain {
    ($f:path) => {
        $f as $crate::VecDotFn
    };
}

/// The function pointer of `$f` rebuilt with AVX2, FMA and F16C enabled.
/// Only call it after [`avx2_available`] returned true.
#[cfg(target_arch = "x86_64")]
macro_rules! avx2_twin {
    ($f:path) => {{
        #[target_feature(enable = "avx2,fma,f16c")]
        fn twin(n: usize, w: &[u8], a: &[u8]) -> f32 {
            $f(n, w, a)
        }
        fn call(n: usize, w: &[u8], a: &[u8]) -> f32 {
            // SAFETY: twins are only reachable through tables selected after
            // `avx2_available()` confirmed AVX2, FMA and F16C on this CPU.
            unsafe { twin(n, w, a) }
        }
        call as $crate::VecDotFn
    }};
}

/// Whether this CPU runs the AVX2 twins (checked once). Setting
/// `KESTREL_PORTABLE=1` forces the portable kernels, for comparison.
#[cfg(target_arch = "x86_64")]
pub(crate) fn avx2_available() -> bool {
    static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        std::env::var_os("KESTREL_PORTABLE").is_none_or(|v| v != "1")
            && std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma")
            && std::arch::is_x86_feature_detected!("f16c")
    })
}

/// Whether the AVX2 kernels may also use AVX-VNNI's `vpdpbusd` for their
/// integer lane sums (same sums, so the same bits; fewer instructions).
/// `KESTREL_NO_VNNI=1` turns it off, for comparison.
#[cfg(target_arch = "x86_64")]
pub(crate) fn vnni_available() -> bool {
    static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        avx2_available()
            && std::env::var_os("KESTREL_NO_VNNI").is_none_or(|v| v != "1")
            && std::arch::is_x86_feature_detected!("avxvnni")
    })
}

/// As [`avx2_twin!`] for a quantizer (the activation quantizers run once per
/// matrix product input and use rounding instructions there).
#[cfg(target_arch = "x86_64")]
macro_rules! avx2_quant_twin {
    ($f:path) => {{
        #[target_feature(enable = "avx2,fma,f16c")]
        fn twin(src: &[f32], dst: &mut [u8]) {
            $f(src, dst)
        }
        fn call(src: &[f32], dst: &mut [u8]) {
            // SAFETY: as in `avx2_twin!`.
            unsafe { twin(src, dst) }
        }
        call as $crate::QuantizeFn
    }};
}
