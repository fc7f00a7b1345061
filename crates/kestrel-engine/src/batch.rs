//! Continuous batching: up to `n_slots` sequences generate together, one
//! batched forward pass per step ([`CpuModel::forward_batch`]), each in a
//! slot with its own share of the context and its own KV cache. A sequence
//! joins between steps, prefills its prompt in chunks while the others keep
//! decoding, and leaves when it stops or is cancelled, freeing its slot for
//! the next.
//!
//! Each sequence gets the output it would get alone, bit for bit:
//! - the batched pass gives every row the kernels of its own sequence
//!   (see `forward_batch`);
//! - prompt chunks start at fixed positions (multiples of `chunk`), so the
//!   attention path of every prompt token (ggml's one-query path below
//!   [`TILED_MIN_QUERIES`] queries, tiles above) does not depend on which
//!   other requests were running;
//! - a reused cache prefix is shortened where needed to keep those paths;
//! - sampling, stop strings and logprobs go through the same code as
//!   [`Engine::generate`] (the tests hold the two to the same tokens).
//!
//! On the GPU ([`Batch::on_gpu`]) a step is one submission of
//! [`GpuModel::step_batch`]: every decoding sequence's token is chosen on the
//! device and written into its history there, and the host reads it one
//! step later, after the next step is submitted, so the device never waits
//! for the host. Stop strings, EOS and limits are judged on the tokens as
//! they come back; a step already submitted for a sequence that ended is
//! not read. Prompts go in with [`GpuModel::prefill`], whose positions get
//! the bits one-token steps give them, so any cached prefix is reusable.
//!
//! [`CpuModel::forward_batch`]: kestrel_cpu::CpuModel::forward_batch

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Instant;

use kestrel_cpu::attention::TILED_MIN_QUERIES;
use kestrel_cpu::{KvCache, Logits, SeqInput};
use kestrel_gpu::model::{GpuModel, GpuSeq, PendingToken, MAX_SEQS};
use kestrel_gpu::sample::SampleParams;
use kestrel_sampling::{logprobs, Sampler, TokenLogprobs, XorShift};

use crate::generate::Emitter;
use crate::{Engine, EngineError, GenStats, GenerateParams, Generation, StopReason, TokenEvent};

/// Receives a sequence's tokens as [`Engine::generate`]'s callback does;
/// returning `false` cancels the sequence.
pub type Sink<'s> = Box<dyn FnMut(&TokenEvent<'_>) -> bool + 's>;

/// What `/slots` shows of a slot.
#[derive(Clone, Debug, Default)]
pub struct SlotInfo {
    pub id: usize,
    pub n_ctx: usize,
    /// The sequence in the slot, if any.
    pub task: Option<u64>,
    pub n_prompt: usize,
    /// Prompt tokens reused from the slot's previous sequence.
    pub cache_n: usize,
    /// Tokens whose keys and values are in the cache.
    pub n_past: usize,
    pub n_decoded: usize,
    /// The sequence's token limit (negative: none).
    pub n_predict: i64,
}

/// Why a request could not join.
#[derive(Debug)]
pub enum AdmitError {
    /// Every slot is busy; try again after a step.
    Busy,
    /// The request itself is wrong (prompt too long for a slot, bad ids...).
    Invalid(EngineError),
}

struct Seq<'e> {
    id: u64,
    params: GenerateParams,
    sampler: Sampler,
    emitter: Emitter<'e, Sink<'e>>,
    prompt_len: usize,
    /// Prompt, then the generated tokens.
    history: Vec<u32>,
    /// Tokens of `history` whose keys and values are in the cache.
    n_past: usize,
    cache_n: usize,
    started: Instant,
    /// When the prompt's last chunk finished.
    prompt_done: Option<Instant>,
    /// On the GPU: the device sampler's parameters and the steps submitted
    /// but not read yet.
    device: Option<DeviceSeq>,
}

struct DeviceSeq {
    sample: SampleParams,
    /// Tokens chosen on the device, oldest first, each with its step's
    /// logits when logprobs are asked for.
    pending: VecDeque<(PendingToken, Option<Vec<f32>>)>,
}

/// A slot's KV cache: in host memory, or on the device with the slot's
/// token history and generator state.
enum Store {
    Cpu(KvCache),
    Gpu(GpuSeq),
}

struct Slot<'e> {
    cache: Store,
    /// The tokens whose keys and values the cache holds, from position 0
    /// (kept after a sequence leaves, for the next one to reuse).
    cached: Vec<u32>,
    /// For each of those positions, whether its chunk took the tiled
    /// attention path (on the CPU): a later prompt reuses a position only
    /// where a fresh run of that prompt takes the same path.
    tiled: Vec<bool>,
    seq: Option<Seq<'e>>,
}

/// The running sequences of a server (or of any caller with several
/// requests at once).
pub struct Batch<'e> {
    engine: &'e Engine,
    /// Set when the steps run on the GPU.
    gpu: Option<&'e GpuModel>,
    slots: Vec<Slot<'e>>,
    n_ctx: usize,
    chunk: usize,
}

/// A step's outcome for a sequence that left.
pub type Finished = (u64, Result<Generation, EngineError>);

impl<'e> Batch<'e> {
    /// `n_slots` slots of `n_ctx` tokens each; prompts are fed `chunk`
    /// tokens at a time (at most about one chunk of prompt per step, so
    /// decoding sequences are never held up for long).
    pub fn new(engine: &'e Engine, n_slots: usize, n_ctx: usize, chunk: usize) -> Batch<'e> {
        let n_slots = n_slots.max(1);
        Batch {
            engine,
            gpu: None,
            slots: (0..n_slots)
                .map(|_| Slot {
                    cache: Store::Cpu(engine.model.new_cache(n_ctx)),
                    cached: Vec::new(),
                    tiled: Vec::new(),
                    seq: None,
                })
                .collect(),
            n_ctx,
            chunk: chunk.max(1),
        }
    }

    /// Every slot's sliding-window layers as llama.cpp's `--swa-full` has
    /// them (see [`GenerateParams::swa_full`]).
    /// (The GPU backend's attention always visits keys in position order.)
    pub fn full_swa(mut self) -> Self {
        for slot in &mut self.slots {
            if let Store::Cpu(cache) = &mut slot.cache {
                cache.full_swa();
            }
        }
        self
    }

    /// As [`Batch::new`], stepping on the GPU: `model` (the engine's model
    /// uploaded, with a context of at least `n_ctx`) holds each slot's
    /// cache and history. `chunk` bounds the prompt positions fed per step.
    pub fn on_gpu(
        engine: &'e Engine,
        model: &'e GpuModel,
        n_slots: usize,
        n_ctx: usize,
        chunk: usize,
    ) -> Result<Batch<'e>, EngineError> {
        if model.n_ctx() < n_ctx {
            return Err(EngineError::Gpu(kestrel_gpu::GpuError::Shape(format!(
                "slots of {n_ctx} tokens on a GPU model loaded for {}",
                model.n_ctx()
            ))));
        }
        Ok(Batch {
            engine,
            gpu: Some(model),
            slots: (0..n_slots.max(1))
                .map(|_| Slot {
                    cache: Store::Gpu(model.new_seq()),
                    cached: Vec::new(),
                    tiled: Vec::new(),
                    seq: None,
                })
                .collect(),
            n_ctx,
            chunk: chunk.max(1),
        })
    }

    pub fn n_ctx(&self) -> usize {
        self.n_ctx
    }

    pub fn has_free_slot(&self) -> bool {
        self.slots.iter().any(|s| s.seq.is_none())
    }

    /// No sequence is running.
    pub fn is_idle(&self) -> bool {
        self.slots.iter().all(|s| s.seq.is_none())
    }

    pub fn running(&self) -> usize {
        self.slots.iter().filter(|s| s.seq.is_some()).count()
    }

    /// The ids of the running sequences.
    pub fn ids(&self) -> Vec<u64> {
        self.slots
            .iter()
            .filter_map(|s| s.seq.as_ref().map(|q| q.id))
            .collect()
    }

    pub fn slot_info(&self) -> Vec<SlotInfo> {
        self.slots
            .iter()
            .enumerate()
            .map(|(id, s)| match &s.seq {
                Some(q) => SlotInfo {
                    id,
                    n_ctx: self.n_ctx,
                    task: Some(q.id),
                    n_prompt: q.prompt_len,
                    cache_n: q.cache_n,
                    n_past: q.n_past,
                    n_decoded: q.history.len() - q.prompt_len,
                    n_predict: q.params.n_predict,
                },
                None => SlotInfo {
                    id,
                    n_ctx: self.n_ctx,
                    n_past: s.cached.len(),
                    ..SlotInfo::default()
                },
            })
            .collect()
    }

    /// Puts a request in a free slot: the one whose cache shares the longest
    /// prefix with the prompt (when `cache_prompt`), else the first free.
    /// `params.n_ctx` is replaced by the slot's context. Returns the slot.
    pub fn admit(
        &mut self,
        id: u64,
        prompt: Vec<u32>,
        params: &GenerateParams,
        cache_prompt: bool,
        sink: Sink<'e>,
    ) -> Result<usize, AdmitError> {
        let params = GenerateParams {
            n_ctx: self.n_ctx,
            ..params.clone()
        };
        let sampler = self
            .engine
            .check_request(&prompt, &params)
            .map_err(AdmitError::Invalid)?;
        let common = |s: &Slot<'_>| {
            s.cached
                .iter()
                .zip(&prompt)
                .take_while(|(a, b)| a == b)
                .count()
        };
        let (slot_id, common) = self
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.seq.is_none())
            .map(|(i, s)| (i, if cache_prompt { common(s) } else { 0 }))
            // The longest shared prefix; the first slot among equals.
            .max_by_key(|&(i, n)| (n, usize::MAX - i))
            .ok_or(AdmitError::Busy)?;
        let slot = &mut self.slots[slot_id];
        let (cache_n, device) = match (&slot.cache, self.gpu) {
            (Store::Gpu(dev), Some(model)) => {
                // Every position's cache entry has the bits of a fresh run.
                let cache_n = common.min(prompt.len() - 1);
                model
                    .write_tokens(dev, cache_n, &prompt[cache_n..])
                    .map_err(|e| AdmitError::Invalid(e.into()))?;
                model.set_rng(dev, XorShift::new(params.sampler.seed).state());
                let device = DeviceSeq {
                    sample: self.engine.device_sampling(&params),
                    pending: VecDeque::new(),
                };
                (cache_n, Some(device))
            }
            (cache, _) => {
                // The reused positions' keys and values must be those a
                // fresh run computes: each was computed on its chunk's
                // attention path then, which must be the one this prompt's
                // chunks give it (a 260-token prompt's first tokens were
                // tiled; a 31-token prompt's are not).
                let fresh_tiled = |t: usize| {
                    let start = t / self.chunk * self.chunk;
                    (start + self.chunk).min(prompt.len()) - start >= TILED_MIN_QUERIES
                };
                let same_path = slot
                    .tiled
                    .iter()
                    .take(common)
                    .enumerate()
                    .take_while(|&(t, &tiled)| tiled == fresh_tiled(t))
                    .count();
                let mut n = reusable_prefix(common.min(same_path), prompt.len(), self.chunk);
                // A window ring keeps the last positions only: the window
                // before the reused prefix's end must still be there.
                let window = self.engine.model.spec.hparams.sliding_window;
                if let Store::Cpu(c) = cache {
                    if !c.keeps(n.saturating_sub(window), n, slot.cached.len()) {
                        n = 0;
                    }
                }
                (n, None)
            }
        };
        slot.cached.truncate(cache_n);
        slot.tiled.truncate(cache_n);
        slot.seq = Some(Seq {
            id,
            sampler,
            emitter: Emitter::new(&self.engine.tokenizer, &params.stop, sink),
            params,
            prompt_len: prompt.len(),
            history: prompt,
            n_past: cache_n,
            cache_n,
            started: Instant::now(),
            prompt_done: None,
            device,
        });
        Ok(slot_id)
    }

    /// Ends sequence `id` now (its client left); returns what it generated.
    pub fn cancel(&mut self, id: u64) -> Option<Generation> {
        let slot = self
            .slots
            .iter_mut()
            .find(|s| s.seq.as_ref().is_some_and(|q| q.id == id))?;
        let seq = slot.seq.take().expect("found");
        Some(finish(slot, seq, StopReason::Cancelled))
    }

    /// One step: every decoding sequence feeds its last token, prefilling
    /// sequences feed their next prompt chunk (oldest first, about one
    /// chunk in all per step), in one forward pass; then each sequence
    /// whose input is all fed samples and emits its next token. Returns the
    /// sequences that ended.
    pub fn step(&mut self) -> Vec<Finished> {
        if let Some(model) = self.gpu {
            return self.step_gpu(model);
        }
        // What each slot feeds this step: a range of its history.
        let mut feed: Vec<Option<(usize, usize)>> = vec![None; self.slots.len()];
        let mut prefilling: Vec<(Instant, usize)> = Vec::new();
        for (i, s) in self.slots.iter().enumerate() {
            let Some(q) = &s.seq else { continue };
            if q.n_past + 1 < q.prompt_len {
                prefilling.push((q.started, i));
            } else {
                // Decoding (or the prompt's last token, alone in its chunk).
                feed[i] = Some((q.n_past, chunk_end(q.n_past, q.history.len(), self.chunk)));
            }
        }
        prefilling.sort();
        let mut budget = self.chunk;
        for (_, i) in prefilling {
            let q = self.slots[i].seq.as_ref().expect("prefilling");
            let to = chunk_end(q.n_past, q.prompt_len, self.chunk);
            // The oldest prompt always gets its chunk; others while they fit.
            if to - q.n_past > budget && budget < self.chunk {
                break;
            }
            budget = budget.saturating_sub(to - q.n_past);
            feed[i] = Some((q.n_past, to));
        }
        if feed.iter().all(Option::is_none) {
            return Vec::new();
        }

        // Each fed sequence's input and, where this step ends its prompt or
        // decodes, its draw: sampled inside the pass's hand-off to the pool
        // (see `forward_batch_map`), a sequence at a time on the workers.
        let mut inputs: Vec<SeqInput<'_>> = Vec::new();
        let mut draws: Vec<Mutex<Option<Draw<'_>>>> = Vec::new();
        for (s, f) in self.slots.iter_mut().zip(&feed) {
            let (Some((from, to)), Some(q), Store::Cpu(cache)) = (*f, s.seq.as_mut(), &mut s.cache)
            else {
                continue;
            };
            let Seq {
                history,
                sampler,
                params,
                prompt_len,
                ..
            } = q;
            let history: &[u32] = history;
            let at_limit = params.limit_reached(history.len() - *prompt_len);
            let draws_now = to == history.len() && !at_limit;
            inputs.push(SeqInput {
                tokens: &history[from..to],
                pos0: from,
                cache,
                logits: Logits::Last,
            });
            draws.push(Mutex::new(draws_now.then_some(Draw {
                sampler,
                history,
                n_probs: params.n_probs,
            })));
        }
        let drawn = self
            .engine
            .model
            .forward_batch_map(&mut inputs, |i, logits| {
                let mut draw = draws[i].lock().unwrap_or_else(|e| e.into_inner());
                draw.as_mut().map(|d| d.take(logits))
            });
        drop(inputs);
        drop(draws);

        let mut done = Vec::new();
        let fed = feed
            .iter()
            .enumerate()
            .filter_map(|(i, f)| f.map(|(from, to)| (i, from, to)));
        for ((i, from, to), drawn) in fed.zip(drawn) {
            let slot = &mut self.slots[i];
            let q = slot.seq.as_mut().expect("planned");
            slot.cached.truncate(from);
            slot.cached.extend_from_slice(&q.history[from..to]);
            // The path `attend` takes for this sequence's chunk.
            slot.tiled.truncate(from);
            slot.tiled.resize(to, to - from >= TILED_MIN_QUERIES);
            q.n_past = to;
            if to < q.history.len() {
                continue; // more prompt to feed
            }
            if q.prompt_done.is_none() {
                q.prompt_done = Some(Instant::now());
            }
            // No draw at the end of the prompt or later: the limit was reached.
            let reason = match drawn {
                Some((token, lp)) => accept(self.engine, q, token, lp),
                None => Some(StopReason::Length),
            };
            if let Some(reason) = reason {
                let seq = slot.seq.take().expect("running");
                done.push((seq.id, Ok(finish(slot, seq, reason))));
            }
        }
        done
    }

    /// [`Batch::step`] on the GPU (see the module documentation): prompt
    /// positions (oldest prompt first, about one chunk in all), then one
    /// submission per [`MAX_SEQS`] decoding sequences, then each token of
    /// the step before is read and emitted.
    fn step_gpu(&mut self, model: &GpuModel) -> Vec<Finished> {
        let mut done = Vec::new();
        let mut prefilling: Vec<(Instant, usize)> = self
            .slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                let q = s.seq.as_ref()?;
                (q.n_past + 1 < q.prompt_len).then_some((q.started, i))
            })
            .collect();
        prefilling.sort();
        let mut budget = self.chunk;
        for (_, i) in prefilling {
            if budget == 0 {
                break;
            }
            let slot = &mut self.slots[i];
            let (Store::Gpu(dev), Some(q)) = (&slot.cache, slot.seq.as_mut()) else {
                continue;
            };
            let n = (q.prompt_len - 1 - q.n_past).min(budget);
            budget -= n;
            let r = model.prefill(dev, q.n_past, n);
            if r.is_ok() {
                q.n_past += n;
            }
            if let Err(e) = r {
                fail(slot, e, &mut done);
            }
        }

        // Sequences whose prompt is in but for its last token feed one
        // position each, while their limits allow another token.
        let n_ctx = self.n_ctx;
        let feeding: Vec<usize> = self
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| {
                s.seq.as_ref().is_some_and(|q| {
                    let asked = q.history.len() - q.prompt_len
                        + q.device.as_ref().map_or(0, |d| d.pending.len());
                    q.n_past + 1 >= q.prompt_len
                        && q.n_past < n_ctx
                        && (q.params.n_predict < 0 || (asked as i64) < q.params.n_predict)
                })
            })
            .map(|(i, _)| i)
            .collect();
        for group in feeding.chunks(MAX_SEQS) {
            let mut seqs = Vec::with_capacity(group.len());
            let mut params = Vec::with_capacity(group.len());
            for &i in group {
                let s = &self.slots[i];
                let (Store::Gpu(dev), Some(q)) = (&s.cache, &s.seq) else {
                    unreachable!("a GPU slot");
                };
                seqs.push((dev, q.n_past));
                params.push(q.device.as_ref().expect("on the GPU").sample.clone());
            }
            let submitted = model.step_batch(&seqs, &params).and_then(|tokens| {
                // Logprobs need this step's logits before the next step
                // overwrites them: the one wait outside the pipeline.
                let wants = group.iter().any(|&i| {
                    self.slots[i]
                        .seq
                        .as_ref()
                        .is_some_and(|q| q.params.n_probs > 0)
                });
                let logits = if wants {
                    Some(model.read_batch_logits(group.len())?)
                } else {
                    None
                };
                Ok((tokens, logits))
            });
            match submitted {
                Ok((tokens, logits)) => {
                    let n_vocab = model.spec.hparams.n_vocab;
                    for (k, (&i, token)) in group.iter().zip(tokens).enumerate() {
                        let q = self.slots[i].seq.as_mut().expect("feeding");
                        let row = logits
                            .as_ref()
                            .filter(|_| q.params.n_probs > 0)
                            .map(|l| l[k * n_vocab..(k + 1) * n_vocab].to_vec());
                        q.n_past += 1;
                        let dev = q.device.as_mut().expect("on the GPU");
                        dev.pending.push_back((token, row));
                    }
                }
                Err(e) => {
                    for &i in group {
                        let e = kestrel_gpu::GpuError::Failed(e.to_string());
                        fail(&mut self.slots[i], e, &mut done);
                    }
                }
            }
        }

        // One step behind: the token of the step before this one, or the
        // last token of a sequence that fed nothing this step.
        for (i, slot) in self.slots.iter_mut().enumerate() {
            let Some(q) = slot.seq.as_mut() else { continue };
            if q.n_past + 1 < q.prompt_len {
                continue;
            }
            let fed = feeding.contains(&i);
            let dev = q.device.as_mut().expect("on the GPU");
            let reason = if dev.pending.len() >= 2 || (!fed && !dev.pending.is_empty()) {
                let (token, row) = dev.pending.pop_front().expect("pending");
                match token.wait(&model.gpu) {
                    Ok(token) => {
                        q.prompt_done.get_or_insert_with(Instant::now);
                        let lp = row.map(|l| logprobs(&l, token, q.params.n_probs));
                        accept(self.engine, q, token, lp)
                    }
                    Err(e) => {
                        fail(slot, e, &mut done);
                        continue;
                    }
                }
            } else if !fed && dev.pending.is_empty() {
                // Nothing was asked (n_predict 0) or the context is full.
                q.prompt_done.get_or_insert_with(Instant::now);
                Some(if q.n_past >= n_ctx {
                    StopReason::ContextFull
                } else {
                    StopReason::Length
                })
            } else {
                None
            };
            if let Some(reason) = reason {
                let seq = slot.seq.take().expect("running");
                done.push((seq.id, Ok(finish(slot, seq, reason))));
            }
        }
        done
    }
}

/// Ends a slot's sequence with a device error; its cache is not reused.
fn fail(slot: &mut Slot<'_>, e: kestrel_gpu::GpuError, done: &mut Vec<Finished>) {
    if let Some(q) = slot.seq.take() {
        slot.cached.clear();
        slot.tiled.clear();
        done.push((q.id, Err(EngineError::Gpu(e))));
    }
}

/// How much of a `common` shared prefix a `prompt_len` prompt reuses: at
/// least its last token is fed again (its logits are needed), and the first
/// chunk fed must take the attention path its tokens take in an unshared
/// run (chunks at multiples of `chunk`): one of at least
/// `TILED_MIN_QUERIES` tokens stays at least that long.
fn reusable_prefix(common: usize, prompt_len: usize, chunk: usize) -> usize {
    let p = common.min(prompt_len.saturating_sub(1));
    let start = p / chunk * chunk;
    let end = (start + chunk).min(prompt_len);
    if end - start >= TILED_MIN_QUERIES && end - p < TILED_MIN_QUERIES {
        end - TILED_MIN_QUERIES
    } else {
        p
    }
}

/// The end of the chunk that starts at `from` (chunks end at multiples of
/// `chunk`, or at `len`).
fn chunk_end(from: usize, len: usize, chunk: usize) -> usize {
    ((from / chunk + 1) * chunk).min(len)
}

/// What a sequence needs to draw its next token from a step's logits, as
/// [`Engine::generate`]'s loop draws it.
struct Draw<'a> {
    sampler: &'a mut Sampler,
    history: &'a [u32],
    n_probs: usize,
}

impl Draw<'_> {
    /// The token and, when asked for, its logprobs.
    fn take(&mut self, logits: &[f32]) -> (u32, Option<TokenLogprobs>) {
        let token = self.sampler.sample_with_history(logits, self.history);
        let lp = (self.n_probs > 0).then(|| logprobs(logits, token, self.n_probs));
        (token, lp)
    }
}

/// Takes a sequence's next token (sampled on the host or on the device):
/// ends at an end-of-generation token, else appends and emits it; returns
/// why the sequence ends, if it does.
fn accept(
    engine: &Engine,
    q: &mut Seq<'_>,
    token: u32,
    lp: Option<TokenLogprobs>,
) -> Option<StopReason> {
    let p = &q.params;
    if !p.ignore_eos && engine.tokenizer.is_eog(token) {
        return Some(StopReason::EndOfGeneration);
    }
    q.history.push(token);
    let pos = q.history.len() - 1;
    let last = if pos >= p.n_ctx {
        Some(StopReason::ContextFull)
    } else if p.limit_reached(q.history.len() - q.prompt_len) {
        Some(StopReason::Length)
    } else {
        None
    };
    q.emitter.token(token, lp).or(last)
}

/// Flushes a sequence's held-back text and builds its result.
fn finish(slot: &mut Slot<'_>, seq: Seq<'_>, reason: StopReason) -> Generation {
    // Only what the cache really holds stays reusable: positions fed whose
    // token the host knows (on the GPU a step may have fed a token that was
    // never read).
    let valid = seq.n_past.min(seq.history.len());
    slot.cached.clear();
    slot.cached.extend_from_slice(&seq.history[..valid]);
    // (On the CPU every position fed was recorded as it was fed.)
    slot.tiled.truncate(valid);
    let now = Instant::now();
    let prompt_done = seq.prompt_done.unwrap_or(now);
    let (text, logprobs, stopped_late) = seq.emitter.finish();
    let stop = if stopped_late {
        StopReason::StopString
    } else {
        reason
    };
    let tokens = seq.history[seq.prompt_len..].to_vec();
    Generation {
        stats: GenStats {
            prompt_tokens: seq.prompt_len,
            cache_n: seq.cache_n,
            prompt_n: valid.min(seq.prompt_len).saturating_sub(seq.cache_n),
            prompt_ms: (prompt_done - seq.started).as_secs_f64() * 1000.0,
            generated_tokens: tokens.len(),
            generate_ms: (now - prompt_done).as_secs_f64() * 1000.0,
            stop,
        },
        tokens,
        text,
        logprobs,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reuse_keeps_the_attention_path_of_every_prompt_token() {
        let chunk = 256;
        for prompt_len in 1..700usize {
            for common in 0..=prompt_len {
                let p = reusable_prefix(common, prompt_len, chunk);
                assert!(p < prompt_len && p <= common, "{common}/{prompt_len}: {p}");
                // Each token fed takes the path of its chunk in a fresh run.
                let fresh_tiled = |t: usize| {
                    let start = t / chunk * chunk;
                    (start + chunk).min(prompt_len) - start >= TILED_MIN_QUERIES
                };
                let mut from = p;
                while from < prompt_len {
                    let to = chunk_end(from, prompt_len, chunk);
                    let tiled = to - from >= TILED_MIN_QUERIES;
                    for t in from..to {
                        assert_eq!(tiled, fresh_tiled(t), "{common}/{prompt_len}: token {t}");
                    }
                    from = to;
                }
            }
        }
        // The shortening costs at most TILED_MIN_QUERIES tokens.
        assert_eq!(reusable_prefix(250, 600, 256), 192);
        assert_eq!(reusable_prefix(100, 150, 256), 86);
        assert_eq!(reusable_prefix(599, 600, 256), 536);
        // A short last chunk is one-query attention either way.
        assert_eq!(reusable_prefix(530, 560, 256), 530);
    }
}
