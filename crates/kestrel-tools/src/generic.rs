//! The generic family's prompt side, for templates that know nothing of tools: a system
//! message that describes the tools and the JSON answer format, and past calls and tool results
//! rewritten as plain messages in that format.

use serde_json::{json, Value};

use crate::{ToolChoice, ToolRequest};

/// The instructions Kestrel adds to the system message: the callable tools as JSON, and the
/// answer shape the generic grammar enforces.
pub fn system_prompt(req: &ToolRequest) -> String {
    let tools: Vec<&Value> = req.callable().into_iter().map(|t| &t.raw).collect();
    let tools = serde_json::to_string_pretty(&tools).unwrap_or_default();
    let call = if req.parallel {
        r#"{"tool_calls": [{"name": "<tool name>", "arguments": {<arguments>}}, ...]}"#
    } else {
        r#"{"tool_call": {"name": "<tool name>", "arguments": {<arguments>}}}"#
    };
    let mut text = format!(
        "You can call these tools (JSON function definitions):\n{tools}\n\n\
         To call tools, answer with only this JSON object:\n{call}"
    );
    if req.choice != ToolChoice::Required && !matches!(req.choice, ToolChoice::Function(_)) {
        text.push_str(
            "\n\nTo answer the user directly instead, answer with only this JSON object:\n\
             {\"response\": \"<your answer>\"}",
        );
    }
    text
}

/// `messages` (OpenAI-shaped JSON) made fit for a template without tool support: the
/// [`system_prompt`] joined to the first system message (or put first), each assistant
/// turn's `tool_calls` written as its content in the answer format, and each run of `tool`
/// results turned into one user message holding them as JSON.
pub fn prepare_messages(messages: &[Value], req: &ToolRequest) -> Vec<Value> {
    let prompt = system_prompt(req);
    let mut out: Vec<Value> = Vec::with_capacity(messages.len() + 1);
    let mut rest = messages;
    match messages.first() {
        Some(first) if first["role"] == "system" => {
            let text = match first["content"].as_str() {
                Some(c) if !c.is_empty() => format!("{c}\n\n{prompt}"),
                _ => prompt,
            };
            out.push(json!({ "role": "system", "content": text }));
            rest = &messages[1..];
        }
        _ => out.push(json!({ "role": "system", "content": prompt })),
    }
    let mut results: Vec<Value> = Vec::new();
    for message in rest {
        if message["role"] == "tool" {
            results.push(json!({
                "tool_call_id": message["tool_call_id"],
                "content": message["content"],
            }));
            continue;
        }
        flush_results(&mut out, &mut results);
        match message.get("tool_calls").and_then(Value::as_array) {
            Some(calls) if message["role"] == "assistant" && !calls.is_empty() => {
                out.push(json!({
                    "role": "assistant",
                    "content": answer_text(calls, req.parallel),
                }));
            }
            _ => out.push(message.clone()),
        }
    }
    flush_results(&mut out, &mut results);
    out
}

fn flush_results(out: &mut Vec<Value>, results: &mut Vec<Value>) {
    if results.is_empty() {
        return;
    }
    let body = json!({ "tool_results": std::mem::take(results) });
    out.push(json!({
        "role": "user",
        "content": serde_json::to_string_pretty(&body).unwrap_or_default(),
    }));
}

/// Past calls in the answer format (arguments strings parsed back into objects).
fn answer_text(calls: &[Value], parallel: bool) -> String {
    let calls: Vec<Value> = calls
        .iter()
        .map(|call| {
            let function = call.get("function").unwrap_or(call);
            let arguments = match &function["arguments"] {
                Value::String(s) => {
                    serde_json::from_str(s).unwrap_or_else(|_| Value::from(s.clone()))
                }
                other => other.clone(),
            };
            json!({ "name": function["name"], "arguments": arguments })
        })
        .collect();
    let body = if parallel || calls.len() != 1 {
        json!({ "tool_calls": calls })
    } else {
        json!({ "tool_call": calls[0] })
    };
    serde_json::to_string_pretty(&body).unwrap_or_default()
}
