//! OpenAI's Responses API (`/v1/responses`): a request read as the chat it
//! asks for, and the response object and its named stream events.

use axum::body::Bytes;
use axum::extract::State;
use axum::response::Response;
use kestrel_engine::Generation;
use serde_json::{json, Value};

use super::answer::{finish_reason, predicted, timings, Answer};
use super::fields::{field, get_bool, get_int, get_str, wrong, Obj};
use super::generate::generate;
use super::parse::Source;
use super::{tokens, unix_time, Api, AppState};
use crate::error::ApiError;

pub(crate) async fn responses(State(s): AppState, body: Bytes) -> Response {
    generate(s, body, Api::Responses, Source::Request).await
}

/// `POST /v1/responses/input_tokens`: how many tokens a Responses
/// request's prompt takes, without generating.
pub(crate) async fn responses_input_tokens(State(s): AppState, body: Bytes) -> Response {
    tokens::input_tokens(s, body, Api::Responses).await
}

/// An OpenAI Responses request (`POST /v1/responses`) as the chat request
/// it asks for: `instructions` become a system turn, `input` (a string, or
/// message items whose content is a string or text parts) the turns after
/// it, `max_output_tokens` the token limit, `text.format` the
/// response_format; what has no chat equivalent here (stored responses,
/// background runs, tool items, non-text parts, logprobs) is a 400.
pub(crate) fn responses_request(o: &Obj) -> Result<Obj, ApiError> {
    let mut chat = o.clone();
    for name in [
        "input",
        "instructions",
        "max_output_tokens",
        "text",
        "messages",
    ] {
        chat.remove(name);
    }
    if field(o, "previous_response_id").is_some() {
        return Err(ApiError::bad_request(
            "'previous_response_id' is not supported: the server keeps no responses; send the whole conversation in 'input'",
        ));
    }
    if get_bool(o, "background")? == Some(true) {
        return Err(ApiError::bad_request(
            "'background' responses are not supported",
        ));
    }
    if get_int(o, "top_logprobs", 0, 20)?.is_some_and(|n| n > 0) {
        return Err(ApiError::bad_request(
            "'top_logprobs' is not supported on /v1/responses yet (use /v1/chat/completions)",
        ));
    }
    let mut messages = Vec::new();
    if let Some(text) = get_str(o, "instructions")? {
        messages.push(json!({"role": "system", "content": text}));
    }
    match o.get("input") {
        Some(Value::String(text)) => messages.push(json!({"role": "user", "content": text})),
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                messages.push(response_item(&format!("input[{i}]"), item)?);
            }
        }
        Some(v) => return Err(wrong("input", "a string or an array of items", v)),
        None => return Err(ApiError::bad_request("'input' is required")),
    }
    chat.insert("messages".into(), Value::Array(messages));
    if let Some(n) = field(o, "max_output_tokens") {
        chat.insert("max_tokens".into(), n.clone());
    }
    if let Some(text) = field(o, "text") {
        let text = text
            .as_object()
            .ok_or_else(|| wrong("text", "an object", text))?;
        if let Some(format) = field(text, "format") {
            chat.insert("response_format".into(), format.clone());
        }
    }
    Ok(chat)
}

/// One `input` item as a chat message.
fn response_item(at: &str, item: &Value) -> Result<Value, ApiError> {
    let item = item
        .as_object()
        .ok_or_else(|| wrong(at, "an object", item))?;
    match get_str(item, "type")? {
        None | Some("message") => {}
        Some(t) => {
            return Err(ApiError::bad_request(format!(
                "{at}: items of type {t:?} are not supported (only messages)"
            )))
        }
    }
    let role = get_str(item, "role")?
        .ok_or_else(|| ApiError::bad_request(format!("{at} has no 'role'")))?;
    if !matches!(role, "user" | "system" | "developer" | "assistant") {
        return Err(ApiError::bad_request(format!(
            "{at}: unknown role {role:?} (expected user, system, developer or assistant)"
        )));
    }
    let content = match item.get("content") {
        Some(Value::String(text)) => Value::String(text.clone()),
        Some(Value::Array(parts)) => {
            let mut texts = Vec::new();
            for (j, p) in parts.iter().enumerate() {
                let at = format!("{at}.content[{j}]");
                let p = p.as_object().ok_or_else(|| wrong(&at, "an object", p))?;
                match get_str(p, "type")? {
                    Some("input_text" | "output_text") => {
                        let text = get_str(p, "text")?
                            .ok_or_else(|| ApiError::bad_request(format!("{at} has no 'text'")))?;
                        texts.push(json!({"type": "text", "text": text}));
                    }
                    Some(t) => {
                        return Err(ApiError::bad_request(format!(
                            "{at}: content parts of type {t:?} are not supported (only input_text and output_text)"
                        )))
                    }
                    None => return Err(ApiError::bad_request(format!("{at} has no 'type'"))),
                }
            }
            Value::Array(texts)
        }
        Some(v) => return Err(wrong(&format!("{at}.content"), "a string or an array", v)),
        None => return Err(ApiError::bad_request(format!("{at} has no 'content'"))),
    };
    Ok(json!({"role": role, "content": content}))
}

/// The one output item's id (the response's own, retyped).
fn message_id(a: &Answer) -> String {
    format!("msg_{}", a.id.trim_start_matches("resp_"))
}

/// The assistant message item, with its text once known.
fn message_item(a: &Answer, status: &str, text: Option<&str>) -> Value {
    json!({
        "id": message_id(a), "type": "message", "status": status, "role": "assistant",
        "content": text.map(|t| vec![output_text(t)]).unwrap_or_default(),
    })
}

/// Responses: an output text content part.
fn output_text(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []})
}

/// The whole response object. A generation that ran into its token limit
/// (or the context's end) is "incomplete", as OpenAI reports
/// `max_output_tokens`.
pub(super) fn full(a: &Answer, g: &Generation) -> Value {
    let cut = finish_reason(g.stats.stop) == "length";
    let status = if cut { "incomplete" } else { "completed" };
    let text = format!("{}{}", a.prefill, g.text);
    json!({
        "id": a.id, "object": "response", "created_at": a.created,
        "status": status,
        "completed_at": (!cut).then(unix_time),
        "error": null,
        "incomplete_details": cut.then(|| json!({"reason": "max_output_tokens"})),
        "model": a.model,
        "output": [message_item(a, status, Some(&text))],
        "usage": {
            "input_tokens": g.stats.prompt_tokens,
            "input_tokens_details": {"cached_tokens": g.stats.cache_n},
            "output_tokens": predicted(&g.stats),
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": g.stats.prompt_tokens + predicted(&g.stats),
        },
        "timings": timings(g),
    })
}

/// The events before any token: the response pending, its message item
/// and the item's (empty) text part.
pub(super) fn stream_start(a: &Answer) -> Vec<Value> {
    let pending = json!({
        "id": a.id, "object": "response", "created_at": a.created,
        "status": "in_progress", "model": a.model, "output": [],
    });
    vec![
        json!({"type": "response.created", "response": pending}),
        json!({"type": "response.in_progress", "response": pending}),
        json!({"type": "response.output_item.added", "output_index": 0,
            "item": message_item(a, "in_progress", None)}),
        json!({"type": "response.content_part.added", "item_id": message_id(a),
            "output_index": 0, "content_index": 0, "part": output_text("")}),
    ]
}

/// One token's text delta.
pub(super) fn stream_token(a: &Answer, text: &str) -> Value {
    json!({
        "type": "response.output_text.delta", "item_id": message_id(a),
        "output_index": 0, "content_index": 0, "delta": text, "logprobs": [],
    })
}

/// The closing events: the text, its part and item done, then the whole
/// response, completed or incomplete.
pub(super) fn stream_end(a: &Answer, g: &Generation) -> Vec<Value> {
    let mut out = Vec::new();
    let response = full(a, g);
    let item = &response["output"][0];
    let (id, part) = (message_id(a), &item["content"][0]);
    out.push(json!({"type": "response.output_text.done", "item_id": id,
        "output_index": 0, "content_index": 0, "text": part["text"], "logprobs": []}));
    out.push(json!({"type": "response.content_part.done", "item_id": id,
        "output_index": 0, "content_index": 0, "part": part}));
    out.push(
        json!({"type": "response.output_item.done", "output_index": 0,
        "item": item}),
    );
    let kind = match response["status"].as_str() {
        Some("incomplete") => "response.incomplete",
        _ => "response.completed",
    };
    out.push(json!({"type": kind, "response": response}));
    out
}

#[cfg(test)]
mod tests {
    use super::super::chat::messages;
    use super::*;

    fn obj(v: Value) -> Obj {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn a_responses_request_reads_as_its_chat() {
        let chat = responses_request(&obj(json!({
            "model": "m", "instructions": "Be brief.", "max_output_tokens": 7,
            "temperature": 0.5, "text": {"format": {"type": "text"}}, "store": false,
            "input": [
                {"role": "user", "content": "Hi"},
                {"type": "message", "role": "assistant",
                 "content": [{"type": "output_text", "text": "Hello"}]},
                {"role": "developer", "content": [{"type": "input_text", "text": "a"},
                    {"type": "input_text", "text": "b"}]},
            ],
        })))
        .unwrap();
        assert_eq!(
            Value::Object(chat.clone()),
            json!({
                "model": "m", "temperature": 0.5, "store": false,
                "messages": [
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "Hi"},
                    {"role": "assistant", "content": [{"type": "text", "text": "Hello"}]},
                    {"role": "developer", "content": [{"type": "text", "text": "a"},
                        {"type": "text", "text": "b"}]},
                ],
                "max_tokens": 7, "response_format": {"type": "text"},
            })
        );
        // Text parts join as a chat's do.
        let m = messages(&chat).unwrap();
        assert_eq!(m[3].turn.content, "a\nb");
        let plain = responses_request(&obj(json!({"input": "Hi"}))).unwrap();
        assert_eq!(
            plain["messages"],
            json!([{"role": "user", "content": "Hi"}])
        );
    }

    #[test]
    fn a_responses_request_names_what_it_cannot_do() {
        for (body, words) in [
            (json!({}), "'input' is required"),
            (
                json!({"input": [{"type": "reasoning", "summary": []}]}),
                "input[0]: items of type \"reasoning\"",
            ),
            (json!({"input": ["x"]}), "'input[0]' must be an object"),
            (
                json!({"input": [{"role": "tool", "content": "x"}]}),
                "input[0]: unknown role \"tool\"",
            ),
            (
                json!({"input": [{"role": "user", "content": [{"type": "input_file"}]}]}),
                "input[0].content[0]: content parts of type \"input_file\"",
            ),
            (
                json!({"input": "x", "previous_response_id": "resp_1"}),
                "previous_response_id",
            ),
            (json!({"input": "x", "top_logprobs": 2}), "top_logprobs"),
            (json!({"input": "x", "text": 1}), "'text' must be an object"),
        ] {
            let e = responses_request(&obj(body.clone())).unwrap_err();
            assert!(e.message.contains(words), "{body}: {}", e.message);
            assert_eq!(e.status, 400);
        }
    }
}
