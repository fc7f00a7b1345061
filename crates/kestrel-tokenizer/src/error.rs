//! Errors building a tokenizer from a vocabulary.

use thiserror::Error;

/// Why a vocabulary could not be turned into a tokenizer.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum TokenizerError {
    /// A required metadata key is absent.
    #[error("GGUF vocabulary: missing key '{0}'")]
    MissingKey(&'static str),
    /// A metadata key is present but holds the wrong type.
    #[error("GGUF vocabulary: key '{key}' should be {expected}")]
    WrongType {
        key: &'static str,
        expected: &'static str,
    },
    /// `tokenizer.ggml.model` names a tokenizer Kestrel does not implement.
    #[error("unsupported tokenizer model '{0}' (supported: 'gpt2' byte-level BPE, 'llama' SentencePiece)")]
    UnsupportedModel(String),
    /// `tokenizer.ggml.pre` names a pre-tokenizer Kestrel does not implement.
    #[error("unknown pre-tokenizer '{name}' (supported: {supported})")]
    UnknownPre { name: String, supported: String },
    /// The token list is empty.
    #[error("GGUF vocabulary: tokenizer.ggml.tokens is empty")]
    EmptyVocab,
    /// A per-token array is shorter than the token list.
    #[error("GGUF vocabulary: '{key}' has {len} entries for {n_tokens} tokens")]
    ShortArray {
        key: &'static str,
        len: usize,
        n_tokens: usize,
    },
    /// More tokens than ids can address.
    #[error("GGUF vocabulary: {0} tokens do not fit 32-bit ids")]
    TooManyTokens(usize),
}
