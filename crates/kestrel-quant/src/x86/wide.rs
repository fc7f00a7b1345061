//! AVX-512 builds of the legacy formats' several-token kernels (Q4_1,
//! Q5_0, Q8_0; four or eight tokens, on packed or unpacked rows, the
//! unpacked ones also two rows a call): one 512-bit register holds two
//! tokens' eight lanes, so each instruction serves two tokens where the
//! AVX2 build spends one per token; and of
//! Q5_0's four-row decode kernel, where one register holds two rows'
//! lanes; and of Q4_1's four-row kernel for four, two or one token
//! (batched and single-token decode), whose registers hold four rows'
//! lanes of one token. Each half runs exactly
//! the AVX2 kernel's f32 steps for its token or row (the same lanes, the
//! same products, the same fused adds in the same order), so the results
//! are the same bits; the lib.rs tests hold every build to the portable
//! kernel. Then the four-row decode kernels of two K-quants: Q6_K (a
//! block's two halves in one register) and Q4_K (four rows' scales
//! unpacked in one register, their sums folded in as four f32 lanes), and
//! Q4_K's prompt kernels: on packed rows, and on rows unpacked with the
//! tokens in lanes (see the section's comment), as Q6_K's last.
//!
//! The activations get their own layout (`prepare_*`), 64-byte units so
//! that each two-token load stays within one cache line:
//! per group of four tokens and per block, `[a0 | a1]`, `[a2 | a3]` (Q5_0:
//! each byte + 128, as unsigned), `[da0 x8 | da1 x8]`, `[da2 x8 | da3 x8]`
//! (scales widened), then for Q4_1 a unit with the four sums s. Q5_0 rows
//! are multiplied as signed weights against unsigned activations: each
//! lane then starts at -128 x the sum of its four weights (computed once
//! per row, `unpack_q5_0`), which leaves the exact signed sum.

use std::arch::x86_64::*;

use super::{f16x2_at, Legacy, Q50Bw, Q41, Q50, Q80};
use crate::Chunk32;

/// 64-byte units per block of a prepared group.
const fn units<F: Legacy>() -> usize {
    if F::SIGNED {
        4
    } else {
        5
    }
}

/// Where the 64-aligned part of `v` starts, in chunks (a `Vec<Chunk32>`
/// is only 32-aligned). Prepare and kernel agree because both ask the same
/// allocation.
fn start(v: &[Chunk32]) -> usize {
    usize::from(!(v.as_ptr() as usize).is_multiple_of(64))
}

/// Four Q8_0/Q8_1 rows in the layout above.
fn prepare<F: Legacy>(a: [&[u8]; 4], out: &mut Vec<Chunk32>) {
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
const fn across_units<F: Legacy>() -> usize {
    if F::SIGNED {
        9
    } else {
        10
    }
}

/// Four Q8_1 (Q4_1) or Q8_0 (Q8_0) rows in the rows-across layout
/// ([`across_units`]). Every unit is written, so `out` is only grown,
/// never cleared.
fn prepare_across<F: Legacy>(a: [&[u8]; 4], out: &mut Vec<Chunk32>) {
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
fn prepare_one_q4_1(a: &[u8], out: &mut Vec<Chunk32>) {
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
/// then the (d, m) pairs four blocks to a chunk, as `super::unpack_legacy`
/// has them.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
fn unpack_signed<F: Legacy>(w: &[u8], out: &mut Vec<Chunk32>) {
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
trait WideRow {
    fn blocks(&self) -> usize;
    /// The caller keeps `i < self.blocks()` and enables AVX2 and AVX-512.
    unsafe fn block(&self, i: usize) -> (__m256i, __m256i, f32, f32);
}

/// A row unpacked beforehand (`unpack_signed`, or for Q4_1
/// `super::unpack_legacy`).
struct Unpacked<'a, F> {
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
struct Packed<'a, F> {
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
unsafe fn start_lanes(q: __m256i) -> __m256i {
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
fn prepared_bases<F: Legacy, const G: usize>(
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
unsafe fn dotw<F: Legacy, R: WideRow, const G: usize>(w: R, pre: [&[Chunk32]; G]) -> [[f32; 4]; G] {
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
unsafe fn dotw2<F: Legacy, const G: usize>(
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
unsafe fn finish<F: Legacy, const H: usize>(acc: [__m512; H], summs: __m128) -> [f32; 4] {
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

/// The four-row kernels' one check for their raw reads: four rows of
/// `blocks` whole blocks and a prepared group with units for as many.
/// Returns `blocks` and where the group's 64-aligned units start.
#[inline(always)]
fn rows4_bases<F: Legacy>(rows: [&[u8]; 4], pre: &[Chunk32], units: usize) -> (usize, *const u8) {
    let blocks = rows[0].len() / F::WB;
    assert!(
        rows.iter().all(|r| r.len() == blocks * F::WB),
        "weight rows"
    );
    assert!(pre.len() > blocks * 2 * units, "prepared activations");
    // The 64-aligned part of the prepared buffer (within it: `start`).
    (blocks, pre[start(pre)..].as_ptr() as *const u8)
}

/// Bytes ahead of each row's block that `dotw_rows4` asks for. Four
/// tokens' arithmetic per weight byte left the hardware prefetchers behind
/// (a single token's kernel keeps pace without): batchbench, SmolLM2, four
/// sequences, 5.9 -> 5.3 ms per step at 1 KiB (256 B to 8 KiB all helped).
/// 3 KiB (about five Q8_0 rows of 576) kept Q8_0 further ahead: mmbench,
/// two threads, GMAC/s at 1 / 3 KiB: Q8_0 two tokens 87-103 / 117-119,
/// four 154-155 / 164-172; Q4_1 the same (62 / 61, 90 / 90).
const ROWS4_PREFETCH: usize = 3072;

/// A block's 32 quants in both 256-bit halves of a register (the
/// two-token kernels' weight operand), unpacked straight into it where the
/// format allows.
trait Unpack2: Legacy {
    /// The caller enables AVX-512 and passes a whole block.
    #[inline(always)]
    unsafe fn unpack2(bw: &[u8]) -> __m512i {
        // SAFETY: as the trait method's contract.
        unsafe { _mm512_broadcast_i64x4(Self::unpack(bw)) }
    }
}

impl Unpack2 for Q41 {
    /// The 16 nibble bytes in all four 128-bit lanes, split
    /// (`split_nibbles`): low nibbles (elements 0..16), high nibbles
    /// (16..32), twice; two instructions after the load instead of five.
    #[inline(always)]
    unsafe fn unpack2(bw: &[u8]) -> __m512i {
        assert!(bw.len() >= 20, "Q4_1 block");
        // SAFETY: 16 bytes at 4 are within the block (checked); AVX-512
        // is enabled in every caller.
        unsafe {
            split_nibbles(_mm512_broadcast_i32x4(_mm_loadu_si128(
                bw.as_ptr().add(4) as *const __m128i
            )))
        }
    }
}

/// Nibble bytes in each 128-bit lane to codes: lanes 0 and 2 keep their
/// low nibbles, lanes 1 and 3 their high ones (shifted down by 4 as 16-bit
/// words; the mask drops what crosses a byte).
#[inline(always)]
unsafe fn split_nibbles(x: __m512i) -> __m512i {
    let by4 = 0x0004_0004_0004_0004i64;
    let shift = _mm512_set_epi64(by4, by4, 0, 0, by4, by4, 0, 0);
    // SAFETY: AVX-512 F/BW are enabled in every caller.
    unsafe { _mm512_and_si512(_mm512_srlv_epi16(x, shift), _mm512_set1_epi8(0x0f)) }
}

impl Unpack2 for Q50Bw {}

impl Unpack2 for Q80 {
    /// The 32 bytes broadcast from memory: a load, no shuffle.
    #[inline(always)]
    unsafe fn unpack2(bw: &[u8]) -> __m512i {
        assert!(bw.len() >= 34, "Q8_0 block");
        // SAFETY: 32 bytes at 2 are within the block (checked).
        unsafe { _mm512_broadcast_i64x4(_mm256_loadu_si256(bw.as_ptr().add(2) as *const __m256i)) }
    }
}

/// Four weight rows (take them from four streams, as decode does) against
/// one group of four tokens: each token's steps exactly as in `dotw`, the
/// four rows' blocks interleaved so that each activation load serves four
/// rows and eight independent sums are in flight. Batched decode's few
/// tokens went one weight row per call, and each call's sums waited on
/// each other block by block.
#[inline(always)]
unsafe fn dotw_rows4<F: Unpack2, const H: usize>(
    rows: [&[u8]; 4],
    pre: &[Chunk32],
) -> [[f32; 4]; 4] {
    let (blocks, base) = rows4_bases::<F>(rows, pre, units::<F>());
    let mut acc = [[_mm512_setzero_ps(); H]; 4];
    let mut summs = [_mm_setzero_ps(); 4];
    for i in 0..blocks {
        // SAFETY: i < blocks; the activation reads are within the length
        // checked above, in 64-aligned units; AVX2 and AVX-512 are enabled
        // in every caller.
        unsafe {
            let unit = |k: usize| base.add((i * units::<F>() + k) * 64);
            let act: [__m512i; H] =
                std::array::from_fn(|h| _mm512_load_si512(unit(h) as *const __m512i));
            let da: [__m512; H] =
                std::array::from_fn(|h| _mm512_load_ps(unit(2 + h) as *const f32));
            let s = if F::SIGNED {
                _mm_setzero_ps()
            } else {
                _mm_load_ps(unit(4) as *const f32)
            };
            for r in 0..4 {
                let bw = &rows[r][i * F::WB..(i + 1) * F::WB];
                // A hint: the address is not dereferenced, and may lie
                // past the row (the stream's next row follows it).
                _mm_prefetch::<_MM_HINT_T0>(bw.as_ptr().wrapping_add(ROWS4_PREFETCH) as *const i8);
                let q = F::unpack2(bw);
                let start_lanes = if F::SIGNED {
                    // -128 x the sum of each lane's four signed weights.
                    _mm512_madd_epi16(
                        _mm512_maddubs_epi16(_mm512_set1_epi8(1), q),
                        _mm512_set1_epi16(-128),
                    )
                } else {
                    _mm512_setzero_si512()
                };
                let (dw, mw) = f16x2_at(bw, 0);
                let dw16 = _mm512_set1_ps(dw);
                if !F::SIGNED {
                    summs[r] = _mm_fmadd_ps(_mm_set1_ps(mw), s, summs[r]);
                }
                for h in 0..H {
                    let l = if F::SIGNED {
                        _mm512_dpbusd_epi32(start_lanes, act[h], q)
                    } else {
                        _mm512_dpbusd_epi32(start_lanes, q, act[h])
                    };
                    let d = _mm512_mul_ps(dw16, da[h]);
                    acc[r][h] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(l), acc[r][h]);
                }
            }
        }
    }
    let mut out = [[0f32; 4]; 4];
    for (o, (&a, &s)) in out.iter_mut().zip(acc.iter().zip(&summs)) {
        // SAFETY: AVX2 and AVX-512 are enabled in every caller.
        *o = unsafe { finish::<F, H>(a, s) };
    }
    out
}

/// A four-row group kernel (`VecDot4x4Fn`) from its body, inlined into a
/// function with the AVX-512 builds' target features.
macro_rules! rows4 {
    ($name:ident, $body:expr) => {
        pub(crate) fn $name(rows: [&[u8]; 4], pre: &[Chunk32]) -> [[f32; 4]; 4] {
            #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
            unsafe fn body(rows: [&[u8]; 4], pre: &[Chunk32]) -> [[f32; 4]; 4] {
                unsafe { $body(rows, pre) }
            }
            // SAFETY: handed out only after `avx512_available()` confirmed the
            // features.
            unsafe { body(rows, pre) }
        }
    };
}

/// Q4_1's four weight rows against a prepared group of four tokens (or
/// of its first `T` = 2 or 1), with the rows across the register instead of the
/// tokens: lane 4r + j of `lo` holds row r's quants 4j..4j + 4 (low
/// nibbles), of `hi` its quants 16 + 4j.. (high nibbles), so one
/// `vpdpbusd` against a token's half block broadcast to the four 128-bit
/// lanes gives all four rows' lane sums j and 4 + j of that token. Each
/// (row, token) still gets exactly `dotw_rows4`'s lanes, products and fused
/// adds in the same order (its lane sums j and 4 + j sit in two of these
/// registers' lanes 4r + j, the d x da product is the same one, the final
/// pairings are `finish`'s within each row's 128-bit lane), so the bits
/// are the same; but the weight block needs no broadcast per token pair,
/// and the per-row work (d and m, the nibble split, the m x s sums) is done
/// once for four rows: 29 multiply, convert and fused-add instructions per
/// block of four rows where `dotw_rows4` spends 36. kbench, one thread,
/// four tokens with the rows in L1, six alternated runs: 101-110 -> 113-120
/// GMAC/s; batchbench, SmolLM2, four sequences, Q4_1 products per step
/// (four alternated runs): 2.93-3.32 -> 2.72-3.04 ms.
#[inline(always)]
unsafe fn q4_1_rows4_across<const T: usize>(rows: [&[u8]; 4], pre: &[Chunk32]) -> [[f32; 4]; 4] {
    const WB: usize = 20;
    let (blocks, base) = rows4_bases::<Q41>(rows, pre, across_units::<Q41>());
    // Lane 4r + x takes row r's d (element 2r of the converted (d, m)
    // pairs) or its m (2r + 1).
    let d_at = _mm512_set_epi32(6, 6, 6, 6, 4, 4, 4, 4, 2, 2, 2, 2, 0, 0, 0, 0);
    let m_at = _mm512_add_epi32(d_at, _mm512_set1_epi32(1));
    // [token][low / high half of the block], lanes 4r + j.
    let mut acc = [[_mm512_setzero_ps(); 2]; T];
    // Lanes 4r + t: row r's m x token t's s.
    let mut summs = _mm512_setzero_ps();
    // Two blocks at a time while 64 bytes from block i stay within each
    // row: one load per row, and the two blocks' quants and (d, m) words
    // gathered by two-table permutes, where a block at a time took three
    // 128-bit inserts and three dword inserts (six shuffle-port uops a
    // block, now two for the quants and under three for the scales; the
    // loop was bound by its 42 vector uops on two ports). kbench, one
    // thread, `x4 rows4`, ten alternated runs: median 51.2 -> 58.2 GMAC/s.
    // Dwords of a row's 64 bytes: block i's (d, m) at 0, its quants at
    // 1..5; block i + 1's at 5 and 6..10.
    let quants_idx = _mm512_setr_epi32(1, 2, 3, 4, 17, 18, 19, 20, 6, 7, 8, 9, 22, 23, 24, 25);
    let dm_idx = _mm512_setr_epi32(0, 16, 5, 21, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    let dm_merge = _mm512_setr_epi32(0, 1, 16, 17, 2, 3, 18, 19, 0, 0, 0, 0, 0, 0, 0, 0);
    let first = (d_at, m_at);
    // Block i + 1's pairs sit eight lanes up.
    let up = _mm512_set1_epi32(8);
    let second = (_mm512_add_epi32(d_at, up), _mm512_add_epi32(m_at, up));
    // Block i's prepared activations (64-aligned units).
    let unit = |i: usize| base.wrapping_add(i * across_units::<Q41>() * 64);
    let mut i = 0;
    while i + 4 <= blocks {
        // SAFETY: (i + 4) * 20 >= i * 20 + 64, so each 64-byte read lies
        // within its row (length checked above), and blocks i and i + 1 <
        // blocks have their activation units within the prepared buffer
        // (checked above); AVX-512 F/BW/VNNI is enabled in every caller.
        unsafe {
            let z = |r: usize| {
                let at = rows[r].as_ptr().add(i * WB);
                // A hint (one per 40 bytes reaches every line): the address
                // is not dereferenced, and may lie past the row (the
                // stream's next row follows it).
                _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(ROWS4_PREFETCH) as *const i8);
                _mm512_loadu_si512(at as *const _)
            };
            let (z0, z1, z2, z3) = (z(0), z(1), z(2), z(3));
            // Rows 0, 1 (and 2, 3): block i's quants, then block i + 1's.
            let a = _mm512_permutex2var_epi32(z0, quants_idx, z1);
            let b = _mm512_permutex2var_epi32(z2, quants_idx, z3);
            // The (d, m) words of rows 0..4 for block i, then block i + 1.
            let dm01 = _mm512_permutex2var_epi32(z0, dm_idx, z1);
            let dm23 = _mm512_permutex2var_epi32(z2, dm_idx, z3);
            let dm = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutex2var_epi32(
                dm01, dm_merge, dm23,
            )));
            q4_1_across_block(
                &mut acc,
                &mut summs,
                unit(i),
                _mm512_shuffle_i64x2::<0b01_00_01_00>(a, b),
                dm,
                first,
            );
            q4_1_across_block(
                &mut acc,
                &mut summs,
                unit(i + 1),
                _mm512_shuffle_i64x2::<0b11_10_11_10>(a, b),
                dm,
                second,
            );
        }
        i += 2;
    }
    for i in i..blocks {
        // SAFETY: i < blocks, so each row's block i is within its row and
        // its activation units within the prepared buffer (both checked
        // above); AVX2 and AVX-512 are enabled in every caller.
        unsafe {
            let at = |r: usize| rows[r].as_ptr().add(i * WB);
            let qs16 = |r: usize| _mm_loadu_si128(at(r).add(4) as *const __m128i);
            let qs = _mm512_inserti32x4::<3>(
                _mm512_inserti32x4::<2>(
                    _mm512_inserti32x4::<1>(_mm512_castsi128_si512(qs16(0)), qs16(1)),
                    qs16(2),
                ),
                qs16(3),
            );
            let dm = |r: usize| (at(r) as *const i32).read_unaligned();
            let dm =
                _mm512_castps256_ps512(_mm256_cvtph_ps(_mm_set_epi32(dm(3), dm(2), dm(1), dm(0))));
            q4_1_across_block(&mut acc, &mut summs, unit(i), qs, dm, first);
        }
    }
    // SAFETY: the features are enabled in every caller.
    unsafe { across_finish(&acc, Some(summs)) }
}

/// The rows-across kernels' results, `[row][token]`: each token's lanes j
/// and 4 + j, then `finish`'s pairings within each row's 128-bit lane (the
/// sum lands in lane 4r), plus `summs`' lane 4r + t (row r's m x token t's
/// s) for the unsigned formats; tokens past T: 0, as `finish`. The caller
/// has AVX-512 F.
#[inline(always)]
unsafe fn across_finish<const T: usize>(
    acc: &[[__m512; 2]; T],
    summs: Option<__m512>,
) -> [[f32; 4]; 4] {
    let sums: [__m512; 4] = std::array::from_fn(|t| {
        let Some(&[lo, hi]) = acc.get(t) else {
            return _mm512_setzero_ps();
        };
        let y = _mm512_add_ps(lo, hi);
        let z = _mm512_add_ps(y, _mm512_permute_ps::<0b01_00_11_10>(y));
        _mm512_add_ps(z, _mm512_permute_ps::<0b10_11_00_01>(z))
    });
    // Lane 4r + t from token t's lane 4r.
    let s01 = _mm512_unpacklo_ps(sums[0], sums[1]);
    let s23 = _mm512_unpacklo_ps(sums[2], sums[3]);
    let v = _mm512_shuffle_ps::<0b01_00_01_00>(s01, s23);
    let keep: __mmask16 = match T {
        4 => 0xffff,
        2 => 0x3333,
        _ => 0x1111,
    };
    let v = match summs {
        Some(summs) => _mm512_maskz_add_ps(keep, v, summs),
        None => _mm512_maskz_mov_ps(keep, v),
    };
    let mut out = [[0f32; 4]; 4];
    // SAFETY: out is 16 contiguous floats, lane 4r + t = out[r][t].
    unsafe { _mm512_storeu_ps(out.as_mut_ptr() as *mut f32, v) };
    out
}

/// Q8_0's four weight rows against a prepared group of four tokens (or of
/// its first `T` = 2), rows across the register as in
/// [`q4_1_rows4_across`]: lane 4r + j of `lo` holds row r's quants
/// 4j..4j + 4, of `hi` its quants 16 + 4j.., and each lane starts at -128
/// x the sum of its four weights (the activations are unsigned, + 128, as
/// `dotw_rows4` takes them), so one `vpdpbusd` against a token's half
/// block broadcast to the four 128-bit lanes gives all four rows' exact
/// signed lane sums j (or 4 + j). Each (row, token) gets `dotw_rows4`'s
/// lanes, d x da product and fused adds in the same order, so the same
/// bits; but the lane starts, the scales and the weight loads are done
/// once for four rows instead of once per row, and no weight broadcast per
/// token pair: 24 multiply-add-port instructions per block of four rows
/// and four tokens where `dotw_rows4` spends 32 (the output matrix of
/// batched decode).
#[inline(always)]
unsafe fn q8_0_rows4_across<const T: usize>(rows: [&[u8]; 4], pre: &[Chunk32]) -> [[f32; 4]; 4] {
    const WB: usize = 34;
    let (blocks, base) = rows4_bases::<Q80>(rows, pre, across_units::<Q80>());
    // Lane 4r + x takes row r's d.
    let d_at = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
    // Qwords of [row 0 | row 1] (0..8) and [row 2 | row 3] (8..16): each
    // row's first 16 quants, then its last 16.
    let lo_idx = _mm512_setr_epi64(0, 1, 4, 5, 8, 9, 12, 13);
    let hi_idx = _mm512_setr_epi64(2, 3, 6, 7, 10, 11, 14, 15);
    let ones = _mm512_set1_epi8(1);
    let minus128 = _mm512_set1_epi16(-128);
    let mut acc = [[_mm512_setzero_ps(); 2]; T];
    for i in 0..blocks {
        // SAFETY: i < blocks, so each row's block i (34 bytes) is within
        // its row and the block's activation units within the prepared
        // buffer (both checked above); AVX-512 F/BW/VNNI and F16C are
        // enabled in every caller.
        unsafe {
            let at = |r: usize| rows[r].as_ptr().add(i * WB);
            let q = |r: usize| {
                // A hint (one per 34 bytes reaches every line): the address
                // is not dereferenced, and may lie past the row.
                _mm_prefetch::<_MM_HINT_T0>(at(r).wrapping_add(ROWS4_PREFETCH) as *const i8);
                _mm256_loadu_si256(at(r).add(2) as *const __m256i)
            };
            let z01 = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(q(0)), q(1));
            let z23 = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(q(2)), q(3));
            let lo = _mm512_permutex2var_epi64(z01, lo_idx, z23);
            let hi = _mm512_permutex2var_epi64(z01, hi_idx, z23);
            let start = |w: __m512i| _mm512_madd_epi16(_mm512_maddubs_epi16(ones, w), minus128);
            let halves = [(lo, start(lo)), (hi, start(hi))];
            let d16 = |r: usize| (at(r) as *const i16).read_unaligned();
            let d4 = _mm_cvtph_ps(_mm_setr_epi16(d16(0), d16(1), d16(2), d16(3), 0, 0, 0, 0));
            let dw = _mm512_permutexvar_ps(d_at, _mm512_castps128_ps512(d4));
            let unit = |k: usize| base.add((i * across_units::<Q80>() + k) * 64);
            let da = unit(8) as *const f32;
            for (t, acc) in acc.iter_mut().enumerate() {
                let d = _mm512_mul_ps(dw, _mm512_set1_ps(da.add(t).read()));
                for (h, (acc, &(q, st))) in acc.iter_mut().zip(&halves).enumerate() {
                    let act = _mm512_loadu_si512(unit(2 * t + h) as *const _);
                    let l = _mm512_dpbusd_epi32(st, act, q);
                    *acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(l), *acc);
                }
            }
        }
    }
    // SAFETY: the features are enabled in every caller.
    unsafe { across_finish(&acc, None) }
}

/// One block of [`q4_1_rows4_across`]: its four rows' quants `qs` (row r's
/// 16 bytes in 128-bit lane r) and their (d, m) pairs as f32 in `dm`, at
/// the lanes `at` names (`at.0`: lane 4r + x takes row r's d, `at.1` its
/// m), against the block's prepared activations at `act`. The caller has
/// AVX-512 F/BW/VNNI and `act` holds the block's [`across_units`] units.
#[inline(always)]
unsafe fn q4_1_across_block<const T: usize>(
    acc: &mut [[__m512; 2]; T],
    summs: &mut __m512,
    act: *const u8,
    qs: __m512i,
    dm: __m512,
    at: (__m512i, __m512i),
) {
    // SAFETY: the reads are within the block's units (the caller's
    // contract); the features are enabled in every caller.
    unsafe {
        let unit = |k: usize| act.add(k * 64);
        let nibble = _mm512_set1_epi8(0x0f);
        let lo = _mm512_and_si512(qs, nibble);
        let hi = _mm512_and_si512(_mm512_srli_epi16::<4>(qs), nibble);
        let dw = _mm512_permutexvar_ps(at.0, dm);
        let mw = _mm512_permutexvar_ps(at.1, dm);
        let s = _mm512_loadu_ps(unit(9) as *const f32);
        *summs = _mm512_fmadd_ps(mw, s, *summs);
        // One multiply per token with its d broadcast from memory (the
        // sixteen products in one multiply, then an in-lane permute per
        // token, ran slower: kbench, five alternated runs, 58-62 against
        // 60-71 GMAC/s).
        let da = unit(8) as *const f32;
        for (t, acc) in acc.iter_mut().enumerate() {
            let d = _mm512_mul_ps(dw, _mm512_set1_ps(da.add(t).read()));
            for (h, (acc, q)) in acc.iter_mut().zip([lo, hi]).enumerate() {
                let act = _mm512_loadu_si512(unit(2 * t + h) as *const _);
                let l = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q, act);
                *acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(l), *acc);
            }
        }
    }
}

rows4!(rows4x4_q4_1, q4_1_rows4_across::<4>);
rows4!(rows4x4_q5_0, dotw_rows4::<Q50Bw, 2>);
rows4!(rows4x4_q8_0, q8_0_rows4_across::<4>);
// The group's first two tokens only (two sequences decoding): one register
// of the two, half the arithmetic.
rows4!(rows4x2_q4_1, q4_1_rows4_across::<2>);
rows4!(rows4x2_q5_0, dotw_rows4::<Q50Bw, 1>);
rows4!(rows4x2_q8_0, q8_0_rows4_across::<2>);

/// The band kernels' one check: `w` holds 4q weight rows and every output
/// slice 4q results or none, the first `wanted` all there. Returns q and
/// the bytes of a row.
fn band_shape(w: &[u8], out: &[&mut [f32]], wanted: usize) -> (usize, usize) {
    let n = out[0].len();
    let q = n / 4;
    let rb = w.len().checked_div(n).unwrap_or(0);
    assert!(
        n == 4 * q
            && w.len() == rb * n
            && out[..wanted].iter().all(|o| o.len() == n)
            && out.iter().all(|o| o.is_empty() || o.len() == n),
        "a band of four quarters"
    );
    (q, rb)
}

/// A band kernel (`VecDot4x4BandFn`) from a four-row group kernel inlined
/// into it: the loop over the band's quarters runs inside one call with the
/// target features, so the setup and the reductions of one four-row call
/// overlap the next rows' loads (perf, four SmolLM2 sequences: the
/// four-row calls' loop in `rows_into` alone held 5.5% of the step).
/// batchbench, eight alternated runs, medians: step 8.06 -> 7.50 ms, Q4_1
/// products 5.08 -> 4.83, the Q8_0 output 1.33 -> 1.26.
macro_rules! rows4_band {
    ($name:ident, $body:expr) => {
        pub(crate) fn $name(w: &[u8], pre: &[Chunk32], out: [&mut [f32]; 4]) {
            #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
            unsafe fn body(w: &[u8], pre: &[Chunk32], out: [&mut [f32]; 4]) {
                let (q, rb) = band_shape(w, &out, 1);
                let [o0, o1, o2, o3] = out;
                for k in 0..q {
                    let row = |j: usize| &w[(j * q + k) * rb..(j * q + k + 1) * rb];
                    // SAFETY: this function has the body's target features.
                    let v: [[f32; 4]; 4] = unsafe { $body([row(0), row(1), row(2), row(3)], pre) };
                    for (j, [a, b, c, d]) in v.into_iter().enumerate() {
                        let i = j * q + k;
                        o0[i] = a;
                        // A token not wanted has an empty slice.
                        for (o, x) in [(&mut *o1, b), (&mut *o2, c), (&mut *o3, d)] {
                            if let Some(o) = o.get_mut(i) {
                                *o = x;
                            }
                        }
                    }
                }
            }
            // SAFETY: handed out only after `avx512_available()` confirmed the
            // features.
            unsafe { body(w, pre, out) }
        }
    };
}

/// [`rows4_band!`] for two groups of four tokens (six to eight sequences
/// decoding): each four weight rows go through the kernel once per group
/// while they are in L1, all in one call. `out[4g + j]` is group g's token
/// j (empty for a token not wanted; group 0's four all wanted).
macro_rules! rows4_band2 {
    ($name:ident, $body:expr) => {
        pub(crate) fn $name(w: &[u8], pre: [&[Chunk32]; 2], out: [&mut [f32]; 8]) {
            #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
            unsafe fn body(w: &[u8], pre: [&[Chunk32]; 2], mut out: [&mut [f32]; 8]) {
                let (q, rb) = band_shape(w, &out, 4);
                for k in 0..q {
                    let row = |j: usize| &w[(j * q + k) * rb..(j * q + k + 1) * rb];
                    let rows = [row(0), row(1), row(2), row(3)];
                    for (pre, out) in pre.into_iter().zip(out.chunks_exact_mut(4)) {
                        // SAFETY: this function has the body's target
                        // features.
                        let v: [[f32; 4]; 4] = unsafe { $body(rows, pre) };
                        for (j, v4) in v.into_iter().enumerate() {
                            let i = j * q + k;
                            for (o, x) in out.iter_mut().zip(v4) {
                                if let Some(o) = o.get_mut(i) {
                                    *o = x;
                                }
                            }
                        }
                    }
                }
            }
            // SAFETY: handed out only after `avx512_available()` confirmed the
            // features.
            unsafe { body(w, pre, out) }
        }
    };
}

rows4_band2!(band8x4_q4_1, q4_1_rows4_across::<4>);
rows4_band2!(band8x4_q5_0, dotw_rows4::<Q50Bw, 2>);
rows4_band2!(band8x4_q8_0, q8_0_rows4_across::<4>);

rows4_band!(band4x4_q4_1, q4_1_rows4_across::<4>);
rows4_band!(band4x4_q5_0, dotw_rows4::<Q50Bw, 2>);
rows4_band!(band4x4_q8_0, q8_0_rows4_across::<4>);
rows4_band!(band4x2_q4_1, q4_1_rows4_across::<2>);
rows4_band!(band4x2_q5_0, dotw_rows4::<Q50Bw, 1>);
rows4_band!(band4x2_q8_0, q8_0_rows4_across::<2>);

// Single-token decode of Q4_1 takes the same kernel with the group's first
// token alone, its activations prepared once per band: the rows-across
// registers leave fewer instructions per block than `dot_pairs`' two rows
// a register (one 64-byte load and two permutes per row pair of blocks,
// the scales gathered for four rows at once, where `dot_pairs` assembles
// each row's nibbles and scales on its own). Same bits (`dotw_rows4`'s
// lanes, products and fused adds, as above). One thread, SmolLM2's 576
// columns, 200 alternated runs, median GB/s of weights: rows in L1 (64)
// 9.4 -> 13.3, in L2 (256) 13.1 -> 18.1, from DRAM (400000) 10.3 -> 12.1.

thread_local! {
    /// A band's prepared token, kept from call to call.
    static PREPARED: std::cell::RefCell<Vec<Chunk32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// [`q4_1_rows4_across`] for one token: rows 0..4 against `a` (a Q8_1
/// row), prepared here (the tests' four-row entry beside [`banda_q4_1`]).
pub(crate) fn rows4a_q4_1(rows: [&[u8]; 4], a: &[u8]) -> [f32; 4] {
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn body(rows: [&[u8]; 4], pre: &[Chunk32]) -> [[f32; 4]; 4] {
        // SAFETY: this function has the kernel's features.
        unsafe { q4_1_rows4_across::<1>(rows, pre) }
    }
    PREPARED.with_borrow_mut(|pre| {
        prepare_one_q4_1(a, pre);
        // SAFETY: handed out only after `avx512_available()` confirmed the
        // features.
        unsafe { body(rows, pre) }.map(|r| r[0])
    })
}

/// The band kernel of [`rows4a_q4_1`] (see `super::band!`): rows k, q + k,
/// 2q + k and 3q + k of the band's four quarters together, the token
/// prepared once for the band.
pub(crate) fn banda_q4_1(w: &[u8], a: &[u8], out: &mut [f32]) {
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn body(w: &[u8], pre: &[Chunk32], out: &mut [f32]) {
        // SAFETY: this function has the kernel's features.
        super::band_loop!(w, out, |rows| unsafe { q4_1_rows4_across::<1>(rows, pre) }
            .map(|r| r[0]));
    }
    PREPARED.with_borrow_mut(|pre| {
        prepare_one_q4_1(a, pre);
        // SAFETY: handed out only after `avx512_available()` confirmed the
        // features.
        unsafe { body(w, pre, out) }
    })
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

/// How a format's single-token decode kernel below takes two rows' block
/// at once: the 32 quants of each as unsigned codes (the weight plus
/// `ZERO`), row a in the low 256 bits; two rows per instruction where
/// the VNNI kernel spends one per row.
trait PairCodes: Legacy {
    /// The code of a zero weight: the lanes start at -ZERO x the
    /// activations' four-byte sums, which leaves the exact signed sums.
    const ZERO: u8;
    /// The caller passes two whole blocks and enables AVX-512 BW/VL.
    unsafe fn codes2(a: &[u8], b: &[u8]) -> __m512i;
}

/// Two rows' 16 nibble bytes (at `at`) as 64 codes: per row the low
/// nibbles (elements 0..16), then the high (16..32).
#[inline(always)]
unsafe fn nibbles2(a: &[u8], b: &[u8], at: usize) -> __m512i {
    assert!(a.len() >= at + 16 && b.len() >= at + 16, "nibble blocks");
    // SAFETY: 16 bytes at `at` in each block (checked); AVX-512 is
    // enabled in every caller.
    unsafe {
        let lo = _mm256_broadcastsi128_si256(_mm_loadu_si128(a.as_ptr().add(at) as *const __m128i));
        let hi = _mm256_broadcastsi128_si256(_mm_loadu_si128(b.as_ptr().add(at) as *const __m128i));
        split_nibbles(_mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi))
    }
}

impl PairCodes for Q50Bw {
    const ZERO: u8 = 16;
    /// The nibbles, plus 16 where the block's fifth bit is set (one
    /// masked add, both rows' `qh` words the mask).
    #[inline(always)]
    unsafe fn codes2(a: &[u8], b: &[u8]) -> __m512i {
        let qh = u64::from(super::qh_at(a, 2)) | (u64::from(super::qh_at(b, 2)) << 32);
        // SAFETY: as the trait method's contract.
        unsafe {
            let nib = nibbles2(a, b, 6);
            _mm512_mask_add_epi8(nib, qh, nib, _mm512_set1_epi8(0x10))
        }
    }
}

/// Four weight rows of a signed format (Q5_0) against one token
/// (decode), rows 0 and 1 in one 512-bit register and rows 2 and 3 in
/// another: each half runs exactly the one-row kernel's f32 steps for its
/// row (the same exact integer lanes, the same scale products, the same
/// fused adds in block order, the same final sum), at half the
/// instructions of the VNNI kernel's row-by-row loop, which bound
/// single-token decode on this core (kbench: ~4 cycles per row and block,
/// L2-resident). (Q4_1 decodes with its rows-across kernel instead,
/// `banda_q4_1`, which needs fewer instructions still.)
#[inline(always)]
unsafe fn dot_pairs<F: PairCodes>(rows: [&[u8]; 4], a: &[u8]) -> [f32; 4] {
    assert!(F::SIGNED, "a signed format");
    let (blocks, ab) = super::legacy_shape::<F>(&rows, a);
    // Lanes 0..8 take element 2p of the product vector below (d0..d3),
    // lanes 8..16 element 2p + 1.
    let spread = |p: i32| {
        let (x, y) = (2 * p, 2 * p + 1);
        _mm512_set_epi32(y, y, y, y, y, y, y, y, x, x, x, x, x, x, x, x)
    };
    let spread = [spread(0), spread(1)];
    let mut acc = [_mm512_setzero_ps(); 2];
    for i in 0..blocks {
        let ba = &a[i * ab..(i + 1) * ab];
        let bw: [&[u8]; 4] = std::array::from_fn(|r| &rows[r][i * F::WB..(i + 1) * F::WB]);
        // SAFETY: the blocks are whole (sliced above); AVX2, F16C and
        // AVX-512 F/BW/VL/VNNI are enabled in every caller.
        unsafe {
            // Each stream's bytes a few KiB ahead (see ROWS4_PREFETCH): a
            // hint, never dereferenced, so past a row's end is allowed.
            for r in bw {
                _mm_prefetch::<_MM_HINT_T0>(r.as_ptr().wrapping_add(ROWS4_PREFETCH) as *const i8);
            }
            let act = _mm512_broadcast_i64x4(_mm256_loadu_si256(
                ba.as_ptr().add(ab - 32) as *const __m256i
            ));
            let start = if F::ZERO != 0 {
                let s = _mm512_dpbusd_epi32(
                    _mm512_setzero_si512(),
                    _mm512_set1_epi8(F::ZERO as i8),
                    act,
                );
                _mm512_sub_epi32(_mm512_setzero_si512(), s)
            } else {
                _mm512_setzero_si512()
            };
            // Each row's d x da rounded as the one-row kernel rounds it.
            let prod = {
                let h = |r: usize| u64::from(u16::from_le_bytes([bw[r][0], bw[r][1]]));
                let bits = h(0) | h(1) << 16 | h(2) << 32 | h(3) << 48;
                let d = _mm_cvtph_ps(_mm_cvtsi64_si128(bits as i64));
                let da = super::f16_at(ba, 0);
                _mm512_castps128_ps512(_mm_mul_ps(d, _mm_set1_ps(da)))
            };
            for p in 0..2 {
                let q = F::codes2(bw[2 * p], bw[2 * p + 1]);
                let l = _mm512_dpbusd_epi32(start, q, act);
                let d = _mm512_permutexvar_ps(spread[p], prod);
                acc[p] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(l), acc[p]);
            }
        }
    }
    // Rows 0..4 take the place of tokens 0..4 (no m x s: signed).
    // SAFETY: AVX2 and AVX-512 are enabled in every caller.
    unsafe { finish::<F, 2>(acc, _mm_setzero_ps()) }
}

macro_rules! wide_pairs {
    ($f:ty, $name:ident) => {
        pub(crate) fn $name(rows: [&[u8]; 4], a: &[u8]) -> [f32; 4] {
            #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
            unsafe fn body(rows: [&[u8]; 4], a: &[u8]) -> [f32; 4] {
                unsafe { dot_pairs::<$f>(rows, a) }
            }
            // SAFETY: handed out only after `avx512_available()` confirmed the
            // features.
            unsafe { body(rows, a) }
        }
    };
}

wide_pairs!(Q50Bw, rows4z_q5_0);

super::band!(
    band_q5_0,
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    dot_pairs::<Q50Bw>
);

/// Q6_K's four-row decode kernel with both halves of a block (128 quants
/// each) in one register: the AVX2 kernel (`q6_k_vec_dot_rows`) unpacks,
/// scales and sums each half's four groups of 32 quants in turn; here
/// group k of half 0 sits beside group k of half 1, so each step serves
/// both, and `vpdpwssd` takes the run scales and the sum in one
/// instruction. The integer lanes are the same sums (exact, in any
/// order), reduced from 16 lanes to the AVX2 kernel's 8 (lane l + lane
/// 8 + l: the same element positions), then the same f32 steps: the same
/// bits.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn q6_k_rows4(rows: [&[u8]; 4], a: &[u8]) -> [f32; 4] {
    use super::{
        f16_at, hsum_ps, prefetch_block, q6k_offset, q6k_runs, q8k_d, MASKS, Q6K, Q6K_PREFETCH,
        Q8K, Q8K_QS,
    };
    let blocks = a.len() / Q8K;
    assert!(rows.iter().all(|r| r.len() >= blocks * Q6K), "weight rows");
    // `q6k_pair_scale`'s masks in both 256-bit halves.
    let masks: [__m512i; 4] = std::array::from_fn(|k| {
        // SAFETY: a mask holds 32 bytes.
        _mm512_broadcast_i64x4(unsafe { _mm256_loadu_si256(MASKS.1[k].as_ptr() as *const __m256i) })
    });
    let (m4, m3) = (_mm512_set1_epi8(0x0f), _mm512_set1_epi8(0x03));
    let mut acc = [_mm256_setzero_ps(); 4];
    for (i, ba) in a.chunks_exact(Q8K).enumerate() {
        // SAFETY (all raw reads below): a Q8_K block holds 256 quants from
        // Q8K_QS, and each weight block is Q6K = 210 bytes, of which the
        // reads take 0..192 (checked above, i < blocks).
        let act: [__m512i; 4] = std::array::from_fn(|k| unsafe {
            let at = |h: usize| ba.as_ptr().add(Q8K_QS + 128 * h + 32 * k) as *const __m256i;
            _mm512_inserti64x4::<1>(
                _mm512_castsi256_si512(_mm256_loadu_si256(at(0))),
                _mm256_loadu_si256(at(1)),
            )
        });
        let da = q8k_d(ba);
        for (r, acc) in acc.iter_mut().enumerate() {
            prefetch_block(rows[r], (i + Q6K_PREFETCH) * Q6K, Q6K);
            let bw = &rows[r][i * Q6K..(i + 1) * Q6K];
            // SAFETY: see above.
            unsafe {
                let p = bw.as_ptr();
                // ql: half 0's 64 bytes, then half 1's; qh: 32 bytes each.
                let (l0, l1) = (
                    _mm512_loadu_si512(p as *const __m512i),
                    _mm512_loadu_si512(p.add(64) as *const __m512i),
                );
                let ql0 = _mm512_shuffle_i64x2::<0b01_00_01_00>(l0, l1);
                let ql1 = _mm512_shuffle_i64x2::<0b11_10_11_10>(l0, l1);
                let qh = _mm512_loadu_si512(p.add(128) as *const __m512i);
                let runs = _mm512_castsi256_si512(q6k_runs(bw));
                // Runs 0..8 in the first two 128-bit lanes, 8..16 in the others.
                let halves = _mm512_shuffle_i64x2::<0b01_01_00_00>(runs, runs);
                let high = |v: __m512i| _mm512_slli_epi16::<4>(_mm512_and_si512(v, m3));
                let quants = [
                    _mm512_or_si512(_mm512_and_si512(ql0, m4), high(qh)),
                    _mm512_or_si512(_mm512_and_si512(ql1, m4), high(_mm512_srli_epi16::<2>(qh))),
                    _mm512_or_si512(
                        _mm512_and_si512(_mm512_srli_epi16::<4>(ql0), m4),
                        high(_mm512_srli_epi16::<4>(qh)),
                    ),
                    _mm512_or_si512(
                        _mm512_and_si512(_mm512_srli_epi16::<4>(ql1), m4),
                        high(_mm512_srli_epi16::<6>(qh)),
                    ),
                ];
                let mut sum = _mm512_setzero_si512();
                for k in 0..4 {
                    let sc = _mm512_shuffle_epi8(halves, masks[k]);
                    sum = _mm512_dpwssd_epi32(sum, _mm512_maddubs_epi16(quants[k], act[k]), sc);
                }
                let lanes = _mm256_add_epi32(
                    _mm512_castsi512_si256(sum),
                    _mm512_extracti64x4_epi64::<1>(sum),
                );
                let d = da * f16_at(bw, 208);
                let s = _mm256_cvtepi32_ps(_mm256_sub_epi32(lanes, q6k_offset(bw, ba)));
                *acc = _mm256_fmadd_ps(_mm256_set1_ps(d), s, *acc);
            }
        }
    }
    // SAFETY: AVX2 is enabled here.
    acc.map(|a| unsafe { hsum_ps(a) })
}

super::band!(
    band_q6_k,
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    q6_k_rows4
);

pub(crate) fn rows4z_q6_k(rows: [&[u8]; 4], a: &[u8]) -> [f32; 4] {
    // SAFETY: handed out only after `avx512_available()` confirmed the features.
    unsafe { q6_k_rows4(rows, a) }
}

/// A Q8_K block's quants as the Q4_K kernels here pair them with a
/// register of weight quants: sub-blocks (0, 2), (1, 3), (4, 6), (5, 7),
/// one 256-bit half each. The caller enables AVX-512.
#[inline(always)]
unsafe fn q8k_sub_block_pairs(ba: &[u8]) -> [__m512i; 4] {
    assert!(ba.len() >= super::Q8K, "Q8_K block");
    // SAFETY: 256 quants from Q8K_QS are within the block (checked).
    unsafe {
        let qa = ba.as_ptr().add(super::Q8K_QS);
        let two = |x: usize, y: usize| {
            _mm512_inserti64x4::<1>(
                _mm512_castsi256_si512(_mm256_loadu_si256(qa.add(x) as *const __m256i)),
                _mm256_loadu_si256(qa.add(y) as *const __m256i),
            )
        };
        [two(0, 64), two(32, 96), two(128, 192), two(160, 224)]
    }
}

/// Byte-shuffle masks for [`q4_k_gemv_rows4`]'s per-lane scale word
/// (bytes 0..4: scales 4..8, 4..8: scales 0..4, 8..16: mins 0..8): the
/// four sub-block pairs' scale vectors (i16, zero-extended; the low 256
/// bits take the pair's first sub-block, the high 256 its second), then
/// the eight mins as i16.
const fn q4k_masks() -> ([[u8; 64]; 4], [u8; 64]) {
    const fn scale_byte(k: usize) -> u8 {
        (if k < 4 { 4 + k } else { k - 4 }) as u8
    }
    let subs = [(0, 2), (1, 3), (4, 6), (5, 7)];
    let mut scales = [[0u8; 64]; 4];
    let mut mins = [0u8; 64];
    let mut t = 0;
    while t < 4 {
        let mut b = 0;
        while b < 64 {
            let k = if b < 32 { subs[t].0 } else { subs[t].1 };
            scales[t][b] = if b % 2 == 0 { scale_byte(k) } else { 0x80 };
            mins[b] = if b % 2 == 0 {
                (8 + (b % 16) / 2) as u8
            } else {
                0x80
            };
            b += 1;
        }
        t += 1;
    }
    (scales, mins)
}

static Q4K_MASKS: ([[u8; 64]; 4], [u8; 64]) = q4k_masks();

/// Bytes ahead in each Q4_K row that the decode kernel asks for (16
/// blocks; Q6_K's kernel asks 12 of its larger blocks ahead).
const Q4K_PREFETCH: usize = 16;

/// Q4_K's four-row decode kernel in the repacked-gemv order (see
/// `q4k::dot_repacked`, group 8): per block and row one exact integer sum
/// of scale x quant x activation, one of min x sub-block sum, each folded
/// in by one fused add with d x da (dmin x da). The AVX2 kernel
/// (`q4_k_gemv_rows`) unpacked each row's scales with scalar shifts and
/// reduced each sum alone, about 75 instructions per row and block, which
/// bound it below the memory's pace (Qwen2.5-0.5B's ffn_down, profile: 52
/// GB/s beside Q6_K's 76). Here the four rows' scale words are unpacked in
/// one register (a 128-bit lane per row), a whole 64-quant half of a block
/// is one `vpmaddubsw` + `vpdpwssd` against its two sub-blocks' scales, and
/// the four rows' sums are reduced together and folded in with four-lane
/// fused adds: each lane is one row's scalar step, so the same bits.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn q4_k_gemv_rows4(rows: [&[u8]; 4], a: &[u8]) -> [f32; 4] {
    use super::{prefetch_block, q8k_d, Q4K, Q8K, Q8K_BSUMS};
    let blocks = a.len() / Q8K;
    assert!(rows.iter().all(|r| r.len() >= blocks * Q4K), "weight rows");
    let load64 = |m: &[u8; 64]| {
        // SAFETY: m holds 64 bytes.
        unsafe { _mm512_loadu_si512(m.as_ptr() as *const __m512i) }
    };
    let scale_masks = Q4K_MASKS.0.each_ref().map(load64);
    let min_mask = load64(&Q4K_MASKS.1);
    let m4 = _mm512_set1_epi8(0x0f);
    let low6 = _mm512_set_epi32(
        0,
        0x3f3f_3f3f,
        0x3f3f_3f3f,
        0,
        0,
        0x3f3f_3f3f,
        0x3f3f_3f3f,
        0,
        0,
        0x3f3f_3f3f,
        0x3f3f_3f3f,
        0,
        0,
        0x3f3f_3f3f,
        0x3f3f_3f3f,
        0,
    );
    let by4 = _mm512_set_epi32(4, 0, 0, 0, 4, 0, 0, 0, 4, 0, 0, 0, 4, 0, 0, 0);
    // Half k of row r's (d, dmin) word: d's to 0..4, dmin's to 4..8.
    let dm_index = _mm512_set_epi16(
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 25, 17, 9, 1, 24,
        16, 8, 0,
    );
    let lane_words = _mm512_set_epi32(3, 2, 1, 0, 3, 2, 1, 0, 3, 2, 1, 0, 3, 2, 1, 0);
    let mut acc = _mm_setzero_ps();
    let mut acc_min = _mm_setzero_ps();
    for (i, ba) in a.chunks_exact(Q8K).enumerate() {
        // SAFETY (all raw reads below): a Q8_K block holds 256 quants from
        // Q8K_QS and 16 i16 sums from Q8K_BSUMS; each row's block i is
        // 144 bytes (checked above, i < blocks): d, dmin and the scales in
        // 0..16, the quants in 16..144. AVX2 and AVX-512 are enabled here.
        unsafe {
            let act = q8k_sub_block_pairs(ba);
            // The eight sub-block sums as i16 in every 128-bit lane.
            let bs = _mm256_madd_epi16(
                _mm256_loadu_si256(ba.as_ptr().add(Q8K_BSUMS) as *const __m256i),
                _mm256_set1_epi16(1),
            );
            let bsub = _mm512_broadcast_i32x4(_mm_packs_epi32(
                _mm256_castsi256_si128(bs),
                _mm256_extracti128_si256::<1>(bs),
            ));
            let p = rows.map(|r| r.as_ptr().add(i * Q4K));
            for r in rows {
                prefetch_block(r, (i + Q4K_PREFETCH) * Q4K, Q4K);
            }
            // Row r's words d|dmin, u0, u1, u2 in 128-bit lane r.
            let head = |r: usize| _mm_loadu_si128(p[r] as *const __m128i);
            let head = _mm512_inserti32x4::<3>(
                _mm512_inserti32x4::<2>(
                    _mm512_inserti32x4::<1>(_mm512_castsi128_si512(head(0)), head(1)),
                    head(2),
                ),
                head(3),
            );
            // `q4k_scale_min` in each lane: scales 0..4 (u0 & 0x3f..) and
            // mins 0..4 (u1 & 0x3f..) stay in words 1 and 2; scales 4..8
            // go to word 0, from u2's low nibbles and u0's top bits, and
            // mins 4..8 to word 3, from u2's high nibbles and u1's.
            let u2 = _mm512_shuffle_epi32::<0xE7>(head);
            let u01 = _mm512_shuffle_epi32::<0xA5>(head);
            let high = _mm512_or_si512(
                _mm512_and_si512(_mm512_srlv_epi32(u2, by4), m4),
                _mm512_and_si512(_mm512_srli_epi32::<2>(u01), _mm512_set1_epi8(0x30)),
            );
            let sm = _mm512_mask_blend_epi32(0x9999, _mm512_and_si512(head, low6), high);
            let mut sums = [_mm512_setzero_si512(); 4];
            for (r, sum) in sums.iter_mut().enumerate() {
                let q01 = _mm512_loadu_si512(p[r].add(16) as *const __m512i);
                let q23 = _mm512_loadu_si512(p[r].add(80) as *const __m512i);
                let quants = [
                    _mm512_and_si512(q01, m4),
                    _mm512_and_si512(_mm512_srli_epi16::<4>(q01), m4),
                    _mm512_and_si512(q23, m4),
                    _mm512_and_si512(_mm512_srli_epi16::<4>(q23), m4),
                ];
                // Row r's lane in all four lanes.
                let own = _mm512_permutexvar_epi32(
                    _mm512_add_epi32(_mm512_set1_epi32(4 * r as i32), lane_words),
                    sm,
                );
                for k in 0..4 {
                    let sc = _mm512_shuffle_epi8(own, scale_masks[k]);
                    *sum = _mm512_dpwssd_epi32(*sum, _mm512_maddubs_epi16(quants[k], act[k]), sc);
                }
            }
            // The four rows' sums: lane r of `s` is row r's.
            let pairs = |x: __m512i, y: __m512i| {
                _mm512_add_epi32(_mm512_unpacklo_epi32(x, y), _mm512_unpackhi_epi32(x, y))
            };
            let (s01, s23) = (pairs(sums[0], sums[1]), pairs(sums[2], sums[3]));
            let c = _mm512_add_epi32(
                _mm512_unpacklo_epi64(s01, s23),
                _mm512_unpackhi_epi64(s01, s23),
            );
            let c = _mm256_add_epi32(_mm512_castsi512_si256(c), _mm512_extracti64x4_epi64::<1>(c));
            let s = _mm_add_epi32(_mm256_castsi256_si128(c), _mm256_extracti128_si256::<1>(c));
            // Each row's min x sub-block sums, in its lane's four words.
            let m = _mm512_madd_epi16(_mm512_shuffle_epi8(sm, min_mask), bsub);
            let m = _mm512_add_epi32(m, _mm512_shuffle_epi32::<0xB1>(m));
            let m = _mm512_add_epi32(m, _mm512_shuffle_epi32::<0x4E>(m));
            let m = _mm512_castsi512_si128(_mm512_permutexvar_epi32(
                _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12, 8, 4, 0),
                m,
            ));
            // d x da and dmin x da per row, each rounded as the scalar step.
            let dm = _mm256_cvtph_ps(_mm512_castsi512_si128(_mm512_permutexvar_epi16(
                dm_index, head,
            )));
            let dm = _mm256_mul_ps(dm, _mm256_set1_ps(q8k_d(ba)));
            acc = _mm_fmadd_ps(_mm_cvtepi32_ps(s), _mm256_castps256_ps128(dm), acc);
            acc_min = _mm_fmadd_ps(_mm_cvtepi32_ps(m), _mm256_extractf128_ps::<1>(dm), acc_min);
        }
    }
    let mut out = [0f32; 4];
    // SAFETY: out holds four floats.
    unsafe { _mm_storeu_ps(out.as_mut_ptr(), _mm_sub_ps(acc, acc_min)) };
    out
}

super::band!(
    band_q4_k_gemv,
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    q4_k_gemv_rows4
);

pub(crate) fn rows4z_q4_k_gemv(rows: [&[u8]; 4], a: &[u8]) -> [f32; 4] {
    // SAFETY: handed out only after `avx512_available()` confirmed the features.
    unsafe { q4_k_gemv_rows4(rows, a) }
}

/// Byte-shuffle masks for [`q4_k_gemm_x4`]: from eight i16 scales in
/// every 128-bit lane, vector k's low 256 bits take sub-block k's first
/// scale and its high 256 bits the second, for sub-blocks (0, 2), (1, 3),
/// (4, 6), (5, 7).
const fn q4k_gemm_masks() -> [[u8; 64]; 4] {
    let subs = [(0, 2), (1, 3), (4, 6), (5, 7)];
    let mut m = [[0u8; 64]; 4];
    let mut k = 0;
    while k < 4 {
        let mut b = 0;
        while b < 64 {
            let s = if b < 32 { subs[k].0 } else { subs[k].1 };
            m[k][b] = (2 * s + b % 2) as u8;
            b += 1;
        }
        k += 1;
    }
    m
}

static Q4K_GEMM_MASKS: [[u8; 64]; 4] = q4k_gemm_masks();

/// Q4_K's four-token prompt kernel in the repacked-gemm order (see
/// `q4k::dot_repacked`, group 2: per pair of sub-blocks one exact integer
/// sum, folded in by a fused add with d x da, and one of its mins with
/// dmin x da). The AVX2 kernel (`super::q4_k_gemm_x4`) took a pair of
/// sub-blocks per step, two `vpmaddubsw` + `vpmaddwd` per token, and
/// reduced each pair's four tokens with two `vphaddd`s; here a register
/// holds two pairs' halves, one `vpmaddubsw` + `vpdpwssd` takes 64 quants
/// of a token against their two sub-blocks' scales, and all sixteen (pair,
/// token) sums are reduced in one transpose. Each (pair, token) sum is
/// the same integer and meets the same f32 steps in the same order: the
/// same bits. kbench (one thread, L1-resident, six alternated runs):
/// 48.9-63.2 -> 63.3-68.9 GMAC/s. Not more: the activations' 256-bit
/// halves (sub-blocks 0 and 2 against one register of quants) cost an
/// insert each, and with the reduction's shuffles about 30 shuffle
/// operations a block bound it, as the decode kernels on this core.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn q4_k_gemm_x4_wide(w: &[u8], a: [&[u8]; 4]) -> [f32; 4] {
    use super::{q4k_gemm_block, Q4K, Q8K};
    let blocks = w.len() / Q4K;
    assert!(a.iter().all(|r| r.len() >= blocks * Q8K), "activation rows");
    // SAFETY: each mask holds 64 bytes.
    let masks = Q4K_GEMM_MASKS
        .each_ref()
        .map(|m| unsafe { _mm512_loadu_si512(m.as_ptr() as *const __m512i) });
    let m4 = _mm512_set1_epi8(0x0f);
    let (mut acc, mut acc_min) = (_mm_setzero_ps(), _mm_setzero_ps());
    for (i, bw) in w.chunks_exact(Q4K).enumerate() {
        let blk = unsafe { q4k_gemm_block(bw, a, i) };
        // SAFETY (all raw reads below): the weight block is whole (144
        // bytes: quants at 16..144) and each Q8_K block holds 256 quants
        // from Q8K_QS (sliced above); AVX2 and AVX-512 are enabled here.
        unsafe {
            let scales =
                _mm512_broadcast_i32x4(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(blk.sc as i64)));
            let sv = masks.map(|k| _mm512_shuffle_epi8(scales, k));
            let q01 = _mm512_loadu_si512(bw.as_ptr().add(16) as *const __m512i);
            let q23 = _mm512_loadu_si512(bw.as_ptr().add(80) as *const __m512i);
            // Sub-blocks (0, 2), (1, 3), (4, 6), (5, 7).
            let quants = [
                _mm512_and_si512(q01, m4),
                _mm512_and_si512(_mm512_srli_epi16::<4>(q01), m4),
                _mm512_and_si512(q23, m4),
                _mm512_and_si512(_mm512_srli_epi16::<4>(q23), m4),
            ];
            // Per token: 128-bit lane p holds pair p's partial lane sums.
            let mut per_token = [_mm512_setzero_si512(); 4];
            for (t, ba) in blk.rows.iter().enumerate() {
                let act = q8k_sub_block_pairs(ba);
                let half = |k: usize| {
                    _mm512_dpwssd_epi32(
                        _mm512_dpwssd_epi32(
                            _mm512_setzero_si512(),
                            _mm512_maddubs_epi16(quants[k], act[k]),
                            sv[k],
                        ),
                        _mm512_maddubs_epi16(quants[k + 1], act[k + 1]),
                        sv[k + 1],
                    )
                };
                // Pairs 0 and 1, then 2 and 3, a pair per 256 bits.
                let (v01, v23) = (half(0), half(2));
                per_token[t] = _mm512_add_epi32(
                    _mm512_shuffle_i64x2::<0b10_00_10_00>(v01, v23),
                    _mm512_shuffle_i64x2::<0b11_01_11_01>(v01, v23),
                );
            }
            // Lane 4p + t: pair p, token t.
            let [x0, x1, x2, x3] = per_token;
            let p01 =
                _mm512_add_epi32(_mm512_unpacklo_epi32(x0, x1), _mm512_unpackhi_epi32(x0, x1));
            let p23 =
                _mm512_add_epi32(_mm512_unpacklo_epi32(x2, x3), _mm512_unpackhi_epi32(x2, x3));
            let sums = _mm512_cvtepi32_ps(_mm512_add_epi32(
                _mm512_unpacklo_epi64(p01, p23),
                _mm512_unpackhi_epi64(p01, p23),
            ));
            let pair = [
                _mm512_castps512_ps128(sums),
                _mm512_extractf32x4_ps::<1>(sums),
                _mm512_extractf32x4_ps::<2>(sums),
                _mm512_extractf32x4_ps::<3>(sums),
            ];
            for (s, min_sum) in pair.into_iter().zip(blk.min_sums) {
                acc = _mm_fmadd_ps(s, blk.scale_d, acc);
                acc_min = _mm_fmadd_ps(_mm_cvtepi32_ps(min_sum), blk.scale_min, acc_min);
            }
        }
    }
    let mut out = [0f32; 4];
    // SAFETY: out holds 4 floats.
    unsafe { _mm_storeu_ps(out.as_mut_ptr(), _mm_sub_ps(acc, acc_min)) };
    out
}

pub(crate) fn dot4_q4_k_gemm(w: &[u8], a: [&[u8]; 4], _pre: &[Chunk32]) -> [f32; 4] {
    // SAFETY: handed out only after `avx512_available()` confirmed the features.
    unsafe { q4_k_gemm_x4_wide(w, a) }
}

// Q4_K prompt kernel on unpacked rows, tokens in lanes.
// ---------------------------------------------------------------------------
//
// The packed kernel above keeps one token per register and pays about 30
// shuffles a block to reduce each (pair of sub-blocks, token) sum across
// its lanes, plus the activation halves' inserts: on a core with one
// shuffle port (Intel's) it ran at 32 GMAC/s a thread, half of Q8_0's.
// Here a 128-bit lane holds one quad of quants of one sub-block for the
// group's four tokens: lane g of unit 8h + c is quad c of sub-block
// 4h + g, so eight `vpdpbusd`s leave each sub-block's exact sum for each
// token in lane (g, t), with no reduction across lanes. The weight row is
// unpacked once per row tile (each quad repeated for the four token
// lanes, scales and mins widened to the lanes they meet) and serves every
// group of the tile.
// The integers are exact and meet the f32 steps of `q4k::dot_repacked`
// (group 2) in its order, so the bits are the packed kernel's.

/// Chunks per block of an unpacked Q4_K row: 1024 bytes of quads (quad c
/// of sub-block 4h + g at bytes 64(8h + c) + 16g, four times), the sub-block
/// scales as i32 lanes (j, t) for j in 0..4 and then 4..8, the mins as
/// i16 pairs (m[2p], m[2p + 1]) in lanes (p, t), then d and dmin as f32.
const Q4KU_ROW: usize = 32 + 4 + 2 + 1;
/// Chunks per block of a prepared group: the four tokens' quants (quad c
/// of sub-block 4h + g at bytes 64(8h + c) + 16g + 4t for token t), the
/// sub-block sums as i16 pairs (s[2p], s[2p + 1]) in lanes (p, t), then
/// the tokens' d as f32.
const Q4KU_ACT: usize = 32 + 2 + 1;

/// Empties `out` to `chunks` zeroed chunks from a 64-byte line (one
/// more for the alignment) and returns where they start.
fn cleared(out: &mut Vec<Chunk32>, chunks: usize) -> usize {
    out.clear();
    out.resize(chunks + 1, Chunk32([0; 32]));
    start(out)
}

/// Writes `bytes` (a multiple of 32 long) over `out` from chunk `at`.
fn put_bytes(out: &mut [Chunk32], at: usize, bytes: &[u8]) {
    for (c, b) in out[at..].iter_mut().zip(bytes.chunks_exact(32)) {
        c.0.copy_from_slice(b);
    }
}

/// Byte-shuffle masks: mask c makes each 128-bit lane quad c of itself,
/// four times (one copy for each token lane).
static QUAD_REPEAT: [[u8; 64]; 4] = {
    let mut m = [[0u8; 64]; 4];
    let mut c = 0;
    while c < 4 {
        let mut i = 0;
        while i < 64 {
            m[c][i] = (4 * c + i % 4) as u8;
            i += 1;
        }
        c += 1;
    }
    m
};

/// A Q4_K block's quants as [`Q4KU_ROW`] lays them out, in the 16 units
/// from `dst`. Sub-block 2p is the low nibbles of quant bytes 32p..32p +
/// 32, sub-block 2p + 1 their high nibbles.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn q4_k_quad_units(bw: &[u8], dst: *mut __m512i) {
    assert!(bw.len() >= super::Q4K, "Q4_K block");
    // SAFETY: the block's quants are bytes 16..144 (checked); per the
    // caller the 16 units at `dst` are within its row; AVX-512 is enabled
    // here.
    unsafe {
        let reps = QUAD_REPEAT
            .each_ref()
            .map(|m| _mm512_loadu_si512(m.as_ptr() as *const __m512i));
        let m4 = _mm512_set1_epi8(0x0f);
        let qs = bw.as_ptr().add(16);
        for h in 0..2 {
            for q in 0..2 {
                // Lanes: bytes 16q..16q + 16 of run 2h, twice, then of run
                // 2h + 1, twice; nibbles low, high, low, high: quads 4q..4q
                // + 4 of sub-blocks 4h..4h + 4.
                let x = _mm512_mask_blend_epi64(
                    0xf0,
                    _mm512_broadcast_i32x4(_mm_loadu_si128(
                        qs.add(64 * h + 16 * q) as *const __m128i
                    )),
                    _mm512_broadcast_i32x4(_mm_loadu_si128(
                        qs.add(64 * h + 32 + 16 * q) as *const __m128i
                    )),
                );
                let x = _mm512_and_si512(_mm512_mask_srli_epi16::<4>(x, 0xff00_ff00, x), m4);
                for (c, rep) in reps.iter().enumerate() {
                    _mm512_storeu_si512(dst.add(8 * h + 4 * q + c), _mm512_shuffle_epi8(x, *rep));
                }
            }
        }
    }
}

/// A Q4_K row in the layout of [`Q4KU_ROW`].
pub(crate) fn unpack_q4_k(w: &[u8], out: &mut Vec<Chunk32>) {
    use super::{q4k_scale_min, Q4K};
    let blocks = w.len() / Q4K;
    let at = cleared(out, blocks * Q4KU_ROW);
    let mut extra = [0u8; 224];
    for (i, bw) in w.chunks_exact(Q4K).enumerate() {
        // SAFETY: `available()` confirmed the features before this
        // kernel was handed out; the block's 16 units are within `out`
        // (sized above).
        unsafe { q4_k_quad_units(bw, out.as_mut_ptr().add(at + i * Q4KU_ROW) as *mut __m512i) };
        let (sc, m) = q4k_scale_min(bw);
        let (sc, m) = (sc.to_le_bytes(), m.to_le_bytes());
        for lane in 0..32 {
            let j = lane / 4;
            let at = 4 * lane;
            extra[at..at + 4].copy_from_slice(&i32::from(sc[j]).to_le_bytes());
        }
        for lane in 0..16 {
            let p = lane / 4;
            let at = 128 + 4 * lane;
            extra[at..at + 2].copy_from_slice(&i16::from(m[2 * p]).to_le_bytes());
            extra[at + 2..at + 4].copy_from_slice(&i16::from(m[2 * p + 1]).to_le_bytes());
        }
        let half = |k: usize| crate::f16_to_f32(u16::from_le_bytes([bw[k], bw[k + 1]]));
        let (d, dmin) = (half(0), half(2));
        extra[192..196].copy_from_slice(&d.to_le_bytes());
        extra[196..200].copy_from_slice(&dmin.to_le_bytes());
        put_bytes(out, at + i * Q4KU_ROW + 32, &extra);
    }
}

/// Four Q8_K rows in the layout of [`Q4KU_ACT`].
pub(crate) fn prepare_q4_k(a: [&[u8]; 4], out: &mut Vec<Chunk32>) {
    use super::{Q8K, Q8K_BSUMS, Q8K_QS};
    let blocks = a[0].len() / Q8K;
    let at = cleared(out, blocks * Q4KU_ACT);
    let mut quads = [0u8; 1024];
    let mut extra = [0u8; 96];
    for i in 0..blocks {
        for (t, row) in a.iter().enumerate() {
            let ba = &row[i * Q8K..(i + 1) * Q8K];
            let qs = &ba[Q8K_QS..Q8K_QS + 256];
            for (q, quad) in qs.chunks_exact(4).enumerate() {
                let (j, c) = (q / 8, q % 8);
                let at = 64 * (8 * (j / 4) + c) + 16 * (j % 4) + 4 * t;
                quads[at..at + 4].copy_from_slice(quad);
            }
            let bsum =
                |k: usize| i16::from_le_bytes([ba[Q8K_BSUMS + 2 * k], ba[Q8K_BSUMS + 2 * k + 1]]);
            // A sub-block's sum: |32 x 127| fits i16.
            let sub = |j: usize| bsum(2 * j) + bsum(2 * j + 1);
            for p in 0..4 {
                let at = 16 * p + 4 * t;
                extra[at..at + 2].copy_from_slice(&sub(2 * p).to_le_bytes());
                extra[at + 2..at + 4].copy_from_slice(&sub(2 * p + 1).to_le_bytes());
            }
            extra[64 + 4 * t..68 + 4 * t].copy_from_slice(&super::q8k_d(ba).to_le_bytes());
        }
        put_bytes(out, at + i * Q4KU_ACT, &quads);
        put_bytes(out, at + i * Q4KU_ACT + 32, &extra);
    }
}

/// Lanes [x0 + x1, y0 + y1, z0 + z1, w0 + w1] of `u` = [x0, x1, y0, y1]
/// and `v` = [z0, z1, w0, w1].
#[inline(always)]
unsafe fn fold_pairs(u: __m512i, v: __m512i) -> __m512i {
    // SAFETY: the caller enables AVX-512.
    unsafe {
        _mm512_add_epi32(
            _mm512_shuffle_i64x2::<0b10_00_10_00>(u, v),
            _mm512_shuffle_i64x2::<0b11_01_11_01>(u, v),
        )
    }
}

/// An unpacked row's block count (`row` chunks a block) and where it and
/// each prepared group (`act` chunks a block) start, once the groups are
/// checked to hold as many blocks: the one check that stands for a
/// kernel's raw reads.
fn unpacked_bases<const G: usize>(
    uw: &[Chunk32],
    pre: [&[Chunk32]; G],
    row: usize,
    act: usize,
) -> (usize, usize, [usize; G]) {
    let blocks = uw.len().saturating_sub(1) / row;
    let (wat, pat) = (start(uw), pre.map(start));
    assert!(uw.len() >= wat + blocks * row, "unpacked row");
    for (p, &at) in pre.iter().zip(&pat) {
        assert!(p.len() >= at + blocks * act, "prepared group");
    }
    (blocks, wat, pat)
}

/// One unpacked Q4_K row against `G` prepared groups of four tokens.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn q4_k_unpacked<const G: usize>(uw: &[Chunk32], pre: [&[Chunk32]; G]) -> [[f32; 4]; G] {
    let (blocks, wat, pat) = unpacked_bases(uw, pre, Q4KU_ROW, Q4KU_ACT);
    let mut acc = [_mm_setzero_ps(); G];
    let mut acc_min = [_mm_setzero_ps(); G];
    for i in 0..blocks {
        // SAFETY (all raw reads below): block i's chunks are within both
        // layouts (checked above); AVX-512 is enabled here.
        unsafe {
            let w = uw.as_ptr().add(wat + i * Q4KU_ROW) as *const __m512i;
            let sc = [_mm512_loadu_si512(w.add(16)), _mm512_loadu_si512(w.add(17))];
            let mins = _mm512_loadu_si512(w.add(18));
            let dw = _mm_loadu_ps(w.add(19) as *const f32);
            let (d, dmin) = (_mm_broadcastss_ps(dw), _mm_permute_ps::<0b01_01_01_01>(dw));
            for g in 0..G {
                let a = pre[g].as_ptr().add(pat[g] + i * Q4KU_ACT) as *const __m512i;
                // Lanes (sub-block, token) for sub-blocks 4h..4h + 4, each
                // times its scale; two chains of four.
                let half = |h: usize| {
                    let k = 8 * h;
                    let dp = |acc: __m512i, c: usize| {
                        _mm512_dpbusd_epi32(
                            acc,
                            _mm512_loadu_si512(w.add(k + c)),
                            _mm512_loadu_si512(a.add(k + c)),
                        )
                    };
                    let zero = _mm512_setzero_si512();
                    let (mut e, mut o) = (dp(zero, 0), dp(zero, 1));
                    for c in (2..8).step_by(2) {
                        e = dp(e, c);
                        o = dp(o, c + 1);
                    }
                    _mm512_mullo_epi32(_mm512_add_epi32(e, o), sc[h])
                };
                let (s0, s1) = (half(0), half(1));
                // Lanes (pair, token): the exact sum over the pair's two
                // sub-blocks, then its min sum.
                let sums = _mm512_cvtepi32_ps(fold_pairs(s0, s1));
                let min_sums =
                    _mm512_cvtepi32_ps(_mm512_madd_epi16(mins, _mm512_loadu_si512(a.add(16))));
                let da = _mm_loadu_ps(a.add(17) as *const f32);
                let (scale_d, scale_min) = (_mm_mul_ps(d, da), _mm_mul_ps(dmin, da));
                let pairs = [
                    (
                        _mm512_castps512_ps128(sums),
                        _mm512_castps512_ps128(min_sums),
                    ),
                    (
                        _mm512_extractf32x4_ps::<1>(sums),
                        _mm512_extractf32x4_ps::<1>(min_sums),
                    ),
                    (
                        _mm512_extractf32x4_ps::<2>(sums),
                        _mm512_extractf32x4_ps::<2>(min_sums),
                    ),
                    (
                        _mm512_extractf32x4_ps::<3>(sums),
                        _mm512_extractf32x4_ps::<3>(min_sums),
                    ),
                ];
                for (s, m) in pairs {
                    acc[g] = _mm_fmadd_ps(s, scale_d, acc[g]);
                    acc_min[g] = _mm_fmadd_ps(m, scale_min, acc_min[g]);
                }
            }
        }
    }
    std::array::from_fn(|g| {
        let mut out = [0f32; 4];
        // SAFETY: out holds 4 floats.
        unsafe { _mm_storeu_ps(out.as_mut_ptr(), _mm_sub_ps(acc[g], acc_min[g])) };
        out
    })
}

pub(crate) fn dot8_q4_k_unpacked(uw: &[Chunk32], pre0: &[Chunk32], pre1: &[Chunk32]) -> [f32; 8] {
    // SAFETY: handed out only after `avx512_available()` confirmed the features.
    let [x, y] = unsafe { q4_k_unpacked::<2>(uw, [pre0, pre1]) };
    [x[0], x[1], x[2], x[3], y[0], y[1], y[2], y[3]]
}

// Q6_K prompt kernel on unpacked rows, tokens in lanes.
// ---------------------------------------------------------------------------
//
// The same layout as Q4_K's above, for the tiled path's order (one exact
// integer sum per super-block, then d x sum and one fused add with the
// token's d): lane g of unit 4h + c is quad c of run 4h + g (16 quants),
// so four `vpdpbusd`s leave each run's sum of unsigned quants (0..=63) for
// each token in lane (g, t); the runs' signed scales multiply lane for
// lane, the offset of 32 comes off through the activations' run sums, and
// one fold across the 128-bit lanes leaves each token's sum. The AVX2
// four-token kernel reduces each token's lanes on its own (kbench: 33
// GMAC/s a thread on the Intel machine, about Q4_K's packed kernel).

/// Chunks per block of an unpacked Q6_K row: 1024 bytes of quads (quad c
/// of run 4h + g at bytes 64(4h + c) + 16g, four times), the run scales as
/// i32 lanes (g, t) for runs 4h + g (four units), the scale pairs (s[g],
/// s[4 + g]) and (s[8 + g], s[12 + g]) as i16 in lanes (g, t) (two units),
/// then d as f32 and a chunk of padding.
const Q6KU_ROW: usize = 32 + 8 + 4 + 2;
/// Chunks per block of a prepared group: the quants (quad c of run 4h + g
/// of token t at bytes 64(4h + c) + 16g + 4t), the run sums paired as the
/// row's scale pairs, the tokens' d as f32, and a chunk of padding.
const Q6KU_ACT: usize = 32 + 4 + 2;

/// A Q6_K block's quants (unsigned, 0..=63) as [`Q6KU_ROW`] lays them
/// out, from `dst` (16 units).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn q6_k_quad_units(bw: &[u8], dst: *mut __m512i) {
    assert!(bw.len() >= super::Q6K, "Q6_K block");
    let (m4, m3) = (_mm256_set1_epi8(0x0f), _mm256_set1_epi8(0x03));
    let mut q = [0u8; 256];
    // SAFETY: ql is bytes 0..128 and qh 128..192 of the block (checked);
    // AVX-512 is enabled here; the stores are within `q` and, per the
    // caller, the 16 units at `dst`.
    unsafe {
        let at = |k: usize| _mm256_loadu_si256(bw.as_ptr().add(k) as *const __m256i);
        for n in 0..2 {
            let (ql0, ql1, qh) = (at(64 * n), at(64 * n + 32), at(128 + 32 * n));
            let lows = [
                _mm256_and_si256(ql0, m4),
                _mm256_and_si256(ql1, m4),
                _mm256_and_si256(_mm256_srli_epi16::<4>(ql0), m4),
                _mm256_and_si256(_mm256_srli_epi16::<4>(ql1), m4),
            ];
            for (k, low) in lows.into_iter().enumerate() {
                let high =
                    _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * k as i32)), m3);
                let v = _mm256_or_si256(low, _mm256_slli_epi16::<4>(high));
                _mm256_storeu_si256(q.as_mut_ptr().add(128 * n + 32 * k) as *mut __m256i, v);
            }
        }
        // Runs 4h..4h + 4 are quants 64h..64h + 64, a 128-bit lane each.
        for h in 0..4 {
            let x = _mm512_loadu_si512(q.as_ptr().add(64 * h) as *const __m512i);
            for (c, rep) in QUAD_REPEAT.iter().enumerate() {
                let rep = _mm512_loadu_si512(rep.as_ptr() as *const __m512i);
                _mm512_storeu_si512(dst.add(4 * h + c), _mm512_shuffle_epi8(x, rep));
            }
        }
    }
}

/// A Q6_K block's scales and d as [`Q6KU_ROW`] lays them out, in units
/// 16..23 from `dst`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn q6_k_scale_units(bw: &[u8], dst: *mut __m512i) {
    assert!(bw.len() >= super::Q6K, "Q6_K block");
    // SAFETY: the scales are bytes 192..208 and d 208..210 of the block
    // (checked); AVX-512 is enabled here; per the caller the stores are
    // within the block's units.
    unsafe {
        // Lane r: run r's scale.
        let sc = _mm512_cvtepi8_epi32(_mm_loadu_si128(bw.as_ptr().add(192) as *const __m128i));
        // Lane (g, t) of a unit: index `base + g`.
        let runs = |base: i32| {
            let idx = _mm512_add_epi32(
                _mm512_srli_epi32::<2>(_mm512_set_epi32(
                    15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0,
                )),
                _mm512_set1_epi32(base),
            );
            _mm512_permutexvar_epi32(idx, sc)
        };
        for h in 0..4 {
            _mm512_storeu_si512(dst.add(16 + h), runs(4 * h as i32));
        }
        for p in 0..2 {
            let lo = _mm512_and_si512(runs(8 * p as i32), _mm512_set1_epi32(0xffff));
            let hi = _mm512_slli_epi32::<16>(runs(8 * p as i32 + 4));
            _mm512_storeu_si512(dst.add(20 + p), _mm512_or_si512(lo, hi));
        }
        let d = crate::f16_to_f32(u16::from_le_bytes([bw[208], bw[209]]));
        _mm512_storeu_ps(dst.add(22) as *mut f32, _mm512_set1_ps(d));
    }
}

/// A Q6_K row in the layout of [`Q6KU_ROW`].
pub(crate) fn unpack_q6_k(w: &[u8], out: &mut Vec<Chunk32>) {
    use super::Q6K;
    let blocks = w.len() / Q6K;
    let at = cleared(out, blocks * Q6KU_ROW);
    for (i, bw) in w.chunks_exact(Q6K).enumerate() {
        // SAFETY: `available()` confirmed the features before this kernel
        // was handed out; the block's 16 units are within `out` (sized
        // above).
        unsafe { q6_k_quad_units(bw, out.as_mut_ptr().add(at + i * Q6KU_ROW) as *mut __m512i) };
        // SAFETY: as above; units 16..23 of the block are within `out`.
        unsafe { q6_k_scale_units(bw, out.as_mut_ptr().add(at + i * Q6KU_ROW) as *mut __m512i) };
    }
}

/// Four Q8_K rows in the layout of [`Q6KU_ACT`].
pub(crate) fn prepare_q6_k(a: [&[u8]; 4], out: &mut Vec<Chunk32>) {
    use super::{Q8K, Q8K_BSUMS, Q8K_QS};
    let blocks = a[0].len() / Q8K;
    let at = cleared(out, blocks * Q6KU_ACT);
    let mut unit = [0u8; 32 * Q6KU_ACT];
    for i in 0..blocks {
        for (t, row) in a.iter().enumerate() {
            let ba = &row[i * Q8K..(i + 1) * Q8K];
            let qs = &ba[Q8K_QS..Q8K_QS + 256];
            for (q, quad) in qs.chunks_exact(4).enumerate() {
                // Quad c of run r = 4h + g.
                let (r, c) = (q / 4, q % 4);
                let at = 64 * (4 * (r / 4) + c) + 16 * (r % 4) + 4 * t;
                unit[at..at + 4].copy_from_slice(quad);
            }
            let bsum = |r: usize| [ba[Q8K_BSUMS + 2 * r], ba[Q8K_BSUMS + 2 * r + 1]];
            for p in 0..2 {
                for g in 0..4 {
                    let at = 1024 + 64 * p + 16 * g + 4 * t;
                    unit[at..at + 2].copy_from_slice(&bsum(8 * p + g));
                    unit[at + 2..at + 4].copy_from_slice(&bsum(8 * p + 4 + g));
                }
            }
            unit[1152 + 4 * t..1156 + 4 * t].copy_from_slice(&super::q8k_d(ba).to_le_bytes());
        }
        put_bytes(out, at + i * Q6KU_ACT, &unit);
    }
}

/// One unpacked Q6_K row against `G` prepared groups of four tokens.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn q6_k_unpacked<const G: usize>(uw: &[Chunk32], pre: [&[Chunk32]; G]) -> [[f32; 4]; G] {
    let (blocks, wat, pat) = unpacked_bases(uw, pre, Q6KU_ROW, Q6KU_ACT);
    let mut acc = [_mm_setzero_ps(); G];
    for i in 0..blocks {
        // SAFETY (all raw reads below): block i's chunks are within both
        // layouts (checked above); AVX-512 is enabled here.
        unsafe {
            let w = uw.as_ptr().add(wat + i * Q6KU_ROW) as *const __m512i;
            let d = _mm_set1_ps(*(w.add(22) as *const f32));
            for g in 0..G {
                let a = pre[g].as_ptr().add(pat[g] + i * Q6KU_ACT) as *const __m512i;
                let mut total = _mm512_setzero_si512();
                for h in 0..4 {
                    let dp = |acc: __m512i, c: usize| {
                        _mm512_dpbusd_epi32(
                            acc,
                            _mm512_loadu_si512(w.add(4 * h + c)),
                            _mm512_loadu_si512(a.add(4 * h + c)),
                        )
                    };
                    let zero = _mm512_setzero_si512();
                    let runs = _mm512_add_epi32(dp(dp(zero, 0), 2), dp(dp(zero, 1), 3));
                    total = _mm512_add_epi32(
                        total,
                        _mm512_mullo_epi32(runs, _mm512_loadu_si512(w.add(16 + h))),
                    );
                }
                // The offset: 32 x the runs' scales times their sums.
                let offset = _mm512_dpwssd_epi32(
                    _mm512_madd_epi16(_mm512_loadu_si512(w.add(20)), _mm512_loadu_si512(a.add(16))),
                    _mm512_loadu_si512(w.add(21)),
                    _mm512_loadu_si512(a.add(17)),
                );
                let total = _mm512_sub_epi32(total, _mm512_slli_epi32::<5>(offset));
                let x =
                    _mm512_add_epi32(total, _mm512_shuffle_i64x2::<0b01_00_11_10>(total, total));
                let x = _mm512_add_epi32(x, _mm512_shuffle_i64x2::<0b10_11_00_01>(x, x));
                let sums = _mm_cvtepi32_ps(_mm512_castsi512_si128(x));
                let da = _mm_loadu_ps(a.add(18) as *const f32);
                acc[g] = _mm_fmadd_ps(_mm_mul_ps(d, sums), da, acc[g]);
            }
        }
    }
    std::array::from_fn(|g| {
        let mut out = [0f32; 4];
        // SAFETY: out holds 4 floats.
        unsafe { _mm_storeu_ps(out.as_mut_ptr(), acc[g]) };
        out
    })
}

pub(crate) fn dot8_q6_k_unpacked(uw: &[Chunk32], pre0: &[Chunk32], pre1: &[Chunk32]) -> [f32; 8] {
    // SAFETY: handed out only after `avx512_available()` confirmed the features.
    let [x, y] = unsafe { q6_k_unpacked::<2>(uw, [pre0, pre1]) };
    [x[0], x[1], x[2], x[3], y[0], y[1], y[2], y[3]]
}
