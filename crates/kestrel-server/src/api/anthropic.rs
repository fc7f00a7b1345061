//! Anthropic's Messages API (`/v1/messages`, which llama-server answers
//! too): a request read as the chat it asks for (client tools, `tool_use`
//! and `tool_result` blocks included), token counting, and the message
//! object (text and `tool_use` blocks) and its named stream events.

use axum::body::Bytes;
use axum::extract::State;
use axum::response::Response;
use kestrel_engine::{Generation, StopReason};
use serde_json::{json, Value};

use super::answer::{predicted, Answer};
use super::fields::{field, get_str, required_str_at as required, str_at as text, wrong, Obj};
use super::generate::generate;
use super::parse::Source;
use super::tools::{self, Block, ToolStream};
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
/// whose content is a string or text blocks, an assistant's `tool_use`
/// blocks and a user's `tool_result` blocks) the turns after it,
/// `stop_sequences` the stop strings, `tools` and `tool_choice` chat's;
/// image, document and thinking blocks and server tools are a 400.
pub(crate) fn messages_request(o: &Obj) -> Result<Obj, ApiError> {
    let mut chat = o.clone();
    for name in [
        "system",
        "messages",
        "stop_sequences",
        "thinking",
        "tools",
        "tool_choice",
    ] {
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
        match m.get("content") {
            Some(Value::String(text)) => turns.push(json!({"role": role, "content": text})),
            Some(Value::Array(blocks)) => {
                turn_blocks(&format!("{at}.content"), role, blocks, &mut turns)?;
            }
            Some(v) => return Err(wrong(&format!("{at}.content"), "a string or an array", v)),
            None => return Err(ApiError::bad_request(format!("{at} has no 'content'"))),
        }
    }
    chat.insert("messages".into(), Value::Array(turns));
    if let Some(stop) = field(o, "stop_sequences") {
        if !stop.is_array() {
            return Err(wrong("stop_sequences", "an array of strings", stop));
        }
        chat.insert("stop".into(), stop.clone());
    }
    if let Some(tools) = field(o, "tools") {
        chat.insert("tools".into(), chat_tools(tools)?);
    }
    if let Some(choice) = field(o, "tool_choice") {
        tool_choice(choice, &mut chat)?;
    }
    Ok(chat)
}

/// Anthropic's client tools (`name`, `description`, `input_schema`) in
/// chat's shape; server tools (a `type` such as `web_search_20250305`) are
/// a 400.
fn chat_tools(tools: &Value) -> Result<Value, ApiError> {
    let list = tools
        .as_array()
        .ok_or_else(|| wrong("tools", "an array", tools))?;
    let mut out = Vec::with_capacity(list.len());
    for (i, t) in list.iter().enumerate() {
        let at = format!("tools[{i}]");
        let t = t.as_object().ok_or_else(|| wrong(&at, "an object", t))?;
        match text(t, &at, "type")? {
            None | Some("custom") => {}
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "{at}: tools of type {other:?} are not supported (only client tools: name, description, input_schema)"
                )))
            }
        }
        required(t, &at, "name")?;
        text(t, &at, "description")?;
        // (Named here: chat's check would name `parameters`.)
        match field(t, "input_schema") {
            None => {}
            Some(Value::Object(schema)) if schema.get("type").is_none_or(|t| t == "object") => {}
            Some(v) => {
                return Err(ApiError::bad_request(format!(
                    "'{at}.input_schema' must be an object schema (\"type\": \"object\"), got {v}"
                )))
            }
        }
        // In the request's order: the template writes the tools out.
        let function: Obj = t
            .iter()
            .filter_map(|(k, v)| match k.as_str() {
                "name" | "description" => Some((k.clone(), v.clone())),
                "input_schema" => Some(("parameters".into(), v.clone())),
                _ => None,
            })
            .collect();
        out.push(json!({"type": "function", "function": function}));
    }
    Ok(Value::Array(out))
}

/// Anthropic's `tool_choice` as chat's `tool_choice` (`auto`, `any` as
/// `required`, `tool` as a named function, `none`) and its
/// `disable_parallel_tool_use` as `parallel_tool_calls`.
fn tool_choice(choice: &Value, chat: &mut Obj) -> Result<(), ApiError> {
    let c = choice
        .as_object()
        .ok_or_else(|| wrong("tool_choice", "an object", choice))?;
    let chosen = match text(c, "tool_choice", "type")? {
        Some("auto") => json!("auto"),
        Some("any") => json!("required"),
        Some("none") => json!("none"),
        Some("tool") => {
            let name = required(c, "tool_choice", "name")?;
            json!({"type": "function", "function": {"name": name}})
        }
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "'tool_choice.type' {other:?} is not one of \"auto\", \"any\", \"tool\", \"none\""
            )))
        }
        None => return Err(ApiError::bad_request("'tool_choice' has no 'type'")),
    };
    chat.insert("tool_choice".into(), chosen);
    match field(c, "disable_parallel_tool_use") {
        None => {}
        Some(Value::Bool(off)) => {
            chat.insert("parallel_tool_calls".into(), json!(!off));
        }
        Some(v) => {
            return Err(wrong(
                "tool_choice.disable_parallel_tool_use",
                "a boolean",
                v,
            ))
        }
    }
    Ok(())
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

/// A message's content blocks as chat turns: an assistant's text and
/// `tool_use` blocks one turn (its text and `tool_calls`); a user's
/// `tool_result` blocks a `tool` turn each, then its text blocks one user
/// turn, as Anthropic has results lead the message.
fn turn_blocks(
    at: &str,
    role: &str,
    blocks: &[Value],
    turns: &mut Vec<Value>,
) -> Result<(), ApiError> {
    let mut texts = Vec::new();
    let mut calls = Vec::new();
    let mut results = 0;
    for (j, b) in blocks.iter().enumerate() {
        let at = format!("{at}[{j}]");
        let b = b.as_object().ok_or_else(|| wrong(&at, "an object", b))?;
        match (role, get_str(b, "type")?) {
            (_, Some("text")) => texts.push(json!({"type": "text", "text": required(b, &at, "text")?})),
            ("assistant", Some("tool_use")) => {
                let input = match b.get("input") {
                    Some(input @ Value::Object(_)) => input.to_string(),
                    Some(v) => return Err(wrong(&format!("{at}.input"), "an object", v)),
                    None => return Err(ApiError::bad_request(format!("{at} has no 'input'"))),
                };
                calls.push(json!({"id": required(b, &at, "id")?, "type": "function",
                    "function": {"name": required(b, &at, "name")?, "arguments": input}}));
            }
            ("user", Some("tool_result")) => {
                let id = required(b, &at, "tool_use_id")?;
                let content = match b.get("content") {
                    None | Some(Value::Null) => json!(""),
                    Some(Value::String(text)) => json!(text),
                    // Text parts, which join as a chat's do.
                    Some(Value::Array(blocks)) => text_blocks(&format!("{at}.content"), blocks)?
                        .into_iter()
                        .map(|t| json!({"type": "text", "text": t}))
                        .collect(),
                    Some(v) => {
                        return Err(wrong(
                            &format!("{at}.content"),
                            "a string or an array of text blocks",
                            v,
                        ))
                    }
                };
                // Checked, but a chat's tool turn has no place for it: the
                // result's text says what went wrong.
                if let Some(v) = b.get("is_error").filter(|v| !v.is_boolean() && !v.is_null()) {
                    return Err(wrong(&format!("{at}.is_error"), "a boolean", v));
                }
                turns.push(json!({"role": "tool", "tool_call_id": id, "content": content}));
                results += 1;
            }
            (_, Some(t @ ("tool_use" | "tool_result"))) => {
                return Err(ApiError::bad_request(format!(
                    "{at}: {t} blocks belong in {} messages",
                    if t == "tool_use" { "assistant" } else { "user" }
                )))
            }
            (_, Some(t)) => {
                return Err(ApiError::bad_request(format!(
                    "{at}: content blocks of type {t:?} are not supported (only text, tool_use and tool_result)"
                )))
            }
            (_, None) => return Err(ApiError::bad_request(format!("{at} has no 'type'"))),
        }
    }
    if !calls.is_empty() {
        let content = if texts.is_empty() {
            Value::Null
        } else {
            json!(texts)
        };
        turns.push(json!({"role": role, "content": content, "tool_calls": calls}));
    } else if !texts.is_empty() || results == 0 {
        turns.push(json!({"role": role, "content": texts}));
    }
    Ok(())
}

/// Why the answer ended (a call ends it with `tool_use`), and the stop
/// string that ended it.
fn stop(a: &Answer, g: &Generation, called: bool) -> (&'static str, Value) {
    if called {
        return ("tool_use", Value::Null);
    }
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

/// A `tool_use` block's id (`toolu_`), from its call's (`call_`).
fn tool_use_id(call_id: &str) -> String {
    format!("toolu_{}", call_id.trim_start_matches("call_"))
}

/// The content blocks, and whether the model called: the text, and with
/// tools the calls (`tool_use`) after any text.
fn content(a: &Answer, g: &Generation) -> (Vec<Value>, bool) {
    let text = format!("{}{}", a.prefill, g.text);
    let Some(t) = &a.tools else {
        return (vec![json!({"type": "text", "text": text})], false);
    };
    let (m, called) = tools::message(t, &text, a.seed);
    let calls = m["tool_calls"].as_array().map_or(&[][..], Vec::as_slice);
    let text = m["content"].as_str().unwrap_or("");
    let mut blocks = Vec::new();
    if !text.is_empty() || calls.is_empty() {
        blocks.push(json!({"type": "text", "text": text}));
    }
    blocks.extend(calls.iter().map(|c| {
        let f = &c["function"];
        // The grammar and the parser let only a JSON object through; an
        // unreadable one would be an empty input rather than a string.
        let input: Value = f["arguments"]
            .as_str()
            .and_then(|args| serde_json::from_str(args).ok())
            .unwrap_or_else(|| json!({}));
        json!({"type": "tool_use", "id": tool_use_id(c["id"].as_str().unwrap_or("")),
            "name": f["name"], "input": input})
    }));
    (blocks, called)
}

/// The whole message.
pub(super) fn full(a: &Answer, g: &Generation) -> Value {
    let (content, called) = content(a, g);
    let (reason, sequence) = stop(a, g, called);
    json!({
        "id": a.id, "type": "message", "role": "assistant",
        "content": content,
        "model": a.model, "stop_reason": reason, "stop_sequence": sequence,
        "usage": usage(g),
    })
}

/// The events before any token: the message (with the prompt's length)
/// and, without tools, its one text block (with tools, blocks open as the
/// answer's do: [`block_events`]).
pub(super) fn stream_start(a: &Answer) -> Vec<Value> {
    let mut out = vec![json!({"type": "message_start", "message": {
        "id": a.id, "type": "message", "role": "assistant", "content": [],
        "model": a.model, "stop_reason": null, "stop_sequence": null,
        "usage": {"input_tokens": a.n_prompt, "output_tokens": 0},
    }})];
    if a.tool_stream.is_none() {
        out.push(text_start(0));
    }
    out
}

fn text_start(index: usize) -> Value {
    json!({"type": "content_block_start", "index": index,
        "content_block": {"type": "text", "text": ""}})
}

/// One token's text delta.
pub(super) fn stream_token(text: &str) -> Value {
    text_delta(0, text)
}

fn text_delta(index: usize, text: &str) -> Value {
    json!({
        "type": "content_block_delta", "index": index,
        "delta": {"type": "text_delta", "text": text},
    })
}

/// The events of a block of an answer with tools: text blocks as without
/// tools, and `tool_use` blocks (input `{}`) whose input streams as
/// `input_json_delta` fragments.
pub(super) fn block_events(b: &Block) -> Vec<Value> {
    match b {
        Block::TextStart(i) => vec![text_start(*i)],
        Block::Text(i, text) => vec![text_delta(*i, text)],
        Block::TextDone(i, _) | Block::CallDone { index: i, .. } => {
            vec![json!({"type": "content_block_stop", "index": i})]
        }
        Block::CallStart { index, id, name } => vec![json!({
            "type": "content_block_start", "index": index,
            "content_block": {"type": "tool_use", "id": tool_use_id(id), "name": name,
                "input": {}},
        })],
        Block::CallArguments {
            index, fragment, ..
        } => vec![json!({
            "type": "content_block_delta", "index": index,
            "delta": {"type": "input_json_delta", "partial_json": fragment},
        })],
    }
}

/// The closing events: without tools, the block's end; why the message
/// ended (with the usage); the message's end.
pub(super) fn stream_end(a: &Answer, g: &Generation) -> Vec<Value> {
    let called = a.tool_stream.as_ref().is_some_and(ToolStream::called);
    let (reason, sequence) = stop(a, g, called);
    let mut out = Vec::new();
    if a.tool_stream.is_none() {
        out.push(json!({"type": "content_block_stop", "index": 0}));
    }
    out.push(json!({"type": "message_delta",
        "delta": {"stop_reason": reason, "stop_sequence": sequence},
        "usage": usage(g)}));
    out.push(json!({"type": "message_stop"}));
    out
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
                "messages[0].content[0]: tool_use blocks belong in assistant messages",
            ),
            (
                json!({"messages": [{"role": "user", "content": [{"type": "image"}]}]}),
                "messages[0].content[0]: content blocks of type \"image\"",
            ),
            (
                json!({"messages": [{"role": "user", "content": [{"type": "tool_result"}]}]}),
                "messages[0].content[0] has no 'tool_use_id'",
            ),
            (
                json!({"messages": [{"role": "user", "content": [{"type": "tool_result",
                    "tool_use_id": "t", "is_error": "yes"}]}]}),
                "'messages[0].content[0].is_error' must be a boolean",
            ),
            (
                json!({"messages": [{"role": "assistant", "content": [{"type": "tool_use",
                    "id": "t", "name": "f", "input": "{}"}]}]}),
                "'messages[0].content[0].input' must be an object",
            ),
            (
                json!({"messages": [], "tools": [{"type": "web_search_20250305", "name": "w"}]}),
                "tools[0]: tools of type \"web_search_20250305\" are not supported",
            ),
            (
                json!({"messages": [], "tools": [{"input_schema": {}}]}),
                "tools[0] has no 'name'",
            ),
            (
                json!({"messages": [], "tool_choice": "any"}),
                "'tool_choice' must be an object",
            ),
            (
                json!({"messages": [], "tool_choice": {"type": "tool"}}),
                "tool_choice has no 'name'",
            ),
            (
                json!({"messages": [], "tool_choice": {"type": "required"}}),
                "'tool_choice.type' \"required\"",
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

    #[test]
    fn tools_uses_and_results_read_as_the_chat_they_are() {
        let chat = messages_request(&obj(json!({
            "max_tokens": 50,
            "tools": [{"name": "get_weather", "description": "Weather.",
                "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
                "cache_control": {"type": "ephemeral"}}],
            "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
            "messages": [
                {"role": "user", "content": "Weather in Paris and Rome?"},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                        "input": {"city": "Paris"}},
                    {"type": "tool_use", "id": "toolu_2", "name": "get_weather",
                        "input": {"city": "Rome"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"},
                    {"type": "tool_result", "tool_use_id": "toolu_2", "is_error": true,
                        "content": [{"type": "text", "text": "no data"}]},
                    {"type": "text", "text": "Thanks."}]},
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
                "max_tokens": 50,
                "tools": [{"type": "function", "function": {"name": "get_weather",
                    "description": "Weather.",
                    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}],
                "tool_choice": "required", "parallel_tool_calls": false,
                "messages": [
                    {"role": "user", "content": "Weather in Paris and Rome?"},
                    {"role": "assistant", "content": [{"type": "text", "text": "Checking."}],
                        "tool_calls": [call("toolu_1", "{\"city\":\"Paris\"}"),
                            call("toolu_2", "{\"city\":\"Rome\"}")]},
                    {"role": "tool", "tool_call_id": "toolu_1", "content": "sunny"},
                    {"role": "tool", "tool_call_id": "toolu_2",
                        "content": [{"type": "text", "text": "no data"}]},
                    {"role": "user", "content": [{"type": "text", "text": "Thanks."}]},
                ],
            })
        );
        let m = super::super::chat::messages(&chat).unwrap();
        assert_eq!(m[1].tool_calls.len(), 2);
        assert_eq!(m[1].turn.content, "Checking.");
        for (choice, want) in [
            (json!({"type": "auto"}), json!("auto")),
            (json!({"type": "none"}), json!("none")),
            (
                json!({"type": "tool", "name": "f"}),
                json!({"type": "function", "function": {"name": "f"}}),
            ),
        ] {
            let chat = messages_request(&obj(json!({"messages": [], "tool_choice": choice})));
            let chat = chat.unwrap();
            assert_eq!(chat["tool_choice"], want);
            assert!(!chat.contains_key("parallel_tool_calls"));
        }
    }
}
