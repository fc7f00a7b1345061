//! The CPU backend: binds a model's memory-mapped tensors (validated against
//! its hyperparameters) and runs the forward pass — batched prefill and
//! one-token decode over an f16 KV cache.
//!
//! This module owns the binding and the passes' entry points (micro-batches,
//! the pool a pass runs on); the pass itself, block by block, is in
//! `forward`, the cache in `kv_cache`, attention in [`attention`].

pub mod attention;
mod fork;
mod forward;
mod kv_cache;
pub mod matmul;
pub mod ops;
mod profile;

use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use kestrel_gguf::{GgmlType, GgufFile, TensorInfo};
use kestrel_model::ModelSpec;
use kestrel_quant::dequantize_row;
pub use kv_cache::{swa_ring, KvCache};
use matmul::{quantize_rows, run_products, MatRef, Product};
use profile::Profiler;
pub use profile::{Profile, ProfileEntry};

/// Why a model's tensors could not be bound.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("missing tensor '{0}'")]
    Missing(String),
    #[error("tensor '{name}' has shape {got:?}, expected {want:?}")]
    Shape {
        name: String,
        got: Vec<u64>,
        want: Vec<u64>,
    },
    #[error("tensor '{name}' has type {ty}, which cannot be used there")]
    Type { name: String, ty: GgmlType },
    #[error("cannot start {0} worker threads: {1}")]
    Threads(usize, String),
}

/// Where a weight matrix lives in the file.
#[derive(Clone, Debug)]
struct Weight {
    info: TensorInfo,
    rows: usize,
    cols: usize,
}

struct Layer {
    attn_norm: Vec<f32>,
    wq: Option<Weight>,
    wk: Option<Weight>,
    wv: Option<Weight>,
    wqkv: Option<Weight>,
    bq: Option<Vec<f32>>,
    bk: Option<Vec<f32>>,
    bv: Option<Vec<f32>>,
    wo: Weight,
    q_norm: Option<Vec<f32>>,
    k_norm: Option<Vec<f32>>,
    post_attn_norm: Option<Vec<f32>>,
    ffn_norm: Vec<f32>,
    ffn_gate: Option<Weight>,
    ffn_up: Weight,
    ffn_down: Weight,
    post_ffn_norm: Option<Vec<f32>>,
}

/// A model ready to run on the CPU. Weights stay in the mapped file.
pub struct CpuModel {
    file: Arc<GgufFile>,
    pub spec: ModelSpec,
    tok_embd: Weight,
    output_norm: Vec<f32>,
    output: Weight,
    layers: Vec<Layer>,
    /// Persistent workers (rayon: they spin briefly, then sleep), one per
    /// thread asked for; every parallel op runs on them.
    pool: rayon::ThreadPool,
    /// The workers' relative speeds, for cutting products' bands.
    balance: matmul::Balance,
    /// The last pass's logits buffer, taken by the next pass: at four
    /// sequences a fresh one cost zeroing 0.8 MB (SmolLM2's vocabulary) and
    /// the split into one vector a sequence copying it again, 0.2-0.3 ms a
    /// step on the leading worker while the others waited.
    logits: Mutex<Vec<f32>>,
    profiler: Profiler,
}

/// llama.cpp's default micro-batch (`n_ubatch`): its sliding-window cache
/// holds the window plus one micro-batch.
pub const N_UBATCH: usize = 512;

/// One sequence's part of a batched forward pass: its new tokens, the
/// position of the first, its cache and which logits it wants.
pub struct SeqInput<'a> {
    pub tokens: &'a [u32],
    pub pos0: usize,
    pub cache: &'a mut KvCache,
    pub logits: Logits,
}

/// Which logits a forward pass returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Logits {
    Last,
    All,
}

struct Binder<'a> {
    f: &'a GgufFile,
}

impl Binder<'_> {
    fn info(&self, name: &str) -> Option<&TensorInfo> {
        self.f.tensor(name)
    }

    fn check(&self, name: &str, want: &[usize]) -> Result<TensorInfo, LoadError> {
        let t = self
            .info(name)
            .ok_or_else(|| LoadError::Missing(name.into()))?;
        let want64: Vec<u64> = want.iter().map(|&d| d as u64).collect();
        if t.dims != want64 {
            return Err(LoadError::Shape {
                name: name.into(),
                got: t.dims.clone(),
                want: want64,
            });
        }
        Ok(t.clone())
    }

    fn matrix(&self, name: &str, cols: usize, rows: usize) -> Result<Weight, LoadError> {
        let info = self.check(name, &[cols, rows])?;
        if matches!(info.ty, GgmlType::Q8_1 | GgmlType::Q8_K) {
            return Err(LoadError::Type {
                name: name.into(),
                ty: info.ty,
            });
        }
        // K-quant activations come in 256-element blocks, and so must the rows.
        if !cols.is_multiple_of(kestrel_quant::vec_dot_type(info.ty).block_size()) {
            return Err(LoadError::Type {
                name: name.into(),
                ty: info.ty,
            });
        }
        Ok(Weight { info, rows, cols })
    }

    fn opt_matrix(
        &self,
        name: &str,
        cols: usize,
        rows: usize,
    ) -> Result<Option<Weight>, LoadError> {
        if self.info(name).is_none() {
            return Ok(None);
        }
        self.matrix(name, cols, rows).map(Some)
    }

    fn vector(&self, name: &str, n: usize) -> Result<Vec<f32>, LoadError> {
        let info = self.check(name, &[n])?;
        if matches!(info.ty, GgmlType::Q8_1 | GgmlType::Q8_K)
            || !n.is_multiple_of(info.ty.block_size())
        {
            return Err(LoadError::Type {
                name: name.into(),
                ty: info.ty,
            });
        }
        let mut out = vec![0f32; n];
        dequantize_row(info.ty, self.f.tensor_data(&info), &mut out);
        Ok(out)
    }

    fn opt_vector(&self, name: &str, n: usize) -> Result<Option<Vec<f32>>, LoadError> {
        if self.info(name).is_none() {
            return Ok(None);
        }
        self.vector(name, n).map(Some)
    }
}

impl CpuModel {
    /// Binds and validates every tensor the architecture needs.
    pub fn load(
        file: Arc<GgufFile>,
        spec: ModelSpec,
        threads: usize,
    ) -> Result<CpuModel, LoadError> {
        let b = Binder { f: &file };
        let hp = &spec.hparams;
        let blk = &spec.block;
        let (e, nv) = (hp.n_embd, hp.n_vocab);
        let q_dim = hp.n_head * hp.head_dim_k;
        let k_dim = hp.n_head_kv * hp.head_dim_k;
        let v_dim = hp.n_head_kv * hp.head_dim_v;
        let o_in = hp.n_head * hp.head_dim_v;
        let tok_embd = b.matrix("token_embd.weight", e, nv)?;
        let output_norm = b.vector("output_norm.weight", e)?;
        let output = match b.opt_matrix("output.weight", e, nv)? {
            Some(w) => w,
            None => tok_embd.clone(),
        };
        let mut layers = Vec::with_capacity(hp.n_layer);
        for il in 0..hp.n_layer {
            let n = |s: &str| format!("blk.{il}.{s}");
            let (wq, wk, wv, wqkv) = if blk.fused_qkv {
                (
                    None,
                    None,
                    None,
                    Some(b.matrix(&n("attn_qkv.weight"), e, q_dim + k_dim + v_dim)?),
                )
            } else {
                (
                    Some(b.matrix(&n("attn_q.weight"), e, q_dim)?),
                    Some(b.matrix(&n("attn_k.weight"), e, k_dim)?),
                    Some(b.matrix(&n("attn_v.weight"), e, v_dim)?),
                    None,
                )
            };
            let (bq, bk, bv) = if blk.qkv_bias {
                (
                    Some(b.vector(&n("attn_q.bias"), q_dim)?),
                    Some(b.vector(&n("attn_k.bias"), k_dim)?),
                    Some(b.vector(&n("attn_v.bias"), v_dim)?),
                )
            } else {
                (
                    b.opt_vector(&n("attn_q.bias"), q_dim)?,
                    b.opt_vector(&n("attn_k.bias"), k_dim)?,
                    b.opt_vector(&n("attn_v.bias"), v_dim)?,
                )
            };
            let (q_norm, k_norm) = if blk.qk_norm {
                (
                    Some(b.vector(&n("attn_q_norm.weight"), hp.head_dim_k)?),
                    Some(b.vector(&n("attn_k_norm.weight"), hp.head_dim_k)?),
                )
            } else {
                (None, None)
            };
            let (post_attn_norm, post_ffn_norm) = if blk.post_norms {
                (
                    Some(b.vector(&n("post_attention_norm.weight"), e)?),
                    Some(b.vector(&n("post_ffw_norm.weight"), e)?),
                )
            } else {
                (None, None)
            };
            let (ffn_gate, ffn_up) = if blk.fused_gate_up {
                (None, b.matrix(&n("ffn_up.weight"), e, 2 * hp.n_ff)?)
            } else {
                (
                    Some(b.matrix(&n("ffn_gate.weight"), e, hp.n_ff)?),
                    b.matrix(&n("ffn_up.weight"), e, hp.n_ff)?,
                )
            };
            layers.push(Layer {
                attn_norm: b.vector(&n("attn_norm.weight"), e)?,
                wq,
                wk,
                wv,
                wqkv,
                bq,
                bk,
                bv,
                wo: b.matrix(&n("attn_output.weight"), o_in, e)?,
                q_norm,
                k_norm,
                post_attn_norm,
                ffn_norm: b.vector(&n("ffn_norm.weight"), e)?,
                ffn_gate,
                ffn_up,
                ffn_down: b.matrix(&n("ffn_down.weight"), hp.n_ff, e)?,
                post_ffn_norm,
            });
        }
        Ok(CpuModel {
            file: file.clone(),
            spec,
            tok_embd,
            output_norm,
            output,
            layers,
            pool: rayon::ThreadPoolBuilder::new()
                .num_threads(threads.max(1))
                .thread_name(|i| format!("kestrel-cpu-{i}"))
                .build()
                .map_err(|e| LoadError::Threads(threads.max(1), e.to_string()))?,
            balance: matmul::Balance::new(threads.max(1)),
            logits: Mutex::new(Vec::new()),
            profiler: Profiler::default(),
        })
    }

    pub fn threads(&self) -> usize {
        self.pool.current_num_threads()
    }

    /// Bytes of all tensors in the file (token embeddings included, which a
    /// decode step only gathers a row of unless they double as the output).
    pub fn weight_bytes(&self) -> u64 {
        self.file.tensors().iter().map(|t| t.n_bytes).sum()
    }

    pub fn new_cache(&self, n_ctx: usize) -> KvCache {
        KvCache::new(&self.spec.hparams, n_ctx)
    }

    fn mat(&self, w: &Weight) -> MatRef<'_> {
        MatRef {
            ty: w.info.ty,
            rows: w.rows,
            cols: w.cols,
            data: self.file.tensor_data(&w.info),
        }
    }

    fn mm(&self, w: &Weight, x: &[f32], seqs: &[Range<usize>]) -> Vec<f32> {
        let [out] = self.mm_shared([w], x, seqs);
        out
    }

    /// Starts or stops collecting per-op times (see [`CpuModel::take_profile`]).
    pub fn set_profiling(&self, on: bool) {
        self.profiler.set(on);
    }

    /// The times collected since the last call, by kernel class.
    pub fn take_profile(&self) -> Profile {
        self.profiler.take()
    }

    /// Products of several weights with the same input; the input is
    /// quantized once per activation type rather than once per weight.
    fn mm_shared<const N: usize>(
        &self,
        ws: [&Weight; N],
        x: &[f32],
        seqs: &[Range<usize>],
    ) -> [Vec<f32>; N] {
        let n_tok = seqs.last().map_or(0, |s| s.end);
        let mut outs = ws.map(|w| vec![0f32; n_tok * w.rows]);
        self.mm_shared_into(ws, x, seqs, outs.each_mut().map(|o| o.as_mut_slice()));
        outs
    }

    /// [`CpuModel::mm_shared`] into the given outputs ([tok][row] each).
    fn mm_shared_into<const N: usize>(
        &self,
        ws: [&Weight; N],
        x: &[f32],
        seqs: &[Range<usize>],
        mut outs: [&mut [f32]; N],
    ) {
        let t0 = self.profiler.tick();
        let mut cache: Vec<(GgmlType, Vec<Vec<u8>>)> = Vec::new();
        for w in ws {
            let ty = kestrel_quant::vec_dot_type(w.info.ty);
            if !cache.iter().any(|(t, _)| *t == ty) {
                cache.push((ty, quantize_rows(w.info.ty, x, w.cols)));
            }
        }
        self.profiler.tock(t0, "quantize activations", 0);
        let t0 = self.profiler.tick();
        let products = ws
            .iter()
            .zip(outs.iter_mut())
            .map(|(w, out)| {
                let ty = kestrel_quant::vec_dot_type(w.info.ty);
                let acts = &cache.iter().find(|(t, _)| *t == ty).expect("cached").1;
                Product {
                    w: self.mat(w),
                    acts,
                    seqs,
                    out,
                }
            })
            .collect();
        run_products(products, &self.pool, Some(&self.balance));
        if t0.is_some() {
            let mut types: Vec<String> = ws.iter().map(|w| w.info.ty.to_string()).collect();
            types.dedup();
            let bytes = ws.iter().map(|w| self.mat(w).data.len() as u64).sum();
            self.profiler
                .tock(t0, &format!("matmul {}", types.join("+")), bytes);
        }
    }

    /// Runs `tokens` at positions `pos0..`, appending their keys and values to
    /// the cache, and returns logits (of the last token, or of every token).
    /// The caller passes at least one token, keeps `pos0 + tokens.len() <= cache.n_ctx()`
    /// and ids below `n_vocab` (the engine checks all three).
    ///
    /// More than [`N_UBATCH`] tokens go as passes of that many, as
    /// llama.cpp's `llama_decode` cuts a batch into micro-batches: a row's
    /// kernels depend on its pass (a last pass of under 64 rows takes the
    /// one-query attention, which accumulates in f16, where one pass of
    /// them all would take the tiled one; under 8 rows, the k-quants' row
    /// kernels instead of the tiled ones), and so do its bits (a 533-token
    /// prompt on SmolLM2: top logit 28.285219 in one pass, 28.478569 from
    /// llama.cpp and from 512 + 21).
    pub fn forward(
        &self,
        tokens: &[u32],
        pos0: usize,
        cache: &mut KvCache,
        which: Logits,
    ) -> Vec<f32> {
        let mut out = Vec::new();
        let parts = tokens.len().div_ceil(N_UBATCH);
        for (i, part) in tokens.chunks(N_UBATCH).enumerate() {
            let mut seqs = [SeqInput {
                tokens: part,
                pos0: pos0 + i * N_UBATCH,
                cache: &mut *cache,
                logits: which,
            }];
            let logits = self.forward_batch(&mut seqs).pop().expect("one sequence");
            // An earlier pass's last row is not wanted with `Last` (its
            // logits cost one product row; llama.cpp skips them).
            if matches!(which, Logits::All) || i + 1 == parts {
                out.extend(logits);
            }
        }
        out
    }

    /// One pass over several sequences, each with its own cache: every
    /// weight product runs once over all their tokens (each weight row is
    /// read once per step however many sequences decode), attention runs per
    /// sequence. Returns each sequence's logits, in order. A row's result
    /// does not depend on the other rows of the batch: the products treat
    /// token rows independently and attention never mixes sequences, so a
    /// sequence gets the same bits batched as alone. The caller keeps every
    /// sequence non-empty and within its cache, as for [`CpuModel::forward`].
    pub fn forward_batch(&self, seqs: &mut [SeqInput<'_>]) -> Vec<Vec<f32>> {
        self.pass(seqs, |_, buf, spans| {
            // One sequence owns the whole buffer: it is the result (a copy
            // was 0.6-1 MB a step at Qwen2.5's and Gemma-3's vocabularies).
            if spans.len() == 1 && spans[0] == (0..buf.len()) {
                return vec![buf];
            }
            spans.iter().map(|r| buf[r.clone()].to_vec()).collect()
        })
    }

    /// [`CpuModel::forward_batch`], then `each(i, logits)` for every
    /// sequence `i`, in parallel on the pool within the same hand-off, and
    /// the results in order. A server's sampling goes here: after the pass
    /// returned it ran on the calling thread, one sequence after another,
    /// with the workers idle (`kestrel serve`, four streams: about 180 us
    /// from one pass's end to the next one's start, 70-78 with the draws in
    /// here, which two workers share).
    pub fn forward_batch_map<R, F>(&self, seqs: &mut [SeqInput<'_>], each: F) -> Vec<R>
    where
        R: Send,
        F: Fn(usize, &[f32]) -> R + Sync,
    {
        self.pass(seqs, |model, buf, spans| {
            let mut results: Vec<Option<R>> = spans.iter().map(|_| None).collect();
            let (each, logits) = (&each, &buf);
            fork::scope(&model.pool, |s| {
                for ((i, r), slot) in spans.iter().enumerate().zip(&mut results) {
                    s.spawn(move || *slot = Some(each(i, &logits[r.clone()])));
                }
            });
            // Kept for the next pass, unless a prompt's every row made it
            // large.
            if buf.capacity() <= KEEP_LOGITS {
                *model.logits.lock().unwrap_or_else(|e| e.into_inner()) = buf;
            }
            results
                .into_iter()
                .map(|r| r.expect("every sequence's job ran"))
                .collect()
        })
    }

    /// One pass over `seqs` on the pool (see [`CpuModel::forward_batch_map`]
    /// for why its leader is a worker), then `finish(self, logits, spans)`
    /// on the leader while the other workers still spin: the logits of
    /// every wanted row in one buffer, and each sequence's part of it.
    fn pass<R: Send>(
        &self,
        seqs: &mut [SeqInput<'_>],
        finish: impl FnOnce(&CpuModel, Vec<f32>, Vec<Range<usize>>) -> R + Send,
    ) -> R {
        // The whole pass runs on a pool worker: its parallel ops then split
        // work in place (the other workers steal it) instead of waking a
        // worker and putting this thread to sleep for every op. Always the
        // same worker: the pass's buffers then come from one thread's
        // malloc arena, where a pass led by whichever worker took it left
        // each worker's arena holding a pass's peak (SmolLM2 pp512 peak
        // RSS 147 or 164 MB from run to run). That is the first worker, or
        // the caller when it is one of this pool's workers (see
        // [`CpuModel::install`]): it leads without waiting for a hand-off.
        let leader = self.pool.current_thread_index().unwrap_or(0);
        let done = AtomicBool::new(false);
        let seqs = Mutex::new(seqs);
        let finish = Mutex::new(Some(finish));
        let mut led = self.pool.broadcast(|ctx| {
            if ctx.index() == leader {
                // Set on the way out, by unwinding too: the broadcast waits
                // for the spinners, which wait for this.
                let _finish = SetOnDrop(&done);
                let mut seqs = seqs.lock().unwrap_or_else(|e| e.into_inner());
                let (buf, spans) = self.forward_dispatch(&mut seqs);
                let finish = finish.lock().unwrap_or_else(|e| e.into_inner()).take();
                Some(finish.expect("one leader")(self, buf, spans))
            } else {
                keep_warm(&done);
                None
            }
        });
        led.swap_remove(leader)
            .expect("the leading worker returns the pass")
    }

    /// Runs `f` on a worker of the model's pool. A caller that runs its
    /// passes from there (the engine's CPU backend worker, while steps keep
    /// coming) starts each pass at once; from another thread a pass waits
    /// for a sleeping worker to wake and take it. `f` must not block for
    /// long: the pass of any other caller needs that worker too.
    pub fn install<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        self.pool.install(f)
    }
}

/// Most logits (floats) a model keeps between passes: decode steps of
/// several sequences at a large vocabulary (16 MB).
const KEEP_LOGITS: usize = 1 << 22;

/// Sets its flag when dropped.
struct SetOnDrop<'a>(&'a AtomicBool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// Keeps a pool worker spinning, and taking the pass's parallel work as it
/// appears, until the pass is `done`: between two ops a parked worker cost
/// a futex wake-up per op (~12% of a SmolLM2 decode step went to the
/// scheduler), where ggml's workers spin through a graph.
fn keep_warm(done: &AtomicBool) {
    fork::wait_until(|| done.load(Ordering::Acquire));
}
