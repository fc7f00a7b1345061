//! The kernel builds held to their portable twins, bit for bit: every
//! table entry and every build this CPU runs of each.

use super::*;
use crate::*;

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
        let Some(rows4) = dot4_kernel(DotPath::VecDot, ty).and_then(|k| k.rows4.map(|r| (k, r)))
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
        let Some(kern) = dot4_kernel(DotPath::VecDot, ty).filter(|k| k.rows4_band.is_some()) else {
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
