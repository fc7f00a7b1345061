//! One request's generation: its parameters ([`GenerateParams`]), what it
//! reports as it goes ([`TokenEvent`]) and in the end ([`Generation`]),
//! the host side of each token ([`Emitter`]: detokenizing, stop strings,
//! the callback), and [`Engine::generate`], which runs a request as the
//! only sequence of a one-slot [`Batch`] on the CPU.
//!
//! Pipelined (the default), the backend computes step N+1 while the host
//! emits token N (see [`crate::batch`]); unpipelined, each step is read as
//! soon as it is submitted. Both orders feed identical inputs to identical
//! computations, so their output is identical (a test checks this on a
//! real model).

use kestrel_sampling::{SamplerParams, StopMatcher, TokenLogprobs};
use kestrel_tokenizer::{StreamDecoder, Tokenizer};

use crate::backend::cpu::CpuBackend;
use crate::{AdmitError, Batch, Engine, EngineError};

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
    /// Host time spent in the constraint (masks and accepted tokens); it
    /// runs while the next pass computes, so it adds to `generate_ms` only
    /// where it outlasts the pass.
    pub constraint_ms: f64,
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
    /// Structured output: what each token may be (a JSON schema, a
    /// grammar); none by default.
    pub constraint: Option<crate::Constraint>,
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
            constraint: None,
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
        self.check_request(prompt, params)?;
        let backend = CpuBackend::new(self.model.clone(), params.n_ctx, params.swa_full)?;
        let mut batch = Batch::new(self, Box::new(backend), 1, crate::PROMPT_CHUNK)?
            .pipelined(params.pipelined);
        match batch.admit(0, prompt.to_vec(), params, false, Box::new(on_event)) {
            Ok(_) => {}
            Err(AdmitError::Invalid(e)) => return Err(e),
            Err(AdmitError::Busy) => unreachable!("a fresh one-slot batch has a free slot"),
        }
        loop {
            if let Some((_, result)) = batch.step().pop() {
                return result;
            }
        }
    }

    /// Checks a request against the model: prompt length and ids, logit
    /// bias ids, context.
    pub(crate) fn check_request(
        &self,
        prompt: &[u32],
        params: &GenerateParams,
    ) -> Result<(), EngineError> {
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

        Ok(())
    }
}
