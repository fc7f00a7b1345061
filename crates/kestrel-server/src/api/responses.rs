//! OpenAI's Responses API (`/v1/responses`): a request read as the chat it
//! asks for (function tools, calls and their outputs included), and the
//! response object (message and function call items) and its named stream
//! events.

use axum::body::Bytes;
use axum::extract::State;
use axum::response::Response;
use kestrel_engine::Generation;
use serde_json::{json, Value};

use super::answer::{finish_reason, predicted, timings, Answer};
use super::fields::{
    field, get_bool, get_int, get_str, required_str_at as required, str_at as text, wrong, Obj,
};
use super::generate::generate;
use super::parse::Source;
use super::tools::{self, Block};
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
/// message items whose content is a string or text parts, and function
/// calls and their outputs) the turns after it, `max_output_tokens` the
/// token limit, `text.format` the response_format, function `tools` and
/// `tool_choice` chat's; what has no chat equivalent here (stored
/// responses, background runs, hosted tools, other items, non-text parts,
/// logprobs) is a 400.
pub(crate) fn responses_request(o: &Obj) -> Result<Obj, ApiError> {
    let mut chat = o.clone();
    for name in [
        "input",
        "instructions",
        "max_output_tokens",
        "text",
        "messages",
        "tools",
        "tool_choice",
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
                input_item(&format!("input[{i}]"), item, &mut messages)?;
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
    if let Some(tools) = field(o, "tools") {
        chat.insert("tools".into(), chat_tools(tools)?);
    }
    if let Some(choice) = field(o, "tool_choice") {
        chat.insert("tool_choice".into(), chat_tool_choice(choice)?);
    }
    Ok(chat)
}

/// Responses' function tools (`name`, `description`, `parameters` and
/// `strict` beside `type`) in chat's shape (under `function`).
fn chat_tools(tools: &Value) -> Result<Value, ApiError> {
    let list = tools
        .as_array()
        .ok_or_else(|| wrong("tools", "an array", tools))?;
    let mut out = Vec::with_capacity(list.len());
    for (i, t) in list.iter().enumerate() {
        let at = format!("tools[{i}]");
        let t = t.as_object().ok_or_else(|| wrong(&at, "an object", t))?;
        match text(t, &at, "type")? {
            Some("function") => {}
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "{at}: tools of type {other:?} are not supported (only function)"
                )))
            }
            None => return Err(ApiError::bad_request(format!("{at} has no 'type'"))),
        }
        // In the request's order: the template writes the tools out.
        let function: Obj = t
            .iter()
            .filter(|(k, _)| matches!(k.as_str(), "name" | "description" | "parameters" | "strict"))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        out.push(json!({"type": "function", "function": function}));
    }
    Ok(Value::Array(out))
}

/// Responses' `tool_choice` as chat's: the same words, and a function
/// named beside `type` rather than under `function`.
fn chat_tool_choice(choice: &Value) -> Result<Value, ApiError> {
    let Some(c) = choice.as_object() else {
        // ("auto", "none", "required"; chat's check names anything else.)
        return Ok(choice.clone());
    };
    match text(c, "tool_choice", "type")? {
        Some("function") => {
            let name = text(c, "tool_choice", "name")?.ok_or_else(|| {
                ApiError::bad_request("'tool_choice' of type \"function\" needs a 'name'")
            })?;
            Ok(json!({"type": "function", "function": {"name": name}}))
        }
        Some(other) => Err(ApiError::bad_request(format!(
            "'tool_choice' of type {other:?} is not supported (only \"function\", \"auto\", \"none\" and \"required\")"
        ))),
        None => Err(ApiError::bad_request("'tool_choice' has no 'type'")),
    }
}

/// One `input` item as the chat turns it adds to: a message, a function
/// call (an assistant turn's `tool_calls`; calls that follow an assistant
/// turn belong to it, as a response's message and calls make one turn),
/// or a call's output (a `tool` turn).
fn input_item(at: &str, item: &Value, messages: &mut Vec<Value>) -> Result<(), ApiError> {
    let item = item
        .as_object()
        .ok_or_else(|| wrong(at, "an object", item))?;
    match get_str(item, "type")? {
        None | Some("message") => messages.push(message_item_turn(at, item)?),
        Some("function_call") => {
            let call = json!({
                "id": required(item, at, "call_id")?, "type": "function",
                "function": {"name": required(item, at, "name")?,
                    "arguments": required(item, at, "arguments")?},
            });
            match messages.last_mut() {
                Some(m) if m["role"] == "assistant" => match m.get_mut("tool_calls") {
                    Some(Value::Array(calls)) => calls.push(call),
                    _ => m["tool_calls"] = json!([call]),
                },
                _ => messages.push(json!({"role": "assistant", "content": null,
                    "tool_calls": [call]})),
            }
        }
        Some("function_call_output") => {
            let call_id = required(item, at, "call_id")?;
            let output = match item.get("output") {
                Some(Value::String(text)) => Value::String(text.clone()),
                Some(Value::Array(parts)) => text_parts(&format!("{at}.output"), parts)?,
                Some(v) => return Err(wrong(&format!("{at}.output"), "a string or an array", v)),
                None => return Err(ApiError::bad_request(format!("{at} has no 'output'"))),
            };
            messages.push(json!({"role": "tool", "tool_call_id": call_id, "content": output}));
        }
        Some(t) => {
            return Err(ApiError::bad_request(format!(
                "{at}: items of type {t:?} are not supported (only message, function_call and function_call_output)"
            )))
        }
    }
    Ok(())
}

/// A message item as a chat message.
fn message_item_turn(at: &str, item: &Obj) -> Result<Value, ApiError> {
    let role = get_str(item, "role")?
        .ok_or_else(|| ApiError::bad_request(format!("{at} has no 'role'")))?;
    if !matches!(role, "user" | "system" | "developer" | "assistant") {
        return Err(ApiError::bad_request(format!(
            "{at}: unknown role {role:?} (expected user, system, developer or assistant)"
        )));
    }
    let content = match item.get("content") {
        Some(Value::String(text)) => Value::String(text.clone()),
        Some(Value::Array(parts)) => text_parts(&format!("{at}.content"), parts)?,
        Some(v) => return Err(wrong(&format!("{at}.content"), "a string or an array", v)),
        None => return Err(ApiError::bad_request(format!("{at} has no 'content'"))),
    };
    Ok(json!({"role": role, "content": content}))
}

/// Responses' text content parts as chat's.
fn text_parts(at: &str, parts: &[Value]) -> Result<Value, ApiError> {
    let mut texts = Vec::new();
    for (j, p) in parts.iter().enumerate() {
        let at = format!("{at}[{j}]");
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
    Ok(Value::Array(texts))
}

/// The message item's id (the response's own, retyped); a text block
/// after the first (text after calls) numbered apart.
fn message_id(a: &Answer, index: usize) -> String {
    let id = format!("msg_{}", a.id.trim_start_matches("resp_"));
    match index {
        0 => id,
        i => format!("{id}_{i}"),
    }
}

/// An assistant message item, with its text once known.
fn message_item(a: &Answer, index: usize, status: &str, text: Option<&str>) -> Value {
    json!({
        "id": message_id(a, index), "type": "message", "status": status, "role": "assistant",
        "content": text.map(|t| vec![output_text(t)]).unwrap_or_default(),
    })
}

/// A function call item's own id (`fc_`), from its call's (`call_`).
fn call_item_id(call_id: &str) -> String {
    format!("fc_{}", call_id.trim_start_matches("call_"))
}

/// A function call item: its own id and the call's, which a
/// `function_call_output` names.
fn call_item(call_id: &str, name: &str, arguments: &str, status: &str) -> Value {
    json!({
        "id": call_item_id(call_id), "type": "function_call",
        "status": status, "call_id": call_id, "name": name, "arguments": arguments,
    })
}

/// Responses: an output text content part.
fn output_text(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []})
}

/// The response's status: "incomplete" when the generation ran into its
/// token limit (or the context's end), as OpenAI reports
/// `max_output_tokens`.
pub(super) fn status(g: &Generation) -> &'static str {
    if finish_reason(g.stats.stop) == "length" {
        "incomplete"
    } else {
        "completed"
    }
}

/// The output items: the message, and with tools the calls after any text.
fn output(a: &Answer, g: &Generation, status: &str) -> Vec<Value> {
    let text = format!("{}{}", a.prefill, g.text);
    let Some(t) = &a.tools else {
        return vec![message_item(a, 0, status, Some(&text))];
    };
    let (m, _) = tools::message(t, &text, a.seed);
    let calls = m["tool_calls"].as_array().map_or(&[][..], Vec::as_slice);
    let content = m["content"].as_str().unwrap_or("");
    let mut items = Vec::new();
    if !content.is_empty() || calls.is_empty() {
        items.push(message_item(a, 0, status, Some(content)));
    }
    items.extend(calls.iter().map(|c| {
        let f = &c["function"];
        call_item(
            c["id"].as_str().unwrap_or(""),
            f["name"].as_str().unwrap_or(""),
            f["arguments"].as_str().unwrap_or(""),
            "completed",
        )
    }));
    items
}

/// The whole response object.
pub(super) fn full(a: &Answer, g: &Generation) -> Value {
    let status = status(g);
    let cut = status == "incomplete";
    json!({
        "id": a.id, "object": "response", "created_at": a.created,
        "status": status,
        "completed_at": (!cut).then(unix_time),
        "error": null,
        "incomplete_details": cut.then(|| json!({"reason": "max_output_tokens"})),
        "model": a.model,
        "output": output(a, g, status),
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

/// The events before any token: the response pending and, without tools,
/// its message item and the item's (empty) text part (with tools, items
/// open as the answer's blocks do: [`block_events`]).
pub(super) fn stream_start(a: &Answer) -> Vec<Value> {
    let pending = json!({
        "id": a.id, "object": "response", "created_at": a.created,
        "status": "in_progress", "model": a.model, "output": [],
    });
    let mut out = vec![
        json!({"type": "response.created", "response": pending}),
        json!({"type": "response.in_progress", "response": pending}),
    ];
    if a.tool_stream.is_none() {
        out.extend(text_start(a, 0));
    }
    out
}

/// A message item's opening: the item, and its text part.
fn text_start(a: &Answer, index: usize) -> Vec<Value> {
    vec![
        json!({"type": "response.output_item.added", "output_index": index,
            "item": message_item(a, index, "in_progress", None)}),
        json!({"type": "response.content_part.added", "item_id": message_id(a, index),
            "output_index": index, "content_index": 0, "part": output_text("")}),
    ]
}

/// One token's text delta.
pub(super) fn stream_token(a: &Answer, text: &str) -> Value {
    text_delta(a, 0, text)
}

fn text_delta(a: &Answer, index: usize, text: &str) -> Value {
    json!({
        "type": "response.output_text.delta", "item_id": message_id(a, index),
        "output_index": index, "content_index": 0, "delta": text, "logprobs": [],
    })
}

/// A message item's close: its text, its part and the item done.
fn text_done(a: &Answer, index: usize, text: &str, status: &str) -> Vec<Value> {
    let id = message_id(a, index);
    let part = output_text(text);
    vec![
        json!({"type": "response.output_text.done", "item_id": id,
            "output_index": index, "content_index": 0, "text": text, "logprobs": []}),
        json!({"type": "response.content_part.done", "item_id": id,
            "output_index": index, "content_index": 0, "part": part}),
        json!({"type": "response.output_item.done", "output_index": index,
            "item": message_item(a, index, status, Some(text))}),
    ]
}

/// The events of a block of an answer with tools: message items as
/// without tools, and function call items whose arguments stream as
/// `response.function_call_arguments.delta`. A message item that ends the
/// answer takes the response's `status`.
pub(super) fn block_events(a: &Answer, b: &Block, status: &str) -> Vec<Value> {
    match b {
        Block::TextStart(i) => text_start(a, *i),
        Block::Text(i, text) => vec![text_delta(a, *i, text)],
        Block::TextDone(i, text) => text_done(a, *i, text, status),
        Block::CallStart { index, id, name } => vec![json!({
            "type": "response.output_item.added", "output_index": index,
            "item": call_item(id, name, "", "in_progress"),
        })],
        Block::CallArguments {
            index,
            id,
            fragment,
        } => vec![json!({
            "type": "response.function_call_arguments.delta",
            "item_id": call_item_id(id),
            "output_index": index, "delta": fragment,
        })],
        Block::CallDone {
            index,
            id,
            name,
            arguments,
        } => {
            let item = call_item(id, name, arguments, "completed");
            vec![
                json!({"type": "response.function_call_arguments.done", "item_id": item["id"],
                    "output_index": index, "name": name, "arguments": arguments}),
                json!({"type": "response.output_item.done", "output_index": index,
                    "item": item}),
            ]
        }
    }
}

/// The closing events: without tools, the text, its part and item done;
/// then the whole response, completed or incomplete.
pub(super) fn stream_end(a: &Answer, g: &Generation) -> Vec<Value> {
    let response = full(a, g);
    let mut out = Vec::new();
    if a.tool_stream.is_none() {
        let text = response["output"][0]["content"][0]["text"]
            .as_str()
            .unwrap_or("");
        out.extend(text_done(a, 0, text, status(g)));
    }
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
            (
                json!({"input": "x", "tools": [{"type": "web_search"}]}),
                "tools[0]: tools of type \"web_search\" are not supported",
            ),
            (
                json!({"input": "x", "tools": [{"name": "f"}]}),
                "tools[0] has no 'type'",
            ),
            (
                json!({"input": "x", "tools": {}}),
                "'tools' must be an array",
            ),
            (
                json!({"input": "x", "tool_choice": {"type": "file_search"}}),
                "'tool_choice' of type \"file_search\"",
            ),
            (
                json!({"input": "x", "tool_choice": {"type": "function"}}),
                "needs a 'name'",
            ),
            (
                json!({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}),
                "input[0] has no 'call_id'",
            ),
            (
                json!({"input": [{"type": "function_call", "call_id": "c", "name": "f",
                    "arguments": {}}]}),
                "'input[0].arguments' must be a string",
            ),
            (
                json!({"input": [{"type": "function_call_output", "call_id": "c"}]}),
                "input[0] has no 'output'",
            ),
        ] {
            let e = responses_request(&obj(body.clone())).unwrap_err();
            assert!(e.message.contains(words), "{body}: {}", e.message);
            assert_eq!(e.status, 400);
        }
    }

    #[test]
    fn function_tools_calls_and_outputs_read_as_the_chat_they_are() {
        let chat = responses_request(&obj(json!({
            "tools": [{"type": "function", "name": "get_weather", "description": "Weather.",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
                "strict": true}],
            "tool_choice": {"type": "function", "name": "get_weather"},
            "parallel_tool_calls": false,
            "input": [
                {"role": "user", "content": "Weather in Paris and Rome?"},
                {"type": "function_call", "call_id": "call_1", "name": "get_weather",
                    "arguments": "{\"city\":\"Paris\"}", "id": "fc_1", "status": "completed"},
                {"type": "function_call", "call_id": "call_2", "name": "get_weather",
                    "arguments": "{\"city\":\"Rome\"}"},
                {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
                {"type": "function_call_output", "call_id": "call_2",
                    "output": [{"type": "input_text", "text": "rain"}]},
                {"type": "message", "role": "assistant", "content": "Let me check again."},
                {"type": "function_call", "call_id": "call_3", "name": "get_weather",
                    "arguments": "{}"},
            ],
        })))
        .unwrap();
        let call = |id: &str, args: &str| {
            json!({"id": id, "type": "function",
                "function": {"name": "get_weather", "arguments": args}})
        };
        assert_eq!(
            Value::Object(chat.clone()),
            json!({
                "parallel_tool_calls": false,
                "tools": [{"type": "function", "function": {"name": "get_weather",
                    "description": "Weather.", "strict": true,
                    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}],
                "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
                "messages": [
                    {"role": "user", "content": "Weather in Paris and Rome?"},
                    {"role": "assistant", "content": null, "tool_calls": [
                        call("call_1", "{\"city\":\"Paris\"}"),
                        call("call_2", "{\"city\":\"Rome\"}")]},
                    {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
                    {"role": "tool", "tool_call_id": "call_2",
                        "content": [{"type": "text", "text": "rain"}]},
                    {"role": "assistant", "content": "Let me check again.",
                        "tool_calls": [call("call_3", "{}")]},
                ],
            })
        );
        let m = messages(&chat).unwrap();
        assert_eq!(m[1].tool_calls.len(), 2);
        assert_eq!(m[3].turn.content, "rain");
        assert_eq!(m[4].turn.content, "Let me check again.");
        // The words pass as they are (chat's check reads them).
        let plain = responses_request(&obj(json!({"input": "x", "tool_choice": "required"})));
        assert_eq!(plain.unwrap()["tool_choice"], "required");
    }
}
