//! A model's forward pass on the GPU with token selection on the device:
//! the token at `pos` is read from the sequence's history buffer by the
//! embedding lookup, and the chosen next token is written back into it at
//! `pos + 1`, so a decode step needs nothing from the host but its
//! position. A step carries one sequence or several
//! ([`GpuModel::step_batch`]); a prompt goes in chunks of positions
//! ([`GpuModel::prefill`]); either way each row gets the bits it gets alone.
//!
//! Covers the llama, mistral, qwen2, qwen3 and gemma3 blocks (biases, q/k
//! norms, post norms, scaled embeddings, sliding windows, softcap); fused
//! q/k/v or gate/up tensors (phi3) are refused by name.
//!
//! A step is recorded into one command encoder and submitted once; the
//! chosen token comes back through a 4-byte copy in that same submission,
//! which the host maps after submitting the next step (see
//! [`GpuModel::step_async`]), so the device runs steps back to back.
//!
//! A step may also be held ([`GpuModel::step_batch_held`]): its forward
//! pass is submitted and its logits stay on the device until the host
//! says how each sequence's token is chosen ([`GpuModel::finish_held`]:
//! the sampler, the sampler over a mask of allowed tokens, or a token the
//! host forces). A grammar's mask depends on the previous token, which the
//! host reads one step late; holding lets the next forward pass run while
//! the host computes it.
//!
//! Not yet: prompt chunks wider than [`MAX_SEQS`] positions, or attention
//! for a chunk's queries in one dispatch.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use kestrel_gguf::{GgmlType, GgufFile, TensorInfo};
use kestrel_model::rope::rope_cache;
use kestrel_model::{Activation, ModelSpec, RopeStyle};

use crate::attention::{Attention, Shape};
use crate::embed::Embed;
use crate::matvec::{GpuMatrix, MatVec};
use crate::norm::RmsNorm;
use crate::ops::{Glu, Ops};
use crate::sample::Sampler;
use crate::{Gpu, GpuError};
use kestrel_sampling::SamplerParams;

struct Layer {
    attn_norm: wgpu::Buffer,
    wq: GpuMatrix,
    wk: GpuMatrix,
    wv: GpuMatrix,
    bias: Option<[wgpu::Buffer; 3]>,
    qk_norm: Option<[wgpu::Buffer; 2]>,
    wo: GpuMatrix,
    post_attn_norm: Option<wgpu::Buffer>,
    ffn_norm: wgpu::Buffer,
    gate: GpuMatrix,
    up: GpuMatrix,
    down: GpuMatrix,
    post_ffn_norm: Option<wgpu::Buffer>,
}

/// Sequences one step can carry ([`GpuModel::step_batch`]).
pub const MAX_SEQS: usize = 8;

/// Activations of a step, [`MAX_SEQS`] rows each (row i is sequence i of
/// the batch), reused by every step; `row` holds one row where a kernel
/// works on one sequence (attention, the KV store, the sampler) and the
/// row is not the first.
struct Scratch {
    x: wgpu::Buffer,
    h: wgpu::Buffer,
    q: wgpu::Buffer,
    k: wgpu::Buffer,
    v: wgpu::Buffer,
    attn: wgpu::Buffer,
    o: wgpu::Buffer,
    gate: wgpu::Buffer,
    up: wgpu::Buffer,
    act: wgpu::Buffer,
    logits: wgpu::Buffer,
    pos: wgpu::Buffer,
    scores: wgpu::Buffer,
    row: RowScratch,
}

struct RowScratch {
    x: wgpu::Buffer,
    q: wgpu::Buffer,
    k: wgpu::Buffer,
    v: wgpu::Buffer,
    attn: wgpu::Buffer,
    logits: wgpu::Buffer,
}

/// Row `i` (of `n` f32 values) of `batch`, for a kernel that works on one
/// row at offset 0: row 0 is the batch buffer itself, another row is
/// copied into `row` first.
fn take_row<'b>(
    gpu: &Gpu,
    batch: &'b wgpu::Buffer,
    row: &'b wgpu::Buffer,
    i: usize,
    n: usize,
) -> &'b wgpu::Buffer {
    if i == 0 {
        return batch;
    }
    gpu.copy((batch, (i * n * 4) as u64), (row, 0), (n * 4) as u64);
    row
}

/// Puts `row` back as row `i` of `batch` (nothing to do for row 0, which
/// a kernel wrote in place).
fn put_row(gpu: &Gpu, row: &wgpu::Buffer, batch: &wgpu::Buffer, i: usize, n: usize) {
    if i > 0 {
        gpu.copy((row, 0), (batch, (i * n * 4) as u64), (n * 4) as u64);
    }
}

/// What a step computes after the layers.
#[derive(Clone, Copy)]
enum Output<'p> {
    /// Only the KV cache (a prompt token whose successor is known).
    Nothing,
    /// The logits.
    Logits,
    /// The logits and the next token, into the history (parameters per
    /// sequence).
    Sample(&'p [SamplerParams]),
}

/// The token a submitted step chose, on its way back to the host.
pub struct PendingToken {
    staging: wgpu::Buffer,
}

impl PendingToken {
    /// Waits for the step and returns the token.
    pub fn wait(self, gpu: &Gpu) -> Result<u32, GpuError> {
        Ok(gpu.map_read(&self.staging, 1)?[0].to_bits())
    }
}

/// How [`GpuModel::finish_held`] chooses one sequence's token.
#[derive(Clone, Copy, Debug)]
pub enum TokenChoice<'a> {
    /// The sampler, with the sequence's parameters (as
    /// [`GpuModel::step_batch`] chooses).
    Sample,
    /// The sampler over the allowed tokens only: bit `t % 32` of word
    /// `t / 32` set = token `t` allowed, `n_vocab.div_ceil(32)` words.
    /// Every other logit is `-inf` before the whole chain (before logit
    /// bias and penalties); nothing allowed gives token 0.
    Masked(&'a [u32]),
    /// This token, without sampling: the generator does not advance.
    Forced(u32),
}

/// A step whose forward pass is submitted and whose tokens are not chosen
/// yet ([`GpuModel::step_batch_held`]); its logits wait on the device.
pub struct HeldStep {
    /// Each sequence's history and generator buffers, and its position.
    seqs: Vec<(wgpu::Buffer, wgpu::Buffer, usize)>,
    params: Vec<SamplerParams>,
    /// The model's count of logit passes when this one was recorded.
    pass: u64,
}

/// A sequence's state on the device: its token history, KV cache and
/// sampler generator state.
pub struct GpuSeq {
    pub history: wgpu::Buffer,
    /// The xorshift state the sampler draws from and advances.
    pub rng: wgpu::Buffer,
    kc: Vec<wgpu::Buffer>,
    vc: Vec<wgpu::Buffer>,
    n_ctx: usize,
}

pub struct GpuModel {
    pub gpu: Gpu,
    pub spec: ModelSpec,
    tok_embd: GpuMatrix,
    /// `None`: the output shares the token embeddings.
    output: Option<GpuMatrix>,
    output_norm: wgpu::Buffer,
    layers: Vec<Layer>,
    rope: wgpu::Buffer,
    rope_swa: wgpu::Buffer,
    n_ctx: usize,
    matvec: HashMap<GgmlType, MatVec>,
    embed: Embed,
    norm: RmsNorm,
    ops: Ops,
    attention: Attention,
    /// Behind a lock: the sampler grows its scratch on first use.
    sampler: std::sync::Mutex<Sampler>,
    /// Forward passes recorded that compute logits: a held step's logits
    /// are still there only while this has not moved on.
    logit_passes: AtomicU64,
    s: Scratch,
}

fn tensor<'f>(f: &'f GgufFile, name: &str) -> Result<&'f TensorInfo, GpuError> {
    f.tensor(name)
        .ok_or_else(|| GpuError::Shape(format!("missing tensor '{name}'")))
}

fn matrix(
    gpu: &Gpu,
    f: &GgufFile,
    name: &str,
    cols: usize,
    rows: usize,
) -> Result<GpuMatrix, GpuError> {
    let t = tensor(f, name)?;
    if t.dims != [cols as u64, rows as u64] {
        return Err(GpuError::Shape(format!(
            "tensor '{name}' has shape {:?}, expected [{cols}, {rows}]",
            t.dims
        )));
    }
    gpu.upload_matrix(name, t.ty, rows, cols, f.tensor_data(t))
}

fn vector(gpu: &Gpu, f: &GgufFile, name: &str, n: usize) -> Result<wgpu::Buffer, GpuError> {
    let t = tensor(f, name)?;
    if t.dims != [n as u64] {
        return Err(GpuError::Shape(format!(
            "tensor '{name}' has shape {:?}, expected [{n}]",
            t.dims
        )));
    }
    if t.ty.block_size() > 1 && !n.is_multiple_of(t.ty.block_size()) {
        return Err(GpuError::Unsupported(t.ty));
    }
    let mut v = vec![0f32; n];
    kestrel_quant::dequantize_row(t.ty, f.tensor_data(t), &mut v);
    gpu.upload_f32(name, &v)
}

fn opt_vector(
    gpu: &Gpu,
    f: &GgufFile,
    name: &str,
    n: usize,
) -> Result<Option<wgpu::Buffer>, GpuError> {
    if f.tensor(name).is_none() {
        return Ok(None);
    }
    vector(gpu, f, name, n).map(Some)
}

/// `rope_cache` of every position below `n_ctx`, one row per position.
fn rope_table(n_ctx: usize, n_rot: usize, base: f32, freq_scale: f32) -> Vec<f32> {
    let mut out = Vec::with_capacity(n_ctx * n_rot);
    let mut row = Vec::new();
    for pos in 0..n_ctx {
        rope_cache(pos, n_rot, base, freq_scale, &mut row);
        out.extend_from_slice(&row);
    }
    out
}

impl GpuModel {
    /// Uploads the model for contexts of up to `n_ctx` tokens.
    pub fn load(
        gpu: Gpu,
        file: Arc<GgufFile>,
        spec: ModelSpec,
        n_ctx: usize,
    ) -> Result<GpuModel, GpuError> {
        let f = &*file;
        let hp = &spec.hparams;
        let blk = &spec.block;
        if blk.fused_qkv || blk.fused_gate_up {
            return Err(GpuError::Shape(format!(
                "{:?}: fused q/k/v or gate/up tensors are not supported on the GPU yet",
                spec.arch
            )));
        }
        let e = hp.n_embd;
        let (q_dim, kv_k, kv_v) = (
            hp.n_head * hp.head_dim_k,
            hp.n_head_kv * hp.head_dim_k,
            hp.n_head_kv * hp.head_dim_v,
        );
        let o_in = hp.n_head * hp.head_dim_v;
        let tok_embd = matrix(&gpu, f, "token_embd.weight", e, hp.n_vocab)?;
        let output = match f.tensor("output.weight") {
            Some(_) => Some(matrix(&gpu, f, "output.weight", e, hp.n_vocab)?),
            None => None,
        };
        let mut layers = Vec::with_capacity(hp.n_layer);
        for il in 0..hp.n_layer {
            let n = |s: &str| format!("blk.{il}.{s}");
            let bias = if blk.qkv_bias {
                Some([
                    vector(&gpu, f, &n("attn_q.bias"), q_dim)?,
                    vector(&gpu, f, &n("attn_k.bias"), kv_k)?,
                    vector(&gpu, f, &n("attn_v.bias"), kv_v)?,
                ])
            } else {
                None
            };
            let qk_norm = if blk.qk_norm {
                Some([
                    vector(&gpu, f, &n("attn_q_norm.weight"), hp.head_dim_k)?,
                    vector(&gpu, f, &n("attn_k_norm.weight"), hp.head_dim_k)?,
                ])
            } else {
                None
            };
            let (post_attn_norm, post_ffn_norm) = if blk.post_norms {
                (
                    opt_vector(&gpu, f, &n("post_attention_norm.weight"), e)?,
                    opt_vector(&gpu, f, &n("post_ffw_norm.weight"), e)?,
                )
            } else {
                (None, None)
            };
            layers.push(Layer {
                attn_norm: vector(&gpu, f, &n("attn_norm.weight"), e)?,
                wq: matrix(&gpu, f, &n("attn_q.weight"), e, q_dim)?,
                wk: matrix(&gpu, f, &n("attn_k.weight"), e, kv_k)?,
                wv: matrix(&gpu, f, &n("attn_v.weight"), e, kv_v)?,
                bias,
                qk_norm,
                wo: matrix(&gpu, f, &n("attn_output.weight"), o_in, e)?,
                post_attn_norm,
                ffn_norm: vector(&gpu, f, &n("ffn_norm.weight"), e)?,
                gate: matrix(&gpu, f, &n("ffn_gate.weight"), e, hp.n_ff)?,
                up: matrix(&gpu, f, &n("ffn_up.weight"), e, hp.n_ff)?,
                down: matrix(&gpu, f, &n("ffn_down.weight"), hp.n_ff, e)?,
                post_ffn_norm,
            });
        }
        let all: Vec<&GpuMatrix> = layers
            .iter()
            .flat_map(|l| [&l.wq, &l.wk, &l.wv, &l.wo, &l.gate, &l.up, &l.down])
            .chain(output.iter())
            .chain([&tok_embd])
            .collect();
        // One product per weight type, its activation scratch sized for the
        // widest matrix of that type.
        let mut widest: HashMap<GgmlType, usize> = HashMap::new();
        for m in &all {
            let w = widest.entry(m.ty).or_default();
            *w = (*w).max(m.cols);
        }
        let mut matvec = HashMap::new();
        for (ty, cols) in widest {
            matvec.insert(ty, MatVec::new(&gpu, ty, cols)?);
        }
        let rope = gpu.upload_f32(
            "rope",
            &rope_table(n_ctx, hp.n_rot, hp.rope_base, hp.rope_freq_scale),
        )?;
        let rope_swa = gpu.upload_f32(
            "rope swa",
            &rope_table(n_ctx, hp.n_rot, hp.rope_base_swa, 1.0),
        )?;
        let b = MAX_SEQS;
        let s = Scratch {
            x: gpu.scratch_f32("x", b * e),
            h: gpu.scratch_f32("h", b * e),
            q: gpu.scratch_f32("q", b * q_dim),
            k: gpu.scratch_f32("k", b * kv_k),
            v: gpu.scratch_f32("v", b * kv_v),
            attn: gpu.scratch_f32("attn", b * o_in.max(q_dim)),
            o: gpu.scratch_f32("o", b * e),
            gate: gpu.scratch_f32("gate", b * hp.n_ff),
            up: gpu.scratch_f32("up", b * hp.n_ff),
            act: gpu.scratch_f32("act", b * hp.n_ff),
            logits: gpu.scratch_f32("logits", b * hp.n_vocab),
            pos: gpu.scratch_f32("pos", b),
            scores: gpu.scratch_f32("scores", hp.n_head * n_ctx),
            row: RowScratch {
                x: gpu.scratch_f32("x row", e),
                q: gpu.scratch_f32("q row", q_dim),
                k: gpu.scratch_f32("k row", kv_k),
                v: gpu.scratch_f32("v row", kv_v),
                attn: gpu.scratch_f32("attn row", o_in),
                logits: gpu.scratch_f32("logits row", hp.n_vocab),
            },
        };
        Ok(GpuModel {
            embed: Embed::new(&gpu, tok_embd.ty)?,
            norm: RmsNorm::new(&gpu),
            ops: Ops::new(&gpu),
            attention: Attention::new(&gpu),
            sampler: std::sync::Mutex::new(Sampler::new(&gpu)),
            logit_passes: AtomicU64::new(0),
            tok_embd,
            output,
            output_norm: vector(&gpu, f, "output_norm.weight", e)?,
            layers,
            rope,
            rope_swa,
            n_ctx,
            matvec,
            s,
            gpu,
            spec,
        })
    }

    /// The longest context a sequence of this model holds.
    pub fn n_ctx(&self) -> usize {
        self.n_ctx
    }

    /// A sequence of up to the model's `n_ctx` tokens.
    pub fn new_seq(&self) -> GpuSeq {
        let hp = &self.spec.hparams;
        let cache = |w: usize, what: &str| {
            (0..hp.n_layer)
                .map(|_| self.gpu.scratch_f32(what, (self.n_ctx * w).div_ceil(2)))
                .collect()
        };
        GpuSeq {
            history: self.gpu.scratch_f32("history", self.n_ctx + 1),
            rng: self.gpu.scratch_f32("sampler state", 4),
            kc: cache(hp.n_head_kv * hp.head_dim_k, "k cache"),
            vc: cache(hp.n_head_kv * hp.head_dim_v, "v cache"),
            n_ctx: self.n_ctx,
        }
    }

    /// Sets the sequence's generator state (`kestrel_sampling::XorShift::
    /// state` of the seed); sampling with a temperature draws from it.
    pub fn set_rng(&self, seq: &GpuSeq, state: [u32; 4]) {
        self.gpu
            .queue
            .write_buffer(&seq.rng, 0, bytemuck::cast_slice(&state));
    }

    /// Puts `tokens` into the history from position `at`.
    pub fn write_tokens(&self, seq: &GpuSeq, at: usize, tokens: &[u32]) -> Result<(), GpuError> {
        if at + tokens.len() > seq.n_ctx + 1 {
            return Err(GpuError::Shape(format!(
                "{} tokens at {at} do not fit a context of {}",
                tokens.len(),
                seq.n_ctx
            )));
        }
        self.gpu
            .queue
            .write_buffer(&seq.history, (at * 4) as u64, bytemuck::cast_slice(tokens));
        Ok(())
    }

    /// The history entry at `pos` (waits for the device).
    pub fn read_token(&self, seq: &GpuSeq, pos: usize) -> Result<u32, GpuError> {
        Ok(self.gpu.read_u32(&seq.history, pos + 1)?[pos])
    }

    /// The logits of the last step that computed them.
    pub fn read_logits(&self) -> Result<Vec<f32>, GpuError> {
        self.gpu.read_f32(&self.s.logits, self.spec.hparams.n_vocab)
    }

    /// The logits of the first `n` sequences of the last batched step, one
    /// row each.
    pub fn read_batch_logits(&self, n: usize) -> Result<Vec<f32>, GpuError> {
        self.gpu
            .read_f32(&self.s.logits, n.min(MAX_SEQS) * self.spec.hparams.n_vocab)
    }

    /// `n` rows of x through `m`.
    fn mv(
        &self,
        m: &GpuMatrix,
        (x, y): (&wgpu::Buffer, &wgpu::Buffer),
        n: usize,
    ) -> Result<(), GpuError> {
        self.matvec[&m.ty].run_batch(&self.gpu, m, (x, y), n)
    }

    /// Runs the token at `history[pos]` through the model; with `sample`,
    /// computes the logits and writes the token the sampler chooses (the
    /// whole chain of `kestrel_sampling`, drawing from the sequence's
    /// generator) into `history[pos + 1]`. The whole step is one
    /// submission; this does not wait for it.
    pub fn step(
        &self,
        seq: &GpuSeq,
        pos: usize,
        sample: Option<&SamplerParams>,
    ) -> Result<(), GpuError> {
        self.gpu.begin_step();
        let r = self.record_step(seq, pos, sample);
        self.gpu.finish_step();
        r
    }

    /// Runs the tokens at `history[from..from + n]` through the model (only
    /// the KV cache is kept), up to [`MAX_SEQS`] positions per submission:
    /// the positions of a chunk share every weight read as the sequences
    /// of [`GpuModel::step_batch`] do, and each token's attention runs
    /// after its own keys are stored and sees no later ones, so the cache
    /// gets the bits one-token steps give it. Does not wait.
    pub fn prefill(&self, seq: &GpuSeq, from: usize, n: usize) -> Result<(), GpuError> {
        let mut pos = from;
        while pos < from + n {
            let take = (from + n - pos).min(MAX_SEQS);
            let batch: Vec<(&GpuSeq, usize)> = (pos..pos + take).map(|p| (seq, p)).collect();
            self.gpu.begin_step();
            let r = self.record(&batch, Output::Nothing);
            self.gpu.finish_step();
            r?;
            pos += take;
        }
        Ok(())
    }

    /// Runs the token at `history[pos]` through the model and computes the
    /// logits ([`GpuModel::read_logits`]) without choosing a token: the
    /// history is left as it is (scoring a known text, as perplexity does).
    pub fn step_logits(&self, seq: &GpuSeq, pos: usize) -> Result<(), GpuError> {
        self.gpu.begin_step();
        let r = self.record(&[(seq, pos)], Output::Logits);
        self.gpu.finish_step();
        r
    }

    /// One step of several sequences (up to [`MAX_SEQS`]), each at its own
    /// position, in one submission: the weights are read once for all
    /// (matrix-matrix products), attention runs per sequence against its
    /// own cache, and each sequence's token is chosen with its own
    /// parameters and generator and written into its history. Every
    /// sequence gets the bits it would get stepped alone. Returns each
    /// sequence's token on its way back, as [`GpuModel::step_async`].
    pub fn step_batch(
        &self,
        batch: &[(&GpuSeq, usize)],
        params: &[SamplerParams],
    ) -> Result<Vec<PendingToken>, GpuError> {
        check_batch(batch, params)?;
        let staging: Vec<wgpu::Buffer> = batch.iter().map(|_| self.token_staging()).collect();
        self.gpu.begin_step();
        let r = self.record(batch, Output::Sample(params));
        if r.is_ok() {
            for ((seq, pos), st) in batch.iter().zip(&staging) {
                self.gpu
                    .copy((&seq.history, ((pos + 1) * 4) as u64), (st, 0), 4);
            }
        }
        self.gpu.finish_step();
        r.map(|()| {
            staging
                .into_iter()
                .map(|staging| PendingToken { staging })
                .collect()
        })
    }

    /// [`GpuModel::step_batch`]'s forward pass, submitted, with the token
    /// choice left for [`GpuModel::finish_held`]: each sequence's logits
    /// stay on the device and nothing is written into the histories yet.
    /// No other step that computes logits (a step with sampling,
    /// [`GpuModel::step_logits`], another batch, held or not) may be
    /// submitted before the held one finishes (finishing then fails);
    /// [`GpuModel::prefill`] may, as it leaves the logits alone.
    pub fn step_batch_held(
        &self,
        batch: &[(&GpuSeq, usize)],
        params: &[SamplerParams],
    ) -> Result<HeldStep, GpuError> {
        check_batch(batch, params)?;
        self.gpu.begin_step();
        let r = self.record(batch, Output::Logits);
        self.gpu.finish_step();
        r?;
        Ok(HeldStep {
            seqs: batch
                .iter()
                .map(|&(seq, pos)| (seq.history.clone(), seq.rng.clone(), pos))
                .collect(),
            params: params.to_vec(),
            pass: self.logit_passes.load(Ordering::Relaxed),
        })
    }

    /// Chooses the tokens of a held step, one choice per sequence in the
    /// batch's order, in one submission: each goes into its history at
    /// `pos + 1` (where the next step reads it) and comes back as
    /// [`GpuModel::step_batch`]'s do. With [`TokenChoice::Sample`] for all,
    /// the tokens and generator states are [`GpuModel::step_batch`]'s bit
    /// for bit.
    pub fn finish_held(
        &self,
        held: HeldStep,
        choices: &[TokenChoice<'_>],
    ) -> Result<Vec<PendingToken>, GpuError> {
        let n_vocab = self.spec.hparams.n_vocab;
        if choices.len() != held.seqs.len() {
            return Err(GpuError::Shape(format!(
                "{} token choices for a held step of {} sequences",
                choices.len(),
                held.seqs.len()
            )));
        }
        if self.logit_passes.load(Ordering::Relaxed) != held.pass {
            return Err(GpuError::Shape(
                "another step computed logits after the held step: its logits are gone".into(),
            ));
        }
        let words = n_vocab.div_ceil(32);
        let mut masks = Vec::with_capacity(choices.len());
        let mut forced = vec![0u32; choices.len()];
        for (i, c) in choices.iter().enumerate() {
            masks.push(match *c {
                TokenChoice::Sample => None,
                TokenChoice::Masked(m) if m.len() == words => {
                    Some(self.gpu.upload_u32("token mask", m)?)
                }
                TokenChoice::Masked(m) => {
                    return Err(GpuError::Shape(format!(
                        "a token mask of {} words for {n_vocab} tokens (needs {words})",
                        m.len()
                    )))
                }
                TokenChoice::Forced(t) if (t as usize) < n_vocab => {
                    forced[i] = t;
                    None
                }
                TokenChoice::Forced(t) => {
                    return Err(GpuError::Shape(format!(
                        "forced token {t} is outside the vocabulary of {n_vocab}"
                    )))
                }
            });
        }
        let forced = self.gpu.upload_u32("forced tokens", &forced)?;
        let staging: Vec<wgpu::Buffer> = choices.iter().map(|_| self.token_staging()).collect();
        self.gpu.begin_step();
        let r = self.record_choices(&held, choices, (&masks, &forced), &staging);
        self.gpu.finish_step();
        r.map(|()| {
            staging
                .into_iter()
                .map(|staging| PendingToken { staging })
                .collect()
        })
    }

    /// Records [`GpuModel::finish_held`]'s choices: the sampler (with the
    /// uploaded mask where there is one) or word `i` of `forced` into each
    /// history, then each token's copy to its staging buffer.
    fn record_choices(
        &self,
        held: &HeldStep,
        choices: &[TokenChoice<'_>],
        (masks, forced): (&[Option<wgpu::Buffer>], &wgpu::Buffer),
        staging: &[wgpu::Buffer],
    ) -> Result<(), GpuError> {
        let g = &self.gpu;
        let mut sampler = self.sampler.lock().unwrap_or_else(|e| e.into_inner());
        for (i, ((history, rng, pos), p)) in held.seqs.iter().zip(&held.params).enumerate() {
            let next = ((pos + 1) * 4) as u64;
            if let TokenChoice::Forced(_) = choices[i] {
                g.copy((forced, (i * 4) as u64), (history, next), 4);
            } else {
                self.choose_token(&mut sampler, i, (history, rng), *pos, p, masks[i].as_ref())?;
            }
        }
        for ((history, _, pos), st) in held.seqs.iter().zip(staging) {
            g.copy((history, ((pos + 1) * 4) as u64), (st, 0), 4);
        }
        Ok(())
    }

    /// Runs the sampler on row `i` of the step's logits (with `mask`, over
    /// the tokens it allows) and writes the token to `history[pos + 1]`.
    fn choose_token(
        &self,
        sampler: &mut Sampler,
        i: usize,
        (history, rng): (&wgpu::Buffer, &wgpu::Buffer),
        pos: usize,
        params: &SamplerParams,
        mask: Option<&wgpu::Buffer>,
    ) -> Result<(), GpuError> {
        let (g, s, nv) = (&self.gpu, &self.s, self.spec.hparams.n_vocab);
        let logits = take_row(g, &s.logits, &s.row.logits, i, nv);
        sampler.run_masked(g, (logits, history, rng), nv, pos + 1, params, mask)
    }

    fn token_staging(&self) -> wgpu::Buffer {
        self.gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("token"),
            size: 4,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        })
    }

    /// [`GpuModel::step`] with token selection that also copies the chosen
    /// token (4 bytes) to a buffer of its own, in the same submission: the
    /// host reads it with [`PendingToken::wait`] after submitting the next
    /// step, whose embedding lookup reads the token on the device.
    pub fn step_async(
        &self,
        seq: &GpuSeq,
        pos: usize,
        params: &SamplerParams,
    ) -> Result<PendingToken, GpuError> {
        let staging = self.token_staging();
        self.gpu.begin_step();
        let r = self.record_step(seq, pos, Some(params));
        if r.is_ok() {
            self.gpu
                .copy((&seq.history, ((pos + 1) * 4) as u64), (&staging, 0), 4);
        }
        self.gpu.finish_step();
        r.map(|()| PendingToken { staging })
    }

    fn record_step(
        &self,
        seq: &GpuSeq,
        pos: usize,
        sample: Option<&SamplerParams>,
    ) -> Result<(), GpuError> {
        let out = match sample {
            Some(p) => Output::Sample(std::slice::from_ref(p)),
            None => Output::Nothing,
        };
        self.record(&[(seq, pos)], out)
    }

    fn record(&self, batch: &[(&GpuSeq, usize)], out: Output<'_>) -> Result<(), GpuError> {
        let b = batch.len();
        if b == 0 || b > MAX_SEQS {
            return Err(GpuError::Shape(format!(
                "a step of {b} sequences (1 to {MAX_SEQS})"
            )));
        }
        if let Some((seq, pos)) = batch.iter().find(|(seq, pos)| *pos >= seq.n_ctx) {
            return Err(GpuError::Shape(format!(
                "position {pos} is past the context of {}",
                seq.n_ctx
            )));
        }
        if !matches!(out, Output::Nothing) {
            self.logit_passes.fetch_add(1, Ordering::Relaxed);
        }
        let g = &self.gpu;
        let hp = &self.spec.hparams;
        let blk = &self.spec.block;
        let s = &self.s;
        let e = hp.n_embd;
        let (hd_k, hd_v) = (hp.head_dim_k, hp.head_dim_v);
        let (q_dim, kv_k, kv_v) = (hp.n_head * hd_k, hp.n_head_kv * hd_k, hp.n_head_kv * hd_v);
        let o_in = hp.n_head * hd_v;
        let scale = if blk.scale_embeddings {
            (e as f32).sqrt()
        } else {
            1.0
        };
        let positions: Vec<u32> = batch.iter().map(|&(_, pos)| pos as u32).collect();
        g.queue
            .write_buffer(&s.pos, 0, bytemuck::cast_slice(&positions));
        for (i, &(seq, pos)) in batch.iter().enumerate() {
            let dst = if i == 0 { &s.x } else { &s.row.x };
            self.embed
                .run(g, &self.tok_embd, (&seq.history, dst), pos, scale)?;
            put_row(g, &s.row.x, &s.x, i, e);
        }
        let glu = match blk.activation {
            Activation::SiluGlu => Glu::Silu,
            Activation::GeluGlu => Glu::Gelu,
        };
        for (il, l) in self.layers.iter().enumerate() {
            self.norm
                .run(g, (&s.x, &l.attn_norm, &s.h), (b, e), hp.rms_eps)?;
            self.mv(&l.wq, (&s.h, &s.q), b)?;
            self.mv(&l.wk, (&s.h, &s.k), b)?;
            self.mv(&l.wv, (&s.h, &s.v), b)?;
            if let Some([bq, bk, bv]) = &l.bias {
                for i in 0..b {
                    for (v, bias, n, row) in [
                        (&s.q, bq, q_dim, &s.row.q),
                        (&s.k, bk, kv_k, &s.row.k),
                        (&s.v, bv, kv_v, &s.row.v),
                    ] {
                        let r = take_row(g, v, row, i, n);
                        self.ops.add(g, r, bias, n)?;
                        put_row(g, row, v, i, n);
                    }
                }
            }
            if let Some([qn, kn]) = &l.qk_norm {
                // In place through a copy: a buffer may not be read and
                // written by one dispatch's separate bindings.
                self.norm_heads(&s.q, qn, b * hp.n_head, hd_k, hp.rms_eps)?;
                self.norm_heads(&s.k, kn, b * hp.n_head_kv, hd_k, hp.rms_eps)?;
            }
            let swa = hp.swa_layers[il];
            let table = if swa { &self.rope_swa } else { &self.rope };
            let neox = blk.rope == RopeStyle::Neox;
            self.ops
                .rope(g, (&s.q, table, &s.pos), b, hp.n_head, hd_k, hp.n_rot, neox)?;
            self.ops.rope(
                g,
                (&s.k, table, &s.pos),
                b,
                hp.n_head_kv,
                hd_k,
                hp.n_rot,
                neox,
            )?;
            if blk.prescale_q {
                self.ops.scale(g, &s.q, b * q_dim, hp.attn_scale)?;
            }
            let shape = Shape {
                n_head: hp.n_head,
                n_head_kv: hp.n_head_kv,
                head_dim_k: hd_k,
                head_dim_v: hd_v,
                scale: if blk.prescale_q { 1.0 } else { hp.attn_scale },
                window: if swa { hp.sliding_window } else { 0 },
            };
            // Attention runs per sequence, against its own cache.
            for (i, &(seq, pos)) in batch.iter().enumerate() {
                let k = take_row(g, &s.k, &s.row.k, i, kv_k);
                self.attention.store(g, (k, &seq.kc[il]), kv_k, pos)?;
                let v = take_row(g, &s.v, &s.row.v, i, kv_v);
                self.attention.store(g, (v, &seq.vc[il]), kv_v, pos)?;
                let q = take_row(g, &s.q, &s.row.q, i, q_dim);
                let dst = if i == 0 { &s.attn } else { &s.row.attn };
                self.attention.attend(
                    g,
                    (q, &seq.kc[il], &seq.vc[il], &s.scores, dst),
                    &shape,
                    pos,
                )?;
                put_row(g, &s.row.attn, &s.attn, i, o_in);
            }
            self.mv(&l.wo, (&s.attn, &s.o), b)?;
            if let Some(pn) = &l.post_attn_norm {
                self.norm.run(g, (&s.o, pn, &s.h), (b, e), hp.rms_eps)?;
                self.ops.add(g, &s.x, &s.h, b * e)?;
            } else {
                self.ops.add(g, &s.x, &s.o, b * e)?;
            }
            self.norm
                .run(g, (&s.x, &l.ffn_norm, &s.h), (b, e), hp.rms_eps)?;
            self.mv(&l.gate, (&s.h, &s.gate), b)?;
            self.mv(&l.up, (&s.h, &s.up), b)?;
            self.ops
                .glu(g, glu, (&s.gate, &s.up, &s.act), (b * hp.n_ff, hp.n_ff))?;
            self.mv(&l.down, (&s.act, &s.o), b)?;
            if let Some(pn) = &l.post_ffn_norm {
                self.norm.run(g, (&s.o, pn, &s.h), (b, e), hp.rms_eps)?;
                self.ops.add(g, &s.x, &s.h, b * e)?;
            } else {
                self.ops.add(g, &s.x, &s.o, b * e)?;
            }
        }
        if matches!(out, Output::Nothing) {
            return Ok(());
        }
        self.norm
            .run(g, (&s.x, &self.output_norm, &s.h), (b, e), hp.rms_eps)?;
        self.mv(
            self.output.as_ref().unwrap_or(&self.tok_embd),
            (&s.h, &s.logits),
            b,
        )?;
        if hp.final_logit_softcap > 0.0 {
            self.ops
                .softcap(g, &s.logits, b * hp.n_vocab, hp.final_logit_softcap)?;
        }
        let Output::Sample(params) = out else {
            return Ok(());
        };
        let mut sampler = self.sampler.lock().unwrap_or_else(|e| e.into_inner());
        for (i, (&(seq, pos), p)) in batch.iter().zip(params).enumerate() {
            self.choose_token(&mut sampler, i, (&seq.history, &seq.rng), pos, p, None)?;
        }
        Ok(())
    }

    /// RMSNorm of each head of `v` in place (via the `attn` scratch).
    fn norm_heads(
        &self,
        v: &wgpu::Buffer,
        w: &wgpu::Buffer,
        heads: usize,
        hd: usize,
        eps: f32,
    ) -> Result<(), GpuError> {
        let g = &self.gpu;
        self.norm.run(g, (v, w, &self.s.attn), (heads, hd), eps)?;
        g.copy((&self.s.attn, 0), (v, 0), (heads * hd * 4) as u64);
        Ok(())
    }
}

/// A batch step's shape: 1 to [`MAX_SEQS`] sequences, one parameter set
/// each.
fn check_batch(batch: &[(&GpuSeq, usize)], params: &[SamplerParams]) -> Result<(), GpuError> {
    if batch.is_empty() || batch.len() > MAX_SEQS || params.len() != batch.len() {
        return Err(GpuError::Shape(format!(
            "a step of {} sequences with {} parameter sets (1 to {MAX_SEQS} sequences, one set each)",
            batch.len(),
            params.len()
        )));
    }
    Ok(())
}
