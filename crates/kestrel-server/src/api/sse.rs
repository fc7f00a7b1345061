//! Server-sent events: a generation's events framed as each dialect's
//! stream expects them, fed to the response body as they come.

use std::convert::Infallible;

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderValue};
use axum::response::Response;
use kestrel_engine::StopReason;
use serde_json::{json, Value};
use tokio::sync::mpsc::UnboundedReceiver;

use super::answer::Answer;
use super::completions::Offsets;
use super::generate::cut_short;
use super::Api;
use crate::error::ApiError;
use crate::worker::Event;

/// A stream's events as SSE frames. Responses and Anthropic events are
/// named (`event:`), Responses' also numbered (`sequence_number`, from 0),
/// as OpenAI and Anthropic send them; an error among them is an `error`
/// event in each one's shape.
struct Framer {
    api: Api,
    sequence: u64,
}

impl Framer {
    fn frame(&mut self, mut v: Value) -> Bytes {
        let error = v.get("error").cloned();
        match self.api {
            Api::Responses => {
                if let Some(e) = error {
                    v = json!({"type": "error", "code": e["type"], "message": e["message"],
                        "param": null});
                }
                v["sequence_number"] = json!(self.sequence);
                self.sequence += 1;
            }
            Api::Messages => {
                if let Some(e) = error {
                    v = json!({"type": "error",
                        "error": {"type": e["type"], "message": e["message"]}});
                }
            }
            _ => return Bytes::from(format!("data: {v}\n\n")),
        }
        let kind = v["type"].as_str().unwrap_or("message").to_owned();
        Bytes::from(format!("event: {kind}\ndata: {v}\n\n"))
    }
}

/// A server-sent-event body fed by the generation's events. Dropping the
/// body (the client went away) drops `rx`, which cancels the generation.
pub(crate) fn sse(rx: UnboundedReceiver<Event>, answer: Answer, include_usage: bool) -> Response {
    struct St {
        rx: UnboundedReceiver<Event>,
        answer: Answer,
        include_usage: bool,
        started: bool,
        done: bool,
        offsets: Offsets,
        framer: Framer,
    }
    let st = St {
        framer: Framer {
            api: answer.api,
            sequence: 0,
        },
        rx,
        answer,
        include_usage,
        started: false,
        done: false,
        offsets: Offsets::default(),
    };
    let stream = futures_util::stream::unfold(st, |mut st| async move {
        if st.done {
            return None;
        }
        let mut out = Vec::new();
        if !st.started {
            st.started = true;
            out.extend(st.answer.stream_start());
            // The continued assistant turn comes first, as its own delta.
            let prefill = st.answer.prefill.clone();
            out.extend(
                st.answer
                    .stream_token(None, &prefill, None, &mut st.offsets),
            );
        }
        // Each body chunk carries at least one event (or ends the stream).
        while out.is_empty() {
            match st.rx.recv().await {
                Some(Event::Token {
                    token,
                    text,
                    logprobs,
                }) => {
                    out.extend(st.answer.stream_token(
                        token,
                        &text,
                        logprobs.as_ref(),
                        &mut st.offsets,
                    ));
                }
                // Cut short by a shutdown (a client that left reads nothing).
                Some(Event::Done(Ok(g))) if g.stats.stop == StopReason::Cancelled => {
                    out.push(cut_short().body());
                    st.done = true;
                    break;
                }
                Some(Event::Done(Ok(g))) => {
                    out.extend(st.answer.stream_end(&g, st.include_usage));
                    st.done = true;
                    break;
                }
                Some(Event::Done(Err(e))) => {
                    out.push(ApiError::internal(e).body());
                    st.done = true;
                    break;
                }
                None => {
                    out.push(ApiError::unavailable("the server is shutting down").body());
                    st.done = true;
                    break;
                }
            }
        }
        let mut bytes: Vec<u8> = out.into_iter().flat_map(|v| st.framer.frame(v)).collect();
        // OpenAI's chat and completion streams end so; Responses end with
        // their `response.completed` event, llama-server's with `stop`.
        if st.done && matches!(st.answer.api, Api::Chat | Api::Completions) {
            bytes.extend_from_slice(b"data: [DONE]\n\n");
        }
        Some((Ok::<_, Infallible>(Bytes::from(bytes)), st))
    });
    let mut r = Response::new(Body::from_stream(stream));
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    // A proxy (nginx) in front would otherwise hold the events back.
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    r
}
