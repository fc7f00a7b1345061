//! The one-query path (decode and batches under 64 queries), in the
//! rounding of ggml's `flash_attn_ext_f16_one_chunk`: Q rounded to f16, f16
//! dot products, V accumulated in f16. The portable build is here; the AVX2
//! and AVX-512 builds are beside it (`avx2`, `avx512`), around the body
//! they share (`x86`).

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "x86_64")]
mod x86;

use kestrel_quant::{f16_dot, f16_mad, f16_scale, f16_to_f32_row, f32_to_f16_row};

#[cfg(target_arch = "x86_64")]
use avx2::heads_avx2;
#[cfg(target_arch = "x86_64")]
use avx512::heads_avx512;

use super::keys::Runs;
use super::{AttnShape, KvLayout};

/// What a run of heads reads: the shape, the query rows, the cache, which
/// query row, and the keys it attends to (all it may see, or a split-KV
/// chunk of them).
pub(super) struct Query<'a> {
    pub(super) s: &'a AttnShape,
    pub(super) q: &'a [f32],
    pub(super) kc: &'a [u16],
    pub(super) vc: &'a [u16],
    pub(super) lay: KvLayout,
    pub(super) t: usize,
    pub(super) keys: Runs,
}

/// Attention of query row `t` for heads `h0..h0 + n` (all reading the same
/// KV head) over `keys` into `dst` (n rows of head_dim_v): [`head`],
/// compiled with AVX2/FMA (or AVX-512) where the CPU has them. With
/// `stats`, each head's (running maximum, sum) goes there and `dst` gets
/// the value sums unscaled (a split-KV partial).
pub(super) fn heads_dispatch(
    x: &Query<'_>,
    h0: usize,
    dst: &mut [f32],
    stats: Option<&mut [(f32, f32)]>,
) {
    #[cfg(target_arch = "x86_64")]
    if kestrel_quant::avx512_in_use() {
        // SAFETY: the CPU has AVX2, FMA, F16C and AVX-512 F/BW/VL (checked
        // just above).
        return unsafe { heads_avx512(x, h0, dst, stats) };
    }
    #[cfg(target_arch = "x86_64")]
    if kestrel_quant::avx2_in_use() {
        // SAFETY: the CPU has AVX2, FMA and F16C (checked just above).
        return unsafe { heads_avx2(x, h0, dst, stats) };
    }
    heads_portable(x, h0, dst, stats);
}

/// [`head`] for each of the heads of [`heads_dispatch`].
fn heads_portable(x: &Query<'_>, h0: usize, dst: &mut [f32], mut stats: Option<&mut [(f32, f32)]>) {
    for (i, d) in dst.chunks_exact_mut(x.s.head_dim_v).enumerate() {
        let st = head(x, h0 + i, d, stats.is_some());
        if let Some(stats) = stats.as_deref_mut() {
            stats[i] = st;
        }
    }
}

/// Most heads that [`heads_x86`](x86::heads_x86) interleaves.
pub(super) const MAX_RUN: usize = 4;

/// Attention of query row `t`, head `h`, over `keys`, into `dst`
/// (head_dim_v values), in the rounding of ggml's one-query-at-a-time path
/// (`flash_attn_ext_f16_one_chunk`): Q rounded to f16, f16 dot products, V
/// accumulated in f16. Returns the running maximum and the sum; with
/// `partial`, `dst` gets the value sums unscaled (a split-KV chunk's).
#[inline(always)]
fn head(x: &Query<'_>, h: usize, dst: &mut [f32], partial: bool) -> (f32, f32) {
    let (s, q, kc, vc, t) = (x.s, x.q, x.kc, x.vc, x.t);
    let (dk, dv) = (s.head_dim_k, s.head_dim_v);
    let q_w = s.n_head * dk;
    let lay = x.lay;
    let kvh = h / (s.n_head / s.n_head_kv);
    let qh = &q[t * q_w + h * dk..t * q_w + (h + 1) * dk];
    let key = |j: usize| &kc[j * lay.k_row + kvh * lay.k_head..][..dk];
    let value = |j: usize| &vc[j * lay.v_row + kvh * lay.v_head..][..dv];
    let mut m = f32::NEG_INFINITY;
    let mut sum = 0f32;
    let mut q16 = vec![0u16; dk];
    let mut acc = vec![0u16; dv];
    f32_to_f16_row(qh, &mut q16);
    for j in x.keys.iter() {
        let sc = f16_dot(key(j), &q16) * s.scale;
        let (ms, vs) = online_step(&mut m, sc);
        if ms != 1.0 {
            f16_scale(&mut acc, ms);
        }
        f16_mad(&mut acc, value(j), vs);
        sum = sum.mul_add(ms, vs);
    }
    let inv = if partial {
        1.0
    } else if sum == 0.0 {
        0.0
    } else {
        1.0 / sum
    };
    let mut wide = vec![0f32; dv];
    f16_to_f32_row(&acc, &mut wide);
    dst.iter_mut().zip(&wide).for_each(|(d, a)| *d = a * inv);
    (m, sum)
}

/// One online-softmax step for score `s`: returns (factor for the running
/// accumulator, weight of this value), updating the running maximum.
fn online_step(m: &mut f32, s: f32) -> (f32, f32) {
    if s > *m {
        let old = *m;
        *m = s;
        ((old - s).exp(), 1.0)
    } else {
        (1.0, (s - *m).exp())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attention::keys::causal_keys;
    use crate::attention::tests::uniform;
    use kestrel_quant::f32_to_f16;

    /// The AVX2 and AVX-512 one-query paths against the portable one, bit
    /// for bit, with GQA, runs of 1 to 6 heads of one KV head (past the
    /// four interleaved at once), windows, and contexts long enough for the
    /// running maximum to move many times.
    #[test]
    fn avx2_head_equals_portable_bit_for_bit() {
        if !kestrel_quant::avx2_in_use() {
            eprintln!("no AVX2 here: nothing to compare");
            return;
        }
        let mut rnd = uniform(7u32);
        for (dim, window, pos0, n_head, n_head_kv) in [
            (64usize, 0usize, 0usize, 6usize, 2usize),
            (64, 0, 150, 6, 2),
            (128, 40, 90, 6, 2),
            (64, 7, 30, 6, 2),
            (64, 0, 70, 6, 1),
            (192, 0, 20, 3, 3),
            (256, 0, 40, 4, 1),
        ] {
            let s = AttnShape {
                n_head,
                n_head_kv,
                head_dim_k: dim,
                head_dim_v: dim,
                scale: 0.7,
                window,
            };
            let n_rep = n_head / n_head_kv;
            let n_tok = 3;
            let n_pos = pos0 + n_tok;
            let kc: Vec<u16> = (0..n_pos * n_head_kv * dim)
                .map(|_| f32_to_f16(rnd() * 3.0))
                .collect();
            let vc: Vec<u16> = (0..n_pos * n_head_kv * dim)
                .map(|_| f32_to_f16(rnd() * 5.0))
                .collect();
            let q: Vec<f32> = (0..n_tok * n_head * dim).map(|_| rnd() * 2.0).collect();
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            for t in 0..n_tok {
                let mut want = vec![0f32; n_head * dim];
                let keys = causal_keys(&s, pos0 + t);
                let over = |keys: Runs| Query {
                    s: &s,
                    q: &q,
                    kc: &kc,
                    vc: &vc,
                    lay: KvLayout::position_major(&s),
                    t,
                    keys,
                };
                let x = over(Runs::one(keys.clone()));
                for (h, d) in want.chunks_exact_mut(dim).enumerate() {
                    head(&x, h, d, false);
                }
                // Every run (h0, n) inside one KV head's group.
                for h0 in 0..n_head {
                    for n in 1..=n_rep - h0 % n_rep {
                        let want = &want[h0 * dim..(h0 + n) * dim];
                        let mut got = vec![0f32; n * dim];
                        // SAFETY: AVX2, FMA and F16C were detected above.
                        unsafe { heads_avx2(&x, h0, &mut got, None) };
                        let at = format!("dim {dim} pos0 {pos0} t {t} heads {h0}+{n}");
                        assert_eq!(bits(&got), bits(want), "AVX2: {at}");
                        if kestrel_quant::avx512_in_use() {
                            // SAFETY: AVX-512 F/BW/VL (with AVX2) were detected.
                            unsafe { heads_avx512(&x, h0, &mut got, None) };
                            assert_eq!(bits(&got), bits(want), "AVX-512: {at}");
                        }
                        // A split-KV chunk's partial over the later keys:
                        // the same maxima, sums and unscaled value sums.
                        let part = over(Runs::one(keys.start + keys.len() / 3..keys.end));
                        let mut want_st = vec![(0f32, 0f32); n];
                        let mut want_p = vec![0f32; n * dim];
                        heads_portable(&part, h0, &mut want_p, Some(&mut want_st));
                        let st_bits = |v: &[(f32, f32)]| {
                            v.iter()
                                .map(|(m, x)| (m.to_bits(), x.to_bits()))
                                .collect::<Vec<_>>()
                        };
                        let mut st = vec![(0f32, 0f32); n];
                        // SAFETY: AVX2, FMA and F16C were detected above.
                        unsafe { heads_avx2(&part, h0, &mut got, Some(&mut st)) };
                        assert_eq!(bits(&got), bits(&want_p), "AVX2 partial: {at}");
                        assert_eq!(st_bits(&st), st_bits(&want_st), "AVX2 stats: {at}");
                        if kestrel_quant::avx512_in_use() {
                            // SAFETY: AVX-512 F/BW/VL (with AVX2) were detected.
                            unsafe { heads_avx512(&part, h0, &mut got, Some(&mut st)) };
                            assert_eq!(bits(&got), bits(&want_p), "AVX-512 partial: {at}");
                            assert_eq!(st_bits(&st), st_bits(&want_st), "AVX-512 stats: {at}");
                        }
                        // Two runs, the later keys first (a ring's order),
                        // whole and as a partial.
                        let mid = keys.start + keys.len() * 2 / 5;
                        let ringed = over(Runs([mid..keys.end, keys.start..mid]));
                        for partial in [false, true] {
                            let mut want_st = vec![(0f32, 0f32); n];
                            let mut want_r = vec![0f32; n * dim];
                            fn stats(st: &mut [(f32, f32)], on: bool) -> Option<&mut [(f32, f32)]> {
                                on.then_some(st)
                            }
                            heads_portable(&ringed, h0, &mut want_r, stats(&mut want_st, partial));
                            let mut st = vec![(0f32, 0f32); n];
                            // SAFETY: AVX2, FMA and F16C were detected above.
                            unsafe { heads_avx2(&ringed, h0, &mut got, stats(&mut st, partial)) };
                            let at = format!("{at}, two runs, partial {partial}");
                            assert_eq!(bits(&got), bits(&want_r), "AVX2: {at}");
                            assert_eq!(st_bits(&st), st_bits(&want_st), "AVX2 stats: {at}");
                            if kestrel_quant::avx512_in_use() {
                                // SAFETY: AVX-512 F/BW/VL (with AVX2) were detected.
                                unsafe {
                                    heads_avx512(&ringed, h0, &mut got, stats(&mut st, partial))
                                };
                                assert_eq!(bits(&got), bits(&want_r), "AVX-512: {at}");
                                assert_eq!(st_bits(&st), st_bits(&want_st), "AVX-512 stats: {at}");
                            }
                        }
                    }
                }
            }
        }
    }
}
