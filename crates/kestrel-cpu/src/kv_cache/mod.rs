//! A sequence's KV cache: its layout (f16 rows, each layer's head-major),
//! llama.cpp's sliding-window ring (which row a position takes, which
//! positions a reused prefix still holds), and the storage under it
//! (`store`).

mod store;

use kestrel_model::HParams;

use crate::attention::{AttnItem, AttnShape, KvLayout};
use crate::N_UBATCH;
use store::KvStore;

/// Keys and values of every layer, stored as f16 like llama.cpp's default
/// cache (in one buffer of huge pages: see `store`), each layer's rows
/// head-major: a KV head's rows together, so an attention task, which
/// reads one KV head of one sequence, reads its keys and values as two
/// unbroken streams. Position-major, a task's rows were 128 bytes of every
/// 384 (SmolLM2), each a separate fetch. batchbench, SmolLM2, two threads,
/// a set of caches in each layout taking turns step by step, rate head-
/// major over position-major: contexts 32-236, one sequence 1.03x in three
/// runs, four sequences 1.02x, 1.03x, 1.01x; contexts 32-486, one sequence
/// 1.03x twice, four 1.04x twice.
pub struct KvCache {
    store: KvStore,
    n_ctx: usize,
    k_width: usize,
    v_width: usize,
    /// The cells of llama.cpp's sliding-window cache where that is a ring
    /// smaller than the context (see [`AttnItem::ring`]); 0
    /// where it holds every position (`--swa-full`, or no window). The
    /// window layers then keep only that many rows, position p in row
    /// p mod `swa_ring`, as llama.cpp's cells hold them.
    swa_ring: usize,
    /// Which layers are sliding-window layers.
    swa_layers: Vec<bool>,
}

impl KvCache {
    /// An empty cache of `n_ctx` positions for a model of `hp`.
    pub(crate) fn new(hp: &HParams, n_ctx: usize) -> KvCache {
        let k_width = hp.n_head_kv * hp.head_dim_k;
        let v_width = hp.n_head_kv * hp.head_dim_v;
        let ring = swa_ring(hp, n_ctx);
        // A window layer in a ring keeps the ring's rows only.
        let rows = |l: usize| {
            if ring > 0 && hp.swa_layers[l] {
                ring
            } else {
                n_ctx
            }
        };
        let rows: Vec<usize> = (0..hp.n_layer).map(rows).collect();
        KvCache {
            store: KvStore::new(&rows, k_width, v_width),
            n_ctx,
            k_width,
            v_width,
            swa_ring: ring,
            swa_layers: hp.swa_layers.clone(),
        }
    }

    pub fn n_ctx(&self) -> usize {
        self.n_ctx
    }

    /// Sliding-window layers attend as llama.cpp's full-size window cache
    /// (`--swa-full`) has them: every position in its own cell, visited in
    /// position order. By default they follow llama.cpp's default, a ring
    /// of the window plus a micro-batch, whose visiting order turns once
    /// the positions pass its size.
    /// Call it before the cache's first use: the window layers' rows are
    /// allocated anew, for every position.
    pub fn full_swa(&mut self) {
        if self.swa_ring == 0 {
            return;
        }
        self.swa_ring = 0;
        let rows = vec![self.n_ctx; self.swa_layers.len()];
        self.store = KvStore::new(&rows, self.k_width, self.v_width);
    }

    /// Rows layer `l` holds for each KV head: the context, or a window
    /// layer's ring.
    fn rows(&self, l: usize) -> usize {
        self.store.k(l).len() / self.k_width
    }

    /// The window ring's size (0: none); a reused prefix must keep the
    /// window before its end (see [`KvCache::keeps`]).
    pub fn swa_ring(&self) -> usize {
        self.swa_ring
    }

    /// Whether, after positions up to `written` were stored, positions
    /// `from..to` are all still held: in a window layer's ring a later
    /// position takes the row of the one a ring's length before it.
    pub fn keeps(&self, from: usize, to: usize, written: usize) -> bool {
        self.swa_ring == 0 || from >= to || written <= from + self.swa_ring
    }

    /// The ring layer `l` keeps its rows in (0: none, row = position).
    fn ring(&self, l: usize) -> usize {
        if self.swa_layers[l] {
            self.swa_ring
        } else {
            0
        }
    }

    /// Stores layer `l`'s keys `k` and values `v` (rows of `s.n_head_kv`
    /// heads, one a token) of the tokens from position `pos0` on, rounded
    /// to f16.
    #[inline(always)]
    pub(crate) fn write(&mut self, l: usize, s: &AttnShape, pos0: usize, k: &[f32], v: &[f32]) {
        let (hd_k, hd_v) = (s.head_dim_k, s.head_dim_v);
        let (k_dim, v_dim) = (s.n_head_kv * hd_k, s.n_head_kv * hd_v);
        let n_tok = k.len() / k_dim;
        let swa = self.swa_layers[l];
        // A ring must hold a pass's rows and the window before them
        // (llama.cpp sizes it for its 512-token micro-batches).
        assert!(
            !swa || self.swa_ring == 0 || n_tok + s.window <= self.swa_ring,
            "a pass of {n_tok} tokens overruns the window ring"
        );
        // Position p's row: p, or p mod the ring in a window layer.
        let ring = self.ring(l);
        let rows = self.rows(l);
        let (kc, vc) = self.store.kv_mut(l);
        for t in 0..n_tok {
            let p = pos0 + t;
            let r = if ring > 0 { p % ring } else { p };
            let (kt, vt) = (
                &k[t * k_dim..(t + 1) * k_dim],
                &v[t * v_dim..(t + 1) * v_dim],
            );
            // Head h's row r (see `KvCache`).
            for h in 0..s.n_head_kv {
                let at = h * rows + r;
                kestrel_quant::f32_to_f16_row(
                    &kt[h * hd_k..(h + 1) * hd_k],
                    &mut kc[at * hd_k..(at + 1) * hd_k],
                );
                kestrel_quant::f32_to_f16_row(
                    &vt[h * hd_v..(h + 1) * hd_v],
                    &mut vc[at * hd_v..(at + 1) * hd_v],
                );
            }
        }
    }

    /// What attention reads of layer `l` for the query rows `q` (of the
    /// tokens from position `pos0` on): its rows, their layout, and the
    /// cells and ring of llama.cpp's cache.
    #[inline(always)]
    pub(crate) fn attn_item<'a>(
        &'a self,
        l: usize,
        s: &AttnShape,
        q: &'a [f32],
        pos0: usize,
        n_tok: usize,
    ) -> AttnItem<'a> {
        let ring = self.ring(l);
        AttnItem {
            q,
            kc: self.store.k(l),
            vc: self.store.v(l),
            lay: KvLayout::head_major(s, self.rows(l)),
            pos0,
            n_tok,
            // llama.cpp rounds its context up to 256 cells; a
            // window's ring has its own.
            kv_cells: if ring > 0 {
                ring
            } else {
                self.n_ctx.next_multiple_of(256)
            },
            ring,
        }
    }
}

/// The cells of llama.cpp's sliding-window cache for a context of `n_ctx`
/// (`llama_kv_cache_iswa`: the window plus a micro-batch, at most the
/// context rounded up to 256, itself rounded up to 256), where that is
/// fewer than the context's: else 0 (positions never wrap).
pub fn swa_ring(hp: &HParams, n_ctx: usize) -> usize {
    if hp.sliding_window == 0 || !hp.swa_layers.iter().any(|&w| w) {
        return 0;
    }
    let cells = n_ctx.next_multiple_of(256);
    let ring = cells
        .min(hp.sliding_window + N_UBATCH)
        .next_multiple_of(256);
    if ring < cells {
        ring
    } else {
        0
    }
}
