//! Token masks: the set of tokens a constraint (a grammar, a JSON schema)
//! allows at a step, as a bitset over the vocabulary, and its application
//! to a row of logits before the sampler chain.
//!
//! The bitset is the layout a GPU sampler reads too: bit `t % 32` of word
//! `t / 32` is set when token `t` is allowed; tokens past the last word are
//! not allowed.

/// Whether `token` is allowed by `words`.
pub fn allows(words: &[u32], token: u32) -> bool {
    words
        .get((token / 32) as usize)
        .is_some_and(|w| w >> (token % 32) & 1 == 1)
}

/// Sets every logit whose token `words` does not allow to `-inf`: the
/// chain then never chooses it (bias and penalties keep `-inf` as it is;
/// if nothing is allowed the chain's empty-row rule applies).
pub fn mask_logits(logits: &mut [f32], words: &[u32]) {
    for (w, chunk) in logits.chunks_mut(32).enumerate() {
        let bits = words.get(w).copied().unwrap_or(0);
        if bits == u32::MAX {
            continue;
        }
        for (b, l) in chunk.iter_mut().enumerate() {
            if bits >> b & 1 == 0 {
                *l = f32::NEG_INFINITY;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masked_tokens_become_minus_infinity_and_allowed_ones_keep_their_bits() {
        let mut rng = crate::XorShift::new(7);
        let n: usize = 1000;
        let logits: Vec<f32> = (0..n).map(|_| rng.next_f32() * 20.0 - 10.0).collect();
        let words: Vec<u32> = (0..n.div_ceil(32) - 3).map(|_| rng.next_u32()).collect();
        let mut masked = logits.clone();
        mask_logits(&mut masked, &words);
        for t in 0..n {
            if allows(&words, t as u32) {
                assert_eq!(masked[t].to_bits(), logits[t].to_bits(), "token {t}");
            } else {
                assert_eq!(masked[t], f32::NEG_INFINITY, "token {t}");
            }
        }
        // The last three words are missing: nothing there is allowed.
        assert!(masked[n - 70..].iter().all(|l| *l == f32::NEG_INFINITY));
    }

    #[test]
    fn a_masked_row_samples_only_allowed_tokens() {
        let mut rng = crate::XorShift::new(11);
        let logits: Vec<f32> = (0..500).map(|_| rng.next_f32() * 8.0).collect();
        let mut words = vec![0u32; 16];
        for t in [3u32, 77, 401] {
            words[(t / 32) as usize] |= 1 << (t % 32);
        }
        let mut row = logits.clone();
        mask_logits(&mut row, &words);
        let params = crate::SamplerParams {
            temperature: 1.5,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            seed: 5,
            ..Default::default()
        };
        let mut s = crate::Sampler::new(params);
        for _ in 0..200 {
            let t = s.sample(&row);
            assert!(allows(&words, t), "sampled {t}");
        }
    }
}
