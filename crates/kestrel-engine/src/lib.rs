//! The engine: loads a GGUF model (weights, tokenizer, chat template) and
//! runs it. [`backend`] is the seam to the devices (CPU and GPU);
//! [`batch`] is the one decode loop over a backend (`run`, `serve`,
//! `bench`); [`constraint`] is what it knows of structured output;
//! [`generate`] owns a request's parameters, stop strings and
//! results; [`perplexity`] owns llama-perplexity's chunked evaluation.

use std::path::Path;
use std::sync::Arc;

use kestrel_cpu::CpuModel;
use kestrel_gguf::{Backing, GgufFile};
use kestrel_model::ModelSpec;
use kestrel_tokenizer::chat::{ChatMessage, ChatTemplate};
use kestrel_tokenizer::Tokenizer;

pub mod backend;
pub mod batch;
pub mod constraint;
pub mod context;
pub mod generate;
pub mod grammar;
pub mod perplexity;

pub use backend::{Backend, BackendOptions, Device, DeviceFacts};
pub use batch::{AdmitError, Batch, Sink, SlotInfo, PROMPT_CHUNK};
pub use constraint::{Allowed, Constraint, ConstraintSource, TokenConstraint};
pub use context::{context_size, ContextError, ContextSize};
pub use generate::{GenStats, GenerateParams, Generation, StopReason, TokenEvent};
pub use grammar::GrammarConstraint;
pub use kestrel_constrain::{Compiler, ConstraintError, Spec, Vocabulary};
/// The GPU adapters wgpu finds (`kestrel devices`).
pub use kestrel_gpu::{adapters, AdapterSummary};
pub use kestrel_sampling::TokenLogprobs;
pub use perplexity::{ChunkReport, PerplexityError, PerplexityParams, PerplexityResult};

/// Re-exported so front ends that drive forward passes themselves (the
/// benchmark) need not depend on the backend crate.
pub use kestrel_cpu::{KvCache, Logits, Profile};

/// Why loading or generation failed; every variant names what was wrong.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("{path}: {err}")]
    Gguf {
        path: String,
        err: kestrel_gguf::GgufError,
    },
    #[error("{0}")]
    Model(#[from] kestrel_model::ModelError),
    #[error("{0}")]
    Tensors(#[from] kestrel_cpu::LoadError),
    #[error("tokenizer: {0}")]
    Tokenizer(#[from] kestrel_tokenizer::TokenizerError),
    #[error("chat template: {0}")]
    Chat(#[from] kestrel_tokenizer::chat::ChatError),
    #[error("the vocabulary has {tokenizer} tokens but the embedding table has {model} rows")]
    VocabMismatch { tokenizer: usize, model: usize },
    #[error("the prompt is empty")]
    EmptyPrompt,
    #[error("the prompt has {prompt} tokens, which does not fit the context of {n_ctx}")]
    PromptTooLong { prompt: usize, n_ctx: usize },
    #[error("context size must be at least 1")]
    ZeroContext,
    #[error("token id {id} is outside the vocabulary of {n_vocab}")]
    TokenOutOfRange { id: u32, n_vocab: usize },
    #[error("logit bias for token id {id}, which is outside the vocabulary of {n_vocab}")]
    LogitBiasOutOfRange { id: u32, n_vocab: usize },
    /// The thread running the CPU backend's passes stopped without an
    /// answer (a panic there is raised again on the caller's thread).
    #[error("the decode worker thread stopped unexpectedly")]
    DecodeWorker,
    /// A backend refused a step (a scheduler bug, or a device failure).
    #[error("backend: {0}")]
    Backend(String),
    #[error("gpu: {0}")]
    Gpu(#[from] kestrel_gpu::GpuError),
    /// A constraint (grammar, JSON schema) failed while generating.
    #[error("constraint: {0}")]
    Constraint(String),
}

/// A loaded model with its tokenizer and chat template.
pub struct Engine {
    pub file: Arc<GgufFile>,
    /// Shared with the CPU backend's worker thread.
    pub model: Arc<CpuModel>,
    pub tokenizer: Tokenizer,
    /// The model's own template, or `None` when it has none (ChatML is used then).
    pub template: Option<ChatTemplate>,
    /// Structured output's compiler, made on first use (the vocabulary's
    /// token trie takes a moment on a large vocabulary).
    compiler: std::sync::OnceLock<Result<Compiler, String>>,
}

impl Engine {
    /// Opens and validates a model file; `threads` sizes the CPU backend.
    /// The bytes are held as [`Backing::preferred`] says.
    pub fn load(path: &Path, threads: usize) -> Result<Engine, EngineError> {
        Self::load_backed(path, threads, Backing::preferred())
    }

    /// As [`Engine::load`], with the model's bytes held as `backing` says.
    pub fn load_backed(
        path: &Path,
        threads: usize,
        backing: Backing,
    ) -> Result<Engine, EngineError> {
        let file = GgufFile::open_backed(path, backing).map_err(|err| EngineError::Gguf {
            path: path.display().to_string(),
            err,
        })?;
        let file = Arc::new(file);
        let spec = ModelSpec::from_gguf(&file)?;
        let tokenizer = Tokenizer::from_gguf(&file)?;
        let model = Arc::new(CpuModel::load(file.clone(), spec, threads)?);
        if tokenizer.vocab_size() > model.spec.hparams.n_vocab {
            return Err(EngineError::VocabMismatch {
                tokenizer: tokenizer.vocab_size(),
                model: model.spec.hparams.n_vocab,
            });
        }
        let template = match file.get_str("tokenizer.chat_template") {
            Some(src) => {
                let bos = tokenizer
                    .bos()
                    .and_then(|id| tokenizer.token_text(id))
                    .unwrap_or("");
                let eos = tokenizer
                    .eos()
                    .and_then(|id| tokenizer.token_text(id))
                    .unwrap_or("");
                Some(ChatTemplate::new(src, bos, eos)?)
            }
            None => None,
        };
        Ok(Engine {
            file,
            model,
            tokenizer,
            template,
            compiler: std::sync::OnceLock::new(),
        })
    }

    /// Compiles a constraint (a JSON schema, a grammar) against this
    /// model's vocabulary.
    pub fn compile(&self, spec: &Spec) -> Result<kestrel_constrain::Grammar, ConstraintError> {
        let compiler = self.compiler.get_or_init(|| {
            Vocabulary::new(&self.tokenizer)
                .and_then(Compiler::new)
                .map_err(|e| e.to_string())
        });
        match compiler {
            Ok(c) => c.compile(spec),
            Err(e) => Err(ConstraintError::Vocabulary(e.clone())),
        }
    }

    /// Renders a conversation with the model's template (ChatML when it has none)
    /// and a generation prompt for the assistant.
    pub fn render_chat(&self, messages: &[ChatMessage]) -> Result<String, EngineError> {
        Ok(match &self.template {
            Some(t) => t.render(messages, true)?,
            None => ChatTemplate::chatml().render(messages, true)?,
        })
    }

    /// A backend for this model on `opts.device` (the GPU: the model is
    /// uploaded now).
    pub fn backend(&self, opts: BackendOptions) -> Result<Box<dyn Backend>, EngineError> {
        Ok(match opts.device.resolve(None) {
            Device::Gpu => Box::new(backend::gpu::GpuBackend::new(
                self.file.clone(),
                self.model.spec.clone(),
                opts.n_ctx,
            )?),
            Device::Cpu | Device::Auto => Box::new(backend::cpu::CpuBackend::new(
                self.model.clone(),
                opts.n_ctx,
                opts.swa_full,
            )?),
        })
    }

    /// A scheduler of `n_slots` sequences on a new backend (see
    /// [`Engine::backend`] and [`Batch::new`]).
    pub fn batch(
        &self,
        opts: BackendOptions,
        n_slots: usize,
        chunk: usize,
    ) -> Result<Batch<'_>, EngineError> {
        Batch::new(self, self.backend(opts)?, n_slots, chunk)
    }

    /// A request's sampler parameters as both samplers (host and device)
    /// take them: its own, with the end-of-generation tokens banned when
    /// `ignore_eos` (a logit bias of `-inf`, as llama.cpp bans them).
    pub fn sampler_params(&self, params: &GenerateParams) -> kestrel_sampling::SamplerParams {
        let mut sp = params.sampler.clone();
        if params.ignore_eos {
            sp.logit_bias.extend(
                self.tokenizer
                    .eog_ids()
                    .iter()
                    .map(|&id| (id, f32::NEG_INFINITY)),
            );
        }
        sp
    }

    /// The token a constraint that allows only the end feeds (the loop
    /// stops there and emits nothing of it): the model's first
    /// end-of-generation token, else EOS, else 0.
    pub fn end_token(&self) -> u32 {
        self.tokenizer
            .eog_ids()
            .first()
            .copied()
            .or(self.tokenizer.eos())
            .unwrap_or(0)
    }

    /// Tokenizes a prompt as llama.cpp's completion tool does: BOS per the
    /// vocabulary, special tokens in the text recognised.
    pub fn tokenize_prompt(&self, text: &str) -> Vec<u32> {
        self.tokenizer.encode(text, true, true)
    }
}
