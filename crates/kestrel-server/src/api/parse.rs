//! A generation request read in one call ([`parse`]): its body, in any
//! dialect, becomes the prompt's tokens and everything else the engine and
//! the answer need, or the 4xx that says what was wrong. All of it is
//! checked before the request is queued, so that a stream, once started
//! with 200, rarely fails.

use super::fields::{parse_object, Obj};
use super::params::{settings, Settings};
use super::tools::{self, ToolUse};
use super::{anthropic, chat, llama, prompt, responses, structured, Api};
use crate::error::ApiError;
use crate::worker::Loaded;

/// Where a generation's prompt comes from.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Source {
    /// The endpoint's own fields (`messages`, `prompt`, `input`).
    Request,
    /// An infill request's prefix and suffix.
    Infill,
}

/// A generation request, ready to queue and to answer.
#[derive(Debug)]
pub(crate) struct GenRequest {
    /// The prompt, checked to fit the context.
    pub tokens: Vec<u32>,
    /// The sampling, limits and answer options it asks for.
    pub settings: Settings,
    /// The assistant turn the model continues (chat dialects), else "".
    pub prefill: String,
    /// The prompt as llama-server shows it (`/completion`), else "".
    pub prompt: String,
    /// The chat's tools, when it declares any.
    pub tools: Option<ToolUse>,
}

/// Reads a generation request to `api` from `body`, for the model `l`
/// serves; `server_n_predict` is the server's `-n`, which a request cannot
/// exceed.
pub(crate) fn parse(
    api: Api,
    source: Source,
    body: &[u8],
    l: &Loaded,
    server_n_predict: i64,
) -> Result<GenRequest, ApiError> {
    let o = parse_request(body, api)?;
    let mut tool_use = None;
    let (tokens, prefill) = match (source, api) {
        (Source::Infill, _) => {
            let tokens = llama::infill_tokens(
                &o,
                &l.engine.tokenizer,
                llama::INFILL_BATCH,
                server_n_predict,
                l.n_ctx,
            )?;
            (tokens, None)
        }
        (_, Api::Chat | Api::Responses | Api::Messages) => {
            let chat = chat::chat_prompt(&l.engine, &o)?;
            tool_use = chat.tools;
            let tokens = prompt::tokenize_within(&l.engine, &chat.text, l.n_ctx)?;
            (tokens, chat.prefill)
        }
        (_, Api::Completions | Api::Llama) => {
            (prompt::prompt_tokens(&o, &l.engine, l.n_ctx)?, None)
        }
    };
    let shown = match api {
        // Special tokens written out, as llama-server shows the prompt.
        Api::Llama => l.engine.tokenizer.decode(&tokens, true),
        _ => String::new(),
    };
    let mut settings = settings(&o, api, &l.engine, l.n_ctx, server_n_predict)?;
    prompt::check_prompt_len(&tokens, l.n_ctx)?;
    let format = structured::requested(&o)?;
    let calls = match &tool_use {
        Some(t) => tools::constraint(&l.engine, t)?,
        None => None,
    };
    settings.params.constraint = match (format, calls) {
        (Some(_), Some(_)) => return Err(ApiError::bad_request(
            "a request may constrain its output with 'tools' or with 'response_format', not both",
        )),
        (Some((spec, what)), None) => Some(structured::compile(&l.engine, &spec, what, &[])?),
        (None, calls) => calls,
    };
    Ok(GenRequest {
        tokens,
        settings,
        prefill: prefill.unwrap_or_default(),
        prompt: shown,
        tools: tool_use,
    })
}

/// A request's JSON object; a Responses or Anthropic request as the chat
/// it asks for.
pub(crate) fn parse_request(body: &[u8], api: Api) -> Result<Obj, ApiError> {
    let o = parse_object(body)?;
    match api {
        Api::Responses => responses::responses_request(&o),
        Api::Messages => anthropic::messages_request(&o),
        _ => Ok(o),
    }
}
