//! The AVX2 twins of the portable kernels. On x86-64 every dot is
//! compiled a second time with AVX2, FMA and F16C enabled
//! ([`avx2_twin!`]): the portable code is written over fixed-size integer
//! arrays that LLVM vectorizes there, while each f32 operation stays as
//! written (LLVM never reassociates floats), so a twin returns the same bits
//! as its portable original. The twins are reached only after the CPU was
//! checked for those features (`cpu_features`).

/// The function pointer of a portable dot, as is.
macro_rules! plain {
    ($f:path) => {
        $f as $crate::VecDotFn
    };
}

/// The function pointer of `$f` rebuilt with AVX2, FMA and F16C enabled.
/// Only call it after [`crate::cpu_features::avx2_available`] returned true.
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
