//! The legacy formats' AVX2 and AVX-VNNI prompt kernels: four or eight
//! activation rows (prepared once per product) against one weight row,
//! packed as in the GGUF file or unpacked beforehand.

use std::arch::x86_64::*;

use super::*;

// ---------------------------------------------------------------------------
// Four activation rows at a time (prefill): the same per-row operations, with
// each weight block unpacked once.
// ---------------------------------------------------------------------------

/// Four Q8_0 or Q8_1 activation rows rearranged for a legacy four-row
/// kernel, once per product instead of once per weight row: per block, one
/// chunk with the four rows' scales d (and for Q8_1 then their sums s)
/// widened to f32, then each row's 32 quants in an aligned chunk of its own
/// (in the GGUF layout they straddle cache lines).
pub(super) fn prepare_legacy(a: [&[u8]; 4], block: usize, out: &mut Vec<Chunk32>) {
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
pub(super) trait LegacyRow {
    fn blocks(&self) -> usize;
    /// Block `i`'s quants as bytes and its (d, m) widened (m: 0 where the
    /// format has none). The caller keeps `i < self.blocks()`.
    unsafe fn block(&self, i: usize) -> (__m256i, f32, f32);
}

pub(super) struct Packed<'a, F> {
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
pub(super) struct Unpacked<'a> {
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
pub(super) unsafe fn unpack_legacy<F: Legacy>(w: &[u8], out: &mut Vec<Chunk32>) {
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

/// A legacy-format dot of one weight row against `G` groups of four
/// activation rows, each group prepared by `prepare_legacy`: the weight
/// block is unpacked once for all `4 * G` rows, and each row's f32 steps are
/// its one-row kernel's. Always inlined into its entry points, which enable
/// AVX2 (and AVX-VNNI for `VnniLanes`).
#[inline(always)]
pub(super) unsafe fn legacy_groups<F: Legacy, R: LegacyRow, L: Lanes, const G: usize>(
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
        pub(super) fn $x4(w: &[u8], _a: [&[u8]; 4], pre: &[Chunk32]) -> [f32; 4] {
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

        pub(super) fn $x8(w: &[u8], pre0: &[Chunk32], pre1: &[Chunk32]) -> [f32; 8] {
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
        pub(super) fn $unpack(w: &[u8], out: &mut Vec<Chunk32>) {
            // SAFETY: as `entry!`.
            unsafe { unpack_legacy::<$f>(w, out) }
        }

        // uw holds B + ceil(B / 4) chunks, so B = floor(4 len / 5); the
        // activations' length is checked inside.
        pub(super) fn $x8u(uw: &[Chunk32], pre0: &[Chunk32], pre1: &[Chunk32]) -> [f32; 8] {
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
        pub(super) fn $x8v(uw: &[Chunk32], pre0: &[Chunk32], pre1: &[Chunk32]) -> [f32; 8] {
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
