//! The set of tokens a matcher allows next, as a bitset the sampler can
//! apply to logits.

use llguidance::toktrie::SimpleVob;

/// Allowed token ids: bit `t % 32` of word `t / 32` is set when token `t`
/// is allowed. Bits past the vocabulary are clear.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenMask {
    bits: SimpleVob,
    n_vocab: usize,
}

impl TokenMask {
    pub(crate) fn new(bits: SimpleVob, n_vocab: usize) -> TokenMask {
        TokenMask { bits, n_vocab }
    }

    /// The bitset, `n_vocab.div_ceil(32)` words.
    pub fn words(&self) -> &[u32] {
        &self.bits.as_slice()[..self.n_vocab.div_ceil(32)]
    }

    /// Whether `token` may come next.
    pub fn allows(&self, token: u32) -> bool {
        (token as usize) < self.n_vocab && self.bits.is_allowed(token)
    }

    /// Number of allowed tokens.
    pub fn count(&self) -> usize {
        self.words().iter().map(|w| w.count_ones() as usize).sum()
    }

    /// The allowed ids, ascending.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.words().iter().enumerate().flat_map(|(i, &w)| {
            let base = i as u32 * 32;
            std::iter::successors((w != 0).then_some(w), |&w| {
                let rest = w & (w - 1);
                (rest != 0).then_some(rest)
            })
            .map(move |w| base + w.trailing_zeros())
        })
    }

    /// Sets every disallowed token's logit to minus infinity.
    pub fn apply(&self, logits: &mut [f32]) {
        for (t, l) in logits.iter_mut().enumerate() {
            if !self.allows(t as u32) {
                *l = f32::NEG_INFINITY;
            }
        }
    }
}
