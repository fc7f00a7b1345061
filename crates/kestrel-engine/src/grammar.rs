//! Compiled grammars (`kestrel-constrain`) as the loop's constraints: a
//! grammar that holds from the first token, or a lazy one that holds from
//! the first trigger in the text on (tool calls under `tool_choice: auto`:
//! free text until `<tool_call>`, then the call's grammar).
//!
//! A lazy grammar starts at the token where its trigger's first byte is:
//! the tokens from there are given to a fresh matcher. Where that token
//! holds text before the trigger, or the model's text after it breaks the
//! grammar, the sequence goes on unconstrained (its text is then plain
//! content, never a malformed call).

use std::sync::Arc;

use kestrel_constrain::{Grammar, Matcher, Next};

use crate::constraint::{Allowed, ConstraintSource, TokenConstraint};

/// A grammar and, when lazy, the texts that start it.
pub struct GrammarConstraint {
    grammar: Grammar,
    triggers: Vec<Vec<u8>>,
    what: String,
}

impl GrammarConstraint {
    /// A grammar that holds from the first token; `what` names it in logs.
    pub fn eager(grammar: Grammar, what: impl Into<String>) -> Self {
        GrammarConstraint {
            grammar,
            triggers: Vec::new(),
            what: what.into(),
        }
    }

    /// A grammar that holds from the first of `triggers` in the text on
    /// (from the trigger's first byte); eager when `triggers` is empty.
    pub fn lazy(grammar: Grammar, triggers: &[String], what: impl Into<String>) -> Self {
        GrammarConstraint {
            grammar,
            triggers: triggers.iter().map(|t| t.as_bytes().to_vec()).collect(),
            what: what.into(),
        }
    }
}

impl ConstraintSource for GrammarConstraint {
    fn start(&self) -> Result<Box<dyn TokenConstraint>, String> {
        let state = if self.triggers.is_empty() {
            State::Active(Box::new(self.grammar.matcher()))
        } else {
            State::Waiting {
                text: Vec::new(),
                starts: Vec::new(),
                tokens: Vec::new(),
            }
        };
        Ok(Box::new(Running {
            source: GrammarRef {
                grammar: self.grammar.clone(),
                triggers: Arc::new(self.triggers.clone()),
            },
            state,
        }))
    }

    fn describe(&self) -> String {
        self.what.clone()
    }
}

struct GrammarRef {
    grammar: Grammar,
    triggers: Arc<Vec<Vec<u8>>>,
}

enum State {
    /// Free text so far: its bytes, each token's first byte, the tokens.
    Waiting {
        text: Vec<u8>,
        starts: Vec<usize>,
        tokens: Vec<u32>,
    },
    Active(Box<Matcher>),
    /// A lazy grammar the text did not follow: free to the end.
    Off,
}

struct Running {
    source: GrammarRef,
    state: State,
}

impl Running {
    /// After a free token: starts the grammar if a trigger appeared.
    fn look_for_trigger(&mut self) {
        let State::Waiting {
            text,
            starts,
            tokens,
        } = &self.state
        else {
            return;
        };
        let Some(at) = self
            .source
            .triggers
            .iter()
            .filter_map(|t| find(text, t))
            .min()
        else {
            return;
        };
        // The token the trigger starts in must start with it.
        let Some(first) = starts.iter().position(|&s| s == at) else {
            self.state = State::Off;
            return;
        };
        let mut m = self.source.grammar.matcher();
        let fits = tokens[first..].iter().all(|&t| m.accept(t).is_ok());
        self.state = if fits {
            State::Active(Box::new(m))
        } else {
            State::Off
        };
    }
}

/// Where `needle` first occurs in `hay`.
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || needle.len() > hay.len() {
        return None;
    }
    hay.windows(needle.len()).position(|w| w == needle)
}

impl TokenConstraint for Running {
    fn next(&mut self) -> Result<Allowed, String> {
        match &mut self.state {
            State::Waiting { .. } | State::Off => Ok(Allowed::Any),
            State::Active(m) => match m.next().map_err(|e| e.to_string())? {
                Next::Allowed(mask) => Ok(Allowed::Mask(mask.words().into())),
                Next::Forced(t) => Ok(Allowed::Only(t)),
                Next::End => Ok(Allowed::End),
            },
        }
    }

    fn accept(&mut self, token: u32) -> Result<(), String> {
        match &mut self.state {
            State::Active(m) => m.accept(token).map_err(|e| e.to_string()),
            State::Off => Ok(()),
            State::Waiting {
                text,
                starts,
                tokens,
            } => {
                starts.push(text.len());
                tokens.push(token);
                let bytes = self.source.grammar.vocabulary().token_bytes(token);
                // Special tokens' bytes start with a marker, not text.
                let bytes = bytes.strip_prefix(&[0xFF]).unwrap_or(bytes);
                text.extend_from_slice(bytes);
                self.look_for_trigger();
                Ok(())
            }
        }
    }
}
