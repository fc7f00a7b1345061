//! Tokens without generating: llama-server's `/tokenize` and
//! `/detokenize`, and the input token count of a chat-like request (each
//! dialect's handler calls [`input_tokens`]).

use std::fmt::Write as _;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use super::answer::piece;
use super::chat::chat_prompt;
use super::fields::{get_bool, get_str, kind, parse_object};
use super::parse::parse_request;
use super::{json_text, off_async, ok, Api, AppState};
use crate::error::ApiError;
use crate::worker::Shared;

/// How many tokens the prompt of a chat-like request to `api` takes.
pub(crate) async fn input_tokens(s: Arc<Shared>, body: Bytes, api: Api) -> Response {
    off_async(s.prepare.clone(), body.len(), move || {
        let l = s.loaded()?;
        let o = parse_request(&body, api)?;
        let prompt = chat_prompt(&l.engine, &o)?.text;
        let n = l.engine.tokenize_prompt(&prompt).len();
        Ok(ok(match api {
            Api::Messages => json!({ "input_tokens": n }),
            _ => json!({ "object": "response.input_tokens", "input_tokens": n }),
        }))
    })
    .await
    .unwrap_or_else(|e| e.into_response())
}

pub(crate) async fn tokenize(State(s): AppState, body: Bytes) -> Response {
    off_async(s.prepare.clone(), body.len(), move || {
        let l = s.loaded()?;
        let o = parse_object(&body)?;
        let content = get_str(&o, "content")?
            .ok_or_else(|| ApiError::bad_request("'content' is required"))?;
        let add_special = get_bool(&o, "add_special")?.unwrap_or(false);
        let parse_special = get_bool(&o, "parse_special")?.unwrap_or(true);
        let with_pieces = get_bool(&o, "with_pieces")?.unwrap_or(false);
        let ids = l
            .engine
            .tokenizer
            .encode(content, add_special, parse_special);
        // Written straight out: a JSON value per id cost 150 bytes a token
        // (an 8 MB run of digits: 8M ids, +1.2 GB for one request).
        let mut out = String::with_capacity(ids.len() * 7 + 16);
        out.push_str("{\"tokens\":[");
        for (i, &id) in ids.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            if !with_pieces {
                let _ = write!(out, "{id}");
                continue;
            }
            let (text, bytes) = piece(&l.engine, id);
            // llama-server gives bytes when the piece is not valid UTF-8.
            let p = if std::str::from_utf8(&bytes).is_ok() {
                Value::from(text)
            } else {
                json!(bytes)
            };
            let _ = write!(out, "{{\"id\":{id},\"piece\":{p}}}");
        }
        out.push_str("]}");
        Ok(json_text(StatusCode::OK, out))
    })
    .await
    .unwrap_or_else(|e| e.into_response())
}

pub(crate) async fn detokenize(State(s): AppState, body: Bytes) -> Response {
    off_async(s.prepare.clone(), body.len(), move || {
        let l = s.loaded()?;
        let o = parse_object(&body)?;
        let n_vocab = l.engine.model.spec.hparams.n_vocab;
        let ids = match o.get("tokens") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(a)) => a
                .iter()
                .map(|t| match t.as_u64() {
                    Some(id) if id < n_vocab as u64 => Ok(id as u32),
                    _ => Err(ApiError::bad_request(format!(
                        "'tokens' must hold token ids below {n_vocab}, got {t}"
                    ))),
                })
                .collect::<Result<_, _>>()?,
            Some(v) => {
                return Err(ApiError::bad_request(format!(
                    "'tokens' must be an array, got {}",
                    kind(v)
                )))
            }
        };
        let content = l.engine.tokenizer.decode(&ids, true);
        Ok(ok(json!({ "content": content })))
    })
    .await
    .unwrap_or_else(|e| e.into_response())
}
