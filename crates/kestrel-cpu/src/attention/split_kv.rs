//! ggml's split-KV decode: one query over a view of 512+ cells, cut into
//! one chunk of keys per thread; each chunk's partial comes from the
//! one-query path, and the partials are merged here in chunk order.

use std::ops::Range;

use super::keys::{cell_runs, Runs};

/// ggml's split-KV decode (`flash_attn_ext_f16` with one query row and a
/// view of 512+ cells): the view is `n_kv` cells, llama.cpp's
/// `get_n_kv` (the cells up to the query's, rounded up to 256, at least
/// 256, at most the cache's), cut into one chunk of `chunk` cells per
/// thread; masked cells (past the query, outside the window) are skipped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SplitKv {
    pub n_kv: usize,
    pub chunk: usize,
    pub chunks: usize,
}

impl SplitKv {
    /// The split for one query at position `p` in a cache of `kv_cells`
    /// cells on `threads` threads, if ggml takes that path.
    pub fn for_query(p: usize, kv_cells: usize, threads: usize) -> Option<SplitKv> {
        let n_kv = kv_cells.min((p + 1).next_multiple_of(256).max(256));
        (n_kv >= 512).then(|| {
            let chunks = threads.max(1);
            SplitKv {
                n_kv,
                chunk: n_kv.div_ceil(chunks),
                chunks,
            }
        })
    }

    /// Chunk `c`'s keys among `keys` (maybe none), in cell order (see
    /// [`cell_runs`]).
    pub(super) fn keys(&self, c: usize, keys: &Range<usize>, ring: usize) -> Runs {
        let cells = (c * self.chunk).min(self.n_kv)..((c + 1) * self.chunk).min(self.n_kv);
        cell_runs(keys, cells, ring)
    }
}

/// ggml's `flash_attn_ext_reduce_partials` for one head: the chunks'
/// (maximum, sum) and unscaled value sums merged in chunk order, each
/// step's products fused as ggml's compiler fuses them (the old term's),
/// then scaled by the sum's reciprocal.
fn merge_partials<'a>(chunks: impl Iterator<Item = ((f32, f32), &'a [f32])>, dst: &mut [f32]) {
    /// With FMA enabled, so the fused steps are instructions, not calls.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn fused<'a>(chunks: impl Iterator<Item = ((f32, f32), &'a [f32])>, dst: &mut [f32]) {
        merge_body(chunks, dst)
    }
    #[cfg(target_arch = "x86_64")]
    if kestrel_quant::avx2_in_use() {
        // SAFETY: the CPU has AVX2 and FMA (checked just above).
        return unsafe { fused(chunks, dst) };
    }
    merge_body(chunks, dst)
}

#[inline(always)]
fn merge_body<'a>(chunks: impl Iterator<Item = ((f32, f32), &'a [f32])>, dst: &mut [f32]) {
    dst.fill(0.0);
    let (mut m, mut total) = (f32::NEG_INFINITY, 0f32);
    for ((mc, sc), vkq) in chunks {
        if sc == 0.0 {
            continue;
        }
        let m_new = m.max(mc);
        let old = (m - m_new).exp();
        let new = (mc - m_new).exp();
        for (d, &v) in dst.iter_mut().zip(vkq.iter()) {
            *d = d.mul_add(old, v * new);
        }
        total = total.mul_add(old, sc * new);
        m = m_new;
    }
    if total != 0.0 {
        let inv = 1.0 / total;
        dst.iter_mut().for_each(|d| *d *= inv);
    }
}

/// One split sequence's partials, `[chunk][head]`: (maximum, sum) and the
/// unscaled value sums (head_dim_v each). A chunk with no keys keeps
/// (-inf, 0), which the merge skips as ggml's does.
pub(super) struct Partials {
    chunks: usize,
    n_head: usize,
    dv: usize,
    pub(super) stats: Vec<(f32, f32)>,
    pub(super) sums: Vec<f32>,
}

impl Partials {
    pub(super) fn new(chunks: usize, n_head: usize, dv: usize) -> Self {
        Partials {
            chunks,
            n_head,
            dv,
            stats: vec![(f32::NEG_INFINITY, 0f32); chunks * n_head],
            sums: vec![0f32; chunks * n_head * dv],
        }
    }

    /// Every head's merged result into `out` (n_head rows of head_dim_v).
    pub(super) fn merge_into(&self, out: &mut [f32]) {
        let (n_head, dv) = (self.n_head, self.dv);
        for (h, dst) in out.chunks_exact_mut(dv).enumerate() {
            let chunk = |c: usize| {
                let at = c * n_head + h;
                (self.stats[at], &self.sums[at * dv..(at + 1) * dv])
            };
            merge_partials((0..self.chunks).map(chunk), dst);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attention::tests::{random_cache, six_over_two, uniform};
    use crate::attention::{attend, attend_batch, AttnItem, KvLayout};
    use kestrel_quant::{f16_dot, f16_mad, f16_scale, f16_to_f32, f32_to_f16_row};

    /// llama.cpp's view of the cache (`get_n_kv`) and ggml's chunking of it.
    #[test]
    fn split_kv_follows_llama_cpp_view_and_chunks() {
        // Up to position 255 the view is 256 cells: no split.
        assert_eq!(SplitKv::for_query(0, 4096, 2), None);
        assert_eq!(SplitKv::for_query(255, 4096, 2), None);
        // A cache under 512 cells never splits.
        assert_eq!(SplitKv::for_query(300, 256, 2), None);
        let at = |p, cells, threads| SplitKv::for_query(p, cells, threads).expect("a split");
        let sp = at(256, 4096, 2);
        assert_eq!((sp.n_kv, sp.chunk, sp.chunks), (512, 256, 2));
        assert_eq!(sp.keys(0, &(0..257), 0), Runs::one(0..256));
        assert_eq!(sp.keys(1, &(0..257), 0), Runs::one(256..257));
        // Three threads: chunks of 171, the last one short; the view stops
        // at the cache's cells.
        let sp = at(700, 768, 3);
        assert_eq!((sp.n_kv, sp.chunk), (768, 256));
        let sp = at(520, 4096, 3);
        assert_eq!((sp.n_kv, sp.chunk), (768, 256));
        assert_eq!(sp.keys(2, &(0..521), 0), Runs::one(512..521));
        let sp = at(256, 4096, 3);
        assert_eq!(sp.chunk, 171);
        assert_eq!(
            sp.keys(2, &(0..257), 0),
            Runs::default(),
            "masked chunk: no keys"
        );
        // A window cuts the first chunk's keys.
        assert_eq!(at(600, 4096, 2).keys(0, &(89..601), 0), Runs::one(89..384));
    }

    /// The split-KV decode of `attend_batch` against a plain transcription
    /// of ggml's: each chunk's online softmax key by key (f16 accumulator),
    /// then the partials merged in chunk order with the fused steps its
    /// compiler emits, bit for bit; on 1-3 threads, with GQA and a window,
    /// and one sequence under the split beside one that is not; and with
    /// the window's cells a ring (the cells walked in order, each holding
    /// the latest position congruent to it).
    #[test]
    fn split_kv_decode_equals_ggml_transcription() {
        let mut rnd = uniform(0x5eed_u32);
        for (threads, pos, window, dim, ring) in [
            (2usize, 256usize, 0usize, 64usize, 0usize),
            (2, 700, 0, 64, 0),
            (3, 520, 0, 64, 0),
            (1, 300, 0, 64, 0),
            (2, 600, 100, 32, 0),
            (3, 900, 0, 128, 0),
            (2, 700, 300, 64, 512),
            (3, 1000, 200, 64, 512),
            (1, 900, 256, 64, 512),
            (2, 1020, 500, 32, 768),
            (2, 530, 256, 64, 512),
        ] {
            let s = six_over_two(dim, window);
            let (n_head, n_head_kv) = (s.n_head, s.n_head_kv);
            let cells = 1024;
            let [kc, vc] = random_cache(&s, cells, &mut rnd);
            let q: Vec<f32> = (0..n_head * dim).map(|_| rnd() * 2.0).collect();
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            let item = |pos0, kv_cells| AttnItem {
                q: &q,
                kc: &kc,
                vc: &vc,
                lay: KvLayout::position_major(&s),
                pos0,
                n_tok: 1,
                kv_cells,
                ring,
            };
            // A ring is the view's cells, and the cache's rows.
            let view = if ring > 0 { ring } else { cells };
            let got = attend_batch(&s, &[item(pos, view), item(100, view)], &pool);

            // ggml, transcribed: n_kv, chunk = ceil(n_kv / nth), per chunk
            // and head M, S and VKQ (f16 accumulator read back as f32).
            let n_kv = view.min((pos + 1).div_ceil(256) * 256);
            // The position in cell ic (a ring's latest congruent one).
            let lap = pos.checked_div(ring).map_or(0, |l| l * ring);
            let pos_of = |ic: usize| {
                if ring == 0 || lap + ic <= pos {
                    Some(lap + ic)
                } else {
                    (lap + ic).checked_sub(ring)
                }
            };
            let chunk = n_kv.div_ceil(threads);
            let lo = if window > 0 {
                (pos + 1).saturating_sub(window)
            } else {
                0
            };
            let mut want = vec![0f32; n_head * dim];
            for (h, out) in want.chunks_exact_mut(dim).enumerate() {
                let kvh = h / (n_head / n_head_kv);
                let mut q16 = vec![0u16; dim];
                f32_to_f16_row(&q[h * dim..(h + 1) * dim], &mut q16);
                let (mut m_f, mut s_f) = (f32::NEG_INFINITY, 0f32);
                let mut vkq_f = vec![0f32; dim];
                for c in 0..threads {
                    let ic_start = c * chunk;
                    if ic_start >= n_kv {
                        continue;
                    }
                    let ic_end = (ic_start + chunk).min(n_kv);
                    let (mut m, mut sum) = (f32::NEG_INFINITY, 0f32);
                    let mut acc = vec![0u16; dim];
                    for ic in ic_start..ic_end {
                        if pos_of(ic).is_none_or(|kp| kp > pos || kp < lo) {
                            continue; // masked
                        }
                        // A ring's rows are its cells.
                        let at = (ic * n_head_kv + kvh) * dim;
                        let sc = f16_dot(&kc[at..at + dim], &q16) * s.scale;
                        let (mut ms, mut vs) = (1f32, 1f32);
                        if sc > m {
                            let old = m;
                            m = sc;
                            ms = (old - m).exp();
                            f16_scale(&mut acc, ms);
                        } else {
                            vs = (sc - m).exp();
                        }
                        f16_mad(&mut acc, &vc[at..at + dim], vs);
                        // `S = S*ms + vs`, fused by ggml's compiler.
                        sum = sum.mul_add(ms, vs);
                    }
                    let vkq: Vec<f32> = acc.iter().map(|&a| f16_to_f32(a)).collect();
                    if sum == 0.0 {
                        continue;
                    }
                    let m_new = m_f.max(m);
                    let (so, sn) = ((m_f - m_new).exp(), (m - m_new).exp());
                    for (f, v) in vkq_f.iter_mut().zip(&vkq) {
                        *f = f.mul_add(so, v * sn);
                    }
                    s_f = s_f.mul_add(so, sum * sn);
                    m_f = m_new;
                }
                let inv = 1.0 / s_f;
                for (o, v) in out.iter_mut().zip(&vkq_f) {
                    *o = v * inv;
                }
            }
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            let at = format!(
                "{threads} threads, position {pos}, window {window}, dim {dim}, ring {ring}"
            );
            assert_eq!(bits(&got[0]), bits(&want), "{at}");
            // The sequence at position 100 (a 256-cell view) is not split:
            // it equals `attend`.
            let plain = attend(&s, &q, &kc, &vc, 100, 1, &pool);
            assert_eq!(bits(&got[1]), bits(&plain), "{at}: unsplit sequence");
            // Four split sequences: enough chunks for a task per chunk, all
            // heads in one; the same bits.
            let four: Vec<AttnItem<'_>> = (0..4).map(|_| item(pos, view)).collect();
            for (i, g) in attend_batch(&s, &four, &pool).iter().enumerate() {
                assert_eq!(bits(g), bits(&want), "{at}: sequence {i} of four");
            }
        }
    }
}
