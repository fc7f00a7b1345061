//! Stop strings for streamed generation. [`StopMatcher`] owns two decisions: when generation
//! must end because a stop string appeared in the text, and which generated text may be shown
//! now without ever having to take it back.
//!
//! # Semantics
//!
//! The text is the concatenation of the pieces fed so far. Generation stops at the first
//! point of that text where some stop string has just been completed (the earliest *end* of an
//! occurrence; this is where token-by-token generation would have stopped, so the result does
//! not depend on how the text is split into pieces). If several stop strings end there, the
//! longest one counts (the earliest start). The output is the text before that occurrence; the
//! stop string and anything after it are never emitted. Without a stop, the output is the
//! whole text.
//!
//! While streaming, a suffix of the text that is a proper prefix of some stop string may still
//! turn into a stop and is held back; held text is released as soon as it can no longer start
//! a stop, or by [`StopMatcher::finish`] at the end of generation. Matching is on whole `char`s
//! (pieces are `&str`, so a multibyte character is never split), bytes compared exactly;
//! empty stop strings are ignored.

/// The result of feeding one piece to a [`StopMatcher`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StopStep {
    /// Text that is safe to show now (possibly empty); it will never be retracted.
    pub text: String,
    /// Whether a stop string has completed; generation should end.
    pub stopped: bool,
}

/// Incremental stop-string matcher; see the module documentation.
#[derive(Clone, Debug)]
pub struct StopMatcher {
    stops: Vec<String>,
    /// Text received but not yet emitted: always a proper prefix of some stop string.
    held: String,
    /// Index into `stops` of the stop string that ended generation.
    matched: Option<usize>,
}

impl StopMatcher {
    /// A matcher for `stops`; empty strings are dropped.
    pub fn new<I, S>(stops: I) -> StopMatcher
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        StopMatcher {
            stops: stops
                .into_iter()
                .map(Into::into)
                .filter(|s: &String| !s.is_empty())
                .collect(),
            held: String::new(),
            matched: None,
        }
    }

    /// The (non-empty) stop strings, in the order given.
    pub fn stop_strings(&self) -> &[String] {
        &self.stops
    }

    /// Feeds the next piece of generated text. After a stop, further pieces are discarded and
    /// every call returns empty text with `stopped` set.
    pub fn push(&mut self, piece: &str) -> StopStep {
        if self.matched.is_some() {
            return StopStep {
                text: String::new(),
                stopped: true,
            };
        }
        self.held.push_str(piece);

        // `held` had no complete stop before this piece, so any occurrence found now is new.
        // Key (end, start, index): the earliest end, then the longest, then the first listed.
        let completed = self
            .stops
            .iter()
            .enumerate()
            .filter_map(|(i, s)| self.held.find(s.as_str()).map(|at| (at + s.len(), at, i)))
            .min();
        if let Some((_, start, index)) = completed {
            self.held.truncate(start);
            self.matched = Some(index);
            return StopStep {
                text: std::mem::take(&mut self.held),
                stopped: true,
            };
        }

        let split = self.partial_match_start();
        let rest = self.held.split_off(split);
        StopStep {
            text: std::mem::replace(&mut self.held, rest),
            stopped: false,
        }
    }

    /// Ends generation: returns the text still held back. Empty after a stop: what was held
    /// then belonged to the stop string, and a stop leaves nothing held.
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }

    /// Whether a stop string has completed.
    pub fn is_stopped(&self) -> bool {
        self.matched.is_some()
    }

    /// The stop string that ended generation, if any.
    pub fn matched(&self) -> Option<&str> {
        self.matched.map(|i| self.stops[i].as_str())
    }

    /// The text currently held back as a possible start of a stop string.
    pub fn held(&self) -> &str {
        &self.held
    }

    /// Byte offset in `held` of the longest suffix that is a proper prefix of a stop string
    /// (`held.len()` if none). Any later occurrence must start there or later: one starting
    /// earlier would make a longer suffix a prefix of that stop string.
    fn partial_match_start(&self) -> usize {
        let longest = self.stops.iter().map(String::len).max().unwrap_or(0);
        // A proper prefix is at most `longest - 1` bytes; step forward to a char boundary.
        let mut from = self.held.len().saturating_sub(longest.saturating_sub(1));
        while !self.held.is_char_boundary(from) {
            from += 1;
        }
        self.held[from..]
            .char_indices()
            .map(|(offset, _)| from + offset)
            .find(|&at| {
                let suffix = &self.held[at..];
                self.stops.iter().any(|s| s.starts_with(suffix))
            })
            .unwrap_or(self.held.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_text_is_a_proper_prefix_of_a_stop() {
        let mut m = StopMatcher::new(["<|im_end|>", "###"]);
        assert_eq!(m.push("hi <|im").text, "hi ");
        assert_eq!(m.held(), "<|im");
        assert_eq!(m.push("_e").text, "");
        assert_eq!(m.held(), "<|im_e");
        // '#' restarts a possible match of "###" after the failed one.
        assert_eq!(m.push("x#").text, "<|im_ex");
        assert_eq!(m.held(), "#");
    }
}
