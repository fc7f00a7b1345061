//! The HTTP endpoints, one file per API dialect over one shared answer:
//! OpenAI's chat ([`chat`]), legacy completions ([`completions`]) and
//! Responses ([`responses`]), Anthropic's Messages ([`anthropic`]) and
//! llama-server's `/completion` and `/infill` ([`llama`]). A generation
//! request is read in one call ([`parse`]), submitted and answered
//! ([`generate`]) from an [`answer::Answer`], whole or as server-sent events
//! ([`sse`]). The server's own information is in [`info`], token counting
//! in [`tokens`]; request fields are read by [`fields`], [`params`],
//! [`samplers`], [`structured`] (output constraints), [`tools`] and
//! [`prompt`].

mod answer;
mod anthropic;
mod chat;
mod completions;
mod fields;
mod generate;
mod info;
mod llama;
mod params;
mod parse;
mod prompt;
mod responses;
mod samplers;
mod sse;
mod structured;
mod tokens;
mod tools;

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use crate::error::ApiError;
use crate::prepare::Preparation;
use crate::worker::Shared;

pub(crate) use answer::predicted;
pub(crate) use anthropic::{anthropic_count_tokens, anthropic_messages};
pub(crate) use chat::{apply_template, chat_completions, chat_input_tokens};
pub(crate) use completions::completions;
pub(crate) use info::{
    embeddings, health, lora_adapters, metrics, model, models, not_found, props, props_change,
    rerank, set_lora_adapters, slots, slots_action,
};
pub(crate) use llama::{completion, infill};
pub(crate) use responses::{responses, responses_input_tokens};
pub(crate) use tokens::{detokenize, tokenize};

type AppState = State<Arc<Shared>>;

/// Which endpoint a request came to; decides field names and defaults.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Api {
    Chat,
    Completions,
    /// llama-server's `/completion`.
    Llama,
    /// OpenAI's `/v1/responses`.
    Responses,
    /// Anthropic's `/v1/messages` (which llama-server answers too).
    Messages,
}

pub(crate) fn json_response(status: StatusCode, v: &Value) -> Response {
    json_text(status, v.to_string())
}

/// A response whose body is JSON already written out.
pub(crate) fn json_text(status: StatusCode, body: String) -> Response {
    let mut r = (status, body).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json; charset=utf-8"),
    );
    r
}

pub(crate) fn ok(v: Value) -> Response {
    json_response(StatusCode::OK, &v)
}

pub(crate) fn unix_time() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The name clients see: `--alias`, else the model file's name.
pub(crate) fn model_name(s: &Shared) -> String {
    s.config.alias.clone().unwrap_or_else(|| {
        s.config
            .model
            .file_name()
            .map_or_else(|| "model".into(), |n| n.to_string_lossy().into_owned())
    })
}

/// Runs a request's CPU work (parsing a body of up to 8 MiB, rendering a
/// chat, tokenizing or detokenizing) on tokio's blocking threads: on the
/// two async workers three 8 MB `/tokenize` requests held `/health` up
/// for a second. A panic there is this request's 500, not the server's.
///
/// Work on a body of `body_len` bytes from [`crate::prepare::HEAVY_BODY`] up
/// waits its turn ([`Preparation`]), so that a burst of large
/// bodies costs the memory of a few at a time; smaller ones go at once.
pub(crate) async fn off_async<T: Send + 'static>(
    prepare: Preparation,
    body_len: usize,
    work: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    let turn = prepare.turn(body_len).await;
    tokio::task::spawn_blocking(move || {
        let out = work();
        drop(turn);
        out
    })
    .await
    .unwrap_or_else(|e| Err(ApiError::internal(format!("internal error: {e}"))))
}
