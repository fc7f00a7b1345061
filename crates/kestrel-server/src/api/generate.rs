//! The generation every dialect's endpoint runs: parse the request,
//! submit it to the engine, answer as JSON or as a stream.

use std::sync::Arc;

use axum::body::Bytes;
use axum::response::{IntoResponse, Response};
use kestrel_engine::{Generation, StopReason};
use tokio::sync::mpsc::UnboundedReceiver;

use super::answer::Answer;
use super::llama::generation_settings;
use super::parse::{parse, Source};
use super::sse::sse;
use super::tools::ToolStream;
use super::{model_name, off_async, ok, unix_time, Api};
use crate::error::ApiError;
use crate::worker::{Event, Shared};

/// Answers a generation request to `api`: parsed and queued off the async
/// threads, then answered whole or streamed.
pub(crate) async fn generate(s: Arc<Shared>, body: Bytes, api: Api, source: Source) -> Response {
    answer(s, body, api, source)
        .await
        .unwrap_or_else(|e| e.into_response())
}

async fn answer(
    s: Arc<Shared>,
    body: Bytes,
    api: Api,
    source: Source,
) -> Result<Response, ApiError> {
    let shared = s.clone();
    let (l, req, rx, n_prompt) = off_async(s.prepare.clone(), body.len(), move || {
        let l = shared.loaded()?;
        let mut req = parse(api, source, &body, &l, shared.config.n_predict)?;
        let n_prompt = req.tokens.len();
        let p = &req.settings;
        let rx = shared.submit(
            std::mem::take(&mut req.tokens),
            p.params.clone(),
            p.cache_prompt,
        )?;
        Ok((l, req, rx, n_prompt))
    })
    .await?;
    let p = req.settings;
    let answer = Answer {
        api,
        id: new_id(api),
        created: unix_time(),
        model: model_name(&s),
        loaded: l,
        logprobs: p.logprobs,
        stop: p.params.stop.clone(),
        prefill: req.prefill,
        settings: generation_settings(&p.params, p.stream),
        prompt: req.prompt,
        n_prompt,
        tool_stream: req
            .tools
            .as_ref()
            .filter(|_| p.stream)
            .map(|t| ToolStream::new(t, p.params.sampler.seed)),
        tools: req.tools,
        seed: p.params.sampler.seed,
    };
    if p.stream {
        Ok(sse(rx, answer, p.include_usage))
    } else {
        let g = wait(rx).await?;
        if g.stats.stop == StopReason::Cancelled {
            return Err(cut_short());
        }
        Ok(ok(answer.full(&g)))
    }
}

/// A generation cancelled while its client still listens: only a shutdown
/// does that, and the partial answer must not pass for a whole one.
pub(crate) fn cut_short() -> ApiError {
    ApiError::unavailable("the server is shutting down: the answer was cut short")
}

/// Waits for the end of a generation, ignoring the token events.
async fn wait(mut rx: UnboundedReceiver<Event>) -> Result<Generation, ApiError> {
    loop {
        match rx.recv().await {
            Some(Event::Token { .. }) => {}
            Some(Event::Done(r)) => return r.map_err(ApiError::internal),
            None => return Err(ApiError::unavailable("the server is shutting down")),
        }
    }
}

fn new_id(api: Api) -> String {
    let prefix = match api {
        Api::Chat => "chatcmpl-",
        Api::Completions | Api::Llama => "cmpl-",
        Api::Responses => "resp_",
        Api::Messages => "msg_",
    };
    format!("{prefix}{:016x}", kestrel_sampling::random_seed())
}
