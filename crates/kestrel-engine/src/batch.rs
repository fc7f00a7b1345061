//! The scheduler: the one decode loop. Up to `n_slots` sequences generate
//! together on a [`Backend`], one step at a time, each in a slot with its
//! own share of the context and its own KV cache. A sequence joins between
//! steps, prefills its prompt in chunks while the others keep decoding,
//! and leaves when it stops or is cancelled, freeing its slot for the next.
//! `run` is one slot, `serve` is `-np` slots, on either device.
//!
//! A step feeds every decoding sequence's last token and, oldest first,
//! about one chunk of prompt in all; the backend chooses each sequence's
//! next token on the device that ran the pass and appends it to the
//! sequence's history there. The loop submits step N+1 before it reads
//! step N ("one step behind"), so the device computes while the host
//! detokenizes, matches stop strings and calls the sinks. Stop strings,
//! EOS and limits are judged on the tokens as they come back; a step
//! already submitted for a sequence that ended is not used.
//!
//! Each sequence gets the output it would get alone, bit for bit:
//! - the batched pass gives every row the kernels of its own sequence
//!   (see `CpuModel::forward_batch`; on the GPU, `GpuModel::step_batch`);
//! - prompt chunks start at fixed positions (multiples of `chunk`), so the
//!   attention path of every prompt token does not depend on which other
//!   requests were running;
//! - a reused cache prefix is shortened where the backend says it must be
//!   ([`Backend::reusable_prefix`]);
//! - sampling is the backend's, seeded per sequence; stop strings and
//!   logprobs go through one [`Emitter`] per sequence.
//!
//! A constrained sequence's feeds are held ([`Want::Next`] with `held`):
//! its step N+1 is submitted as any other, and once the host has read
//! token N (one step behind) and told the constraint, it hands the
//! backend what token N+1 may be while that pass still runs. A token the
//! constraint forces is fed without sampling; one that allows only the
//! end stops the sequence (`stop`).

use std::collections::VecDeque;
use std::time::Instant;

use kestrel_sampling::{logprobs, TokenLogprobs};

use crate::backend::{Backend, Feed, Output, SeqId, Want};
use crate::constraint::{Allowed, TokenConstraint};
use crate::generate::Emitter;
use crate::{Engine, EngineError, GenStats, GenerateParams, Generation, StopReason, TokenEvent};

/// Prompt tokens fed per step (a chunk), as `run` and `serve` feed them:
/// llama.cpp's micro-batch, so that a prompt's rows meet the same kernels
/// as in llama.cpp (a row's kernels depend on its pass: with 256, a
/// 310-token prompt's last 54 rows took the one-query attention instead
/// of the tiled one, and SmolLM2's greedy text parted from llama.cpp's at
/// the fifth token); small enough that a long prompt holds the running
/// streams up for a fraction of a second.
pub const PROMPT_CHUNK: usize = kestrel_cpu::N_UBATCH;

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

/// A running sequence, as the host sees it.
struct Seq<'e> {
    id: u64,
    params: GenerateParams,
    emitter: Emitter<'e, Sink<'e>>,
    prompt_len: usize,
    /// Prompt, then the generated tokens read back so far.
    history: Vec<u32>,
    /// Positions fed to the backend (their keys and values are, or will
    /// be once the submitted steps ran, in the cache).
    n_past: usize,
    /// Tokens chosen by submitted steps and not read yet.
    pending: usize,
    cache_n: usize,
    started: Instant,
    /// When the prompt's last chunk came back.
    prompt_done: Option<Instant>,
    /// The request's constraint state, if it has one.
    constraint: Option<Box<dyn TokenConstraint>>,
    /// A held feed of the latest step waits for this sequence's selection.
    awaiting_selection: bool,
    /// The constraint allowed only the end: the token read next ends it.
    ended_by_constraint: bool,
    /// Host time in the constraint.
    constraint_time: std::time::Duration,
}

impl Seq<'_> {
    /// Whether the limits allow asking for one more token.
    fn may_ask(&self, n_ctx: usize) -> bool {
        let asked = self.history.len() - self.prompt_len + self.pending;
        self.n_past < n_ctx && !self.params.limit_reached(asked)
    }
}

struct Slot<'e> {
    seq: SeqId,
    /// The tokens whose keys and values the cache holds, from position 0
    /// (kept after a sequence leaves, for the next one to reuse).
    cached: Vec<u32>,
    running: Option<Seq<'e>>,
}

/// The running sequences of a server, of `run` (one slot), or of any
/// caller with several requests at once.
pub struct Batch<'e> {
    engine: &'e Engine,
    backend: Box<dyn Backend + 'e>,
    slots: Vec<Slot<'e>>,
    n_ctx: usize,
    chunk: usize,
    pipelined: bool,
    /// The steps submitted and not read, oldest first: per feed, the slot
    /// and the sequence it was for.
    in_flight: VecDeque<Vec<(usize, u64)>>,
}

/// A step's outcome for a sequence that left.
pub type Finished = (u64, Result<Generation, EngineError>);

impl<'e> Batch<'e> {
    /// `n_slots` slots of the backend's context each; prompts are fed
    /// `chunk` tokens at a time (at most about one chunk of prompt per
    /// step, so decoding sequences are never held up for long).
    pub fn new(
        engine: &'e Engine,
        mut backend: Box<dyn Backend + 'e>,
        n_slots: usize,
        chunk: usize,
    ) -> Result<Batch<'e>, EngineError> {
        let slots = (0..n_slots.max(1))
            .map(|_| {
                Ok(Slot {
                    seq: backend.create_seq()?,
                    cached: Vec::new(),
                    running: None,
                })
            })
            .collect::<Result<Vec<_>, EngineError>>()?;
        Ok(Batch {
            engine,
            n_ctx: backend.facts().n_ctx,
            backend,
            slots,
            chunk: chunk.max(1),
            pipelined: true,
            in_flight: VecDeque::new(),
        })
    }

    /// Reads each step right after submitting it (`false`) instead of one
    /// step behind: the same computations on the same inputs, so the same
    /// output.
    pub fn pipelined(mut self, on: bool) -> Self {
        self.pipelined = on;
        self
    }

    pub fn n_ctx(&self) -> usize {
        self.n_ctx
    }

    /// The device the steps run on.
    pub fn device(&self) -> &crate::backend::DeviceFacts {
        self.backend.facts()
    }

    pub fn has_free_slot(&self) -> bool {
        self.slots.iter().any(|s| s.running.is_none())
    }

    /// No sequence is running.
    pub fn is_idle(&self) -> bool {
        self.slots.iter().all(|s| s.running.is_none())
    }

    pub fn running(&self) -> usize {
        self.slots.iter().filter(|s| s.running.is_some()).count()
    }

    /// The ids of the running sequences.
    pub fn ids(&self) -> Vec<u64> {
        self.slots
            .iter()
            .filter_map(|s| s.running.as_ref().map(|q| q.id))
            .collect()
    }

    pub fn slot_info(&self) -> Vec<SlotInfo> {
        self.slots
            .iter()
            .enumerate()
            .map(|(id, s)| match &s.running {
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
        self.engine
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
            .filter(|(_, s)| s.running.is_none())
            .map(|(i, s)| (i, if cache_prompt { common(s) } else { 0 }))
            // The longest shared prefix; the first slot among equals.
            .max_by_key(|&(i, n)| (n, usize::MAX - i))
            .ok_or(AdmitError::Busy)?;
        let seq = self.slots[slot_id].seq;
        let keep = self
            .backend
            .reusable_prefix(seq, common, prompt.len(), self.chunk);
        let constraint = match &params.constraint {
            Some(c) => Some(
                c.0.start()
                    .map_err(|e| AdmitError::Invalid(EngineError::Constraint(e)))?,
            ),
            None => None,
        };
        self.backend
            .start(seq, &prompt, keep, &self.engine.sampler_params(&params))
            .map_err(AdmitError::Invalid)?;
        let slot = &mut self.slots[slot_id];
        slot.cached.truncate(keep);
        slot.running = Some(Seq {
            id,
            emitter: Emitter::new(&self.engine.tokenizer, &params.stop, sink),
            params,
            prompt_len: prompt.len(),
            history: prompt,
            n_past: keep,
            pending: 0,
            cache_n: keep,
            started: Instant::now(),
            prompt_done: None,
            constraint,
            awaiting_selection: false,
            ended_by_constraint: false,
            constraint_time: std::time::Duration::ZERO,
        });
        Ok(slot_id)
    }

    /// Ends sequence `id` now (its client left); returns what it generated.
    pub fn cancel(&mut self, id: u64) -> Option<Generation> {
        let slot = self
            .slots
            .iter_mut()
            .find(|s| s.running.as_ref().is_some_and(|q| q.id == id))?;
        let seq = slot.running.take().expect("found");
        Some(finish(slot, seq, StopReason::Cancelled))
    }

    /// What each running sequence feeds this step: decoding sequences
    /// their last token (chosen, maybe not read yet), prefilling ones
    /// their next prompt chunk (oldest first, about one chunk in all).
    fn plan(&self) -> Vec<(usize, Feed)> {
        let mut feeds = Vec::new();
        let mut prefilling: Vec<(Instant, usize)> = Vec::new();
        for (i, s) in self.slots.iter().enumerate() {
            let Some(q) = &s.running else { continue };
            if q.n_past + 1 < q.prompt_len {
                prefilling.push((q.started, i));
            } else if q.n_past + 1 == q.prompt_len {
                // The prompt's last token, alone in its chunk.
                feeds.push((i, self.prompt_feed(s.seq, q, q.prompt_len)));
            } else if q.n_past < q.history.len() + q.pending && q.may_ask(self.n_ctx) {
                let want = Want::Next {
                    logits: q.params.n_probs > 0,
                    held: q.constraint.is_some(),
                };
                feeds.push((
                    i,
                    Feed {
                        seq: s.seq,
                        from: q.n_past,
                        to: q.n_past + 1,
                        want,
                    },
                ));
            }
        }
        prefilling.sort();
        let mut budget = self.chunk;
        for (_, i) in prefilling {
            let s = &self.slots[i];
            let q = s.running.as_ref().expect("prefilling");
            let to = ((q.n_past / self.chunk + 1) * self.chunk).min(q.prompt_len);
            // The oldest prompt always gets its chunk; others while they fit.
            if to - q.n_past > budget && budget < self.chunk {
                break;
            }
            budget = budget.saturating_sub(to - q.n_past);
            feeds.push((i, self.prompt_feed(s.seq, q, to)));
        }
        feeds
    }

    /// A prompt chunk of `q` ending at `to`: the chunk that ends the
    /// prompt asks for the first token, unless the limit allows none.
    fn prompt_feed(&self, seq: SeqId, q: &Seq<'_>, to: usize) -> Feed {
        let generated = q.history.len() - q.prompt_len;
        let want = if to == q.prompt_len && !q.params.limit_reached(generated) {
            Want::Next {
                logits: q.params.n_probs > 0,
                held: q.constraint.is_some(),
            }
        } else {
            Want::Cache
        };
        Feed {
            seq,
            from: q.n_past,
            to,
            want,
        }
    }

    /// One step: submit what the sequences feed, then read the step before
    /// (or, unpipelined, this one) and emit its tokens. Returns the
    /// sequences that ended.
    pub fn step(&mut self) -> Vec<Finished> {
        let mut done = Vec::new();
        let plan = self.plan();
        let submitted = !plan.is_empty();
        if submitted {
            let feeds: Vec<Feed> = plan.iter().map(|&(_, f)| f).collect();
            match self.backend.submit(&feeds) {
                Ok(()) => {
                    let mut tags = Vec::with_capacity(plan.len());
                    for &(i, f) in &plan {
                        let q = self.slots[i].running.as_mut().expect("planned");
                        q.n_past = f.to;
                        if matches!(f.want, Want::Next { .. }) {
                            q.pending += 1;
                        }
                        q.awaiting_selection = f.want.is_held();
                        tags.push((i, q.id));
                    }
                    self.in_flight.push_back(tags);
                    self.select(&mut done);
                }
                Err(e) => {
                    for &(i, _) in &plan {
                        fail(&mut self.slots[i], &e, &mut done);
                    }
                }
            }
        }
        let behind = usize::from(submitted && self.pipelined);
        while self.in_flight.len() > behind {
            let tags = self.in_flight.pop_front().expect("in flight");
            match self.backend.read() {
                Ok(Some(outputs)) => {
                    for (&(i, id), out) in tags.iter().zip(outputs) {
                        self.take_output(i, id, out, &mut done);
                    }
                    self.select(&mut done);
                }
                Ok(None) => {}
                Err(e) => {
                    for &(i, id) in &tags {
                        if self.slots[i].running.as_ref().is_some_and(|q| q.id == id) {
                            fail(&mut self.slots[i], &e, &mut done);
                        }
                    }
                }
            }
        }
        done
    }

    /// Hands the backend the selection of each held token whose sequence
    /// the host has caught up with (every earlier token read): the
    /// constraint's answer, computed while that token's pass runs.
    fn select(&mut self, done: &mut Vec<Finished>) {
        let end_token = self.engine.end_token();
        for slot in &mut self.slots {
            let Some(q) = slot.running.as_mut() else {
                continue;
            };
            if !q.awaiting_selection || q.pending != 1 {
                continue;
            }
            q.awaiting_selection = false;
            let t0 = Instant::now();
            let next = q.constraint.as_mut().map(|c| c.next());
            q.constraint_time += t0.elapsed();
            let allowed = match next {
                Some(Ok(a)) => a,
                Some(Err(e)) => {
                    fail(slot, &EngineError::Constraint(e), done);
                    continue;
                }
                None => Allowed::Any,
            };
            q.ended_by_constraint = allowed == Allowed::End;
            if let Err(e) = self.backend.select(slot.seq, allowed.selection(end_token)) {
                fail(slot, &e, done);
            }
        }
    }

    /// A feed's output for the sequence `id` in slot `i` (ignored when that
    /// sequence has left).
    fn take_output(&mut self, i: usize, id: u64, out: Output, done: &mut Vec<Finished>) {
        let slot = &mut self.slots[i];
        let Some(q) = slot.running.as_mut().filter(|q| q.id == id) else {
            return;
        };
        let reason = match out.token {
            Some(token) => {
                q.pending -= 1;
                q.prompt_done.get_or_insert_with(Instant::now);
                let n_probs = q.params.n_probs;
                let lp = out
                    .logits
                    .filter(|_| n_probs > 0)
                    .map(|row| logprobs(&row, token, n_probs));
                if q.ended_by_constraint {
                    Some(StopReason::EndOfGeneration)
                } else if let Some(Err(e)) = {
                    let t0 = Instant::now();
                    let r = q.constraint.as_mut().map(|c| c.accept(token));
                    q.constraint_time += t0.elapsed();
                    r
                } {
                    // The backend chose what the constraint allowed: an
                    // error here is the constraint's own.
                    fail(slot, &EngineError::Constraint(e), done);
                    return;
                } else {
                    accept(self.engine, q, token, lp)
                }
            }
            // A prompt chunk: the last one, with no token asked (the limit
            // is 0), ends the sequence.
            None if q.n_past >= q.prompt_len
                && q.pending == 0
                && q.history.len() == q.prompt_len =>
            {
                q.prompt_done.get_or_insert_with(Instant::now);
                Some(StopReason::Length)
            }
            None => None,
        };
        if let Some(reason) = reason {
            let seq = slot.running.take().expect("running");
            done.push((seq.id, Ok(finish(slot, seq, reason))));
        }
    }
}

impl Drop for Batch<'_> {
    fn drop(&mut self) {
        for s in &self.slots {
            self.backend.free_seq(s.seq);
        }
    }
}

/// Ends a slot's sequence with a backend error; its cache is not reused.
fn fail(slot: &mut Slot<'_>, e: &EngineError, done: &mut Vec<Finished>) {
    if let Some(q) = slot.running.take() {
        slot.cached.clear();
        done.push((q.id, Err(EngineError::Backend(e.to_string()))));
    }
}

/// Takes a sequence's next token: ends at an end-of-generation token, else
/// appends and emits it; returns why the sequence ends, if it does.
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
    // token the host knows (a step may have fed a token never read).
    let valid = seq.n_past.min(seq.history.len());
    slot.cached.clear();
    slot.cached.extend_from_slice(&seq.history[..valid]);
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
            constraint_ms: seq.constraint_time.as_secs_f64() * 1000.0,
            stop,
        },
        tokens,
        text,
        logprobs,
    }
}
