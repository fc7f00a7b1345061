//! A completion request's prompt as tokens (text or token ids), and the
//! checks that it fits the context, before and after tokenizing.

use kestrel_engine::Engine;
use serde_json::Value;

use super::fields::{kind, wrong, Obj};
use crate::error::ApiError;

/// The prompt of a completion request as tokens: a string (tokenized with
/// BOS as the vocabulary asks), a one-element array of a string, or token
/// ids (used as given).
pub(crate) fn prompt_tokens(o: &Obj, engine: &Engine, n_ctx: usize) -> Result<Vec<u32>, ApiError> {
    let v = o
        .get("prompt")
        .ok_or_else(|| ApiError::bad_request("'prompt' is required"))?;
    let n_vocab = engine.model.spec.hparams.n_vocab;
    let ids = |a: &[Value]| -> Result<Vec<u32>, ApiError> {
        a.iter()
            .map(|t| match t.as_u64() {
                Some(id) if id < n_vocab as u64 => Ok(id as u32),
                Some(id) => Err(ApiError::bad_request(format!(
                    "prompt: token id {id} is outside the vocabulary of {n_vocab}"
                ))),
                None => Err(ApiError::bad_request(format!(
                    "prompt: an array prompt must hold token ids (non-negative integers) or one string, got {}",
                    kind(t)
                ))),
            })
            .collect()
    };
    let tokens = match v {
        Value::String(s) => tokenize_within(engine, s, n_ctx)?,
        Value::Array(a) => match a.as_slice() {
            [Value::String(s)] => tokenize_within(engine, s, n_ctx)?,
            [Value::Array(inner)] => ids(inner)?,
            [_, _, ..] if a.iter().all(Value::is_string) => {
                return Err(ApiError::bad_request(
                    "several prompts in one request are not supported yet",
                ))
            }
            _ => ids(a)?,
        },
        other => {
            return Err(wrong(
                "prompt",
                "a string, an array of strings or an array of token ids",
                other,
            ))
        }
    };
    Ok(tokens)
}

/// Tokenizes a prompt's text, unless its length alone shows that it cannot
/// fit `n_ctx`: no token stands for more than the vocabulary's longest
/// token's bytes, so a text of `n` bytes has at least `n / longest` tokens.
/// An 8 MiB prompt is then refused before anything is built for it.
pub(crate) fn tokenize_within(
    engine: &Engine,
    text: &str,
    n_ctx: usize,
) -> Result<Vec<u32>, ApiError> {
    let at_least = engine.tokenizer.min_tokens(text);
    if at_least >= n_ctx {
        return Err(ApiError::exceeds_context_at_least(
            at_least,
            text.len(),
            n_ctx,
        ));
    }
    Ok(engine.tokenize_prompt(text))
}

/// A prompt that the generation can take: not empty, and shorter than the
/// context (one slot is needed for the first generated token).
pub(crate) fn check_prompt_len(tokens: &[u32], n_ctx: usize) -> Result<(), ApiError> {
    if tokens.is_empty() {
        return Err(ApiError::bad_request("the prompt is empty"));
    }
    if tokens.len() >= n_ctx {
        return Err(ApiError::exceeds_context(tokens.len(), n_ctx));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompt_length_names_both_numbers() {
        assert!(check_prompt_len(&[1, 2], 3).is_ok());
        let e = check_prompt_len(&[1, 2, 3], 3).unwrap_err();
        assert!(e.message.contains('3') && e.message.contains("context of 3"));
        let body = e.body();
        assert_eq!(body["error"]["type"], "exceed_context_size_error");
        assert_eq!(body["error"]["n_prompt_tokens"], 3);
        assert_eq!(body["error"]["n_ctx"], 3);
        assert_eq!(body["error"]["code"], 400);
        assert!(check_prompt_len(&[], 3).is_err());
    }
}
