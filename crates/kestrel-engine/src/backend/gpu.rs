//! The GPU backend: the model uploaded with wgpu ([`GpuModel`]), each
//! sequence's history, cache and generator state on the device. A step is
//! recorded and submitted without waiting: prompt positions go through
//! `prefill` (chunks of positions sharing the weight reads, each getting
//! the bits a one-token step gives it), and the sequences that want their
//! next token go through `step_batch` (up to [`MAX_SEQS`] a submission),
//! which chooses each token on the device and writes it into the history
//! the next step's embedding reads. The host reads the tokens when it
//! reads the step. Logits asked for (logprobs, scoring) are read back in
//! the step itself: the one wait outside the pipeline.

use std::collections::VecDeque;
use std::sync::Arc;

use kestrel_gguf::GgufFile;
use kestrel_gpu::model::{GpuModel, GpuSeq, PendingToken, MAX_SEQS};
use kestrel_model::ModelSpec;
use kestrel_sampling::{SamplerParams, XorShift};

use super::{
    nothing_held, Backend, DeviceFacts, Feed, Output, Profile, ProfileEntry, Selection, SeqId, Want,
};
use crate::EngineError;

/// Whether this host's libm `expf` is the one the GPU's exact kernels
/// emulate (where it is not, GPU and CPU may part in the last bits).
pub use kestrel_gpu::exact::host_expf_is_glibc_fma;

struct SeqState {
    dev: GpuSeq,
    sampler: SamplerParams,
    /// History positions the device will hold once the submitted steps ran.
    known: usize,
}

/// A feed's answer on its way back.
enum Pending {
    Ready(Output),
    Token(PendingToken, Option<Vec<f32>>),
}

pub struct GpuBackend {
    model: GpuModel,
    facts: DeviceFacts,
    seqs: Vec<Option<SeqState>>,
    steps: VecDeque<Vec<Pending>>,
}

impl GpuBackend {
    /// Uploads the model for sequences of up to `n_ctx` tokens on the
    /// first adapter wgpu offers.
    pub fn new(file: Arc<GgufFile>, spec: ModelSpec, n_ctx: usize) -> Result<Self, EngineError> {
        let gpu = kestrel_gpu::Gpu::new()?;
        let facts = DeviceFacts {
            name: gpu.adapter.to_string(),
            api: gpu.adapter.backend.clone(),
            n_ctx,
            timed: gpu.has_timestamps,
            pass_rows: MAX_SEQS,
        };
        let model = GpuModel::load(gpu, file, spec, n_ctx)?;
        Ok(GpuBackend {
            model,
            facts,
            seqs: Vec::new(),
            steps: VecDeque::new(),
        })
    }

    fn seq(&self, seq: SeqId) -> Result<&SeqState, EngineError> {
        self.seqs
            .get(seq)
            .and_then(Option::as_ref)
            .ok_or_else(|| EngineError::Backend(format!("no sequence {seq}")))
    }

    /// Records `feeds`; the tokens come back as pending reads.
    fn record(&mut self, feeds: &[Feed]) -> Result<Vec<Pending>, EngineError> {
        let n_vocab = self.model.spec.hparams.n_vocab;
        let mut out: Vec<Option<Pending>> = feeds.iter().map(|_| None).collect();
        // Prompt positions first: every position but a `Next` feed's last.
        for (i, f) in feeds.iter().enumerate() {
            let s = self.seq(f.seq)?;
            match f.want {
                Want::Cache => {
                    self.model.prefill(&s.dev, f.from, f.to - f.from)?;
                    out[i] = Some(Pending::Ready(Output::default()));
                }
                Want::Next { .. } if f.to - f.from > 1 => {
                    self.model.prefill(&s.dev, f.from, f.to - 1 - f.from)?;
                }
                Want::Next { .. } => {}
                Want::Logits { skip } => {
                    let skip = skip.min(f.to - f.from);
                    if skip > 0 {
                        self.model.prefill(&s.dev, f.from, skip)?;
                    }
                    let mut rows = Vec::with_capacity((f.to - f.from - skip) * n_vocab);
                    for pos in f.from + skip..f.to {
                        self.model.step_logits(&s.dev, pos)?;
                        rows.extend(self.model.read_logits()?);
                    }
                    out[i] = Some(Pending::Ready(Output {
                        token: None,
                        logits: Some(rows),
                    }));
                }
            }
        }
        // Then one submission per `MAX_SEQS` sequences choosing a token.
        let choosing: Vec<usize> = (0..feeds.len())
            .filter(|&i| matches!(feeds[i].want, Want::Next { .. }))
            .collect();
        for group in choosing.chunks(MAX_SEQS) {
            let mut batch = Vec::with_capacity(group.len());
            let mut params = Vec::with_capacity(group.len());
            for &i in group {
                let s = self.seq(feeds[i].seq)?;
                batch.push((&s.dev, feeds[i].to - 1));
                params.push(s.sampler.clone());
            }
            let tokens = self.model.step_batch(&batch, &params)?;
            // Logprobs need this step's logits before the next step
            // overwrites them.
            let wants = |i: usize| matches!(feeds[i].want, Want::Next { logits: true, .. });
            let logits = if group.iter().any(|&i| wants(i)) {
                Some(self.model.read_batch_logits(group.len())?)
            } else {
                None
            };
            for (k, (&i, token)) in group.iter().zip(tokens).enumerate() {
                let row = logits
                    .as_ref()
                    .filter(|_| wants(i))
                    .map(|l| l[k * n_vocab..(k + 1) * n_vocab].to_vec());
                out[i] = Some(Pending::Token(token, row));
            }
        }
        Ok(out
            .into_iter()
            .map(|p| p.expect("every feed answered"))
            .collect())
    }
}

impl Backend for GpuBackend {
    fn facts(&self) -> &DeviceFacts {
        &self.facts
    }

    fn create_seq(&mut self) -> Result<SeqId, EngineError> {
        self.seqs.push(Some(SeqState {
            dev: self.model.new_seq(),
            sampler: SamplerParams::default(),
            known: 0,
        }));
        Ok(self.seqs.len() - 1)
    }

    fn free_seq(&mut self, seq: SeqId) {
        if let Some(s) = self.seqs.get_mut(seq) {
            *s = None;
        }
    }

    fn start(
        &mut self,
        seq: SeqId,
        tokens: &[u32],
        keep: usize,
        sampler: &SamplerParams,
    ) -> Result<(), EngineError> {
        let s = self.seq(seq)?;
        if keep > tokens.len() {
            return Err(EngineError::Backend(format!(
                "sequence {seq}: keeping {keep} of {} tokens",
                tokens.len()
            )));
        }
        self.model.write_tokens(&s.dev, keep, &tokens[keep..])?;
        self.model
            .set_rng(&s.dev, XorShift::new(sampler.seed).state());
        let s = self.seqs[seq].as_mut().expect("checked above");
        s.sampler = sampler.clone();
        s.known = tokens.len();
        Ok(())
    }

    fn reusable_prefix(&self, _seq: SeqId, common: usize, prompt_len: usize, _: usize) -> usize {
        // Every position's cache entry has the bits of a fresh run.
        common.min(prompt_len.saturating_sub(1))
    }

    fn truncate(&mut self, seq: SeqId, n: usize) -> Result<(), EngineError> {
        let s = self
            .seqs
            .get_mut(seq)
            .and_then(Option::as_mut)
            .ok_or_else(|| EngineError::Backend(format!("no sequence {seq}")))?;
        s.known = s.known.min(n);
        Ok(())
    }

    fn submit(&mut self, feeds: &[Feed]) -> Result<(), EngineError> {
        let n_ctx = self.facts.n_ctx;
        for (i, f) in feeds.iter().enumerate() {
            let s = self.seq(f.seq)?;
            if feeds[..i].iter().any(|g| g.seq == f.seq)
                || f.from >= f.to
                || f.to > s.known
                || f.to > n_ctx
            {
                return Err(EngineError::Backend(format!(
                    "sequence {}: positions {}..{} with {} tokens known (context {n_ctx})",
                    f.seq, f.from, f.to, s.known
                )));
            }
        }
        if let Some(f) = feeds.iter().find(|f| f.want.is_held()) {
            return Err(EngineError::Backend(format!(
                "sequence {}: constrained decoding (a held token) is not on the GPU yet",
                f.seq
            )));
        }
        let pending = self.record(feeds)?;
        for f in feeds {
            if matches!(f.want, Want::Next { .. }) {
                let s = self.seqs[f.seq].as_mut().expect("checked above");
                s.known = s.known.max(f.to + 1);
            }
        }
        self.steps.push_back(pending);
        Ok(())
    }

    fn select(&mut self, seq: SeqId, _choice: Selection) -> Result<(), EngineError> {
        Err(nothing_held(seq))
    }

    fn read(&mut self) -> Result<Option<Vec<Output>>, EngineError> {
        let Some(step) = self.steps.pop_front() else {
            return Ok(None);
        };
        let mut out = Vec::with_capacity(step.len());
        for p in step {
            out.push(match p {
                Pending::Ready(o) => o,
                Pending::Token(t, logits) => Output {
                    token: Some(t.wait(&self.model.gpu)?),
                    logits,
                },
            });
        }
        Ok(Some(out))
    }

    fn set_profiling(&mut self, on: bool) -> Result<(), EngineError> {
        self.model.gpu.set_profiling(on);
        Ok(())
    }

    fn take_profile(&mut self) -> Result<Profile, EngineError> {
        let mut p = Profile::default();
        for pass in self.model.gpu.take_profile()? {
            let class = class_of(&pass.label);
            let time = std::time::Duration::from_nanos(pass.ns as u64);
            match p.entries.iter_mut().find(|e| e.class == class) {
                Some(e) => {
                    e.time += time;
                    e.bytes += pass.bytes;
                    e.calls += 1;
                }
                None => p.entries.push(ProfileEntry {
                    class,
                    time,
                    bytes: pass.bytes,
                    calls: 1,
                }),
            }
        }
        Ok(p)
    }
}

/// The kernel class of a pass, from its pipeline's label (the CPU's class
/// names where there is one).
fn class_of(label: &str) -> String {
    let (head, rest) = label.split_once(' ').unwrap_or((label, ""));
    match head {
        "matvec" => format!("matmul {rest}"),
        "quantize" => "activation quantization".into(),
        "attention" => "attention".into(),
        "kv" => "kv store".into(),
        "rms_norm" => "norms".into(),
        "rope" => "rope".into(),
        "elementwise" => "activation, add, scale".into(),
        "embed" => "embedding".into(),
        "sample" | "greedy" => "sampling".into(),
        _ => label.into(),
    }
}
