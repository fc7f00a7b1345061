//! The output side: splitting a model's answer into content and tool calls, per family.
//!
//! One scanner serves both the whole-answer parse and the streaming parser ([`crate::stream`]):
//! it reads the text so far into content, call groups (one opening's worth of calls: a Hermes
//! block, bare call or fence ([`crate::hermes`]), a Mistral array, a generic answer object) and
//! a pending tail that more text must decide. Text that breaks a call's syntax is content, trigger included, so a malformed call
//! never yields a tool call. Whitespace next to a call group is not content.
//!
//! A call's `arguments` is the exact JSON text the model wrote for the arguments object.

use crate::json_scan::{self, decode_string_prefix, skip_ws, Scan, Walk};
use crate::{hermes, CallIds, Family, ToolRequest};

/// One tool call the model made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// The arguments object as JSON text.
    pub arguments: String,
}

/// A model answer split into text and calls.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ParsedMessage {
    /// The text outside calls; `None` when there is none.
    pub content: Option<String>,
    pub tool_calls: Vec<ToolCall>,
}

/// Splits a finished answer. Ids come from `ids` in call order.
pub fn parse(family: Family, text: &str, ids: &mut CallIds) -> ParsedMessage {
    parse_with(family, &[], text, ids)
}

/// [`parse`], also reading Hermes calls written without their tags (bare, or in a
/// ```` ```json ```` fence) when they name one of `tools`' callable tools.
pub fn parse_with_tools(
    family: Family,
    tools: &ToolRequest,
    text: &str,
    ids: &mut CallIds,
) -> ParsedMessage {
    parse_with(family, &callable_names(tools), text, ids)
}

/// The names a bare call may have.
pub(crate) fn callable_names(tools: &ToolRequest) -> Vec<String> {
    tools.callable().iter().map(|t| t.name.clone()).collect()
}

fn parse_with(family: Family, names: &[String], text: &str, ids: &mut CallIds) -> ParsedMessage {
    let segs = scan(family, names, text, true);
    let tool_calls = segs
        .iter()
        .flat_map(|seg| match seg {
            Seg::Calls { calls, .. } => calls.as_slice(),
            _ => &[],
        })
        .map(|call| ToolCall {
            id: ids.next(),
            name: call.name.clone().unwrap_or_default(),
            arguments: call.args.clone().unwrap_or_default(),
        })
        .collect();
    let content = assemble_content(&segs, true);
    ParsedMessage {
        content: (!content.is_empty()).then_some(content),
        tool_calls,
    }
}

/// One call as far as it has been read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CallScan {
    /// Known once the `name` string is complete.
    pub name: Option<String>,
    /// The arguments' text so far (a valid JSON prefix), once their value has begun.
    pub args: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Seg {
    Content(String),
    /// A trigger's calls; `complete` once their syntax has closed (always, at the end).
    Calls {
        calls: Vec<CallScan>,
        complete: bool,
    },
    /// Text that may still turn out to open a call.
    Pending,
}

/// Reads `text` into segments. With `at_end`, nothing stays pending and unfinished calls are
/// content. `names`: the tools a bare Hermes call may name (none: bare calls are content).
pub(crate) fn scan(family: Family, names: &[String], text: &str, at_end: bool) -> Vec<Seg> {
    let mut segs = match family {
        Family::Generic => scan_generic(text, at_end),
        _ => scan_triggered(family, names, text, at_end),
    };
    merge_content(&mut segs);
    segs
}

/// The content so far: what [`parse`] would call content if the text ended here and a call
/// followed (so whitespace a call would drop is held back).
pub(crate) fn assemble_content(segs: &[Seg], at_end: bool) -> String {
    let mut out = String::new();
    for (k, seg) in segs.iter().enumerate() {
        let Seg::Content(text) = seg else { continue };
        let mut text = text.as_str();
        if k > 0 && matches!(segs[k - 1], Seg::Calls { .. }) {
            text = text.trim_start();
        }
        let last = k + 1 == segs.len();
        if (last && !at_end) || (!last && !matches!(segs[k + 1], Seg::Content(_))) {
            text = text.trim_end();
        }
        out.push_str(text);
    }
    out
}

fn merge_content(segs: &mut Vec<Seg>) {
    let mut merged: Vec<Seg> = Vec::with_capacity(segs.len());
    for seg in segs.drain(..) {
        match (merged.last_mut(), seg) {
            (Some(Seg::Content(prev)), Seg::Content(next)) => prev.push_str(&next),
            (_, Seg::Content(next)) if next.is_empty() => {}
            (_, seg) => merged.push(seg),
        }
    }
    *segs = merged;
}

/// What reading one call group found.
pub(crate) enum Group {
    /// Complete calls; the group's text ends at this offset.
    Done(Vec<CallScan>, usize),
    /// The text ran out inside the group.
    Partial(Vec<CallScan>),
    Invalid,
}

/// What looking for the next call group found.
pub(crate) enum Found {
    Open(Opening),
    /// The text ends inside what may still open a group, from this offset.
    Held(usize),
}

/// Where a call group opens.
pub(crate) struct Opening {
    /// Where the group's text begins.
    pub start: usize,
    /// Where its call text begins (after a marker or fence).
    pub body: usize,
    /// Where a broken group's content ends and the search goes on.
    pub resume: usize,
    pub shape: Shape,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    /// A family's literal trigger (a Hermes tag, a Mistral marker, a Llama opening).
    Marker,
    /// A Hermes call object without tags.
    Bare,
    /// A Hermes code fence holding calls.
    Fenced,
}

fn scan_triggered(family: Family, names: &[String], text: &str, at_end: bool) -> Vec<Seg> {
    let mut segs = Vec::new();
    let mut pos = 0;
    // The object right after a Hermes tag whose call broke belongs to that tag: never a
    // bare call of its own.
    let mut not_bare_at = None;
    loop {
        let found = match family {
            Family::Hermes => hermes::find_opening(text, pos, not_bare_at, !names.is_empty()),
            _ => find_trigger(family.triggers(), text, pos),
        };
        let o = match found {
            Some(Found::Open(o)) => o,
            Some(Found::Held(at)) if !at_end => {
                segs.push(Seg::Content(text[pos..at].to_owned()));
                segs.push(Seg::Pending);
                return segs;
            }
            _ => {
                segs.push(Seg::Content(text[pos..].to_owned()));
                return segs;
            }
        };
        segs.push(Seg::Content(text[pos..o.start].to_owned()));
        let group = match family {
            Family::Hermes => hermes::read_group(text, &o, names, at_end),
            _ => read_group(family, text, o.body),
        };
        match group {
            Group::Done(calls, end) => {
                segs.push(Seg::Calls {
                    calls,
                    complete: true,
                });
                pos = end;
            }
            Group::Partial(_) if at_end => {
                segs.push(Seg::Content(text[o.start..].to_owned()));
                return segs;
            }
            Group::Partial(calls) => {
                segs.push(Seg::Calls {
                    calls,
                    complete: false,
                });
                return segs;
            }
            Group::Invalid => {
                segs.push(Seg::Content(text[o.start..o.resume].to_owned()));
                pos = o.resume;
                not_bare_at = (o.shape == Shape::Marker).then(|| skip_ws(text, pos));
            }
        }
    }
}

/// The earliest of `triggers` at or after `from`, or the end of the text when it may begin
/// one.
fn find_trigger(triggers: &[&str], text: &str, from: usize) -> Option<Found> {
    let found = triggers
        .iter()
        .filter_map(|t| text[from..].find(t).map(|at| (from + at, *t)))
        .min_by_key(|&(at, t)| (at, std::cmp::Reverse(t.len())));
    let Some((start, trigger)) = found else {
        let held = held_prefix(&text[from..], triggers);
        return (held > 0).then(|| Found::Held(text.len() - held));
    };
    // Mistral's marker and Llama's python tag wrap the call; Llama's other triggers are the
    // call's own first characters.
    let body = if trigger.starts_with('{') {
        start
    } else {
        start + trigger.len()
    };
    Some(Found::Open(Opening {
        start,
        body,
        resume: start + trigger.len(),
        shape: Shape::Marker,
    }))
}

/// Length of the longest end of `text` that could begin a trigger.
fn held_prefix(text: &str, triggers: &[&str]) -> usize {
    triggers
        .iter()
        .flat_map(|t| (1..t.len()).rev().map(move |n| &t[..n]))
        .filter(|prefix| text.ends_with(prefix))
        .map(str::len)
        .max()
        .unwrap_or(0)
}

fn read_group(family: Family, text: &str, body: usize) -> Group {
    let i = skip_ws(text, body);
    match family {
        Family::Llama3 => read_call_object(text, i, &["parameters", "arguments"], false),
        Family::Mistral => read_call_array(text, i, &["arguments"]),
        Family::Hermes | Family::Generic => unreachable!("read by their own scanners"),
    }
}

/// A `{"name": ..., <args key>: {...}}` object at `i`; with `exact`, nothing else in it
/// (each key once).
pub(crate) fn read_call_object(text: &str, i: usize, args_keys: &[&str], exact: bool) -> Group {
    match text.as_bytes().get(i) {
        None => return Group::Partial(Vec::new()),
        Some(b'{') => {}
        Some(_) => return Group::Invalid,
    }
    let walk = json_scan::walk(text, i, true);
    if exact && !has_only_call_keys(&walk, args_keys) {
        return Group::Invalid;
    }
    match call_from_walk(text, &walk, args_keys) {
        None => Group::Invalid,
        Some(call) => match walk.end {
            Some(end) if call.name.is_some() && is_complete_object(call.args.as_deref()) => {
                Group::Done(vec![call], end)
            }
            Some(_) => Group::Invalid,
            None => Group::Partial(vec![call]),
        },
    }
}

/// Whether the walked object's keys so far are `name` and one of `args_keys`, each once.
fn has_only_call_keys(walk: &Walk, args_keys: &[&str]) -> bool {
    let keys = walk
        .members
        .iter()
        .map(|m| m.key.as_str())
        .chain(walk.open.as_ref().map(|(key, _)| key.as_str()));
    let mut seen: Vec<&str> = Vec::with_capacity(2);
    for key in keys {
        if seen.contains(&key) || (key != "name" && !args_keys.contains(&key)) {
            return false;
        }
        seen.push(key);
    }
    seen.len() <= 2
}

/// A `[{call}, ...]` array at `i` (at least one call).
fn read_call_array(text: &str, i: usize, args_keys: &[&str]) -> Group {
    match text.as_bytes().get(i) {
        None => return Group::Partial(Vec::new()),
        Some(b'[') => {}
        Some(_) => return Group::Invalid,
    }
    let walk = json_scan::walk(text, i, false);
    if walk.invalid {
        return Group::Invalid;
    }
    let mut calls = Vec::new();
    for element in &walk.members {
        match read_call_object(text, element.value.start, args_keys, false) {
            Group::Done(mut call, _) => calls.append(&mut call),
            _ => return Group::Invalid,
        }
    }
    match walk.end {
        Some(_) if calls.is_empty() => Group::Invalid,
        Some(end) => Group::Done(calls, end),
        None => {
            if let Some((_, start)) = walk.open {
                match read_call_object(text, start, args_keys, false) {
                    Group::Invalid => return Group::Invalid,
                    Group::Partial(mut open) | Group::Done(mut open, _) => calls.append(&mut open),
                }
            }
            Group::Partial(calls)
        }
    }
}

fn is_complete_object(args: Option<&str>) -> bool {
    args.is_some_and(|a| a.starts_with('{') && json_scan::value(a, 0) == Scan::Done(a.len()))
}

/// The call a (possibly partial) object walk describes; `None` when what is there already
/// breaks the call shape (a non-string name, non-object arguments).
fn call_from_walk(text: &str, walk: &Walk, args_keys: &[&str]) -> Option<CallScan> {
    if walk.invalid {
        return None;
    }
    let name = match walk.get("name") {
        Some(span) => Some(serde_json::from_str::<String>(&text[span]).ok()?),
        None => None,
    };
    if name.as_deref() == Some("") {
        return None;
    }
    let complete_args = args_keys.iter().find_map(|k| walk.get(k));
    let args = match complete_args {
        Some(span) => Some(text[span].to_owned()),
        None => match &walk.open {
            Some((key, start)) if args_keys.contains(&key.as_str()) => {
                Some(text[*start..].to_owned())
            }
            _ => None,
        },
    };
    if args
        .as_deref()
        .is_some_and(|a| !a.is_empty() && !a.starts_with('{'))
    {
        return None;
    }
    if walk.end.is_some() && (name.is_none() || args.is_none()) {
        return None;
    }
    Some(CallScan { name, args })
}

/// A generic answer: the whole text is one JSON object.
fn scan_generic(text: &str, at_end: bool) -> Vec<Seg> {
    let content = |t: &str| vec![Seg::Content(t.to_owned())];
    let pending = || vec![Seg::Pending];
    let i = skip_ws(text, 0);
    if i == text.len() {
        return if at_end { content(text) } else { pending() };
    }
    if text.as_bytes()[i] != b'{' {
        return content(text);
    }
    let walk = json_scan::walk(text, i, true);
    // The first member decides the answer's kind; once it is a response, what follows no
    // longer matters (so streamed text never has to be taken back).
    let first = match (walk.members.first(), &walk.open) {
        (Some(m), _) => Some((m.key.as_str(), m.value.start)),
        (None, Some((key, start))) => Some((key.as_str(), *start)),
        (None, None) => None,
    };
    let undecided = if at_end { content(text) } else { pending() };
    let Some((key, start)) = first else {
        return if walk.invalid {
            content(text)
        } else {
            undecided
        };
    };
    match key {
        "response" => match text.as_bytes().get(start) {
            None => undecided,
            Some(b'"') => match decode_string_prefix(text, start) {
                Some((decoded, _)) => vec![Seg::Content(decoded)],
                None => content(text),
            },
            Some(_) => match json_scan::value(text, start) {
                Scan::Done(end) => content(&text[start..end]),
                _ => undecided,
            },
        },
        "tool_calls" | "tool_call" => {
            let group = if key == "tool_calls" {
                read_call_array(text, start, &["arguments"])
            } else {
                read_call_object(text, start, &["arguments"], false)
            };
            let closed = walk.end.is_some() && walk.members.len() == 1;
            match group {
                Group::Done(calls, _) if closed => vec![Seg::Calls {
                    calls,
                    complete: true,
                }],
                Group::Done(calls, _) | Group::Partial(calls)
                    if !at_end && !walk.invalid && walk.end.is_none() =>
                {
                    vec![Seg::Calls {
                        calls,
                        complete: false,
                    }]
                }
                _ => content(text),
            }
        }
        _ => {
            if walk.invalid || walk.end.is_some() {
                content(text)
            } else {
                undecided
            }
        }
    }
}
