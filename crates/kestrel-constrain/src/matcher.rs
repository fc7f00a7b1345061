//! One sequence's position in a compiled constraint: what may come next,
//! the tokens it took, and rollback of them.

use std::sync::Arc;

use llguidance::toktrie::SimpleVob;

use crate::{ConstraintError, TokenMask, Vocabulary};

/// What the next token may be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Next {
    /// Any token the mask allows (end-of-generation ids among them where
    /// the output may end here).
    Allowed(TokenMask),
    /// Exactly this one token is allowed.
    Forced(u32),
    /// Only end-of-generation is allowed: the sequence must stop.
    End,
}

/// Tracks one sequence through a [`Grammar`](crate::Grammar). `Send`.
pub struct Matcher {
    inner: llguidance::Matcher,
    vocab: Arc<Vocabulary>,
    /// End-of-generation tokens accepted after llguidance had stopped (it
    /// takes no tokens then), so that rollback can count them.
    eog_after_stop: usize,
    /// The longest run of digits let through (JSON), and the run of digits
    /// the text ends in after each accepted token (popped on rollback).
    digit_cap: Option<usize>,
    digit_runs: Vec<usize>,
}

impl Matcher {
    pub(crate) fn new(
        inner: llguidance::Matcher,
        vocab: Arc<Vocabulary>,
        digit_cap: Option<usize>,
    ) -> Matcher {
        Matcher {
            inner,
            vocab,
            eog_after_stop: 0,
            digit_cap,
            digit_runs: Vec::new(),
        }
    }

    /// The mask without the tokens that would run the digits past the cap,
    /// unless that leaves nothing (then the grammar's own mask holds).
    fn capped(&self, mut bits: SimpleVob) -> SimpleVob {
        let run = self.digit_runs.last().copied().unwrap_or(0);
        if self.digit_cap.is_none_or(|cap| run < cap) {
            return bits;
        }
        let full = bits.clone();
        for &t in self.vocab.digit_leading() {
            bits.disallow_token(t);
        }
        if bits.is_zero() {
            full
        } else {
            bits
        }
    }

    fn failed(&self) -> ConstraintError {
        let why = self
            .inner
            .get_error()
            .unwrap_or_else(|| format!("{:?}", self.inner.stop_reason()));
        ConstraintError::Matcher(why)
    }

    fn is_eog(&self, token: u32) -> bool {
        self.vocab.eog_ids().binary_search(&token).is_ok()
    }

    /// What the next token may be.
    // Not an iterator: it can fail, and the engine's API names it `next`.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<Next, ConstraintError> {
        if self.inner.is_error() {
            return Err(self.failed());
        }
        if self.eog_after_stop > 0 || self.inner.is_stopped() {
            return Ok(Next::End);
        }
        let bits = self.inner.compute_mask().map_err(|_| self.failed())?;
        let bits = self.capped(bits);
        let mask = TokenMask::new(bits, self.vocab.n_vocab());
        let (first, second) = {
            let mut text_tokens = mask.iter().filter(|&t| !self.is_eog(t));
            (text_tokens.next(), text_tokens.next())
        };
        let may_end = self.vocab.eog_ids().iter().any(|&t| mask.allows(t));
        Ok(match (first, second) {
            (None, _) => Next::End,
            (Some(t), None) if !may_end => Next::Forced(t),
            _ => Next::Allowed(mask),
        })
    }

    /// Takes `token`, which the sampler chose from the last mask. A token
    /// the constraint does not allow is an error and leaves the matcher as
    /// it was.
    pub fn accept(&mut self, token: u32) -> Result<(), ConstraintError> {
        if self.inner.is_error() {
            return Err(self.failed());
        }
        if token as usize >= self.vocab.n_vocab() {
            return Err(ConstraintError::NotAllowed { token });
        }
        if self.is_eog(token) {
            if self.eog_after_stop > 0 || self.inner.is_stopped() {
                self.eog_after_stop += 1;
                return Ok(());
            }
            if !self.inner.is_accepting().map_err(|_| self.failed())? {
                return Err(ConstraintError::NotAllowed { token });
            }
        } else {
            if self.eog_after_stop > 0 || self.inner.is_stopped() {
                return Err(ConstraintError::NotAllowed { token });
            }
            let ok = self
                .inner
                .validate_tokens(&[token])
                .map_err(|_| self.failed())?;
            if ok != 1 {
                return Err(ConstraintError::NotAllowed { token });
            }
        }
        self.inner.consume_token(token).map_err(|_| self.failed())?;
        let bytes = self.vocab.token_bytes(token);
        let tail = bytes
            .iter()
            .rev()
            .take_while(|b| b.is_ascii_digit())
            .count();
        let run = if tail == bytes.len() && !bytes.is_empty() {
            self.digit_runs.last().copied().unwrap_or(0) + tail
        } else {
            tail
        };
        self.digit_runs.push(run);
        Ok(())
    }

    /// The tokens the constraint forces from here on (fast-forward), not
    /// taken: feed them to the model and [`accept`](Self::accept) each.
    /// Empty when nothing is forced, or when the vocabulary has no
    /// tokenizer to split forced text as the model would.
    pub fn forced(&mut self) -> Vec<u32> {
        if self.eog_after_stop > 0 || self.inner.is_stopped() {
            return Vec::new();
        }
        self.inner.compute_ff_tokens()
    }

    /// Forgets the last `n` accepted tokens.
    pub fn rollback(&mut self, n: usize) -> Result<(), ConstraintError> {
        let after_stop = n.min(self.eog_after_stop);
        self.eog_after_stop -= after_stop;
        let kept = self.digit_runs.len().saturating_sub(n - after_stop);
        self.digit_runs.truncate(kept);
        self.inner
            .rollback(n - after_stop)
            .map_err(|e| ConstraintError::Matcher(e.to_string()))
    }

    /// The constraint allows nothing more but end-of-generation (or it took
    /// one already).
    pub fn is_finished(&self) -> bool {
        self.eog_after_stop > 0 || (self.inner.is_stopped() && !self.inner.is_error())
    }
}
