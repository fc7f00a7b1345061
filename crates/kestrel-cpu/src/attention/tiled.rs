//! The tiled path (batches of 64+ queries), in the rounding of ggml's
//! `flash_attn_ext_tiled`: 64x64 tiles in f32. Its AVX2 and AVX-512 builds
//! are the same code compiled with those features (`tile_build`).

use crate::ops::exp_minus8;
use kestrel_quant::f16_to_f32_row;

use rayon::prelude::*;
use rayon::ThreadPool;

use super::keys::causal_keys;
use super::{AttnShape, KvLayout};

/// ggml's key tile (`GGML_FA_TILE_KV`); its query tile is the same size.
const KV_TILE: usize = 64;

/// Batches of 64+ queries, in the rounding of ggml's tiled path
/// (`flash_attn_ext_tiled`): keys in tiles of 64; per tile the scores are
/// sequential fused sums over the head dimension, scaled and masked; the
/// running maximum moves per tile (rescaling by libm `expf`); the weights come
/// from ggml's vector `expf` with per-8 partial sums added in f64; values
/// accumulate in f32 as sequential fused sums over the tile's keys.
/// Work is split by (head, 64-query tile).
#[allow(clippy::too_many_arguments)]
pub(super) fn attend_tiled(
    s: &AttnShape,
    q: &[f32],
    kc: &[u16],
    vc: &[u16],
    lay: KvLayout,
    pos0: usize,
    n_tok: usize,
    ring: usize,
    pool: &ThreadPool,
) -> Vec<f32> {
    let dv = s.head_dim_v;
    let n_qt = n_tok.div_ceil(KV_TILE);
    let task = |i: usize| -> Vec<f32> {
        let (h, qt) = (i / n_qt, i % n_qt);
        let t0 = qt * KV_TILE;
        let t1 = (t0 + KV_TILE).min(n_tok);
        #[cfg(target_arch = "x86_64")]
        if kestrel_quant::avx512_in_use() {
            // SAFETY: the CPU has AVX2, FMA, F16C and AVX-512 F/BW/VL
            // (checked just above).
            return unsafe { tile_avx512(s, q, kc, vc, lay, pos0, ring, h, t0, t1) };
        }
        #[cfg(target_arch = "x86_64")]
        if kestrel_quant::avx2_in_use() {
            // SAFETY: the CPU has AVX2 and FMA (checked just above).
            return unsafe { tile_avx2(s, q, kc, vc, lay, pos0, ring, h, t0, t1) };
        }
        tile::<2>(s, q, kc, vc, lay, pos0, ring, h, t0, t1)
    };
    let parts: Vec<Vec<f32>> =
        pool.install(|| (0..s.n_head * n_qt).into_par_iter().map(task).collect());
    let mut out = vec![0f32; n_tok * s.n_head * dv];
    for (i, part) in parts.iter().enumerate() {
        let (h, qt) = (i / n_qt, i % n_qt);
        for (k, row) in part.chunks_exact(dv).enumerate() {
            let t = qt * KV_TILE + k;
            out[(t * s.n_head + h) * dv..(t * s.n_head + h + 1) * dv].copy_from_slice(row);
        }
    }
    out
}

/// A build of [`tile`] with `$features` enabled and `$rows` query rows per
/// pass.
macro_rules! tile_build {
    ($(#[$doc:meta])* $name:ident, $features:literal, $rows:literal) => {
        $(#[$doc])*
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = $features)]
        #[allow(clippy::too_many_arguments)]
        unsafe fn $name(
            s: &AttnShape,
            q: &[f32],
            kc: &[u16],
            vc: &[u16],
            lay: KvLayout,
            pos0: usize,
            ring: usize,
            h: usize,
            t0: usize,
            t1: usize,
        ) -> Vec<f32> {
            tile::<$rows>(s, q, kc, vc, lay, pos0, ring, h, t0, t1)
        }
    };
}

tile_build!(
    /// [`tile`] compiled with AVX2/FMA, so its fused multiply-adds are
    /// instructions and its loops over keys and dimensions vectorize.
    tile_avx2,
    "avx2,fma,f16c",
    2
);

tile_build!(
    /// [`tile`] with AVX-512, query rows four at a time: each K and V tile
    /// element loaded (from L2: the tiles outgrow L1 at large head sizes)
    /// serves four rows' chains instead of two; AVX-512's 32 registers hold
    /// the four rows' sums. Every element's operations are unchanged.
    tile_avx512,
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl",
    4
);

/// Query rows t0..t1 of head `h`; returns (t1 - t0) rows of head_dim_v.
/// Rows go `ROWS` at a time (2 or 4) through the score and value loops.
/// The keys go in tiles of cells, as ggml's view has them: the positions,
/// or in a ring (see [`AttnItem::ring`](super::AttnItem::ring)) once the rows pass its size, its
/// cells, each holding the latest position congruent to it. Cell c is
/// cache row c either way.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn tile<const ROWS: usize>(
    s: &AttnShape,
    q: &[f32],
    kc: &[u16],
    vc: &[u16],
    lay: KvLayout,
    pos0: usize,
    ring: usize,
    h: usize,
    t0: usize,
    t1: usize,
) -> Vec<f32> {
    let (dk, dv) = (s.head_dim_k, s.head_dim_v);
    let q_w = s.n_head * dk;
    let kvh = h / (s.n_head / s.n_head_kv);
    let (k0, v0) = (kvh * lay.k_head, kvh * lay.v_head);
    let rows = t1 - t0;
    let mut out = vec![0f32; rows * dv];
    let mut m = vec![f32::NEG_INFINITY; rows];
    let mut sum = vec![0f32; rows];
    // K tile transposed (dk x 64) and V tile (64 x dv), widened to f32.
    let mut kt = vec![0f32; dk * KV_TILE];
    let mut vt = vec![0f32; KV_TILE * dv];
    let mut krow = vec![0f32; dk];
    let mut kq4 = [[0f32; KV_TILE]; 4];
    let last = pos0 + t1 - 1;
    let (n_cells, lap) = if ring > 0 && last >= ring {
        (ring, last / ring * ring)
    } else {
        (last + 1, 0)
    };
    // (Past the newest lap's cells, lap >= ring.)
    let pos_of = |c: usize| {
        if lap + c <= last {
            lap + c
        } else {
            lap + c - ring
        }
    };
    for ic in (0..n_cells).step_by(KV_TILE) {
        let n_k = KV_TILE.min(n_cells - ic);
        for tk in 0..KV_TILE {
            if tk < n_k {
                let j = ic + tk;
                f16_to_f32_row(&kc[j * lay.k_row + k0..][..dk], &mut krow);
                f16_to_f32_row(
                    &vc[j * lay.v_row + v0..][..dv],
                    &mut vt[tk * dv..(tk + 1) * dv],
                );
            } else {
                krow.iter_mut().for_each(|v| *v = 0.0);
                vt[tk * dv..(tk + 1) * dv].iter_mut().for_each(|v| *v = 0.0);
            }
            for (d, &v) in krow.iter().enumerate() {
                kt[d * KV_TILE + tk] = v;
            }
        }
        // Query rows two at a time: each K and V tile element loaded once
        // serves both rows' FMA chains (the tiles do not fit L1). Every
        // element still sees the same operations in the same order.
        let mut r = 0;
        while r < rows {
            let n = if ROWS == 4 && r + 3 < rows {
                4
            } else if r + 1 < rows {
                2
            } else {
                1
            };
            let qrow = |i: usize| {
                let t = t0 + r + i;
                &q[t * q_w + h * dk..t * q_w + (h + 1) * dk]
            };
            if n == 4 {
                qk_quad(&kt, [qrow(0), qrow(1), qrow(2), qrow(3)], &mut kq4);
            } else if n == 2 {
                let [k0, k1, ..] = &mut kq4;
                qk_pair(&kt, qrow(0), qrow(1), k0, k1);
            } else {
                qk_one(&kt, qrow(0), &mut kq4[0]);
            }
            let mut active = [false; 4];
            for i in 0..n {
                let row = r + i;
                let keys = causal_keys(s, pos0 + t0 + row);
                let kq = &mut kq4[i];
                for (tk, a) in kq.iter_mut().enumerate() {
                    *a = if tk < n_k && keys.contains(&pos_of(ic + tk)) {
                        *a * s.scale
                    } else {
                        f32::NEG_INFINITY
                    };
                }
                let tile_max = kq.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
                if tile_max == f32::NEG_INFINITY {
                    continue;
                }
                active[i] = true;
                let acc = &mut out[row * dv..(row + 1) * dv];
                let m_new = m[row].max(tile_max);
                if m_new > m[row] {
                    let ms = (m[row] - m_new).exp();
                    acc.iter_mut().for_each(|a| *a *= ms);
                    sum[row] *= ms;
                }
                m[row] = m_new;
                let mut total = 0f64;
                for chunk in kq.as_chunks_mut::<8>().0 {
                    exp_minus8(chunk, m_new);
                    total += f64::from(crate_hsum8(chunk));
                }
                sum[row] = (f64::from(sum[row]) + total) as f32;
            }
            if n == 4 && active == [true; 4] {
                let mut rows4 = out[r * dv..(r + 4) * dv].chunks_exact_mut(dv);
                let acc = [(); 4].map(|_| rows4.next().expect("four rows"));
                pv_quad(&vt, dv, &kq4, acc);
            } else if n == 2 && active[..2] == [true, true] {
                let (a0, a1) = out[r * dv..(r + 2) * dv].split_at_mut(dv);
                pv_pair(&vt, dv, &kq4[0], &kq4[1], a0, a1);
            } else {
                for i in 0..n {
                    if active[i] {
                        let row = r + i;
                        pv_one(&vt, dv, &kq4[i], &mut out[row * dv..(row + 1) * dv]);
                    }
                }
            }
            r += n;
        }
    }
    for (r, row) in out.chunks_exact_mut(dv).enumerate() {
        let inv = if sum[r] == 0.0 { 0.0 } else { 1.0 / sum[r] };
        row.iter_mut().for_each(|a| *a *= inv);
    }
    out
}

/// Scores of one query row against a transposed K tile (`kt[d][tk]`):
/// kq[tk] = sum over d of k * q, fused, in order of d.
#[inline(always)]
fn qk_one(kt: &[f32], qh: &[f32], kq: &mut [f32; KV_TILE]) {
    *kq = [0f32; KV_TILE];
    for (d, &qd) in qh.iter().enumerate() {
        let kd = &kt[d * KV_TILE..(d + 1) * KV_TILE];
        for (a, &k) in kq.iter_mut().zip(kd) {
            *a = k.mul_add(qd, *a);
        }
    }
}

/// [`qk_one`] for two rows, keys in halves of 32 so both rows' sums stay
/// in registers.
#[inline(always)]
fn qk_pair(kt: &[f32], q0: &[f32], q1: &[f32], kq0: &mut [f32; KV_TILE], kq1: &mut [f32; KV_TILE]) {
    const HALF: usize = KV_TILE / 2;
    for half in 0..2 {
        let (mut a0, mut a1) = ([0f32; HALF], [0f32; HALF]);
        for (d, (&x0, &x1)) in q0.iter().zip(q1).enumerate() {
            let at = d * KV_TILE + HALF * half;
            let kd: &[f32; HALF] = kt[at..at + HALF].try_into().expect("32 keys");
            for ((a, b), &k) in a0.iter_mut().zip(a1.iter_mut()).zip(kd) {
                *a = k.mul_add(x0, *a);
                *b = k.mul_add(x1, *b);
            }
        }
        kq0[HALF * half..HALF * (half + 1)].copy_from_slice(&a0);
        kq1[HALF * half..HALF * (half + 1)].copy_from_slice(&a1);
    }
}

/// [`qk_one`] for four rows, keys in halves of 32 (four named sums, in
/// [`qk_pair`]'s shape, which LLVM keeps in registers).
#[inline(always)]
fn qk_quad(kt: &[f32], q: [&[f32]; 4], kq: &mut [[f32; KV_TILE]; 4]) {
    const HALF: usize = KV_TILE / 2;
    let [q0, q1, q2, q3] = q;
    for half in 0..2 {
        let (mut a0, mut a1, mut a2, mut a3) =
            ([0f32; HALF], [0f32; HALF], [0f32; HALF], [0f32; HALF]);
        for (d, (((&x0, &x1), &x2), &x3)) in q0.iter().zip(q1).zip(q2).zip(q3).enumerate() {
            let at = d * KV_TILE + HALF * half;
            let kd: &[f32; HALF] = kt[at..at + HALF].try_into().expect("32 keys");
            for i in 0..HALF {
                let k = kd[i];
                a0[i] = k.mul_add(x0, a0[i]);
                a1[i] = k.mul_add(x1, a1[i]);
                a2[i] = k.mul_add(x2, a2[i]);
                a3[i] = k.mul_add(x3, a3[i]);
            }
        }
        for (kqr, ar) in kq.iter_mut().zip([&a0, &a1, &a2, &a3]) {
            kqr[HALF * half..HALF * (half + 1)].copy_from_slice(ar);
        }
    }
}

/// [`pv_one`] for four rows, 32 dimensions at a time for all four.
#[inline(always)]
fn pv_quad(vt: &[f32], dv: usize, w: &[[f32; KV_TILE]; 4], acc: [&mut [f32]; 4]) {
    let [acc0, acc1, acc2, acc3] = acc;
    let [w0, w1, w2, w3] = w;
    let wide = dv / 32 * 32;
    for c in (0..wide).step_by(32) {
        let mut a0: [f32; 32] = acc0[c..c + 32].try_into().expect("32");
        let mut a1: [f32; 32] = acc1[c..c + 32].try_into().expect("32");
        let mut a2: [f32; 32] = acc2[c..c + 32].try_into().expect("32");
        let mut a3: [f32; 32] = acc3[c..c + 32].try_into().expect("32");
        for tk in 0..KV_TILE {
            let at = tk * dv + c;
            let v: &[f32; 32] = vt[at..at + 32].try_into().expect("32 values");
            let (u0, u1, u2, u3) = (w0[tk], w1[tk], w2[tk], w3[tk]);
            for i in 0..32 {
                a0[i] = v[i].mul_add(u0, a0[i]);
                a1[i] = v[i].mul_add(u1, a1[i]);
                a2[i] = v[i].mul_add(u2, a2[i]);
                a3[i] = v[i].mul_add(u3, a3[i]);
            }
        }
        acc0[c..c + 32].copy_from_slice(&a0);
        acc1[c..c + 32].copy_from_slice(&a1);
        acc2[c..c + 32].copy_from_slice(&a2);
        acc3[c..c + 32].copy_from_slice(&a3);
    }
    for (accr, wr) in [acc0, acc1, acc2, acc3].into_iter().zip(w) {
        for (tk, &u) in wr.iter().enumerate() {
            let vrow = &vt[tk * dv + wide..(tk + 1) * dv];
            for (x, &v) in accr[wide..].iter_mut().zip(vrow) {
                *x = v.mul_add(u, *x);
            }
        }
    }
}

/// acc[d] += v[tk][d] * w[tk] over the tile's keys in order (V tile
/// `vt[tk][d]`), 64 dimensions at a time: eight independent FMA chains whose
/// partial sums stay in registers across the keys.
#[inline(always)]
fn pv_one(vt: &[f32], dv: usize, w: &[f32; KV_TILE], acc: &mut [f32]) {
    let (wide, tail) = acc.as_chunks_mut::<64>();
    for (c, a64) in wide.iter_mut().enumerate() {
        let mut av = *a64;
        for (tk, &w) in w.iter().enumerate() {
            let at = tk * dv + 64 * c;
            let v: &[f32; 64] = vt[at..at + 64].try_into().expect("64 values");
            for (a, &v) in av.iter_mut().zip(v) {
                *a = v.mul_add(w, *a);
            }
        }
        *a64 = av;
    }
    let d0 = dv - tail.len();
    for (tk, &w) in w.iter().enumerate() {
        let vrow = &vt[tk * dv + d0..(tk + 1) * dv];
        for (a, &v) in tail.iter_mut().zip(vrow) {
            *a = v.mul_add(w, *a);
        }
    }
}

/// [`pv_one`] for two rows, 32 dimensions at a time for both.
#[inline(always)]
fn pv_pair(
    vt: &[f32],
    dv: usize,
    w0: &[f32; KV_TILE],
    w1: &[f32; KV_TILE],
    acc0: &mut [f32],
    acc1: &mut [f32],
) {
    let (wide0, tail0) = acc0.as_chunks_mut::<32>();
    let (wide1, tail1) = acc1.as_chunks_mut::<32>();
    for (c, (x0, x1)) in wide0.iter_mut().zip(wide1.iter_mut()).enumerate() {
        let (mut a0, mut a1) = (*x0, *x1);
        for (tk, (&u0, &u1)) in w0.iter().zip(w1).enumerate() {
            let at = tk * dv + 32 * c;
            let v: &[f32; 32] = vt[at..at + 32].try_into().expect("32 values");
            for ((a, b), &v) in a0.iter_mut().zip(a1.iter_mut()).zip(v) {
                *a = v.mul_add(u0, *a);
                *b = v.mul_add(u1, *b);
            }
        }
        *x0 = a0;
        *x1 = a1;
    }
    let d0 = dv - tail0.len();
    for (tk, (&u0, &u1)) in w0.iter().zip(w1).enumerate() {
        let vrow = &vt[tk * dv + d0..(tk + 1) * dv];
        for ((a, b), &v) in tail0.iter_mut().zip(tail1.iter_mut()).zip(vrow) {
            *a = v.mul_add(u0, *a);
            *b = v.mul_add(u1, *b);
        }
    }
}

/// `hsum_float_8`'s order: ((x0+x4) + (x2+x6)) + ((x1+x5) + (x3+x7)).
#[inline(always)]
fn crate_hsum8(x: &[f32; 8]) -> f32 {
    let r = [x[0] + x[4], x[1] + x[5], x[2] + x[6], x[3] + x[7]];
    (r[0] + r[2]) + (r[1] + r[3])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attention::tests::uniform;
    use kestrel_quant::f32_to_f16;

    /// The tiled path compiled with AVX2 (and with AVX-512, rows four at a
    /// time, where the CPU has it) against the portable build of the same
    /// code (row pairs, a leftover row, masked rows, windows, a head
    /// size with a tail past the 32- and 64-wide blocks), bit for bit.
    #[test]
    fn avx2_tiles_equal_portable_bit_for_bit() {
        if !kestrel_quant::avx2_in_use() {
            eprintln!("no AVX2 here: nothing to compare");
            return;
        }
        let mut rnd = uniform(5u32);
        for (dim, window, pos0, n_tok) in [
            (64usize, 0usize, 0usize, 67usize),
            (96, 20, 9, 64),
            (40, 0, 70, 65),
        ] {
            let s = AttnShape {
                n_head: 4,
                n_head_kv: 2,
                head_dim_k: dim,
                head_dim_v: dim,
                scale: 0.5,
                window,
            };
            let n_pos = pos0 + n_tok;
            let kc: Vec<u16> = (0..n_pos * 2 * dim)
                .map(|_| f32_to_f16(rnd() * 3.0))
                .collect();
            let vc: Vec<u16> = (0..n_pos * 2 * dim)
                .map(|_| f32_to_f16(rnd() * 5.0))
                .collect();
            let q: Vec<f32> = (0..n_tok * 4 * dim).map(|_| rnd() * 2.0).collect();
            let lay = KvLayout::position_major(&s);
            for h in 0..4 {
                for t0 in (0..n_tok).step_by(KV_TILE) {
                    let t1 = (t0 + KV_TILE).min(n_tok);
                    // SAFETY: AVX2, FMA and F16C were detected above.
                    let a = unsafe { tile_avx2(&s, &q, &kc, &vc, lay, pos0, 0, h, t0, t1) };
                    let b = tile::<2>(&s, &q, &kc, &vc, lay, pos0, 0, h, t0, t1);
                    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(
                        bits(&a),
                        bits(&b),
                        "dim {dim} window {window} h {h} t0 {t0}"
                    );
                    // Four rows at a time: portable, and with AVX-512 where
                    // the CPU has it.
                    let c = tile::<4>(&s, &q, &kc, &vc, lay, pos0, 0, h, t0, t1);
                    assert_eq!(bits(&c), bits(&b), "quads: dim {dim} h {h} t0 {t0}");
                    if kestrel_quant::avx512_in_use() {
                        // SAFETY: AVX-512 F/BW/VL were detected.
                        let e = unsafe { tile_avx512(&s, &q, &kc, &vc, lay, pos0, 0, h, t0, t1) };
                        assert_eq!(bits(&e), bits(&b), "AVX-512: dim {dim} h {h} t0 {t0}");
                    }
                }
            }
        }
    }
}
