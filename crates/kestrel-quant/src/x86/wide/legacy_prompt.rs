//! The legacy formats' AVX-512 prompt kernels (Q4_1, Q5_0, Q8_0; four or
//! eight tokens, on packed or unpacked rows, the unpacked ones also two
//! rows a call), with the activation layouts and row unpacking they read.

use std::arch::x86_64::*;

use super::*;

/// 64-byte units per block of a prepared group.
pub(super) const fn units<F: Legacy>() -> usize {
    if F::SIGNED {
        4
    } else {
        5
    }
}

/// Where the 64-aligned part of `v` starts, in chunks (a `Vec<Chunk32>`
/// is only 32-aligned). Prepare and kernel agree because both ask the same
/// allocation.
pub(super) fn start(v: &[Chunk32]) -> usize {
    usize::from(!(v.as_ptr() as usize).is_multiple_of(64))
}

/// Four Q8_0/Q8_1 rows in the layout above.
pub(super) fn prepare<F: Legacy>(a: [&[u8]; 4], out: &mut Vec<Chunk32>) {
    // Q8_1 (d, s, quants) pairs with the unsigned formats.
    let block = if F::SIGNED { 34 } else { 36 };
    let blocks = a[0].len() / block;
    let per_block = 2 * units::<F>();
    out.clear();
    out.resize(blocks * per_block + 1, Chunk32([0; 32]));
    let at = start(out);
    let half = |b: &[u8], k: usize| crate::f16_to_f32(u16::from_le_bytes([b[2 * k], b[2 * k + 1]]));
    for i in 0..blocks {
        let unit = &mut out[at + i * per_block..at + (i + 1) * per_block];
        for (t, row) in a.iter().enumerate() {
            let b = &row[i * block..(i + 1) * block];
            let q = &mut unit[t].0;
            q.copy_from_slice(&b[block - 32..]);
            if F::SIGNED {
                q.iter_mut().for_each(|v| *v ^= 0x80);
            }
            let d = half(b, 0).to_le_bytes();
            for k in 0..8 {
                unit[4 + t].0[4 * k..4 * k + 4].copy_from_slice(&d);
            }
            if !F::SIGNED {
                unit[8].0[4 * t..4 * t + 4].copy_from_slice(&half(b, 1).to_le_bytes());
            }
        }
    }
}

/// 64-byte units per block of the layout the rows-across kernels
/// ([`q4_1_rows4_across`], [`q8_0_rows4_across`]) read
/// (`prepare_across`): units 2t and 2t + 1 hold token t's half blocks
/// (quants 0..16, 16..32; Q8_0's made unsigned, + 128), each repeated in
/// the four 128-bit lanes; unit 8 holds the tokens' d, token t's in lanes
/// 4r + t, and for Q4_1 unit 9 their s likewise. The kernels load the half
/// blocks and the s as they are, where broadcasting 16 bytes from a
/// compact layout took a shuffle-port instruction per load: Zen 4 ran the
/// Q4_1 kernel's mix with 128-bit broadcast loads at 29 cycles a block,
/// with full loads at 22 (a synthetic loop of its instructions). About
/// twice the bytes of `prepare`'s layout (a 1536-column row's 30 KiB for
/// four tokens), read again for every four weight rows from L1 or L2.
pub(super) const fn across_units<F: Legacy>() -> usize {
    if F::SIGNED {
        9
    } else {
        10
    }
}

/// Four Q8_1 (Q4_1) or Q8_0 (Q8_0) rows in the rows-across layout
/// ([`across_units`]). Every unit is written, so `out` is only grown,
/// never cleared.
pub(super) fn prepare_across<F: Legacy>(a: [&[u8]; 4], out: &mut Vec<Chunk32>) {
    let block = if F::SIGNED { 34 } else { 36 };
    let blocks = a[0].len() / block;
    let per_block = 2 * across_units::<F>();
    out.resize(blocks * per_block + 1, Chunk32([0; 32]));
    let at = start(out);
    let a = a.map(|r| &r[..blocks * block]);
    #[target_feature(enable = "avx2,f16c,avx512f")]
    unsafe fn fill<F: Legacy>(a: [&[u8]; 4], units: &mut [Chunk32], per_block: usize) {
        let block = if F::SIGNED { 34 } else { 36 };
        // Q8_1's (d, s) pairs: the d first, then the s.
        let split = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
        for (i, unit) in units.chunks_exact_mut(per_block).enumerate() {
            let b = a.map(|r| &r[i * block..(i + 1) * block]);
            let word = |t: usize| i32::from_le_bytes([b[t][0], b[t][1], b[t][2], b[t][3]]);
            let p = unit.as_mut_ptr() as *mut u8;
            // SAFETY: AVX2, F16C and AVX-512 F are enabled here; the
            // stores write this block's units (`per_block` chunks), the
            // loads read each row's block (its quants are its last 32
            // bytes; its first four hold d and s, or d and a quant).
            unsafe {
                for (t, b) in b.iter().enumerate() {
                    let mut q = _mm256_loadu_si256(b.as_ptr().add(block - 32) as *const __m256i);
                    if F::SIGNED {
                        q = _mm256_xor_si256(q, _mm256_set1_epi8(-128));
                    }
                    let halves = [_mm256_castsi256_si128(q), _mm256_extracti128_si256::<1>(q)];
                    for (h, x) in halves.into_iter().enumerate() {
                        let to = p.add((2 * t + h) * 64) as *mut __m512i;
                        _mm512_storeu_si512(to, _mm512_broadcast_i32x4(x));
                    }
                }
                // Eight halves: Q8_1's (d, s) pairs, or Q8_0's d and first
                // two quants.
                let words = _mm_setr_epi32(word(0), word(1), word(2), word(3));
                let v = _mm256_permutevar8x32_ps(_mm256_cvtph_ps(words), split);
                let d = _mm512_broadcast_f32x4(_mm256_castps256_ps128(v));
                _mm512_storeu_ps(p.add(8 * 64) as *mut f32, d);
                if !F::SIGNED {
                    let s = _mm512_broadcast_f32x4(_mm256_extractf128_ps::<1>(v));
                    _mm512_storeu_ps(p.add(9 * 64) as *mut f32, s);
                }
            }
        }
    }
    // SAFETY: reached only through kernels handed out after `avx512_available()`
    // (which implies AVX2, F16C and AVX-512 F).
    unsafe { fill::<F>(a, &mut out[at..at + blocks * per_block], per_block) }
}

pub(crate) fn prepare_q4_1_across(a: [&[u8]; 4], out: &mut Vec<Chunk32>) {
    prepare_across::<Q41>(a, out);
}

pub(crate) fn prepare_q8_0_across(a: [&[u8]; 4], out: &mut Vec<Chunk32>) {
    prepare_across::<Q80>(a, out);
}

/// One Q8_1 row as token 0 of a Q4_1 group in the rows-across layout,
/// writing only what the one-token kernel reads (its half blocks, its d
/// and s with tokens 1..4's lanes 0): the rest of `out` keeps whatever it
/// held, so a band's preparation costs no fill of the three absent tokens'
/// units, and F16C converts each block's (d, s) in one instruction (a
/// SmolLM2 step prepares about 200 rows a worker; with the compact layout
/// this took a 576-column row from 231 to 24 ns).
pub(super) fn prepare_one_q4_1(a: &[u8], out: &mut Vec<Chunk32>) {
    const BLOCK: usize = 36;
    let blocks = a.len() / BLOCK;
    let per_block = 2 * across_units::<Q41>();
    out.resize(blocks * per_block + 1, Chunk32([0; 32]));
    let at = start(out);
    #[target_feature(enable = "avx2,f16c,avx512f")]
    unsafe fn fill(a: &[u8], units: &mut [Chunk32], per_block: usize) {
        for (b, unit) in a.chunks_exact(BLOCK).zip(units.chunks_exact_mut(per_block)) {
            let ds = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            let p = unit.as_mut_ptr() as *mut u8;
            // SAFETY: AVX2, F16C and AVX-512 F are enabled here; the stores
            // write units 0, 1, 8 and 9 of this block's 640 bytes, the load
            // reads the block's 32 quant bytes.
            unsafe {
                let ds = _mm_cvtph_ps(_mm_cvtsi32_si128(ds as i32));
                let q = _mm256_loadu_si256(b.as_ptr().add(4) as *const __m256i);
                let halves = [_mm256_castsi256_si128(q), _mm256_extracti128_si256::<1>(q)];
                for (h, x) in halves.into_iter().enumerate() {
                    _mm512_storeu_si512(p.add(h * 64) as *mut __m512i, _mm512_broadcast_i32x4(x));
                }
                // d (then s) in lane 0 of each 128-bit lane, the absent
                // tokens' 0 in lanes 1..4.
                let d = _mm_move_ss(_mm_setzero_ps(), ds);
                let s = _mm_move_ss(_mm_setzero_ps(), _mm_movehdup_ps(ds));
                _mm512_storeu_ps(p.add(8 * 64) as *mut f32, _mm512_broadcast_f32x4(d));
                _mm512_storeu_ps(p.add(9 * 64) as *mut f32, _mm512_broadcast_f32x4(s));
            }
        }
    }
    // SAFETY: reached only through kernels handed out after `avx512_available()`
    // (which implies AVX2, F16C and AVX-512 F).
    unsafe {
        fill(
            &a[..blocks * BLOCK],
            &mut out[at..at + blocks * per_block],
            per_block,
        )
    }
}

pub(crate) fn prepare_q4_1(a: [&[u8]; 4], out: &mut Vec<Chunk32>) {
    prepare::<Q41>(a, out);
}

/// For both signed formats (Q5_0, Q8_0: Q8_0 activations either way).
pub(crate) fn prepare_signed(a: [&[u8]; 4], out: &mut Vec<Chunk32>) {
    prepare::<Q50>(a, out);
}

/// Signed rows (Q5_0, Q8_0) for `dot8`: B blocks of signed quants, then B
/// chunks of lane offsets (-128 x the sum of each lane's four weights),
/// then the (d, m) pairs four blocks to a chunk, as `crate::x86::unpack_legacy`
/// has them.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
pub(super) fn unpack_signed<F: Legacy>(w: &[u8], out: &mut Vec<Chunk32>) {
    let blocks = w.len() / F::WB;
    out.clear();
    out.resize(2 * blocks + blocks.div_ceil(4), Chunk32([0; 32]));
    for (i, bw) in w.chunks_exact(F::WB).enumerate() {
        // SAFETY: AVX2 is enabled here; the block is whole.
        let q = unsafe { F::unpack(bw) };
        // SAFETY: chunk i is in bounds (resized above) and 32-aligned.
        unsafe { _mm256_store_si256(out.as_mut_ptr().add(i) as *mut __m256i, q) };
        // SAFETY: AVX2 is enabled here; chunk blocks + i is in bounds
        // (resized above) and 32-aligned.
        unsafe {
            _mm256_store_si256(
                out.as_mut_ptr().add(blocks + i) as *mut __m256i,
                start_lanes(q),
            )
        };
        let (d, m) = f16x2_at(bw, 0);
        let at = 8 * (i % 4);
        let chunk = &mut out[2 * blocks + i / 4].0;
        chunk[at..at + 4].copy_from_slice(&d.to_le_bytes());
        chunk[at + 4..at + 8].copy_from_slice(&m.to_le_bytes());
    }
}

pub(crate) fn unpack_q5_0(w: &[u8], out: &mut Vec<Chunk32>) {
    // SAFETY: handed out only after `avx512_available()` (which implies AVX2).
    unsafe { unpack_signed::<Q50Bw>(w, out) }
}

pub(crate) fn unpack_q8_0(w: &[u8], out: &mut Vec<Chunk32>) {
    // SAFETY: as `unpack_q5_0`.
    unsafe { unpack_signed::<Q80>(w, out) }
}

/// Where a kernel takes block `i` of its weight row from: the quants as
/// bytes (signed for the signed formats), each lane's start (-128 x the
/// sum of its four weights for the signed formats, else 0) and (d, m).
pub(super) trait WideRow {
    fn blocks(&self) -> usize;
    /// The caller keeps `i < self.blocks()` and enables AVX2 and AVX-512.
    unsafe fn block(&self, i: usize) -> (__m256i, __m256i, f32, f32);
}

/// A row unpacked beforehand (`unpack_signed`, or for Q4_1
/// `crate::x86::unpack_legacy`).
pub(super) struct Unpacked<'a, F> {
    uw: &'a [Chunk32],
    blocks: usize,
    format: std::marker::PhantomData<F>,
}

impl<'a, F: Legacy> Unpacked<'a, F> {
    fn new(uw: &'a [Chunk32]) -> Self {
        // B quant chunks (+ B start chunks when signed) + ceil(B/4).
        let blocks = if F::SIGNED {
            uw.len() * 4 / 9
        } else {
            uw.len() * 4 / 5
        };
        let scales_at = if F::SIGNED { 2 * blocks } else { blocks };
        // One check stands for the raw reads in `block`.
        assert!(uw.len() >= scales_at + blocks.div_ceil(4), "unpacked row");
        Unpacked {
            uw,
            blocks,
            format: std::marker::PhantomData,
        }
    }
}

impl<F: Legacy> WideRow for Unpacked<'_, F> {
    fn blocks(&self) -> usize {
        self.blocks
    }
    #[inline(always)]
    unsafe fn block(&self, i: usize) -> (__m256i, __m256i, f32, f32) {
        let blocks = self.blocks;
        let p = self.uw.as_ptr();
        // SAFETY: chunks i, blocks + i and the scale chunk are within the
        // length checked in `new`; chunks are 32-aligned.
        unsafe {
            let q = _mm256_load_si256(p.add(i) as *const __m256i);
            let (start, scales_at) = if F::SIGNED {
                (
                    _mm256_load_si256(p.add(blocks + i) as *const __m256i),
                    2 * blocks,
                )
            } else {
                (_mm256_setzero_si256(), blocks)
            };
            let scales = p.add(scales_at + i / 4) as *const f32;
            (
                q,
                start,
                *scales.add(2 * (i % 4)),
                *scales.add(2 * (i % 4) + 1),
            )
        }
    }
}

/// A row as the GGUF file has it, each block unpacked as it is reached
/// (fewer tokens than pay for unpacking the row first).
pub(super) struct Packed<'a, F> {
    w: &'a [u8],
    format: std::marker::PhantomData<F>,
}

impl<F: Legacy> WideRow for Packed<'_, F> {
    fn blocks(&self) -> usize {
        self.w.len() / F::WB
    }
    #[inline(always)]
    unsafe fn block(&self, i: usize) -> (__m256i, __m256i, f32, f32) {
        let bw = &self.w[i * F::WB..(i + 1) * F::WB];
        // SAFETY: the block is whole; AVX2 is enabled in every caller.
        unsafe {
            let q = F::unpack(bw);
            let start = if F::SIGNED {
                start_lanes(q)
            } else {
                _mm256_setzero_si256()
            };
            let (d, m) = f16x2_at(bw, 0);
            (q, start, d, m)
        }
    }
}

/// -128 x the sum of each lane's four signed weights.
#[inline(always)]
pub(super) unsafe fn start_lanes(q: __m256i) -> __m256i {
    // SAFETY: AVX2 is enabled in every caller.
    unsafe {
        _mm256_madd_epi16(
            _mm256_maddubs_epi16(_mm256_set1_epi8(1), q),
            _mm256_set1_epi16(-128),
        )
    }
}

/// Where each prepared group's 64-aligned units start, once the groups are
/// checked to hold `blocks` blocks: the one check that stands for a
/// kernel's raw activation reads.
#[inline(always)]
pub(super) fn prepared_bases<F: Legacy, const G: usize>(
    pre: [&[Chunk32]; G],
    blocks: usize,
) -> [*const u8; G] {
    let per_block = 2 * units::<F>();
    assert!(
        pre.iter().all(|p| p.len() > blocks * per_block),
        "prepared activations"
    );
    pre.map(|p| {
        // SAFETY: within the prepared buffer (its 64-aligned part).
        unsafe { p.as_ptr().add(start(p)) as *const u8 }
    })
}

/// `G` groups of four tokens against one weight row.
#[inline(always)]
pub(super) unsafe fn dotw<F: Legacy, R: WideRow, const G: usize>(
    w: R,
    pre: [&[Chunk32]; G],
) -> [[f32; 4]; G] {
    let blocks = w.blocks();
    let base = prepared_bases::<F, G>(pre, blocks);
    let mut acc = [[_mm512_setzero_ps(); 2]; G];
    let mut summs = [_mm_setzero_ps(); G];
    for i in 0..blocks {
        // SAFETY: i < blocks; every activation read below is within the
        // length checked above, in 64-aligned units.
        unsafe {
            let (q, start_lanes, dw, mw) = w.block(i);
            let q = _mm512_broadcast_i64x4(q);
            let start_lanes = _mm512_broadcast_i64x4(start_lanes);
            let dw16 = _mm512_set1_ps(dw);
            for g in 0..G {
                let unit = |k: usize| base[g].add((i * units::<F>() + k) * 64);
                if !F::SIGNED {
                    summs[g] = _mm_fmadd_ps(
                        _mm_set1_ps(mw),
                        _mm_load_ps(unit(4) as *const f32),
                        summs[g],
                    );
                }
                for (h, acc) in acc[g].iter_mut().enumerate() {
                    let act = _mm512_load_si512(unit(h) as *const __m512i);
                    let l = if F::SIGNED {
                        _mm512_dpbusd_epi32(start_lanes, act, q)
                    } else {
                        _mm512_dpbusd_epi32(start_lanes, q, act)
                    };
                    let d = _mm512_mul_ps(dw16, _mm512_load_ps(unit(2 + h) as *const f32));
                    *acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(l), *acc);
                }
            }
        }
    }
    let mut out = [[0f32; 4]; G];
    for (o, (&a, &s)) in out.iter_mut().zip(acc.iter().zip(&summs)) {
        // SAFETY: AVX2 and AVX-512 are enabled in every caller.
        *o = unsafe { finish::<F, 2>(a, s) };
    }
    out
}

/// [`dotw`] on two unpacked rows at once: each activation load serves
/// both rows (the one-row kernel loaded a token pair's quants and scales
/// for every row), each row's lanes take the one-row kernel's exact f32
/// steps, so each row's results are the same bits.
#[inline(always)]
pub(super) unsafe fn dotw2<F: Legacy, const G: usize>(
    w: [Unpacked<'_, F>; 2],
    pre: [&[Chunk32]; G],
) -> [[[f32; 4]; G]; 2] {
    let blocks = w[0].blocks();
    assert_eq!(w[1].blocks(), blocks, "rows of one matrix");
    let base = prepared_bases::<F, G>(pre, blocks);
    let mut acc = [[[_mm512_setzero_ps(); 2]; G]; 2];
    let mut summs = [[_mm_setzero_ps(); G]; 2];
    for i in 0..blocks {
        // SAFETY: i < blocks; every activation read below is within the
        // length checked above, in 64-aligned units.
        unsafe {
            let (q0, s0, d0, m0) = w[0].block(i);
            let (q1, s1, d1, m1) = w[1].block(i);
            let q = [_mm512_broadcast_i64x4(q0), _mm512_broadcast_i64x4(q1)];
            let st = [_mm512_broadcast_i64x4(s0), _mm512_broadcast_i64x4(s1)];
            let dw16 = [_mm512_set1_ps(d0), _mm512_set1_ps(d1)];
            for g in 0..G {
                let unit = |k: usize| base[g].add((i * units::<F>() + k) * 64);
                if !F::SIGNED {
                    let sa = _mm_load_ps(unit(4) as *const f32);
                    summs[0][g] = _mm_fmadd_ps(_mm_set1_ps(m0), sa, summs[0][g]);
                    summs[1][g] = _mm_fmadd_ps(_mm_set1_ps(m1), sa, summs[1][g]);
                }
                for h in 0..2 {
                    let act = _mm512_load_si512(unit(h) as *const __m512i);
                    let da = _mm512_load_ps(unit(2 + h) as *const f32);
                    for (r, acc) in acc.iter_mut().enumerate() {
                        let l = if F::SIGNED {
                            _mm512_dpbusd_epi32(st[r], act, q[r])
                        } else {
                            _mm512_dpbusd_epi32(st[r], q[r], act)
                        };
                        let d = _mm512_mul_ps(dw16[r], da);
                        acc[g][h] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(l), acc[g][h]);
                    }
                }
            }
        }
    }
    let mut out = [[[0f32; 4]; G]; 2];
    for (o2, (a2, s2)) in out.iter_mut().zip(acc.iter().zip(&summs)) {
        for (o, (&a, &s)) in o2.iter_mut().zip(a2.iter().zip(s2)) {
            // SAFETY: AVX2 and AVX-512 are enabled in every caller.
            *o = unsafe { finish::<F, 2>(a, s) };
        }
    }
    out
}

/// One weight row's results from its registers of two tokens' lanes each
/// (`H` of them, one or two): each token's lanes reduced in the AVX2
/// kernel's order (`hsum8`: the halves added, then lanes 0 + 2 and 1 + 3,
/// then those two), all tokens at once, plus its m x s for the unsigned
/// formats (tokens past 2H: 0). Token by token through `hsum_ps`, this
/// was about a hundred instructions per four-row call, a tenth of a call
/// over 18 blocks.
#[inline(always)]
pub(super) unsafe fn finish<F: Legacy, const H: usize>(
    acc: [__m512; H],
    summs: __m128,
) -> [f32; 4] {
    let (a, b) = (acc[0], acc[H - 1]);
    // 128-bit quarters: token 2h's low and high half, token 2h + 1's.
    let lo = _mm512_shuffle_f32x4::<0b10_00_10_00>(a, b);
    let hi = _mm512_shuffle_f32x4::<0b11_01_11_01>(a, b);
    let y = _mm512_add_ps(lo, hi);
    let z = _mm512_add_ps(y, _mm512_permute_ps::<0b01_00_11_10>(y));
    let w = _mm512_add_ps(z, _mm512_permute_ps::<0b10_11_00_01>(z));
    let firsts = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12, 8, 4, 0);
    let mut v = _mm512_castps512_ps128(_mm512_permutexvar_ps(firsts, w));
    if !F::SIGNED {
        v = _mm_add_ps(v, summs);
    }
    if H == 1 {
        v = _mm_movelh_ps(v, _mm_setzero_ps());
    }
    let mut out = [0f32; 4];
    // SAFETY: out holds 4 floats.
    unsafe { _mm_storeu_ps(out.as_mut_ptr(), v) };
    out
}

/// The entries of one format: eight tokens on one or two unpacked rows,
/// and four or eight on a packed one.
macro_rules! wide_entries {
    ($f:ty, $unpacked8:ident, $unpacked16:ident, $packed4:ident, $packed8:ident) => {
        pub(crate) fn $unpacked16(
            uw: [&[Chunk32]; 2],
            pre0: &[Chunk32],
            pre1: &[Chunk32],
        ) -> [[f32; 8]; 2] {
            #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
            unsafe fn body(uw: [&[Chunk32]; 2], pre: [&[Chunk32]; 2]) -> [[[f32; 4]; 2]; 2] {
                unsafe { dotw2::<$f, 2>(uw.map(Unpacked::<$f>::new), pre) }
            }
            // SAFETY: handed out only after `avx512_available()` confirmed the
            // features.
            unsafe { body(uw, [pre0, pre1]) }
                .map(|[a, b]| [a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3]])
        }

        pub(crate) fn $unpacked8(uw: &[Chunk32], pre0: &[Chunk32], pre1: &[Chunk32]) -> [f32; 8] {
            #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
            unsafe fn body(uw: &[Chunk32], pre: [&[Chunk32]; 2]) -> [[f32; 4]; 2] {
                unsafe { dotw::<$f, _, 2>(Unpacked::<$f>::new(uw), pre) }
            }
            // SAFETY: handed out only after `avx512_available()` confirmed the
            // features.
            let [a, b] = unsafe { body(uw, [pre0, pre1]) };
            [a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3]]
        }

        pub(crate) fn $packed4(w: &[u8], _a: [&[u8]; 4], pre: &[Chunk32]) -> [f32; 4] {
            #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
            unsafe fn body(w: &[u8], pre: [&[Chunk32]; 1]) -> [[f32; 4]; 1] {
                let w = Packed::<$f> {
                    w,
                    format: std::marker::PhantomData,
                };
                unsafe { dotw::<$f, _, 1>(w, pre) }
            }
            // SAFETY: as above.
            let [out] = unsafe { body(w, [pre]) };
            out
        }

        pub(crate) fn $packed8(w: &[u8], pre0: &[Chunk32], pre1: &[Chunk32]) -> [f32; 8] {
            #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
            unsafe fn body(w: &[u8], pre: [&[Chunk32]; 2]) -> [[f32; 4]; 2] {
                let w = Packed::<$f> {
                    w,
                    format: std::marker::PhantomData,
                };
                unsafe { dotw::<$f, _, 2>(w, pre) }
            }
            // SAFETY: as above.
            let [a, b] = unsafe { body(w, [pre0, pre1]) };
            [a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3]]
        }
    };
}

wide_entries!(Q41, dot8_q4_1, dot16_q4_1, dot4p_q4_1, dot8p_q4_1);
// Q5_0 through its AVX-512 unpacking (`Q50Bw`: the fifth bits by mask).
wide_entries!(Q50Bw, dot8_q5_0, dot16_q5_0, dot4p_q5_0, dot8p_q5_0);
wide_entries!(Q80, dot8_q8_0, dot16_q8_0, dot4p_q8_0, dot8p_q8_0);
