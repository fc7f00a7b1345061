//! CPU-feature detection and the environment switches that turn kernel
//! builds off: every choice between the portable kernels and their AVX2,
//! AVX-VNNI and AVX-512 builds asks this module, once per process (each
//! answer is cached), so that `KESTREL_PORTABLE=1`, `KESTREL_NO_VNNI=1`
//! and `KESTREL_NO_AVX512=1` reach every dispatch (the tests and
//! scripts/test-kernel-paths.sh run the narrower paths on a wide machine
//! through them).

/// Whether the environment variable `var` is set to exactly `1`.
#[cfg(target_arch = "x86_64")]
fn switched_off(var: &str) -> bool {
    std::env::var_os(var).is_some_and(|v| v == "1")
}

/// Whether this CPU runs the AVX2 twins (checked once). Setting
/// `KESTREL_PORTABLE=1` forces the portable kernels, for comparison.
#[cfg(target_arch = "x86_64")]
pub(crate) fn avx2_available() -> bool {
    static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        !switched_off("KESTREL_PORTABLE")
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
            && !switched_off("KESTREL_NO_VNNI")
            && std::arch::is_x86_feature_detected!("avxvnni")
    })
}

/// Whether this CPU runs the AVX-512 kernels (checked once): AVX-512 F,
/// BW, VL and VNNI on top of the AVX2 builds. They need no AVX-VNNI (its
/// VEX form of `vpdpbusd`): AMD's Zen 4 has AVX-512 VNNI without it, and
/// there every batched product fell back to the AVX2 kernels.
/// `KESTREL_NO_VNNI=1` turns these off with the AVX-VNNI builds,
/// `KESTREL_NO_AVX512=1` just these, for comparison.
#[cfg(target_arch = "x86_64")]
pub(crate) fn avx512_available() -> bool {
    static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        avx2_available()
            && !switched_off("KESTREL_NO_VNNI")
            && !switched_off("KESTREL_NO_AVX512")
            && std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512vl")
            && std::arch::is_x86_feature_detected!("avx512vnni")
    })
}

/// Whether the AVX2/FMA/F16C builds are in use on this machine (x86-64
/// with those features, and `KESTREL_PORTABLE` not set to 1).
pub fn avx2_in_use() -> bool {
    #[cfg(target_arch = "x86_64")]
    return avx2_available();
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Whether the AVX2 kernels take their integer lane sums from AVX-VNNI
/// (detected at run time; `KESTREL_NO_VNNI=1` turns it off).
pub fn vnni_in_use() -> bool {
    #[cfg(target_arch = "x86_64")]
    return vnni_available();
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Whether the legacy formats' prompt kernels run their AVX-512 build (two
/// tokens per instruction; detected at run time; `KESTREL_NO_AVX512=1`
/// turns it off).
pub fn avx512_in_use() -> bool {
    #[cfg(target_arch = "x86_64")]
    return avx512_available();
    #[cfg(not(target_arch = "x86_64"))]
    false
}
