//! The engine: loads a GGUF model (weights, tokenizer, chat template) and
//! runs the generation loop — prefill, decode, sampling, stop conditions —
//! with timings.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use kestrel_cpu::CpuModel;
use kestrel_gguf::{Backing, GgufFile};
use kestrel_model::ModelSpec;
use kestrel_sampling::{Sampler, SamplerParams};
use kestrel_tokenizer::chat::{ChatMessage, ChatTemplate};
use kestrel_tokenizer::{StreamDecoder, Tokenizer};

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
}

/// A loaded model with its tokenizer and chat template.
pub struct Engine {
    pub file: Arc<GgufFile>,
    pub model: CpuModel,
    pub tokenizer: Tokenizer,
    /// The model's own template, or `None` when it has none (ChatML is used then).
    pub template: Option<ChatTemplate>,
}

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
}

/// Counts and times of one generation.
#[derive(Clone, Debug)]
pub struct GenStats {
    pub prompt_tokens: usize,
    pub prompt_ms: f64,
    pub generated_tokens: usize,
    pub generate_ms: f64,
    pub stop: StopReason,
}

impl GenStats {
    pub fn prompt_tps(&self) -> f64 {
        per_second(self.prompt_tokens, self.prompt_ms)
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

/// What to generate.
#[derive(Clone, Debug)]
pub struct GenerateParams {
    /// Maximum tokens to generate; negative = until the context is full.
    pub n_predict: i64,
    pub n_ctx: usize,
    pub sampler: SamplerParams,
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

    /// Tokenizes a prompt as llama.cpp's completion tool does: BOS per the
    /// vocabulary, special tokens in the text recognised.
    pub fn tokenize_prompt(&self, text: &str) -> Vec<u32> {
        self.tokenizer.encode(text, true, true)
    }

    /// Generates from `prompt` tokens. `on_text` receives each piece of
    /// complete UTF-8 text as it is decoded, and returns `false` to stop.
    pub fn generate(
        &self,
        prompt: &[u32],
        params: &GenerateParams,
        mut on_text: impl FnMut(&str) -> bool,
    ) -> Result<(Vec<u32>, GenStats), EngineError> {
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
        let mut cache: KvCache = self.model.new_cache(params.n_ctx);
        let mut sampler = Sampler::new(params.sampler.clone());
        let mut decoder = StreamDecoder::new(&self.tokenizer, false);

        let t0 = Instant::now();
        let mut logits = self.model.forward(prompt, 0, &mut cache, Logits::Last);
        let prompt_ms = t0.elapsed().as_secs_f64() * 1000.0;

        let t1 = Instant::now();
        let mut out = Vec::new();
        let mut pos = prompt.len();
        let stop = loop {
            if params.n_predict >= 0 && out.len() as i64 >= params.n_predict {
                break StopReason::Length;
            }
            let tok = sampler.sample(&logits);
            if self.tokenizer.is_eog(tok) {
                break StopReason::EndOfGeneration;
            }
            out.push(tok);
            let text = decoder.push(tok);
            if !text.is_empty() && !on_text(&text) {
                break StopReason::Cancelled;
            }
            if pos >= params.n_ctx {
                break StopReason::ContextFull;
            }
            if params.n_predict >= 0 && out.len() as i64 >= params.n_predict {
                break StopReason::Length;
            }
            logits = self.model.forward(&[tok], pos, &mut cache, Logits::Last);
            pos += 1;
        };
        let rest = decoder.finish();
        if !rest.is_empty() {
            on_text(&rest);
        }
        let generate_ms = t1.elapsed().as_secs_f64() * 1000.0;
        let stats = GenStats {
            prompt_tokens: prompt.len(),
            prompt_ms,
            generated_tokens: out.len(),
            generate_ms,
            stop,
        };
        Ok((out, stats))
    }
}
