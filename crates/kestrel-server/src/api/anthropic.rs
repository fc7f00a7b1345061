//! Anthropic's Messages API (`/v1/messages`, which llama-server answers
//! too): a request read as the chat it asks for, token counting, and the
//! message object and its named stream events.

use axum::body::Bytes;
use axum::extract::State;
use axum::response::Response;
use kestrel_engine::{Generation, StopReason};
use serde_json::{json, Value};

use super::answer::{predicted, Answer};
use super::fields::{field, get_str, wrong, Obj};
use super::generate::generate;
use super::parse::Source;
use super::{tokens, Api, AppState};
use crate::error::ApiError;

pub(crate) async fn anthropic_messages(State(s): AppState, body: Bytes) -> Response {
    generate(s, body, Api::Messages, Source::Request).await
}

/// `POST /v1/messages/count_tokens`: how many tokens an Anthropic request's
/// prompt takes, without generating.
pub(crate) async fn anthropic_count_tokens(State(s): AppState, body: Bytes) -> Response {
    tokens::input_tokens(s, body, Api::Messages).await
}

/// An Anthropic Messages request (`POST /v1/messages`) as the chat request
/// it asks for: `system` (a string or text blocks, joined as llama-server
/// joins them) becomes a system turn, `messages` (user and assistant turns
/// whose content is a string or text blocks) the turns after it,
/// `stop_sequences` the stop strings; tool, image, document and thinking
/// blocks are a 400, as are tools (`check_unsupported`).
pub(crate) fn messages_request(o: &Obj) -> Result<Obj, ApiError> {
    let mut chat = o.clone();
    for name in ["system", "messages", "stop_sequences", "thinking"] {
        chat.remove(name);
    }
    if let Some(t) = field(o, "thinking") {
        let t = t
            .as_object()
            .ok_or_else(|| wrong("thinking", "an object", t))?;
        if get_str(t, "type")? == Some("enabled") {
            return Err(ApiError::bad_request(
                "'thinking' is not supported (this server has no thinking blocks)",
            ));
        }
    }
    let mut turns = Vec::new();
    match field(o, "system") {
        None => {}
        Some(Value::String(text)) => turns.push(json!({"role": "system", "content": text})),
        Some(Value::Array(blocks)) => {
            let text = text_blocks("system", blocks)?.concat();
            turns.push(json!({"role": "system", "content": text}));
        }
        Some(v) => return Err(wrong("system", "a string or an array of text blocks", v)),
    }
    let list = match o.get("messages") {
        Some(Value::Array(list)) => list,
        Some(v) => return Err(wrong("messages", "an array", v)),
        None => return Err(ApiError::bad_request("'messages' is required")),
    };
    for (i, m) in list.iter().enumerate() {
        let at = format!("messages[{i}]");
        let m = m.as_object().ok_or_else(|| wrong(&at, "an object", m))?;
        let role = get_str(m, "role")?
            .ok_or_else(|| ApiError::bad_request(format!("{at} has no 'role'")))?;
        if !matches!(role, "user" | "assistant") {
            return Err(ApiError::bad_request(format!(
                "{at}: unknown role {role:?} (expected user or assistant; the system prompt goes in 'system')"
            )));
        }
        let content = match m.get("content") {
            Some(Value::String(text)) => json!(text),
            Some(Value::Array(blocks)) => {
                let parts: Vec<Value> = text_blocks(&format!("{at}.content"), blocks)?
                    .into_iter()
                    .map(|t| json!({"type": "text", "text": t}))
                    .collect();
                json!(parts)
            }
            Some(v) => return Err(wrong(&format!("{at}.content"), "a string or an array", v)),
            None => return Err(ApiError::bad_request(format!("{at} has no 'content'"))),
        };
        turns.push(json!({"role": role, "content": content}));
    }
    chat.insert("messages".into(), Value::Array(turns));
    if let Some(stop) = field(o, "stop_sequences") {
        if !stop.is_array() {
            return Err(wrong("stop_sequences", "an array of strings", stop));
        }
        chat.insert("stop".into(), stop.clone());
    }
    Ok(chat)
}

/// The texts of Anthropic content blocks, which must all be text blocks.
fn text_blocks<'a>(at: &str, blocks: &'a [Value]) -> Result<Vec<&'a str>, ApiError> {
    blocks
        .iter()
        .enumerate()
        .map(|(j, b)| {
            let at = format!("{at}[{j}]");
            let b = b.as_object().ok_or_else(|| wrong(&at, "an object", b))?;
            match get_str(b, "type")? {
                Some("text") => get_str(b, "text")?
                    .ok_or_else(|| ApiError::bad_request(format!("{at} has no 'text'"))),
                Some(t) => Err(ApiError::bad_request(format!(
                    "{at}: content blocks of type {t:?} are not supported (only text)"
                ))),
                None => Err(ApiError::bad_request(format!("{at} has no 'type'"))),
            }
        })
        .collect()
}

/// Why the answer ended, and the stop string that ended it.
fn stop(a: &Answer, g: &Generation) -> (&'static str, Value) {
    match g.stats.stop {
        StopReason::StopString => ("stop_sequence", json!(a.stopping_word(g))),
        StopReason::Length | StopReason::ContextFull => ("max_tokens", Value::Null),
        StopReason::EndOfGeneration | StopReason::Cancelled => ("end_turn", Value::Null),
    }
}

/// Token counts, the cached part of the prompt apart (as Anthropic's
/// `input_tokens` leaves cache reads out).
fn usage(g: &Generation) -> Value {
    json!({
        "input_tokens": g.stats.prompt_tokens - g.stats.cache_n.min(g.stats.prompt_tokens),
        "cache_read_input_tokens": g.stats.cache_n,
        "output_tokens": predicted(&g.stats),
    })
}

/// The whole message.
pub(super) fn full(a: &Answer, g: &Generation) -> Value {
    let (reason, sequence) = stop(a, g);
    json!({
        "id": a.id, "type": "message", "role": "assistant",
        "content": [{"type": "text", "text": format!("{}{}", a.prefill, g.text)}],
        "model": a.model, "stop_reason": reason, "stop_sequence": sequence,
        "usage": usage(g),
    })
}

/// The events before any token: the message (with the prompt's length)
/// and its one text block.
pub(super) fn stream_start(a: &Answer) -> Vec<Value> {
    vec![
        json!({"type": "message_start", "message": {
            "id": a.id, "type": "message", "role": "assistant", "content": [],
            "model": a.model, "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": a.n_prompt, "output_tokens": 0},
        }}),
        json!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "text", "text": ""}}),
    ]
}

/// One token's text delta.
pub(super) fn stream_token(text: &str) -> Value {
    json!({
        "type": "content_block_delta", "index": 0,
        "delta": {"type": "text_delta", "text": text},
    })
}

/// The closing events: the block's end, why the message ended (with the
/// usage), the message's end.
pub(super) fn stream_end(a: &Answer, g: &Generation) -> Vec<Value> {
    let (reason, sequence) = stop(a, g);
    vec![
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_delta",
            "delta": {"stop_reason": reason, "stop_sequence": sequence},
            "usage": usage(g)}),
        json!({"type": "message_stop"}),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(v: Value) -> Obj {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn an_anthropic_request_reads_as_its_chat() {
        let chat = messages_request(&obj(json!({
            "model": "m", "max_tokens": 9, "temperature": 0.2, "stop_sequences": ["!"],
            "system": [{"type": "text", "text": "Be "}, {"type": "text", "text": "brief."}],
            "thinking": {"type": "disabled"}, "metadata": {"user_id": "u"},
            "messages": [
                {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": [{"type": "text", "text": "Hello"}]},
            ],
        })))
        .unwrap();
        assert_eq!(
            Value::Object(chat),
            json!({
                "model": "m", "max_tokens": 9, "temperature": 0.2,
                "metadata": {"user_id": "u"},
                "messages": [
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "Hi"},
                    {"role": "assistant", "content": [{"type": "text", "text": "Hello"}]},
                ],
                "stop": ["!"],
            })
        );
        for (body, words) in [
            (json!({}), "'messages' is required"),
            (
                json!({"messages": [{"role": "system", "content": "x"}]}),
                "messages[0]: unknown role \"system\"",
            ),
            (
                json!({"messages": [{"role": "user", "content": [{"type": "tool_use"}]}]}),
                "messages[0].content[0]: content blocks of type \"tool_use\"",
            ),
            (
                json!({"messages": [], "system": [{"type": "image"}]}),
                "system[0]: content blocks of type \"image\"",
            ),
            (
                json!({"messages": [], "stop_sequences": "x"}),
                "'stop_sequences' must be an array",
            ),
            (
                json!({"messages": [], "thinking": {"type": "enabled"}}),
                "'thinking' is not supported",
            ),
        ] {
            let e = messages_request(&obj(body.clone())).unwrap_err();
            assert!(e.message.contains(words), "{body}: {}", e.message);
        }
    }
}
