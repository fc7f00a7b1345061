//! Tool calls in a chat (`tools`, `tool_choice`, `parallel_tool_calls`):
//! the request's tools checked and rendered through the model's template
//! (or, for a template without tool support, described in a system message
//! in the generic form), the grammar that holds the model's calls to the
//! functions' schemas (lazy under `auto`: free text until the family's
//! trigger), and the answer's `tool_calls`, whole or as stream deltas
//! (chat's, or the blocks the Responses and Anthropic streams are made of).
//! The formats per family are `kestrel-tools`'s; this file is the server's
//! glue.

use std::sync::Mutex;

use kestrel_engine::{Constraint, Engine, Spec};
use kestrel_tokenizer::chat::ChatTemplate;
use kestrel_tools::{
    generic, parse_request, CallIds, Delta, Family, GrammarOptions, ParsedMessage, StreamParser,
    ToolChoice, ToolRequest,
};
use serde_json::{json, Value};

use super::chat::Message;
use super::fields::{wrong, Obj};
use super::structured;
use crate::error::ApiError;

/// A chat's tool use: the tools and choice, and the model's call format.
#[derive(Clone, Debug)]
pub(crate) struct ToolUse {
    pub request: ToolRequest,
    pub family: Family,
}

impl ToolUse {
    /// Whether the model may call (not `tool_choice: "none"`).
    fn may_call(&self) -> bool {
        self.request.choice != ToolChoice::None
    }
}

/// The request's tools, if it declares any.
pub(crate) fn tool_use(engine: &Engine, o: &Obj) -> Result<Option<ToolUse>, ApiError> {
    if o.contains_key("functions") {
        return Err(ApiError::bad_request(
            "'functions' (the deprecated form) is not supported: send 'tools'",
        ));
    }
    let Some(request) = parse_request(o).map_err(|e| ApiError::bad_request(e.to_string()))? else {
        return Ok(None);
    };
    let family = Family::detect(engine.template.as_ref().map_or("", ChatTemplate::source));
    Ok(Some(ToolUse { request, family }))
}

/// An assistant message's `tool_calls`, checked (`at` names the message).
pub(crate) fn message_calls(at: &str, role: &str, m: &Obj) -> Result<Vec<Value>, ApiError> {
    let calls = match m.get("tool_calls") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(calls)) => calls,
        Some(v) => return Err(wrong(&format!("{at}.tool_calls"), "an array", v)),
    };
    if !calls.is_empty() && role != "assistant" {
        return Err(ApiError::bad_request(format!(
            "{at}: only assistant messages carry 'tool_calls'"
        )));
    }
    for (j, c) in calls.iter().enumerate() {
        let at = format!("{at}.tool_calls[{j}]");
        let f = c
            .get("function")
            .and_then(Value::as_object)
            .ok_or_else(|| ApiError::bad_request(format!("{at} needs a 'function' object")))?;
        match f.get("name") {
            Some(Value::String(_)) => {}
            Some(v) => return Err(wrong(&format!("{at}.function.name"), "a string", v)),
            None => {
                return Err(ApiError::bad_request(format!(
                    "{at}.function needs a 'name'"
                )))
            }
        }
        match f.get("arguments") {
            Some(Value::String(_) | Value::Object(_)) | None => {}
            Some(v) => {
                return Err(wrong(
                    &format!("{at}.function.arguments"),
                    "a string of JSON",
                    v,
                ))
            }
        }
    }
    Ok(calls.clone())
}

/// A `tool` message's `tool_call_id` and `name`.
pub(crate) fn result_of(
    at: &str,
    role: &str,
    m: &Obj,
) -> Result<(Option<String>, Option<String>), ApiError> {
    let text = |name: &str| match m.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(v) => Err(wrong(&format!("{at}.{name}"), "a string", v)),
    };
    if role != "tool" {
        return Ok((None, None));
    }
    Ok((text("tool_call_id")?, text("name")?))
}

/// The conversation as the template writes it with the tools (none under
/// `tool_choice: "none"`), or in the generic form for a template that
/// knows no tools.
pub(crate) fn render(
    engine: &Engine,
    messages: &[Message],
    tools: Option<&ToolUse>,
) -> Result<String, ApiError> {
    let json: Vec<Value> = messages.iter().map(Message::to_json).collect();
    let chatml;
    let template = match &engine.template {
        Some(t) => t,
        None => {
            chatml = ChatTemplate::chatml();
            &chatml
        }
    };
    let calling = tools.filter(|t| t.may_call());
    let rendered = match calling {
        Some(t) if t.family == Family::Generic => {
            let prepared = generic::prepare_messages(&json, &t.request);
            template.render_with_tools(&prepared, None, true)
        }
        Some(t) => template.render_with_tools(&json, Some(&t.request.raw_tools()), true),
        None => template.render_with_tools(&json, None, true),
    };
    rendered.map_err(|e| ApiError::bad_request(e.to_string()))
}

/// The grammar the calls follow, compiled; none when no call may be made.
pub(crate) fn constraint(engine: &Engine, t: &ToolUse) -> Result<Option<Constraint>, ApiError> {
    let options = GrammarOptions {
        mistral_tool_calls_token: engine
            .tokenizer
            .token_id("[TOOL_CALLS]")
            .filter(|&id| engine.tokenizer.is_control(id)),
    };
    let Some(c) = kestrel_tools::constraint(t.family, &t.request, &options) else {
        return Ok(None);
    };
    structured::compile(engine, &Spec::Lark(c.lark), "tool calls", &c.triggers).map(Some)
}

/// The finished answer's message: content and `tool_calls`, and whether
/// it called (finish reason `tool_calls`).
pub(crate) fn message(t: &ToolUse, text: &str, seed: u64) -> (Value, bool) {
    // Hermes calls written bare (as Qwen often writes them) count when
    // they name one of the request's tools.
    let parsed =
        kestrel_tools::parse_with_tools(t.family, &t.request, text, &mut CallIds::new(seed));
    message_json(&parsed)
}

fn message_json(parsed: &ParsedMessage) -> (Value, bool) {
    let mut m = json!({"role": "assistant", "content": parsed.content});
    let called = !parsed.tool_calls.is_empty();
    if called {
        m["tool_calls"] = parsed
            .tool_calls
            .iter()
            .map(|c| {
                json!({"id": c.id, "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments}})
            })
            .collect();
    }
    (m, called)
}

/// A streamed answer's parser: text in, chat deltas (or blocks) out.
pub(crate) struct ToolStream {
    parser: Mutex<Option<StreamParser>>,
    called: Mutex<bool>,
    blocks: Mutex<Blocks>,
}

/// A streamed answer as a sequence of blocks, as the Responses API (output
/// items) and Anthropic's (content blocks) stream it: text or one call
/// each, opened, grown and closed in turn, numbered from 0 as they open.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Block {
    TextStart(usize),
    Text(usize, String),
    /// The end of a text block, with its whole text.
    TextDone(usize, String),
    CallStart {
        index: usize,
        id: String,
        name: String,
    },
    CallArguments {
        index: usize,
        id: String,
        fragment: String,
    },
    /// The end of a call, with its whole arguments.
    CallDone {
        index: usize,
        id: String,
        name: String,
        arguments: String,
    },
}

/// The block open in a stream, and how many have opened.
#[derive(Default)]
struct Blocks {
    open: Option<Block>,
    opened: usize,
}

impl Blocks {
    /// The block events of one delta: the open block grows, or closes and
    /// the next opens.
    fn step(&mut self, d: Delta, out: &mut Vec<Block>) {
        match d {
            Delta::Content(text) => {
                if !matches!(self.open, Some(Block::TextDone(..))) {
                    self.close(out);
                    let index = self.next();
                    out.push(Block::TextStart(index));
                    self.open = Some(Block::TextDone(index, String::new()));
                }
                if let Some(Block::TextDone(index, all)) = &mut self.open {
                    all.push_str(&text);
                    out.push(Block::Text(*index, text));
                }
            }
            Delta::CallStart { id, name, .. } => {
                self.close(out);
                let index = self.next();
                out.push(Block::CallStart {
                    index,
                    id: id.clone(),
                    name: name.clone(),
                });
                self.open = Some(Block::CallDone {
                    index,
                    id,
                    name,
                    arguments: String::new(),
                });
            }
            Delta::CallArguments { fragment, .. } => {
                // (Fragments follow their call's start.)
                if let Some(Block::CallDone {
                    index,
                    id,
                    arguments,
                    ..
                }) = &mut self.open
                {
                    arguments.push_str(&fragment);
                    out.push(Block::CallArguments {
                        index: *index,
                        id: id.clone(),
                        fragment,
                    });
                }
            }
        }
    }

    fn next(&mut self) -> usize {
        self.opened += 1;
        self.opened - 1
    }

    /// Closes the open block (its `...Done` event is kept while it is open).
    fn close(&mut self, out: &mut Vec<Block>) {
        out.extend(self.open.take());
    }

    /// Closes the last block; an answer with none has one empty text
    /// block, as the whole answer shows it.
    fn finish(&mut self, out: &mut Vec<Block>) {
        self.close(out);
        if self.opened == 0 {
            out.push(Block::TextStart(0));
            out.push(Block::TextDone(0, String::new()));
            self.opened = 1;
        }
    }
}

impl ToolStream {
    /// A grammar that holds from the first token cannot break, so its calls
    /// stream as they grow; under `auto` a call is sent once it closed.
    pub fn new(t: &ToolUse, seed: u64) -> ToolStream {
        let eager = matches!(
            t.request.choice,
            ToolChoice::Required | ToolChoice::Function(_)
        ) || t.family == Family::Generic;
        ToolStream {
            parser: Mutex::new(Some(
                StreamParser::new(t.family, CallIds::new(seed), eager).with_tools(&t.request),
            )),
            called: Mutex::new(false),
            blocks: Mutex::new(Blocks::default()),
        }
    }

    /// The chat deltas for a piece of text.
    pub fn push(&self, text: &str) -> Vec<Value> {
        self.parse(text).into_iter().map(chat_delta).collect()
    }

    /// The last deltas, at the end of the answer.
    pub fn finish(&self) -> Vec<Value> {
        self.parse_rest().into_iter().map(chat_delta).collect()
    }

    /// The block events for a piece of text.
    pub fn push_blocks(&self, text: &str) -> Vec<Block> {
        let deltas = self.parse(text);
        let mut b = self.blocks.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = Vec::new();
        deltas.into_iter().for_each(|d| b.step(d, &mut out));
        out
    }

    /// The last block events, closing the last block, at the end of the
    /// answer.
    pub fn finish_blocks(&self) -> Vec<Block> {
        let deltas = self.parse_rest();
        let mut b = self.blocks.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = Vec::new();
        deltas.into_iter().for_each(|d| b.step(d, &mut out));
        b.finish(&mut out);
        out
    }

    /// Whether the answer called a tool (after the last deltas or blocks).
    pub fn called(&self) -> bool {
        *self.called.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn parse(&self, text: &str) -> Vec<Delta> {
        let mut p = self.parser.lock().unwrap_or_else(|e| e.into_inner());
        let deltas = p.as_mut().map_or_else(Vec::new, |p| p.push(text));
        self.seen(deltas)
    }

    fn parse_rest(&self) -> Vec<Delta> {
        let p = self.parser.lock().unwrap_or_else(|e| e.into_inner()).take();
        let deltas = p.map_or_else(Vec::new, |p| p.finish().0);
        self.seen(deltas)
    }

    /// Notes a call among `deltas`.
    fn seen(&self, deltas: Vec<Delta>) -> Vec<Delta> {
        if deltas.iter().any(|d| matches!(d, Delta::CallStart { .. })) {
            *self.called.lock().unwrap_or_else(|e| e.into_inner()) = true;
        }
        deltas
    }
}

/// A delta as chat streams it.
fn chat_delta(d: Delta) -> Value {
    match d {
        Delta::Content(text) => json!({"content": text}),
        Delta::CallStart { index, id, name } => {
            json!({"tool_calls": [{"index": index, "id": id, "type": "function",
                "function": {"name": name, "arguments": ""}}]})
        }
        Delta::CallArguments { index, fragment } => {
            json!({"tool_calls": [{"index": index, "function": {"arguments": fragment}}]})
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blocks(deltas: Vec<Delta>) -> Vec<Block> {
        let mut b = Blocks::default();
        let mut out = Vec::new();
        deltas.into_iter().for_each(|d| b.step(d, &mut out));
        b.finish(&mut out);
        out
    }

    fn start(index: usize, id: &str) -> Delta {
        Delta::CallStart {
            index,
            id: id.into(),
            name: "f".into(),
        }
    }

    fn args(index: usize, fragment: &str) -> Delta {
        Delta::CallArguments {
            index,
            fragment: fragment.into(),
        }
    }

    #[test]
    fn deltas_become_blocks_that_open_grow_and_close_in_turn() {
        let got = blocks(vec![
            Delta::Content("Hi".into()),
            Delta::Content("!".into()),
            start(0, "a"),
            args(0, "{}"),
            start(1, "b"),
            args(1, "{\"x\""),
            args(1, ":1}"),
        ]);
        let done = |index: usize, id: &str, arguments: &str| Block::CallDone {
            index,
            id: id.into(),
            name: "f".into(),
            arguments: arguments.into(),
        };
        let grow = |index: usize, id: &str, fragment: &str| Block::CallArguments {
            index,
            id: id.into(),
            fragment: fragment.into(),
        };
        let open = |index: usize, id: &str| Block::CallStart {
            index,
            id: id.into(),
            name: "f".into(),
        };
        assert_eq!(
            got,
            vec![
                Block::TextStart(0),
                Block::Text(0, "Hi".into()),
                Block::Text(0, "!".into()),
                Block::TextDone(0, "Hi!".into()),
                open(1, "a"),
                grow(1, "a", "{}"),
                done(1, "a", "{}"),
                open(2, "b"),
                grow(2, "b", "{\"x\""),
                grow(2, "b", ":1}"),
                done(2, "b", "{\"x\":1}"),
            ]
        );
        // Calls alone number from 0; no block at all is one empty text.
        assert_eq!(blocks(vec![start(0, "a")])[0], open(0, "a"));
        assert_eq!(
            blocks(Vec::new()),
            vec![Block::TextStart(0), Block::TextDone(0, String::new())]
        );
    }
}
