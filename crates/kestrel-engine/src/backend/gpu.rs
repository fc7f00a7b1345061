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
//!
//! Held feeds (constrained sequences) go in the step's last group, through
//! `step_batch_held`: the forward pass is submitted at once and the
//! tokens are chosen (`finish_held`, a second submission) when every held
//! feed has its selection, or when the step is read or the next one
//! submitted, whichever comes first.

use std::collections::VecDeque;
use std::sync::Arc;

use kestrel_gguf::GgufFile;
use kestrel_gpu::model::{GpuModel, GpuSeq, HeldStep, PendingToken, TokenChoice, MAX_SEQS};
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
    /// In the latest step's held group, its token not chosen yet.
    Held(Option<Vec<f32>>),
}

/// The latest step's group of held feeds, waiting for selections.
struct HeldGroup {
    step: HeldStep,
    /// Per sequence of the group: the feed's index in its step, its
    /// sequence, and its selection (`None`: not given yet; feeds that are
    /// not held are sampled).
    members: Vec<(usize, SeqId, Option<Selection>)>,
}

pub struct GpuBackend {
    model: GpuModel,
    facts: DeviceFacts,
    seqs: Vec<Option<SeqState>>,
    steps: VecDeque<Vec<Pending>>,
    held: Option<HeldGroup>,
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
            held: None,
        })
    }

    fn seq(&self, seq: SeqId) -> Result<&SeqState, EngineError> {
        self.seqs
            .get(seq)
            .and_then(Option::as_ref)
            .ok_or_else(|| EngineError::Backend(format!("no sequence {seq}")))
    }

    /// Chooses the held group's tokens (a missing selection is free) and
    /// puts them in the latest step's answers.
    fn finish_held(&mut self) -> Result<(), EngineError> {
        let Some(group) = self.held.take() else {
            return Ok(());
        };
        let choices: Vec<TokenChoice<'_>> = group
            .members
            .iter()
            .map(|(_, _, sel)| match sel {
                None | Some(Selection::Free) => TokenChoice::Sample,
                Some(Selection::Allowed(words)) => TokenChoice::Masked(words),
                Some(Selection::Forced(t)) => TokenChoice::Forced(*t),
            })
            .collect();
        let tokens = self.model.finish_held(group.step, &choices)?;
        let step = self.steps.back_mut().expect("the held group's step");
        for ((i, _, _), token) in group.members.iter().zip(tokens) {
            if let Pending::Held(logits) = &mut step[*i] {
                step[*i] = Pending::Token(token, logits.take());
            }
        }
        Ok(())
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
        // Then one submission per `MAX_SEQS` sequences choosing a token,
        // the held ones in the last (only the last can wait: the next
        // logits pass overwrites the logits).
        let (free, held): (Vec<usize>, Vec<usize>) = (0..feeds.len())
            .filter(|&i| matches!(feeds[i].want, Want::Next { .. }))
            .partition(|&i| !feeds[i].want.is_held());
        if held.len() > MAX_SEQS {
            return Err(EngineError::Backend(format!(
                "{} constrained sequences in one step: the GPU takes at most {MAX_SEQS}",
                held.len()
            )));
        }
        let mut groups: Vec<Vec<usize>> = free.chunks(MAX_SEQS).map(<[usize]>::to_vec).collect();
        if !held.is_empty() {
            match groups.last_mut() {
                Some(g) if g.len() + held.len() <= MAX_SEQS => g.extend(&held),
                _ => groups.push(held.clone()),
            }
        }
        for group in &groups {
            let mut batch = Vec::with_capacity(group.len());
            let mut params = Vec::with_capacity(group.len());
            for &i in group {
                let s = self.seq(feeds[i].seq)?;
                batch.push((&s.dev, feeds[i].to - 1));
                params.push(s.sampler.clone());
            }
            let holds = group.iter().any(|&i| feeds[i].want.is_held());
            let tokens = if holds {
                let step = self.model.step_batch_held(&batch, &params)?;
                let members = group
                    .iter()
                    .map(|&i| {
                        let free = (!feeds[i].want.is_held()).then_some(Selection::Free);
                        (i, feeds[i].seq, free)
                    })
                    .collect();
                self.held = Some(HeldGroup { step, members });
                None
            } else {
                Some(self.model.step_batch(&batch, &params)?)
            };
            // Logprobs need this step's logits before the next step
            // overwrites them.
            let wants = |i: usize| matches!(feeds[i].want, Want::Next { logits: true, .. });
            let logits = if group.iter().any(|&i| wants(i)) {
                Some(self.model.read_batch_logits(group.len())?)
            } else {
                None
            };
            let row = |k: usize, i: usize| {
                logits
                    .as_ref()
                    .filter(|_| wants(i))
                    .map(|l| l[k * n_vocab..(k + 1) * n_vocab].to_vec())
            };
            match tokens {
                Some(tokens) => {
                    for (k, (&i, token)) in group.iter().zip(tokens).enumerate() {
                        out[i] = Some(Pending::Token(token, row(k, i)));
                    }
                }
                None => {
                    for (k, &i) in group.iter().enumerate() {
                        out[i] = Some(Pending::Held(row(k, i)));
                    }
                }
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
        // Held tokens never given a selection are chosen freely now.
        self.finish_held()?;
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

    fn select(&mut self, seq: SeqId, choice: Selection) -> Result<(), EngineError> {
        let group = self.held.as_mut().ok_or_else(|| nothing_held(seq))?;
        let member = group
            .members
            .iter_mut()
            .find(|(_, s, sel)| *s == seq && sel.is_none())
            .ok_or_else(|| nothing_held(seq))?;
        member.2 = Some(choice);
        if group.members.iter().all(|(_, _, sel)| sel.is_some()) {
            self.finish_held()?;
        }
        Ok(())
    }

    fn read(&mut self) -> Result<Option<Vec<Output>>, EngineError> {
        if self.steps.len() == 1 {
            // The step read is the latest: its held tokens go free.
            self.finish_held()?;
        }
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
                Pending::Held(_) => {
                    return Err(EngineError::Backend(
                        "a held token was read before it was chosen".into(),
                    ))
                }
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
