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
use super::tools::{self, ToolUse};
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
        let prompt = chat_prompt(&l.engine, &o)?.text;
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

/// A chat prompt: the text, the assistant turn it continues, and the
/// request's tool use.
pub(crate) struct ChatPrompt {
    pub text: String,
    pub prefill: Option<String>,
    pub tools: Option<ToolUse>,
}

/// A chat request's messages as the model's template writes them (with
/// the request's tools, and the calls and results of earlier turns), with
/// a trailing assistant turn continued (llama-server's prefill).
pub(crate) fn chat_prompt(engine: &Engine, o: &Obj) -> Result<ChatPrompt, ApiError> {
    let mut messages = messages(o)?;
    let prefill = take_prefill(&mut messages)?;
    let tools = tools::tool_use(engine, o)?;
    let plain = tools.is_none() && messages.iter().all(|m| m.is_plain());
    let mut text = if plain {
        let turns: Vec<ChatMessage> = messages.into_iter().map(|m| m.turn).collect();
        engine
            .render_chat(&turns)
            .map_err(|e| ApiError::bad_request(e.to_string()))?
    } else {
        tools::render(engine, &messages, tools.as_ref())?
    };
    text.push_str(prefill.as_deref().unwrap_or(""));
    Ok(ChatPrompt {
        text,
        prefill,
        tools,
    })
}

/// One message of a conversation: its role and text, and what a
/// conversation with tools adds (an assistant's calls, a result's call id).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Message {
    pub turn: ChatMessage,
    /// An assistant turn's `tool_calls`, as given (checked).
    pub tool_calls: Vec<Value>,
    /// A `tool` turn's `tool_call_id`.
    pub tool_call_id: Option<String>,
    /// A `tool` turn's function `name`.
    pub name: Option<String>,
}

impl Message {
    /// Renders as a plain `{role, content}` turn.
    fn is_plain(&self) -> bool {
        self.tool_calls.is_empty() && self.turn.role != "tool"
    }

    /// The message as a chat template's `messages` entry takes it
    /// (Hugging Face's shape: `content` null beside calls without text).
    pub fn to_json(&self) -> Value {
        let mut m = json!({"role": self.turn.role, "content": self.turn.content});
        if !self.tool_calls.is_empty() {
            if self.turn.content.is_empty() {
                m["content"] = Value::Null;
            }
            m["tool_calls"] = Value::Array(self.tool_calls.clone());
        }
        if let Some(id) = &self.tool_call_id {
            m["tool_call_id"] = json!(id);
        }
        if let Some(name) = &self.name {
            m["name"] = json!(name);
        }
        m
    }
}

/// The conversation of a chat request: a non-empty array of messages with
/// known roles and text content (a string or an array of text parts);
/// assistant turns may carry `tool_calls`, `tool` turns answer one.
pub(crate) fn messages(o: &Obj) -> Result<Vec<Message>, ApiError> {
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
                "system" | "user" | "assistant" | "tool" => role,
                // OpenAI's newer name for system instructions.
                "developer" => "system",
                other => {
                    return Err(ApiError::bad_request(format!(
                        "messages[{i}]: unknown role {other:?} (expected system, developer, user, assistant or tool)"
                    )))
                }
            };
            let tool_calls = tools::message_calls(&format!("messages[{i}]"), role, m)?;
            let (tool_call_id, name) = tools::result_of(&format!("messages[{i}]"), role, m)?;
            let content = match m.get("content") {
                Some(Value::String(s)) => s.clone(),
                // OpenAI's assistant turns may carry null (llama-server reads "").
                Some(Value::Null) => String::new(),
                None if !tool_calls.is_empty() => String::new(),
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
            Ok(Message {
                turn: ChatMessage {
                    role: role.to_owned(),
                    content,
                },
                tool_calls,
                tool_call_id,
                name,
            })
        })
        .collect()
}

/// A conversation that ends with an assistant turn asks the model to go on
/// with that turn (a prefill), as llama-server does: the turn is taken off
/// here, the rest is rendered with the assistant's opening, and its text
/// follows; the answer's content then starts with it. Two assistant turns
/// at the end are a 400, as llama-server's.
pub(crate) fn take_prefill(messages: &mut Vec<Message>) -> Result<Option<String>, ApiError> {
    let n = messages.len();
    // An assistant turn that called tools is history, not a prefill.
    if messages
        .last()
        .is_none_or(|m| m.turn.role != "assistant" || !m.tool_calls.is_empty())
    {
        return Ok(None);
    }
    if n >= 2 && messages[n - 2].turn.role == "assistant" && messages[n - 2].tool_calls.is_empty() {
        return Err(ApiError::bad_request(
            "messages: two or more assistant turns at the end (only the last may be continued)",
        ));
    }
    Ok(messages.pop().map(|m| m.turn.content))
}

/// The non-streamed answer.
pub(super) fn full(a: &Answer, g: &Generation, logprobs: Value) -> Value {
    let text = format!("{}{}", a.prefill, g.text);
    let (message, called) = match &a.tools {
        Some(t) => tools::message(t, &text, a.seed),
        None => (json!({"role": "assistant", "content": text}), false),
    };
    let reason = if called {
        "tool_calls"
    } else {
        finish_reason(g.stats.stop)
    };
    json!({
        "id": a.id, "object": "chat.completion", "created": a.created,
        "model": a.model, "system_fingerprint": fingerprint(),
        "choices": [{
            "index": 0,
            "message": message,
            "logprobs": logprobs,
            "finish_reason": reason,
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

/// A chunk of one delta (content or tool calls).
pub(super) fn delta_chunk(a: &Answer, delta: Value) -> Value {
    a.chunk(json!([{
        "index": 0, "delta": delta, "logprobs": null, "finish_reason": null,
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
        assert_eq!(m[0].turn.role, "system");
        assert_eq!(m[1].turn.content, "Hel\nlo");
        let o = obj(json!({"messages": [
            {"role": "user", "content": "Hi", "name": "bob"},
            {"role": "assistant", "content": null, "tool_calls": []},
        ]}));
        assert_eq!(messages(&o).unwrap()[1].turn.content, "");
        let calls = json!({"messages": [{"role": "assistant", "content": null,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "42"}]});
        let m = messages(&obj(calls)).unwrap();
        assert_eq!(m[0].tool_calls.len(), 1);
        assert_eq!(m[1].tool_call_id.as_deref(), Some("c1"));
        for bad in [
            json!({"messages": [{"role": "user"}]}),
            json!({"messages": []}),
            json!({"messages": [{"role": "assistant", "tool_calls": [{"type": "function"}]}]}),
            json!({"messages": [{"role": "assistant", "tool_calls": "x"}]}),
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
