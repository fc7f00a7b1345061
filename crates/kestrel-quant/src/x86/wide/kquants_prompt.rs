//! The K-quants' AVX-512 prompt kernels: Q4_K's packed four-token kernel,
//! and Q4_K's and Q6_K's on rows unpacked with the tokens in lanes.

use std::arch::x86_64::*;

use super::*;

/// Byte-shuffle masks for [`q4_k_gemm_x4`]: from eight i16 scales in
/// every 128-bit lane, vector k's low 256 bits take sub-block k's first
/// scale and its high 256 bits the second, for sub-blocks (0, 2), (1, 3),
/// (4, 6), (5, 7).
pub(super) const fn q4k_gemm_masks() -> [[u8; 64]; 4] {
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

pub(super) static Q4K_GEMM_MASKS: [[u8; 64]; 4] = q4k_gemm_masks();

/// Q4_K's four-token prompt kernel in the repacked-gemm order (see
/// `q4k::dot_repacked`, group 2: per pair of sub-blocks one exact integer
/// sum, folded in by a fused add with d x da, and one of its mins with
/// dmin x da). The AVX2 kernel (`crate::x86::q4_k_gemm_x4`) took a pair of
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
pub(super) unsafe fn q4_k_gemm_x4_wide(w: &[u8], a: [&[u8]; 4]) -> [f32; 4] {
    use crate::x86::{q4k_gemm_block, Q4K, Q8K};
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
pub(super) const Q4KU_ROW: usize = 32 + 4 + 2 + 1;
/// Chunks per block of a prepared group: the four tokens' quants (quad c
/// of sub-block 4h + g at bytes 64(8h + c) + 16g + 4t for token t), the
/// sub-block sums as i16 pairs (s[2p], s[2p + 1]) in lanes (p, t), then
/// the tokens' d as f32.
pub(super) const Q4KU_ACT: usize = 32 + 2 + 1;

/// Empties `out` to `chunks` zeroed chunks from a 64-byte line (one
/// more for the alignment) and returns where they start.
pub(super) fn cleared(out: &mut Vec<Chunk32>, chunks: usize) -> usize {
    out.clear();
    out.resize(chunks + 1, Chunk32([0; 32]));
    start(out)
}

/// Writes `bytes` (a multiple of 32 long) over `out` from chunk `at`.
pub(super) fn put_bytes(out: &mut [Chunk32], at: usize, bytes: &[u8]) {
    for (c, b) in out[at..].iter_mut().zip(bytes.chunks_exact(32)) {
        c.0.copy_from_slice(b);
    }
}

/// Byte-shuffle masks: mask c makes each 128-bit lane quad c of itself,
/// four times (one copy for each token lane).
pub(super) static QUAD_REPEAT: [[u8; 64]; 4] = {
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
pub(super) unsafe fn q4_k_quad_units(bw: &[u8], dst: *mut __m512i) {
    assert!(bw.len() >= crate::x86::Q4K, "Q4_K block");
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
    use crate::x86::{q4k_scale_min, Q4K};
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
    use crate::x86::{Q8K, Q8K_BSUMS, Q8K_QS};
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
            extra[64 + 4 * t..68 + 4 * t].copy_from_slice(&crate::x86::q8k_d(ba).to_le_bytes());
        }
        put_bytes(out, at + i * Q4KU_ACT, &quads);
        put_bytes(out, at + i * Q4KU_ACT + 32, &extra);
    }
}

/// Lanes [x0 + x1, y0 + y1, z0 + z1, w0 + w1] of `u` = [x0, x1, y0, y1]
/// and `v` = [z0, z1, w0, w1].
#[inline(always)]
pub(super) unsafe fn fold_pairs(u: __m512i, v: __m512i) -> __m512i {
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
pub(super) fn unpacked_bases<const G: usize>(
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
pub(super) unsafe fn q4_k_unpacked<const G: usize>(
    uw: &[Chunk32],
    pre: [&[Chunk32]; G],
) -> [[f32; 4]; G] {
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
pub(super) const Q6KU_ROW: usize = 32 + 8 + 4 + 2;
/// Chunks per block of a prepared group: the quants (quad c of run 4h + g
/// of token t at bytes 64(4h + c) + 16g + 4t), the run sums paired as the
/// row's scale pairs, the tokens' d as f32, and a chunk of padding.
pub(super) const Q6KU_ACT: usize = 32 + 4 + 2;

/// A Q6_K block's quants (unsigned, 0..=63) as [`Q6KU_ROW`] lays them
/// out, from `dst` (16 units).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn q6_k_quad_units(bw: &[u8], dst: *mut __m512i) {
    assert!(bw.len() >= crate::x86::Q6K, "Q6_K block");
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
pub(super) unsafe fn q6_k_scale_units(bw: &[u8], dst: *mut __m512i) {
    assert!(bw.len() >= crate::x86::Q6K, "Q6_K block");
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
    use crate::x86::Q6K;
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
    use crate::x86::{Q8K, Q8K_BSUMS, Q8K_QS};
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
            unit[1152 + 4 * t..1156 + 4 * t].copy_from_slice(&crate::x86::q8k_d(ba).to_le_bytes());
        }
        put_bytes(out, at + i * Q6KU_ACT, &unit);
    }
}

/// One unpacked Q6_K row against `G` prepared groups of four tokens.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn q6_k_unpacked<const G: usize>(
    uw: &[Chunk32],
    pre: [&[Chunk32]; G],
) -> [[f32; 4]; G] {
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
