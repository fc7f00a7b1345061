//! Streaming detokenization: text out as tokens arrive, whole characters only.
//!
//! Byte-level tokens can end in the middle of a UTF-8 character (an emoji is
//! often two or more byte tokens). `StreamDecoder` keeps an incomplete tail
//! until the bytes that finish it arrive; bytes that can never become valid
//! UTF-8 are emitted as U+FFFD right away rather than held.

use crate::tokenizer::Tokenizer;

/// Feeds token ids, returns the complete UTF-8 text they add.
pub struct StreamDecoder<'a> {
    tokenizer: &'a Tokenizer,
    special: bool,
    pending: Vec<u8>,
}

impl<'a> StreamDecoder<'a> {
    /// `special`: render control tokens' text (as `token_to_piece`).
    pub fn new(tokenizer: &'a Tokenizer, special: bool) -> Self {
        StreamDecoder {
            tokenizer,
            special,
            pending: Vec::new(),
        }
    }

    /// Adds one token; returns the text now complete (maybe empty).
    pub fn push(&mut self, id: u32) -> String {
        self.pending
            .extend(self.tokenizer.token_to_piece(id, self.special));
        let mut out = String::new();
        loop {
            match std::str::from_utf8(&self.pending) {
                Ok(s) => {
                    out.push_str(s);
                    self.pending.clear();
                    return out;
                }
                Err(e) => {
                    let good = e.valid_up_to();
                    // valid_up_to guarantees this prefix is UTF-8
                    out.push_str(&String::from_utf8_lossy(&self.pending[..good]));
                    match e.error_len() {
                        // incomplete character at the end: wait for more
                        None => {
                            self.pending.drain(..good);
                            return out;
                        }
                        // invalid bytes: replace and go on
                        Some(bad) => {
                            out.push('\u{FFFD}');
                            self.pending.drain(..good + bad);
                        }
                    }
                }
            }
        }
    }

    /// Bytes held back waiting for the rest of a character.
    pub fn pending_bytes(&self) -> &[u8] {
        &self.pending
    }

    /// Flushes whatever is held back, lossily.
    pub fn finish(self) -> String {
        String::from_utf8_lossy(&self.pending).into_owned()
    }
}
