//! OpenAI's chat completions (`/v1/chat/completions`): the conversation a
//! request holds and the prompt the model's template makes of it (which the
//! Responses and Anthropic dialects reuse), llama-server's
//! `/apply-template` and input token count, and the chat answer's JSON and
//! stream chunks.

use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use kestrel_engine::{Engine, Generation, TokenLogprobs};
use kestrel_tokenizer::chat::ChatMessage;
use serde_json::{json, Value};

use super::answer::{fingerprint, finish_reason, piece, timings, usage, Answer};
use super::fields::{parse_object, wrong, Obj};
use super::generate::generate;
use super::parse::Source;
use super::{off_async, ok, tokens, Api, AppState};
use crate::error::ApiError;

pub(crate) async fn chat_completions(State(s): AppState, body: Bytes) -> Response {
    generate(s, body, Api::Chat, Source::Request).await
}

/// llama-server's `POST /apply-template`: the prompt a chat request's
/// messages become, without generating.
pub(crate) async fn apply_template(State(s): AppState, body: Bytes) -> Response {
    off_async(s.prepare.clone(), body.len(), move || {
        let l = s.loaded()?;
        let o = parse_object(&body)?;
        let (prompt, _) = chat_prompt(&l.engine, &o)?;
        Ok(ok(json!({ "prompt": prompt })))
    })
    .await
    .unwrap_or_else(|e| e.into_response())
}

/// llama-server's `POST /v1/chat/completions/input_tokens`: how many tokens
/// a chat request's prompt takes, without generating.
pub(crate) async fn chat_input_tokens(State(s): AppState, body: Bytes) -> Response {
    tokens::input_tokens(s, body, Api::Chat).await
}

/// A chat request's messages as the model's template writes them, with a
/// trailing assistant turn continued (llama-server's prefill, returned too).
pub(crate) fn chat_prompt(engine: &Engine, o: &Obj) -> Result<(String, Option<String>), ApiError> {
    let mut messages = messages(o)?;
    let prefill = take_prefill(&mut messages)?;
    let mut text = engine
        .render_chat(&messages)
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    text.push_str(prefill.as_deref().unwrap_or(""));
    Ok((text, prefill))
}

/// The conversation of a chat request: a non-empty array of messages with
/// known roles and text content (a string or an array of text parts).
pub(crate) fn messages(o: &Obj) -> Result<Vec<ChatMessage>, ApiError> {
    let v = o
        .get("messages")
        .ok_or_else(|| ApiError::bad_request("'messages' is required"))?;
    let list = v
        .as_array()
        .ok_or_else(|| wrong("messages", "an array", v))?;
    if list.is_empty() {
        return Err(ApiError::bad_request("'messages' must not be empty"));
    }
    list.iter()
        .enumerate()
        .map(|(i, m)| {
            let m = m
                .as_object()
                .ok_or_else(|| wrong(&format!("messages[{i}]"), "an object", m))?;
            let role = match m.get("role") {
                Some(Value::String(r)) => r.as_str(),
                Some(other) => return Err(wrong(&format!("messages[{i}].role"), "a string", other)),
                None => {
                    return Err(ApiError::bad_request(format!(
                        "messages[{i}] has no 'role'"
                    )))
                }
            };
            let role = match role {
                "system" | "user" | "assistant" => role,
                // OpenAI's newer name for system instructions.
                "developer" => "system",
                other => {
                    return Err(ApiError::bad_request(format!(
                        "messages[{i}]: unknown role {other:?} (expected system, developer, user or assistant)"
                    )))
                }
            };
            // A conversation that used tools cannot be rendered faithfully
            // without them (see `check_unsupported`).
            if m.get("tool_calls").is_some_and(|t| !t.is_null() && t != &Value::Array(vec![])) {
                return Err(ApiError::bad_request(format!(
                    "messages[{i}].tool_calls: tool calls are not supported yet"
                )));
            }
            let content = match m.get("content") {
                Some(Value::String(s)) => s.clone(),
                // OpenAI's assistant turns may carry null (llama-server reads "").
                Some(Value::Null) => String::new(),
                Some(Value::Array(parts)) => {
                    let mut text = String::new();
                    for (j, p) in parts.iter().enumerate() {
                        let at = format!("messages[{i}].content[{j}]");
                        let p = p.as_object().ok_or_else(|| wrong(&at, "an object", p))?;
                        match p.get("type").and_then(Value::as_str) {
                            Some("text") => match p.get("text") {
                                // Parts join with a newline, as llama-server
                                // joins them for templates of plain strings.
                                Some(Value::String(t)) => {
                                    if !text.is_empty() {
                                        text.push('\n');
                                    }
                                    text.push_str(t)
                                }
                                Some(other) => {
                                    return Err(wrong(&format!("{at}.text"), "a string", other))
                                }
                                None => {
                                    return Err(ApiError::bad_request(format!(
                                        "{at} has no 'text'"
                                    )))
                                }
                            },
                            Some(t) => {
                                return Err(ApiError::bad_request(format!(
                                    "{at}: content parts of type {t:?} are not supported (only text)"
                                )))
                            }
                            None => {
                                return Err(ApiError::bad_request(format!(
                                    "{at} has no 'type'"
                                )))
                            }
                        }
                    }
                    text
                }
                Some(other) => {
                    return Err(wrong(
                        &format!("messages[{i}].content"),
                        "a string or an array of text parts",
                        other,
                    ))
                }
                None => {
                    return Err(ApiError::bad_request(format!(
                        "messages[{i}] has no 'content'"
                    )))
                }
            };
            Ok(ChatMessage {
                role: role.to_owned(),
                content,
            })
        })
        .collect()
}

/// A conversation that ends with an assistant turn asks the model to go on
/// with that turn (a prefill), as llama-server does: the turn is taken off
/// here, the rest is rendered with the assistant's opening, and its text
/// follows; the answer's content then starts with it. Two assistant turns
/// at the end are a 400, as llama-server's.
pub(crate) fn take_prefill(messages: &mut Vec<ChatMessage>) -> Result<Option<String>, ApiError> {
    let n = messages.len();
    if messages.last().is_none_or(|m| m.role != "assistant") {
        return Ok(None);
    }
    if n >= 2 && messages[n - 2].role == "assistant" {
        return Err(ApiError::bad_request(
            "messages: two or more assistant turns at the end (only the last may be continued)",
        ));
    }
    Ok(messages.pop().map(|m| m.content))
}

/// The non-streamed answer.
pub(super) fn full(a: &Answer, g: &Generation, logprobs: Value) -> Value {
    json!({
        "id": a.id, "object": "chat.completion", "created": a.created,
        "model": a.model, "system_fingerprint": fingerprint(),
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": format!("{}{}", a.prefill, g.text)},
            "logprobs": logprobs,
            "finish_reason": finish_reason(g.stats.stop),
        }],
        "usage": usage(g), "timings": timings(g),
    })
}

/// The stream's first chunk: the assistant's role.
pub(super) fn stream_start(a: &Answer) -> Vec<Value> {
    vec![a.chunk(json!([{
        "index": 0,
        "delta": {"role": "assistant", "content": ""},
        "logprobs": null,
        "finish_reason": null,
    }]))]
}

/// One token's chunk.
pub(super) fn stream_token(a: &Answer, text: &str, logprobs: Value) -> Value {
    a.chunk(json!([{
        "index": 0, "delta": {"content": text},
        "logprobs": logprobs, "finish_reason": null,
    }]))
}

/// The last choice: why the answer ended.
pub(super) fn last_choice(reason: &str) -> Value {
    json!({"index": 0, "delta": {}, "logprobs": null, "finish_reason": reason})
}

/// Chat's `logprobs` (also the shape of the dialects built on chat): each
/// token's, with its `n` most likely alternatives.
pub(super) fn logprobs(e: &Engine, lps: &[TokenLogprobs], n: usize) -> Value {
    let entries: Vec<Value> = lps
        .iter()
        .map(|lp| {
            let (tok, bytes) = piece(e, lp.token);
            let top = lp.top.iter().take(n);
            json!({
                "token": tok, "logprob": lp.logprob, "bytes": bytes,
                "top_logprobs": top.map(|&(id, l)| {
                    let (t, b) = piece(e, id);
                    json!({"token": t, "logprob": l, "bytes": b})
                }).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({ "content": entries })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(v: Value) -> Obj {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn messages_accept_strings_and_text_parts() {
        let o = obj(json!({"messages": [
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Hel"}, {"type": "text", "text": "lo"}]},
        ]}));
        let m = messages(&o).unwrap();
        assert_eq!(m[0].role, "system");
        assert_eq!(m[1].content, "Hel\nlo");
        let o = obj(json!({"messages": [
            {"role": "user", "content": "Hi", "name": "bob"},
            {"role": "assistant", "content": null, "tool_calls": []},
        ]}));
        assert_eq!(messages(&o).unwrap()[1].content, "");
        let calls = json!({"messages": [{"role": "assistant", "content": null,
            "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{}"}}]}]});
        let e = messages(&obj(calls)).unwrap_err();
        assert!(e.message.contains("tool_calls"), "{}", e.message);
        for bad in [
            json!({"messages": [{"role": "user"}]}),
            json!({"messages": []}),
            json!({"messages": [{"role": "tool", "content": "x"}]}),
            json!({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}),
            json!({"messages": [{"role": "user", "content": [{"type": "text"}]}]}),
            json!({"messages": [{"role": 1, "content": "x"}]}),
            json!({}),
        ] {
            assert_eq!(messages(&obj(bad)).unwrap_err().status.as_u16(), 400);
        }
    }

    #[test]
    fn a_last_assistant_turn_is_a_prefill() {
        let mut m = messages(&obj(json!({"messages": [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Well,"},
        ]})))
        .unwrap();
        assert_eq!(take_prefill(&mut m).unwrap().as_deref(), Some("Well,"));
        assert_eq!(m.len(), 1);
        assert_eq!(take_prefill(&mut m).unwrap(), None);
        let mut two = messages(&obj(json!({"messages": [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "A"},
            {"role": "assistant", "content": "B"},
        ]})))
        .unwrap();
        assert_eq!(take_prefill(&mut two).unwrap_err().status.as_u16(), 400);
    }
}
