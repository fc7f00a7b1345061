//! The engine: loads a GGUF model (weights, tokenizer, chat template) and
//! runs it. [`generate`] owns the generation loop (prefill, pipelined decode,
//! sampling with the token history, stop conditions, stop strings, logprobs,
//! timings); [`perplexity`] owns llama-perplexity's chunked evaluation.

use std::path::Path;
use std::sync::Arc;

use kestrel_cpu::CpuModel;
use kestrel_gguf::{Backing, GgufFile};
use kestrel_model::ModelSpec;
use kestrel_tokenizer::chat::{ChatMessage, ChatTemplate};
use kestrel_tokenizer::Tokenizer;

pub mod batch;
pub mod generate;
pub mod perplexity;

pub use batch::{AdmitError, Batch, Sink, SlotInfo};
pub use generate::{GenStats, GenerateParams, Generation, StopReason, TokenEvent};
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
    /// The thread running the pipelined forward passes stopped without an
    /// answer (it panicked; the panic is re-raised when generation returns).
    #[error("the decode worker thread stopped unexpectedly")]
    DecodeWorker,
    #[error("gpu: {0}")]
    Gpu(#[from] kestrel_gpu::GpuError),
}

/// A loaded model with its tokenizer and chat template.
pub struct Engine {
    pub file: Arc<GgufFile>,
    pub model: CpuModel,
    pub tokenizer: Tokenizer,
    /// The model's own template, or `None` when it has none (ChatML is used then).
    pub template: Option<ChatTemplate>,
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
        let model = CpuModel::load(file.clone(), spec, threads)?;
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
        })
    }

    /// Renders a conversation with the model's template (ChatML when it has none)
    /// and a generation prompt for the assistant.
    pub fn render_chat(&self, messages: &[ChatMessage]) -> Result<String, EngineError> {
        Ok(match &self.template {
            Some(t) => t.render(messages, true)?,
            None => ChatTemplate::chatml().render(messages, true)?,
        })
    }

    /// The device sampler's parameters for a request: its sampler's, with
    /// the end-of-generation tokens banned when `ignore_eos` (as
    /// `check_request` does for the CPU sampler). The seed goes separately,
    /// into the sequence's generator state.
    pub fn device_sampling(&self, params: &GenerateParams) -> kestrel_gpu::sample::SampleParams {
        let sp = &params.sampler;
        let mut logit_bias = sp.logit_bias.clone();
        if params.ignore_eos {
            logit_bias.extend(
                self.tokenizer
                    .eog_ids()
                    .iter()
                    .map(|&id| (id, f32::NEG_INFINITY)),
            );
        }
        kestrel_gpu::sample::SampleParams {
            temperature: sp.temperature,
            top_k: sp.top_k,
            top_p: sp.top_p,
            min_p: sp.min_p,
            repeat_penalty: sp.repeat_penalty,
            repeat_last_n: sp.repeat_last_n,
            frequency_penalty: sp.frequency_penalty,
            presence_penalty: sp.presence_penalty,
            logit_bias,
        }
    }

    /// Tokenizes a prompt as llama.cpp's completion tool does: BOS per the
    /// vocabulary, special tokens in the text recognised.
    pub fn tokenize_prompt(&self, text: &str) -> Vec<u32> {
        self.tokenizer.encode(text, true, true)
    }
}
