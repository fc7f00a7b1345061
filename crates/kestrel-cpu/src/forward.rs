//! The forward pass, block by block: the batch's rows, the embedding, each
//! layer's attention block and feed-forward block with their residuals,
//! and the logits.
//!
//! The pass is compiled inside `forward_avx2` (AVX2/FMA/F16C) so that the
//! element-wise ops inlined into it use hardware FMA; every function here
//! that it calls is `#[inline(always)]` so that it is compiled there too.

use std::ops::Range;

use rayon::prelude::*;

use kestrel_model::{Activation, RopeStyle};
use kestrel_quant::dequantize_row;

use crate::{attention, ops, CpuModel, Layer, Logits, SeqInput};

/// A pass's rows: row t is token `tokens[t]` at position `pos[t]`;
/// sequence i owns rows `spans[i]`; `keep` lists the rows whose logits are
/// wanted.
struct Rows {
    tokens: Vec<u32>,
    pos: Vec<usize>,
    spans: Vec<Range<usize>>,
    keep: Vec<usize>,
}

/// Each row's rotation table, for the layers with the global base and for
/// the sliding-window layers (empty where there are none).
struct RopeTables {
    global: Vec<f32>,
    swa: Vec<f32>,
}

impl CpuModel {
    pub(crate) fn forward_dispatch(
        &self,
        seqs: &mut [SeqInput<'_>],
    ) -> (Vec<f32>, Vec<Range<usize>>) {
        #[cfg(target_arch = "x86_64")]
        if kestrel_quant::avx2_in_use() {
            // SAFETY: the CPU has AVX2, FMA and F16C (checked just above).
            return unsafe { self.forward_avx2(seqs) };
        }
        self.forward_impl(seqs)
    }

    /// The forward pass compiled with AVX2/FMA/F16C, so the element-wise
    /// ops inlined into it (norms, RoPE, activations) use hardware FMA
    /// instead of a libm call. Same operations, same bits.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn forward_avx2(&self, seqs: &mut [SeqInput<'_>]) -> (Vec<f32>, Vec<Range<usize>>) {
        self.forward_impl(seqs)
    }

    /// The pass: the wanted rows' logits in one buffer (taken from
    /// `self.logits`), and each sequence's part of it.
    #[inline(always)]
    fn forward_impl(&self, seqs: &mut [SeqInput<'_>]) -> (Vec<f32>, Vec<Range<usize>>) {
        let hp = &self.spec.hparams;
        let Rows {
            tokens,
            pos,
            mut spans,
            keep,
        } = rows(seqs);
        let mut n_tok = tokens.len();
        let e = hp.n_embd;
        let prof = &self.profiler;
        let mut x = self.embed(&tokens);
        let mut h = vec![0f32; n_tok * e];
        let ropes = self.rope_tables(&pos);

        for (il, layer) in self.layers.iter().enumerate() {
            let t0 = prof.tick();
            norm_rows(&x, &layer.attn_norm, hp.rms_eps, &mut h[..n_tok * e], e);
            prof.tock(t0, "norm", 0);
            let mut o = self.attention_block(il, layer, &h, seqs, &spans, &ropes);
            let t0 = prof.tick();
            // As llama.cpp, the last layer carries on with only the rows whose
            // logits are wanted: its feed-forward products then see the same
            // batch shape (and so take the same kernels) as the peer's.
            if il + 1 == self.layers.len() && keep.len() < n_tok {
                o = gather_rows(&o, &keep, e);
                x = gather_rows(&x, &keep, e);
                n_tok = keep.len();
                h.truncate(n_tok * e);
                keep_spans(seqs, &mut spans);
            }
            add_residual(&mut x, o, &layer.post_attn_norm, hp.rms_eps, e);

            norm_rows(&x, &layer.ffn_norm, hp.rms_eps, &mut h[..n_tok * e], e);
            prof.tock(t0, "norm", 0);
            let d = self.feed_forward_block(layer, &h, &spans, n_tok);
            let t0 = prof.tick();
            add_residual(&mut x, d, &layer.post_ffn_norm, hp.rms_eps, e);
            prof.tock(t0, "norm", 0);
        }

        // After the last layer `x` holds only the wanted rows, in order.
        self.logits(&x, seqs, &spans, n_tok)
    }

    /// The embedding rows of `tokens` (scaled where the model scales them).
    #[inline(always)]
    fn embed(&self, tokens: &[u32]) -> Vec<f32> {
        let hp = &self.spec.hparams;
        let blk = &self.spec.block;
        let (n_tok, e) = (tokens.len(), hp.n_embd);
        let prof = &self.profiler;
        let t0 = prof.tick();
        // Embedding lookup.
        let mut x = vec![0f32; n_tok * e];
        let emb = self.mat(&self.tok_embd);
        let rb = emb.data.len() / emb.rows;
        for (t, &id) in tokens.iter().enumerate() {
            let id = id as usize;
            assert!(id < emb.rows, "token id out of range");
            dequantize_row(
                emb.ty,
                &emb.data[id * rb..(id + 1) * rb],
                &mut x[t * e..(t + 1) * e],
            );
        }
        if blk.scale_embeddings {
            let s = (e as f32).sqrt();
            x.iter_mut().for_each(|v| *v *= s);
        }

        prof.tock(t0, "embedding", 0);
        x
    }

    /// Each row's rotation tables, once per pass, not once a layer: the
    /// layers with the same base and scale share them, and their sines and
    /// cosines cost as much as the rotations (batchbench, SmolLM2, four
    /// sequences: "rope" 0.04 -> 0.01 ms a step).
    #[inline(always)]
    fn rope_tables(&self, pos: &[usize]) -> RopeTables {
        let hp = &self.spec.hparams;
        let prof = &self.profiler;
        let n_tok = pos.len();
        let rope_table = |base: f32, freq_scale: f32| {
            let mut one = Vec::new();
            let mut all = Vec::with_capacity(n_tok * hp.n_rot);
            for &p in pos {
                ops::rope_cache(p, hp.n_rot, base, freq_scale, &mut one);
                all.extend_from_slice(&one);
            }
            all
        };
        let t0 = prof.tick();
        let rope_global = rope_table(hp.rope_base, hp.rope_freq_scale);
        let rope_swa = if hp.swa_layers.iter().any(|&swa| swa) {
            rope_table(hp.rope_base_swa, 1.0)
        } else {
            Vec::new()
        };
        prof.tock(t0, "rope", 0);
        RopeTables {
            global: rope_global,
            swa: rope_swa,
        }
    }

    /// Layer `il`'s attention over its normed input `h`: the query, key
    /// and value projections, their rotation, the keys and values stored
    /// in each sequence's cache, attention over it, and the output
    /// projection.
    #[inline(always)]
    fn attention_block(
        &self,
        il: usize,
        layer: &Layer,
        h: &[f32],
        seqs: &mut [SeqInput<'_>],
        spans: &[Range<usize>],
        ropes: &RopeTables,
    ) -> Vec<f32> {
        let (mut q, mut k, v) = self.qkv(layer, h, spans);
        self.rotate(il, &mut q, &mut k, ropes);
        let attn = self.attend(il, &q, &k, &v, seqs, spans);
        self.mm(&layer.wo, &attn, spans)
    }

    /// The query, key and value rows of `h`, with their biases and norms.
    #[inline(always)]
    fn qkv(
        &self,
        layer: &Layer,
        h: &[f32],
        spans: &[Range<usize>],
    ) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
        let hp = &self.spec.hparams;
        let prof = &self.profiler;
        let n_tok = spans.last().map_or(0, |s| s.end);
        let hd_k = hp.head_dim_k;
        let q_dim = hp.n_head * hd_k;
        let k_dim = hp.n_head_kv * hd_k;
        let v_dim = hp.n_head_kv * hp.head_dim_v;
        let (mut q, mut k, v) = if let Some(wqkv) = &layer.wqkv {
            let qkv = self.mm(wqkv, h, spans);
            let w = q_dim + k_dim + v_dim;
            let mut q = Vec::with_capacity(n_tok * q_dim);
            let mut k = Vec::with_capacity(n_tok * k_dim);
            let mut v = Vec::with_capacity(n_tok * v_dim);
            for row in qkv.chunks_exact(w) {
                q.extend_from_slice(&row[..q_dim]);
                k.extend_from_slice(&row[q_dim..q_dim + k_dim]);
                v.extend_from_slice(&row[q_dim + k_dim..]);
            }
            (q, k, v)
        } else {
            let [q, k, v] = self.mm_shared(
                [
                    layer.wq.as_ref().expect("bound"),
                    layer.wk.as_ref().expect("bound"),
                    layer.wv.as_ref().expect("bound"),
                ],
                h,
                spans,
            );
            (q, k, v)
        };
        let mut v = v;
        let t0 = prof.tick();
        for (buf, bias) in [
            (&mut q, &layer.bq),
            (&mut k, &layer.bk),
            (&mut v, &layer.bv),
        ] {
            if let Some(bias) = bias {
                for row in buf.chunks_exact_mut(bias.len()) {
                    row.iter_mut().zip(bias).for_each(|(a, b)| *a += b);
                }
            }
        }
        if let (Some(qn), Some(kn)) = (&layer.q_norm, &layer.k_norm) {
            q.par_chunks_mut(PAR_ROWS * hd_k)
                .for_each(|hds| ops::rms_norm_rows_inplace(hds, qn, hp.rms_eps));
            k.par_chunks_mut(PAR_ROWS * hd_k)
                .for_each(|hds| ops::rms_norm_rows_inplace(hds, kn, hp.rms_eps));
        }
        prof.tock(t0, "norm, bias", 0);
        (q, k, v)
    }

    /// RoPE on layer `il`'s query and key heads (and the query's scale,
    /// where the model applies it before attention).
    #[inline(always)]
    fn rotate(&self, il: usize, q: &mut [f32], k: &mut [f32], ropes: &RopeTables) {
        let hp = &self.spec.hparams;
        let blk = &self.spec.block;
        let prof = &self.profiler;
        let hd_k = hp.head_dim_k;
        let q_dim = hp.n_head * hd_k;
        let k_dim = hp.n_head_kv * hd_k;
        let neox = blk.rope == RopeStyle::Neox;
        let t0 = prof.tick();
        let swa = hp.swa_layers[il];
        let table = if swa { &ropes.swa } else { &ropes.global };
        // (No rows at all where n_rot is 0: nothing to rotate.)
        for (t, rope) in table.chunks_exact(hp.n_rot.max(1)).enumerate() {
            for hd in q[t * q_dim..(t + 1) * q_dim].chunks_exact_mut(hd_k) {
                ops::rope_apply(hd, rope, hp.n_rot, neox);
            }
            for hd in k[t * k_dim..(t + 1) * k_dim].chunks_exact_mut(hd_k) {
                ops::rope_apply(hd, rope, hp.n_rot, neox);
            }
        }
        if blk.prescale_q {
            q.iter_mut().for_each(|v| *v *= hp.attn_scale);
        }
        prof.tock(t0, "rope", 0);
    }

    /// Stores each sequence's keys and values of layer `il` in its cache,
    /// then attends over that cache; returns the rows of every head's
    /// result.
    #[inline(always)]
    fn attend(
        &self,
        il: usize,
        q: &[f32],
        k: &[f32],
        v: &[f32],
        seqs: &mut [SeqInput<'_>],
        spans: &[Range<usize>],
    ) -> Vec<f32> {
        let hp = &self.spec.hparams;
        let blk = &self.spec.block;
        let prof = &self.profiler;
        let (hd_k, hd_v) = (hp.head_dim_k, hp.head_dim_v);
        let q_dim = hp.n_head * hd_k;
        let k_dim = hp.n_head_kv * hd_k;
        let v_dim = hp.n_head_kv * hd_v;
        let swa = hp.swa_layers[il];
        let t0 = prof.tick();
        // Store each sequence's keys and values, then attend over its cache.
        let scale = if blk.prescale_q { 1.0 } else { hp.attn_scale };
        let window = if swa { hp.sliding_window } else { 0 };
        let shape = attention::AttnShape {
            n_head: hp.n_head,
            n_head_kv: hp.n_head_kv,
            head_dim_k: hd_k,
            head_dim_v: hd_v,
            scale,
            window,
        };
        for (s, span) in seqs.iter_mut().zip(spans) {
            s.cache.write(
                il,
                &shape,
                s.pos0,
                &k[span.start * k_dim..span.end * k_dim],
                &v[span.start * v_dim..span.end * v_dim],
            );
        }
        prof.tock(t0, "kv store", 0);
        let t0 = prof.tick();
        let items: Vec<attention::AttnItem<'_>> = seqs
            .iter()
            .zip(spans)
            .map(|(s, span)| {
                let q = &q[span.start * q_dim..span.end * q_dim];
                s.cache.attn_item(il, &shape, q, s.pos0, span.len())
            })
            .collect();
        let attn = attention::attend_batch(&shape, &items, &self.pool).concat();
        prof.tock(t0, "attention", 0);
        attn
    }

    /// The feed-forward block over its normed input `h` (`n_tok` rows):
    /// gate and up projections, the gated activation, the down projection.
    #[inline(always)]
    fn feed_forward_block(
        &self,
        layer: &Layer,
        h: &[f32],
        spans: &[Range<usize>],
        n_tok: usize,
    ) -> Vec<f32> {
        let hp = &self.spec.hparams;
        let blk = &self.spec.block;
        let prof = &self.profiler;
        let n_ff = hp.n_ff;
        let (gate, up) = match &layer.ffn_gate {
            Some(g) => {
                let [g, u] = self.mm_shared([g, &layer.ffn_up], h, spans);
                (g, u)
            }
            None => {
                let gu = self.mm(&layer.ffn_up, h, spans);
                let mut g = Vec::with_capacity(n_tok * n_ff);
                let mut u = Vec::with_capacity(n_tok * n_ff);
                for row in gu.chunks_exact(2 * n_ff) {
                    g.extend_from_slice(&row[..n_ff]);
                    u.extend_from_slice(&row[n_ff..]);
                }
                (g, u)
            }
        };
        let t0 = prof.tick();
        let mut act = vec![0f32; n_tok * n_ff];
        let glu = match blk.activation {
            Activation::SiluGlu => ops::swiglu,
            Activation::GeluGlu => ops::geglu,
        };
        // Rows are independent: a prompt batch splits them over the pool.
        act.par_chunks_mut(n_ff)
            .zip(gate.par_chunks(n_ff).zip(up.par_chunks(n_ff)))
            .with_min_len(PAR_ROWS)
            .for_each(|(y, (g, u))| glu(g, u, y));
        prof.tock(t0, "activation", 0);
        self.mm(&layer.ffn_down, &act, spans)
    }

    /// The logits of the `n_tok` rows of `x` (the wanted rows, in order),
    /// in the buffer kept from the last pass, and each sequence's part.
    #[inline(always)]
    fn logits(
        &self,
        x: &[f32],
        seqs: &[SeqInput<'_>],
        spans: &[Range<usize>],
        n_tok: usize,
    ) -> (Vec<f32>, Vec<Range<usize>>) {
        let hp = &self.spec.hparams;
        let e = hp.n_embd;
        let mut normed = vec![0f32; n_tok * e];
        ops::rms_norm_rows(x, &self.output_norm, hp.rms_eps, &mut normed);
        let nv = self.output.rows;
        // Every element is written by the product: a buffer of the same
        // size as the last pass's is reused as it stands.
        let mut logits =
            std::mem::take(&mut *self.logits.lock().unwrap_or_else(|e| e.into_inner()));
        logits.resize(n_tok * nv, 0.0);
        self.mm_shared_into([&self.output], &normed, spans, [&mut logits]);
        if hp.final_logit_softcap > 0.0 {
            ops::softcap(&mut logits, hp.final_logit_softcap);
        }
        let mut at = 0;
        let parts = seqs
            .iter()
            .zip(spans)
            .map(|(s, span)| {
                let rows = match s.logits {
                    Logits::Last => 1,
                    Logits::All => span.len(),
                };
                at += rows * nv;
                at - rows * nv..at
            })
            .collect();
        (logits, parts)
    }
}

/// The rows of a pass over `seqs`, checked: at least one sequence, each
/// with at least one token and within its cache.
#[inline(always)]
fn rows(seqs: &[SeqInput<'_>]) -> Rows {
    assert!(!seqs.is_empty(), "forward needs at least one sequence");
    let mut tokens = Vec::new();
    let mut pos = Vec::new();
    let mut spans = Vec::with_capacity(seqs.len());
    for s in seqs.iter() {
        assert!(!s.tokens.is_empty(), "forward needs at least one token");
        assert!(
            s.pos0 + s.tokens.len() <= s.cache.n_ctx(),
            "context overflow"
        );
        spans.push(tokens.len()..tokens.len() + s.tokens.len());
        tokens.extend_from_slice(s.tokens);
        pos.extend(s.pos0..s.pos0 + s.tokens.len());
    }
    // The rows whose logits are wanted.
    let keep: Vec<usize> = seqs
        .iter()
        .zip(&spans)
        .flat_map(|(s, span)| match s.logits {
            Logits::Last => span.end - 1..span.end,
            Logits::All => span.clone(),
        })
        .collect();
    Rows {
        tokens,
        pos,
        spans,
        keep,
    }
}

/// Each sequence's span once only the rows whose logits it wants are kept.
#[inline(always)]
fn keep_spans(seqs: &[SeqInput<'_>], spans: &mut [Range<usize>]) {
    let mut at = 0;
    for (s, span) in seqs.iter().zip(spans.iter_mut()) {
        let rows = match s.logits {
            Logits::Last => 1,
            Logits::All => span.len(),
        };
        *span = at..at + rows;
        at += rows;
    }
}

/// `x += r`, `r` first normed row by row where the block has a norm after
/// it (`post_norm`).
#[inline(always)]
fn add_residual(x: &mut [f32], mut r: Vec<f32>, post_norm: &Option<Vec<f32>>, eps: f32, e: usize) {
    if let Some(pn) = post_norm {
        r.par_chunks_mut(PAR_ROWS * e)
            .for_each(|rows| ops::rms_norm_rows_inplace(rows, pn, eps));
    }
    x.iter_mut().zip(&r).for_each(|(a, b)| *a += b);
}

/// The rows `keep` (ascending indices) of a batch of `e`-wide rows.
fn gather_rows(x: &[f32], keep: &[usize], e: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(keep.len() * e);
    for &r in keep {
        out.extend_from_slice(&x[r * e..(r + 1) * e]);
    }
    out
}

/// Rows per task when a prompt batch's row-wise ops go to the pool: below
/// this a hand-off costs more than the rows.
const PAR_ROWS: usize = 4;

/// RMSNorm of each `e`-wide row of `x` into `y` (rows split over the pool,
/// `PAR_ROWS` to a task, whose sums of squares run side by side).
fn norm_rows(x: &[f32], w: &[f32], eps: f32, y: &mut [f32], e: usize) {
    y.par_chunks_mut(PAR_ROWS * e)
        .zip(x.par_chunks(PAR_ROWS * e))
        .for_each(|(y, x)| ops::rms_norm_rows(x, w, eps, y));
}
