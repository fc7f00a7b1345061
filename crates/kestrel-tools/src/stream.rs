//! The streaming parser: fed an answer piece by piece, it emits content text and tool-call
//! deltas whose sums equal what [`crate::parse`] makes of the whole answer.
//!
//! Each piece rescans the answer so far (answers are short next to the cost of generating
//! them) and sends what grew since the last piece. Text that may open a call, and whitespace
//! that a call would drop, is held back until the following text decides.
//!
//! Two modes. Careful (`eager == false`): a call group is sent only once its syntax has
//! closed, so malformed call text (which becomes content) is never sent as a call. Eager:
//! a call is announced once its name is read and its arguments are sent as they grow; meant
//! for output a grammar constrains, where call text cannot break (a call cut short by a token
//! limit is then sent as far as it got).

use crate::parse::{assemble_content, callable_names, scan, Seg};
use crate::{CallIds, Family, ParsedMessage, ToolCall, ToolRequest};

/// One piece of a streamed answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Delta {
    /// More content text.
    Content(String),
    /// A new call (indexes count from 0 in call order).
    CallStart {
        index: usize,
        id: String,
        name: String,
    },
    /// More of call `index`'s arguments text.
    CallArguments { index: usize, fragment: String },
}

/// Parses one answer as it streams.
#[derive(Clone, Debug)]
pub struct StreamParser {
    family: Family,
    /// The tools a bare Hermes call may name.
    names: Vec<String>,
    eager: bool,
    ids: CallIds,
    text: String,
    sent_content: String,
    sent_calls: Vec<SentCall>,
}

#[derive(Clone, Debug)]
struct SentCall {
    id: String,
    name: String,
    arguments: String,
}

impl StreamParser {
    /// A parser for one answer of `family`; ids come from `ids` as calls start.
    pub fn new(family: Family, ids: CallIds, eager: bool) -> StreamParser {
        StreamParser {
            family,
            names: Vec::new(),
            eager,
            ids,
            text: String::new(),
            sent_content: String::new(),
            sent_calls: Vec::new(),
        }
    }

    /// Also reads Hermes calls written without their tags (bare, or in a ```` ```json ````
    /// fence) when they name one of `tools`' callable tools, as [`crate::parse_with_tools`].
    pub fn with_tools(mut self, tools: &ToolRequest) -> StreamParser {
        self.names = callable_names(tools);
        self
    }

    /// Adds the next piece of the answer; returns what it lets through.
    pub fn push(&mut self, piece: &str) -> Vec<Delta> {
        self.text.push_str(piece);
        let segs = scan(self.family, &self.names, &self.text, false);
        self.send(&segs, false)
    }

    /// Ends the answer: the remaining deltas, and the whole message (what [`crate::parse`]
    /// gives for the full text, with the ids the deltas carried).
    pub fn finish(mut self) -> (Vec<Delta>, ParsedMessage) {
        let segs = scan(self.family, &self.names, &self.text, true);
        let deltas = self.send(&segs, true);
        let message = ParsedMessage {
            content: (!self.sent_content.is_empty()).then_some(self.sent_content),
            tool_calls: self
                .sent_calls
                .into_iter()
                .map(|c| ToolCall {
                    id: c.id,
                    name: c.name,
                    arguments: c.arguments,
                })
                .collect(),
        };
        (deltas, message)
    }

    fn send(&mut self, segs: &[Seg], at_end: bool) -> Vec<Delta> {
        let mut deltas = Vec::new();
        let content = assemble_content(segs, at_end);
        // Content only grows; a rescan that disagrees would mean eager calls broke, and what
        // was sent cannot be taken back.
        if let Some(more) = content.strip_prefix(self.sent_content.as_str()) {
            if !more.is_empty() {
                deltas.push(Delta::Content(more.to_owned()));
                self.sent_content = content;
            }
        }
        let visible = segs.iter().flat_map(|seg| match seg {
            Seg::Calls { calls, complete } if *complete || self.eager => calls.as_slice(),
            _ => &[],
        });
        for (index, call) in visible.enumerate() {
            let Some(name) = &call.name else { break };
            if index == self.sent_calls.len() {
                let id = self.ids.next();
                deltas.push(Delta::CallStart {
                    index,
                    id: id.clone(),
                    name: name.clone(),
                });
                self.sent_calls.push(SentCall {
                    id,
                    name: name.clone(),
                    arguments: String::new(),
                });
            }
            let sent = &mut self.sent_calls[index];
            if let Some(more) = call
                .args
                .as_deref()
                .and_then(|a| a.strip_prefix(sent.arguments.as_str()))
                .filter(|more| !more.is_empty())
            {
                deltas.push(Delta::CallArguments {
                    index,
                    fragment: more.to_owned(),
                });
                sent.arguments.push_str(more);
            }
        }
        deltas
    }
}
