//! kestrel-tokenizer: tokenizers built from GGUF vocabulary metadata that
//! match llama.cpp token for token — byte-level BPE (`gpt2`, with the
//! pre-tokenizer `tokenizer.ggml.pre` names) and SentencePiece (`llama`) —
//! plus special-token handling, detokenization, a streaming decoder, and chat
//! templates (`chat`).

mod bpe;
pub mod chat;
mod error;
mod fxhash;
mod gguf;
mod pretokenize;
mod spm;
mod stream;
mod symbols;
#[cfg(test)]
mod test_rng;
mod tokenizer;
mod unicode;
mod unicode_table;

pub use error::TokenizerError;
pub use stream::StreamDecoder;
pub use tokenizer::{token_type, Fim, Tokenizer, TokenizerKind, VocabData};
