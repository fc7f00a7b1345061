//! The Hermes / Qwen call groups: where one opens in an answer, and reading it.
//!
//! Three openings, as llama.cpp's Hermes 2 Pro handler accepts them too:
//! - tagged: `<tool_call>` then a call object and `</tool_call>` (what the template trains);
//! - bare: a call object written without the tags, `{"name": ..., "arguments": {...}}`
//!   (small Qwen models often answer so under `tool_choice: auto`);
//! - fenced: a ```` ```json ```` (or bare ```` ``` ````) fence holding tagged or bare calls,
//!   separated by whitespace, up to the closing fence.
//!
//! Bare and fenced calls are read only when the parser knows the request's tools
//! ([`crate::parse_with_tools`]): a bare object is a call only when its members are exactly
//! `name` (first, one of the callable tools) and `arguments` (an object); any other JSON
//! object is content. (A small model asked for a joke may well answer
//! `{"name": "Joke", "arguments": {...}}`.)
//! Like llama.cpp's, a bare call is recognized wherever its opening is, even nested in other
//! JSON — except right after a `<tool_call>` whose call broke: that object is the broken
//! call's, content with its tag.

use crate::json_scan::skip_ws;
use crate::parse::{read_call_object, CallScan, Found, Group, Opening, Shape};

const TAG: &str = "<tool_call>";
const CLOSE_TAG: &str = "</tool_call>";
const FENCES: [&str; 2] = ["```json\n", "```\n"];
const FENCE_CLOSE: &str = "```";

/// The first group opening at or after `from`, or the start of text that may still become
/// one. `bare`: whether bare and fenced calls count; `not_bare_at`: an offset where an object
/// is not taken as a bare call.
pub(crate) fn find_opening(
    text: &str,
    from: usize,
    not_bare_at: Option<usize>,
    bare: bool,
) -> Option<Found> {
    (from..text.len())
        .filter(|&s| match text.as_bytes()[s] {
            b'<' => true,
            b'{' | b'`' => bare,
            _ => false,
        })
        .find_map(|s| match classify(text, s, not_bare_at) {
            Class::No => None,
            Class::Prefix => Some(Found::Held(s)),
            Class::Open(o) => Some(Found::Open(o)),
        })
}

/// Reads the group `o` opens; a bare call must name one of `names`.
pub(crate) fn read_group(text: &str, o: &Opening, names: &[String], at_end: bool) -> Group {
    match o.shape {
        Shape::Marker => read_tagged(text, o.body, at_end),
        Shape::Bare => read_bare(text, o.body, names),
        Shape::Fenced => read_fenced(text, o.body, names, at_end),
    }
}

enum Class {
    No,
    /// The text ends inside what may open a group.
    Prefix,
    Open(Opening),
}

fn classify(text: &str, s: usize, not_bare_at: Option<usize>) -> Class {
    if text.as_bytes()[s] != b'`' {
        return classify_call(text, s, not_bare_at);
    }
    let rest = &text[s..];
    let Some(fence) = FENCES.iter().find(|f| rest.starts_with(*f)) else {
        return if FENCES.iter().any(|f| f.starts_with(rest)) {
            Class::Prefix
        } else {
            Class::No
        };
    };
    let body = skip_ws(text, s + fence.len());
    if body == text.len() {
        return Class::Prefix;
    }
    match classify_call(text, body, not_bare_at) {
        Class::Open(_) => Class::Open(Opening {
            start: s,
            body,
            // A fence whose group breaks is content; the calls in it may still count.
            resume: body,
            shape: Shape::Fenced,
        }),
        other => other,
    }
}

/// A tagged or bare call opening at `s`.
fn classify_call(text: &str, s: usize, not_bare_at: Option<usize>) -> Class {
    let rest = &text[s..];
    if rest.starts_with(TAG) {
        let body = s + TAG.len();
        return Class::Open(Opening {
            start: s,
            body,
            resume: body,
            shape: Shape::Marker,
        });
    }
    if rest.starts_with('<') && TAG.starts_with(rest) {
        return Class::Prefix;
    }
    if rest.starts_with('{') && not_bare_at != Some(s) {
        let key = &text[skip_ws(text, s + 1)..];
        if key.starts_with("\"name\"") {
            return Class::Open(Opening {
                start: s,
                body: s,
                resume: s + 1,
                shape: Shape::Bare,
            });
        }
        if "\"name\"".starts_with(key) {
            return Class::Prefix;
        }
    }
    Class::No
}

/// `{call}` then `</tool_call>`, from just after the opening tag.
fn read_tagged(text: &str, body: usize, at_end: bool) -> Group {
    match read_call_object(text, skip_ws(text, body), &["arguments"], false) {
        Group::Done(calls, end) => {
            let j = skip_ws(text, end);
            let rest = &text[j..];
            if rest.starts_with(CLOSE_TAG) {
                Group::Done(calls, j + CLOSE_TAG.len())
            } else if CLOSE_TAG.starts_with(rest) {
                // The closing tag is cut off or was never written (the model stopped).
                if at_end {
                    Group::Done(calls, text.len())
                } else {
                    Group::Partial(calls)
                }
            } else {
                Group::Invalid
            }
        }
        other => other,
    }
}

fn read_bare(text: &str, at: usize, names: &[String]) -> Group {
    let group = read_call_object(text, at, &["arguments"], true);
    let (Group::Done(calls, _) | Group::Partial(calls)) = &group else {
        return group;
    };
    let known = |call: &CallScan| call.name.as_ref().is_none_or(|n| names.contains(n));
    if calls.iter().all(known) {
        group
    } else {
        Group::Invalid
    }
}

/// Calls (tagged or bare, whitespace between) up to the closing fence, from the first call.
fn read_fenced(text: &str, body: usize, names: &[String], at_end: bool) -> Group {
    let mut calls = Vec::new();
    let mut i = body;
    loop {
        let rest = &text[i..];
        if rest.starts_with(FENCE_CLOSE) {
            return Group::Done(calls, i + FENCE_CLOSE.len());
        }
        let group = match classify_call(text, i, None) {
            Class::Open(o) => read_group(text, &o, names, at_end),
            // The closing fence is cut off or was never written (the model stopped).
            _ if !calls.is_empty() && FENCE_CLOSE.starts_with(rest) => {
                return if at_end {
                    Group::Done(calls, text.len())
                } else {
                    Group::Partial(calls)
                };
            }
            Class::Prefix if !at_end => return Group::Partial(calls),
            _ => return Group::Invalid,
        };
        match group {
            Group::Done(mut more, end) => {
                calls.append(&mut more);
                i = skip_ws(text, end);
            }
            Group::Partial(mut more) => {
                calls.append(&mut more);
                return Group::Partial(calls);
            }
            Group::Invalid => return Group::Invalid,
        }
    }
}
