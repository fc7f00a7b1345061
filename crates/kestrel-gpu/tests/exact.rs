//! The exact float operations of `kestrel_gpu::exact` against the CPU's:
//! the emulated fused multiply-add gives `f32::mul_add`'s bits on random
//! and edge-case triples, whatever the adapter's own `fma` does.

use kestrel_gpu::exact::{FMA_EMULATED, FMA_NATIVE};
use kestrel_gpu::Gpu;

struct Rng(u64);

impl Rng {
    fn u32(&mut self) -> u32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 32) as u32
    }

    /// A float with a random sign and mantissa and an exponent within
    /// `spread` binades of 2^0.
    fn float(&mut self, spread: i32) -> f32 {
        let e = (127 + (self.u32() % (2 * spread as u32 + 1)) as i32 - spread).clamp(0, 254);
        f32::from_bits((self.u32() & 0x8000_0000) | ((e as u32) << 23) | (self.u32() & 0x7f_ffff))
    }
}

/// Triples meant to reach every path: near cancellation, addends far
/// above and below the product, subnormal inputs and results, overflow,
/// signed zeros, infinities and NaNs.
fn triples() -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut a, mut b, mut c) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..60_000 {
        let (x, y) = (rng.float(20), rng.float(20));
        let z = match i % 6 {
            // Cancellation: c near -(x*y), a few ulps away.
            0 => f32::from_bits(
                (-(x * y))
                    .to_bits()
                    .wrapping_add(rng.u32() % 9)
                    .wrapping_sub(4),
            ),
            1 => rng.float(60),
            2 => rng.float(5) * (x * y).abs(),
            3 => f32::from_bits(rng.u32() & 0x807f_ffff), // subnormal
            4 => -(x * y) * (1.0 + (rng.u32() % 64) as f32 * f32::EPSILON),
            _ => rng.float(130),
        };
        a.push(x);
        b.push(y);
        c.push(z);
    }
    // Products deep in the subnormal range and near overflow.
    for _ in 0..4000 {
        let small = f32::from_bits(rng.u32() % 0x0100_0000);
        a.push(small);
        b.push(rng.float(30));
        c.push(if rng.u32().is_multiple_of(2) {
            0.0
        } else {
            small
        });
        a.push(rng.float(3) * 1e19);
        b.push(rng.float(3) * 1e19);
        c.push(-rng.float(3) * 3e38);
    }
    let special = [
        0.0,
        -0.0,
        1.0,
        -1.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        f32::MAX,
        f32::MIN_POSITIVE,
        1e-45,
        3.0,
        f32::EPSILON,
    ];
    for &x in &special {
        for &y in &special {
            for &z in &special {
                a.push(x);
                b.push(y);
                c.push(z);
            }
        }
    }
    (a, b, c)
}

fn same(got: f32, want: f32) -> bool {
    got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan())
}

#[test]
fn emulated_fma_rounds_once_as_the_cpu() {
    let gpu = Gpu::new().unwrap_or_else(|e| panic!("{e}"));
    let (a, b, c) = triples();
    let got = gpu.run_fma(FMA_EMULATED, &a, &b, &c).expect("fma");
    let bad: Vec<String> = (0..a.len())
        .filter(|&i| !same(got[i], a[i].mul_add(b[i], c[i])))
        .take(10)
        .map(|i| {
            format!(
                "fma({:e}, {:e}, {:e}) = {:e} ({:#x}), want {:e} ({:#x})",
                a[i],
                b[i],
                c[i],
                got[i],
                got[i].to_bits(),
                a[i].mul_add(b[i], c[i]),
                a[i].mul_add(b[i], c[i]).to_bits()
            )
        })
        .collect();
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    // Control: rounding the product first fails the same cases.
    let unfused = (0..a.len())
        .filter(|&i| !same(a[i] * b[i] + c[i], a[i].mul_add(b[i], c[i])))
        .count();
    assert!(
        unfused > 1000,
        "the cases tell fused from unfused: {unfused}"
    );
}

/// `fma_int`, the products' step (scale times an integer lane sum plus
/// the lane), against `mul_add` on scales like the products' (and zeros,
/// subnormals, infinities), sums up to +-2^16 and every kind of addend.
#[test]
fn emulated_integer_fma_rounds_once_as_the_cpu() {
    let gpu = Gpu::new().unwrap_or_else(|e| panic!("{e}"));
    let (a, _, c) = triples();
    let mut rng = Rng(5);
    let mut d: Vec<f32> = a.iter().map(|&x| x * 1e-3).collect();
    let mut n: Vec<i32> = a
        .iter()
        .map(|_| (rng.u32() % 131_073) as i32 - 65_536)
        .collect();
    let mut c = c;
    for (i, n) in n.iter_mut().enumerate().take(40) {
        *n = [0, 1, -1, 65_536, -65_536][i % 5];
    }
    d.extend([0.0, -0.0, f32::INFINITY, f32::NAN, 1e-45, 3e-39]);
    n.extend([7, -7, 3, 3, 65_536, -1]);
    c.extend([-0.0, 0.0, 1.0, 1.0, 0.0, 1e-38]);
    let got = gpu.run_fma_int(FMA_EMULATED, &d, &n, &c).expect("fma_int");
    let bad: Vec<String> = (0..d.len())
        .filter(|&i| !same(got[i], d[i].mul_add(n[i] as f32, c[i])))
        .take(10)
        .map(|i| format!("fma_int({:e}, {}, {:e}) = {:e}", d[i], n[i], c[i], got[i]))
        .collect();
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    // Control: rounding the product first fails some of the same cases.
    let unfused = (0..d.len())
        .filter(|&i| !same(d[i] * n[i] as f32 + c[i], d[i].mul_add(n[i] as f32, c[i])))
        .count();
    assert!(
        unfused > 100,
        "the cases tell fused from unfused: {unfused}"
    );
}

#[test]
fn the_probe_decides_which_fma_shaders_get() {
    let gpu = Gpu::new().unwrap_or_else(|e| panic!("{e}"));
    let src = gpu.fma_wgsl();
    assert_eq!(src == FMA_NATIVE, gpu.fused_fma);
    eprintln!(
        "{}: fma {}",
        gpu.adapter,
        if gpu.fused_fma { "fused" } else { "emulated" }
    );
    // Whichever it chose rounds once.
    let (a, b, c) = triples();
    let got = gpu.run_fma(src, &a, &b, &c).expect("fma");
    let bad = (0..a.len())
        .filter(|&i| {
            a[i].is_finite()
                && b[i].is_finite()
                && c[i].is_finite()
                && (a[i] * b[i]).is_finite()
                && !same(got[i], a[i].mul_add(b[i], c[i]))
        })
        .count();
    assert_eq!(bad, 0, "{bad} triples rounded twice");
}

/// glibc's expf as the CPU calls it (`f32::exp`), where the host's libm is
/// the build the emulation was written from.
#[test]
fn expf_gives_glibcs_bits() {
    if !kestrel_gpu::exact::host_expf_is_glibc_fma() {
        eprintln!("skipped: the host's expf is not glibc's FMA build");
        return;
    }
    let gpu = Gpu::new().unwrap_or_else(|e| panic!("{e}"));
    let mut rng = Rng(77);
    let mut x: Vec<f32> = Vec::new();
    // Every range the softmax and SiLU reach, densely: random values of
    // -110..90, then small ones, then the neighbourhoods of the cut-offs.
    for _ in 0..200_000 {
        x.push((rng.u32() as f64 / u32::MAX as f64 * 200.0 - 110.0) as f32);
    }
    for _ in 0..50_000 {
        x.push(rng.float(12) * 1e-3);
    }
    for edge in [
        88.722_83f32,
        -103.972_08,
        -103.278_92,
        -87.336_55,
        0.0,
        -0.0,
        1e-30,
        -1e-30,
    ] {
        for k in 0..200u32 {
            x.push(f32::from_bits(
                edge.to_bits().wrapping_add(k).wrapping_sub(100),
            ));
        }
    }
    x.extend([
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        f32::MAX,
        f32::MIN,
    ]);
    let got = gpu.run_expf(&x).expect("expf");
    let bad: Vec<String> = (0..x.len())
        .filter(|&i| !same(got[i], x[i].exp()))
        .take(10)
        .map(|i| {
            format!(
                "expf({:e} = {:#x}) = {:e} ({:#x}), want {:e} ({:#x})",
                x[i],
                x[i].to_bits(),
                got[i],
                got[i].to_bits(),
                x[i].exp(),
                x[i].exp().to_bits()
            )
        })
        .collect();
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}
