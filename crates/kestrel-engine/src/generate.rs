//! The generation loop: prefill, then one token per step — sample with the
//! full token history, check end-of-generation and limits, detokenize, match
//! stop strings, report the token (and its logprobs) to the caller.
//!
//! # Pipelining
//!
//! By default the forward pass for step N+1 runs on a worker thread while the
//! calling thread does step N's host work (logprobs, detokenizing, stop
//! strings, the caller's callback). This is possible because the token fed
//! to forward N+1 is token N itself, known as soon as it is sampled: the
//! loop samples N, submits forward(N), then emits N while the worker
//! computes. The sampler always sees the complete history, since sampling
//! N+1 waits for forward(N)'s logits, by which time N is in the history.
//! If emitting N ends generation (a stop string completes, the callback
//! cancels), the speculative forward's logits are dropped; the KV cache it
//! wrote to belongs to this call alone, so nothing later sees that entry.
//! The same loop runs unpipelined ([`GenerateParams::pipelined`] = false),
//! computing each forward on the calling thread when its logits are needed;
//! both orders feed identical inputs to identical computations, so their
//! output is identical (a test checks this on a real model).

use std::sync::mpsc::{channel, Receiver, Sender};
use std::time::Instant;

use kestrel_cpu::{CpuModel, KvCache, Logits};
use kestrel_sampling::{logprobs, Sampler, SamplerParams, StopMatcher, TokenLogprobs};
use kestrel_tokenizer::{StreamDecoder, Tokenizer};

use crate::{Engine, EngineError};

/// Why generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// An end-of-generation token was sampled (it is not emitted).
    EndOfGeneration,
    /// `n_predict` tokens were generated.
    Length,
    /// The context is full.
    ContextFull,
    /// The caller's callback asked to stop.
    Cancelled,
    /// A stop string appeared in the text (it is not emitted, nor is
    /// anything after it).
    StopString,
}

/// Counts and times of one generation.
#[derive(Clone, Debug)]
pub struct GenStats {
    /// The whole prompt, including `cache_n`.
    pub prompt_tokens: usize,
    /// Prompt tokens whose keys and values were reused from an earlier
    /// request in the same slot (not computed again).
    pub cache_n: usize,
    /// Prompt tokens computed for this request: those past `cache_n`, or
    /// fewer when it ended during the prefill (its client left).
    pub prompt_n: usize,
    pub prompt_ms: f64,
    pub generated_tokens: usize,
    /// From the end of the prefill to the end of the loop (pipelined, that
    /// includes a speculative step discarded after a stop string or cancel).
    pub generate_ms: f64,
    pub stop: StopReason,
}

impl GenStats {
    pub fn prompt_tps(&self) -> f64 {
        per_second(self.prompt_n, self.prompt_ms)
    }
    pub fn generate_tps(&self) -> f64 {
        per_second(self.generated_tokens, self.generate_ms)
    }
}

fn per_second(n: usize, ms: f64) -> f64 {
    if ms > 0.0 {
        n as f64 * 1000.0 / ms
    } else {
        0.0
    }
}

/// What to generate. Build with struct-update syntax from
/// [`GenerateParams::default`] so code keeps compiling as fields are added.
#[derive(Clone, Debug)]
pub struct GenerateParams {
    /// Maximum tokens to generate; negative = until the context is full.
    pub n_predict: i64,
    pub n_ctx: usize,
    pub sampler: SamplerParams,
    /// Never stop at an end-of-generation token: as llama.cpp, their logits
    /// are set to `-inf` (a logit bias), so they are not sampled.
    pub ignore_eos: bool,
    /// Stop strings, matched across token boundaries in the generated text;
    /// empty strings are ignored.
    pub stop: Vec<String>,
    /// Report the log-probabilities of each generated token and of the
    /// `n_probs` most likely tokens at that step (0 = off). They are those of
    /// the model's raw distribution (softmax of the logits, before bias,
    /// penalties, filters and temperature), as llama-server reports by default.
    pub n_probs: usize,
    /// Overlap each step's host work with the next step's forward pass on a
    /// worker thread (see the module documentation). Same output either way.
    pub pipelined: bool,
    /// Sliding-window layers as llama.cpp's `--swa-full` has them (every
    /// position its own cell); by default as its default ring of cells
    /// (see [`kestrel_cpu::KvCache::full_swa`]). Only the order the
    /// attention visits the keys differs, so only the last bits.
    pub swa_full: bool,
}

impl GenerateParams {
    /// Whether `generated` tokens reach `n_predict` (never when it is negative).
    pub(crate) fn limit_reached(&self, generated: usize) -> bool {
        self.n_predict >= 0 && generated as i64 >= self.n_predict
    }
}

impl Default for GenerateParams {
    /// Until an end token or a full context of 4096, llama.cpp's default
    /// sampler (random seed), pipelined, no stop strings, no logprobs.
    fn default() -> GenerateParams {
        GenerateParams {
            n_predict: -1,
            n_ctx: 4096,
            sampler: SamplerParams::default(),
            ignore_eos: false,
            stop: Vec::new(),
            n_probs: 0,
            pipelined: true,
            swa_full: false,
        }
    }
}

/// One call of the generation callback.
#[derive(Clone, Copy, Debug)]
pub struct TokenEvent<'a> {
    /// The token generated at this step; `None` for the final call, which
    /// only flushes text held back until the end.
    pub token: Option<u32>,
    /// Text that became final at this step (possibly empty: an incomplete
    /// UTF-8 character, or a possible start of a stop string, is held back).
    /// Text is never retracted: the concatenation over all calls is
    /// [`Generation::text`].
    pub text: &'a str,
    /// The token's log-probabilities, when [`GenerateParams::n_probs`] > 0.
    pub logprobs: Option<&'a TokenLogprobs>,
}

/// The outcome of [`Engine::generate`].
#[derive(Clone, Debug)]
pub struct Generation {
    /// Every generated token, including one whose text completed a stop
    /// string; an end-of-generation token is not included.
    pub tokens: Vec<u32>,
    /// The text shown, stop string excluded.
    pub text: String,
    /// One entry per token of `tokens` when [`GenerateParams::n_probs`] > 0.
    pub logprobs: Vec<TokenLogprobs>,
    pub stats: GenStats,
}

/// Where a decode step's forward pass runs.
enum Forward<'m> {
    /// On the calling thread, when [`Forward::wait`] asks for the logits.
    Inline {
        model: &'m CpuModel,
        cache: KvCache,
        pending: Option<(u32, usize)>,
    },
    /// On a worker thread that owns the cache; `submit` returns at once.
    Worker {
        requests: Sender<(u32, usize)>,
        results: Receiver<Vec<f32>>,
    },
}

impl Forward<'_> {
    /// Starts (or, inline, schedules) the pass that feeds `token` at `pos`.
    fn submit(&mut self, token: u32, pos: usize) -> Result<(), EngineError> {
        match self {
            Forward::Inline { pending, .. } => *pending = Some((token, pos)),
            Forward::Worker { requests, .. } => requests
                .send((token, pos))
                .map_err(|_| EngineError::DecodeWorker)?,
        }
        Ok(())
    }

    /// The logits of the submitted pass.
    fn wait(&mut self) -> Result<Vec<f32>, EngineError> {
        match self {
            Forward::Inline {
                model,
                cache,
                pending,
            } => {
                let (token, pos) = pending.take().ok_or(EngineError::DecodeWorker)?;
                Ok(model.forward(&[token], pos, cache, Logits::Last))
            }
            Forward::Worker { results, .. } => {
                results.recv().map_err(|_| EngineError::DecodeWorker)
            }
        }
    }
}

/// The host side of a step: detokenizing, stop strings, the callback.
pub(crate) struct Emitter<'t, F> {
    decoder: StreamDecoder<'t>,
    matcher: StopMatcher,
    text: String,
    logprobs: Vec<TokenLogprobs>,
    on_event: F,
}

impl<'t, F: FnMut(&TokenEvent<'_>) -> bool> Emitter<'t, F> {
    pub(crate) fn new(tokenizer: &'t Tokenizer, stop: &[String], on_event: F) -> Self {
        Emitter {
            decoder: StreamDecoder::new(tokenizer, false),
            matcher: StopMatcher::new(stop.iter().cloned()),
            text: String::new(),
            logprobs: Vec::new(),
            on_event,
        }
    }

    /// Emits one generated token; returns why generation must end, if it must.
    pub(crate) fn token(&mut self, token: u32, lp: Option<TokenLogprobs>) -> Option<StopReason> {
        let piece = self.decoder.push(token);
        let step = self.matcher.push(&piece);
        self.text.push_str(&step.text);
        let go_on = (self.on_event)(&TokenEvent {
            token: Some(token),
            text: &step.text,
            logprobs: lp.as_ref(),
        });
        self.logprobs.extend(lp);
        if step.stopped {
            Some(StopReason::StopString)
        } else if !go_on {
            Some(StopReason::Cancelled)
        } else {
            None
        }
    }

    /// Releases what was held back; a stop string can still complete in the
    /// detokenizer's last bytes. Returns the text and whether that happened.
    pub(crate) fn finish(self) -> (String, Vec<TokenLogprobs>, bool) {
        let Emitter {
            decoder,
            mut matcher,
            mut text,
            logprobs,
            mut on_event,
        } = self;
        let mut rest = String::new();
        let mut stopped = matcher.is_stopped();
        if !stopped {
            let step = matcher.push(&decoder.finish());
            rest.push_str(&step.text);
            stopped = step.stopped;
            rest.push_str(&matcher.finish());
        }
        if !rest.is_empty() {
            // Generation is over: the callback cannot cancel anything now.
            on_event(&TokenEvent {
                token: None,
                text: &rest,
                logprobs: None,
            });
            text.push_str(&rest);
        }
        (text, logprobs, stopped)
    }
}

impl Engine {
    /// Generates from `prompt` tokens. `on_event` is called once per
    /// generated token (with the text it made final, possibly empty, and its
    /// logprobs if asked for) and returns `false` to stop; a last call with
    /// `token: None` flushes text held back until the end.
    pub fn generate(
        &self,
        prompt: &[u32],
        params: &GenerateParams,
        on_event: impl FnMut(&TokenEvent<'_>) -> bool,
    ) -> Result<Generation, EngineError> {
        let sampler = self.check_request(prompt, params)?;
        let mut emitter = Emitter::new(&self.tokenizer, &params.stop, on_event);

        let mut cache: KvCache = self.model.new_cache(params.n_ctx);
        if params.swa_full {
            cache.full_swa();
        }
        let t0 = Instant::now();
        let logits = self.model.forward(prompt, 0, &mut cache, Logits::Last);
        let prompt_ms = t0.elapsed().as_secs_f64() * 1000.0;

        let t1 = Instant::now();
        let mut history = prompt.to_vec();
        let stop = if params.pipelined {
            let model = &self.model;
            std::thread::scope(|s| {
                let (requests, worker_requests) = channel::<(u32, usize)>();
                let (worker_results, results) = channel();
                // The passes start on a worker of the model's pool, which
                // then leads them without a hand-off (see `CpuModel::install`).
                s.spawn(move || {
                    model.install(move || {
                        let mut cache = cache;
                        for (token, pos) in worker_requests {
                            let logits = model.forward(&[token], pos, &mut cache, Logits::Last);
                            // The receiver is gone when generation ended while
                            // this (speculative) pass ran: its logits are not
                            // needed.
                            if worker_results.send(logits).is_err() {
                                break;
                            }
                        }
                    })
                });
                let mut forward = Forward::Worker { requests, results };
                // Dropping `forward` at the end of this closure closes the
                // request channel, so the worker ends and the scope can join.
                self.decode(
                    logits,
                    &mut history,
                    params,
                    sampler,
                    &mut forward,
                    &mut emitter,
                )
            })?
        } else {
            let mut forward = Forward::Inline {
                model: &self.model,
                cache,
                pending: None,
            };
            self.decode(
                logits,
                &mut history,
                params,
                sampler,
                &mut forward,
                &mut emitter,
            )?
        };
        let generate_ms = t1.elapsed().as_secs_f64() * 1000.0;
        let (text, logprobs, stopped_late) = emitter.finish();
        let stop = if stopped_late {
            StopReason::StopString
        } else {
            stop
        };
        let tokens = history.split_off(prompt.len());
        let stats = GenStats {
            prompt_tokens: prompt.len(),
            cache_n: 0,
            prompt_n: prompt.len(),
            prompt_ms,
            generated_tokens: tokens.len(),
            generate_ms,
            stop,
        };
        Ok(Generation {
            tokens,
            text,
            logprobs,
            stats,
        })
    }

    /// Checks a request against the model (prompt length and ids, logit
    /// bias ids, context) and builds its sampler (EOG tokens banned when
    /// `ignore_eos`).
    pub(crate) fn check_request(
        &self,
        prompt: &[u32],
        params: &GenerateParams,
    ) -> Result<Sampler, EngineError> {
        if params.n_ctx == 0 {
            return Err(EngineError::ZeroContext);
        }
        if prompt.is_empty() {
            return Err(EngineError::EmptyPrompt);
        }
        if prompt.len() >= params.n_ctx {
            return Err(EngineError::PromptTooLong {
                prompt: prompt.len(),
                n_ctx: params.n_ctx,
            });
        }
        let n_vocab = self.model.spec.hparams.n_vocab;
        if let Some(&bad) = prompt.iter().find(|&&t| t as usize >= n_vocab) {
            return Err(EngineError::TokenOutOfRange { id: bad, n_vocab });
        }
        if let Some(&(id, _)) = params
            .sampler
            .logit_bias
            .iter()
            .find(|(id, _)| *id as usize >= n_vocab)
        {
            return Err(EngineError::LogitBiasOutOfRange { id, n_vocab });
        }

        let mut sampler_params = params.sampler.clone();
        if params.ignore_eos {
            sampler_params.logit_bias.extend(
                self.tokenizer
                    .eog_ids()
                    .iter()
                    .map(|&id| (id, f32::NEG_INFINITY)),
            );
        }
        Ok(Sampler::new(sampler_params))
    }

    /// The decode loop shared by both modes; `logits` are the prompt's.
    /// Appends the generated tokens to `history`.
    fn decode<F: FnMut(&TokenEvent<'_>) -> bool>(
        &self,
        mut logits: Vec<f32>,
        history: &mut Vec<u32>,
        params: &GenerateParams,
        mut sampler: Sampler,
        forward: &mut Forward<'_>,
        emitter: &mut Emitter<'_, F>,
    ) -> Result<StopReason, EngineError> {
        let prompt_len = history.len();
        loop {
            if params.limit_reached(history.len() - prompt_len) {
                return Ok(StopReason::Length);
            }
            let token = sampler.sample_with_history(&logits, history);
            if !params.ignore_eos && self.tokenizer.is_eog(token) {
                return Ok(StopReason::EndOfGeneration);
            }
            history.push(token);
            // The new token sits at this position; feeding it needs a cache slot.
            let pos = history.len() - 1;
            let last = if pos >= params.n_ctx {
                Some(StopReason::ContextFull)
            } else if params.limit_reached(history.len() - prompt_len) {
                Some(StopReason::Length)
            } else {
                None
            };
            if last.is_none() {
                forward.submit(token, pos)?;
            }
            // Host work for this token, in the shadow of the pass just submitted.
            let lp = (params.n_probs > 0).then(|| logprobs(&logits, token, params.n_probs));
            if let Some(reason) = emitter.token(token, lp) {
                return Ok(reason);
            }
            if let Some(reason) = last {
                return Ok(reason);
            }
            logits = forward.wait()?;
        }
    }
}
