//! The one error shape every endpoint answers with:
//! `{"error":{"code":N,"message":"...","type":"..."}}`, as llama-server and
//! OpenAI write it.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// An HTTP error with a message that names what was wrong.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// A more specific `type` than the status gives, and fields beside it
    /// (llama-server's `exceed_context_size_error` carries the two sizes).
    detail: Option<(&'static str, serde_json::Map<String, serde_json::Value>)>,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
            detail: None,
        }
    }
    /// A prompt that does not fit the context: a 400 typed and sized as
    /// llama-server's, so that clients which shorten the conversation on
    /// it recognise it.
    pub fn exceeds_context(n_prompt_tokens: usize, n_ctx: usize) -> ApiError {
        let mut fields = serde_json::Map::new();
        fields.insert("n_prompt_tokens".into(), json!(n_prompt_tokens));
        fields.insert("n_ctx".into(), json!(n_ctx));
        ApiError {
            detail: Some(("exceed_context_size_error", fields)),
            ..ApiError::bad_request(format!(
                "the prompt has {n_prompt_tokens} tokens, which does not fit the context of {n_ctx} tokens"
            ))
        }
    }
    /// As [`ApiError::exceeds_context`] for a prompt refused on its length
    /// in bytes before it was tokenized: `n_prompt_tokens` is the fewest
    /// tokens `n_bytes` can make.
    pub fn exceeds_context_at_least(
        n_prompt_tokens: usize,
        n_bytes: usize,
        n_ctx: usize,
    ) -> ApiError {
        let mut e = ApiError::exceeds_context(n_prompt_tokens, n_ctx);
        e.message = format!(
            "the prompt's {n_bytes} bytes make at least {n_prompt_tokens} tokens, which does not fit the context of {n_ctx} tokens"
        );
        e
    }
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }
    pub fn unavailable(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, message)
    }
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, message)
    }

    /// The JSON body, also sent as an SSE event when a stream fails midway.
    pub fn body(&self) -> serde_json::Value {
        let mut e = json!({
            "code": self.status.as_u16(),
            "message": self.message,
            "type": error_type(self.status),
        });
        if let Some((kind, fields)) = &self.detail {
            e["type"] = json!(kind);
            for (k, v) in fields {
                e[k] = v.clone();
            }
        }
        json!({ "error": e })
    }
}

/// OpenAI's and llama-server's names for the error classes.
fn error_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        401 => "authentication_error",
        404 => "not_found_error",
        501 => "not_supported_error",
        503 => "unavailable_error",
        500..=599 => "server_error",
        _ => "invalid_request_error",
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut r = (self.status, self.body().to_string()).into_response();
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json; charset=utf-8"),
        );
        r
    }
}
