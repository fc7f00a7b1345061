//! Perplexity over a text, by llama-perplexity's method: the tokens (BOS
//! added as the vocabulary asks) are cut into chunks of `n_ctx`; each chunk
//! is evaluated from an empty KV cache with its first token replaced by BOS
//! (when the vocabulary adds BOS), and only the second half is scored: the
//! logits at positions `n_ctx/2 .. n_ctx-2` against the tokens that follow
//! them. PPL is `exp(mean NLL)`; its uncertainty is llama.cpp's
//! `PPL * sqrt((mean(NLL^2) - mean(NLL)^2) / (count - 1))`. All sums are f64.

use std::time::Instant;

use kestrel_sampling::SamplerParams;

use crate::backend::{Backend, BackendOptions, Device, Feed, SeqId, Want};
use crate::{Engine, EngineError};

/// How to evaluate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PerplexityParams {
    /// Tokens per chunk (llama-perplexity's `-c`, default 512).
    pub n_ctx: usize,
    /// Tokens per forward pass; values above `n_ctx` act as `n_ctx` (each
    /// chunk is evaluated on its own).
    pub n_batch: usize,
    /// Evaluate at most this many chunks (`None`: every whole chunk).
    pub n_chunks: Option<usize>,
    /// Sliding-window layers over a full-size cache (`--swa-full`; see
    /// [`crate::GenerateParams::swa_full`]).
    pub swa_full: bool,
}

/// Why a perplexity run could not produce a number.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum PerplexityError {
    #[error("context size must be at least 4 tokens, got {0}")]
    ContextTooSmall(usize),
    #[error("batch size must be at least 1")]
    ZeroBatch,
    #[error("the chunk count must be at least 1")]
    ZeroChunks,
    #[error(
        "the text tokenizes to only {tokens} tokens; a context of {n_ctx} needs at least {needed}"
    )]
    TooShort {
        tokens: usize,
        n_ctx: usize,
        needed: usize,
    },
    #[error("token id {id} is outside the vocabulary of {n_vocab}")]
    TokenOutOfRange { id: u32, n_vocab: usize },
    #[error("the backend failed: {0}")]
    Backend(String),
    #[error(
        "non-finite log-likelihood at {count} of {scored} scored positions in chunk {chunk} \
         (1-based; token indices within the chunk: {})",
        list_positions(positions, *count)
    )]
    NonFinite {
        /// 1-based, as the running output numbers chunks.
        chunk: usize,
        count: usize,
        scored: usize,
        /// Indices within the chunk of the predicted tokens (the first few).
        positions: Vec<usize>,
    },
}

fn list_positions(positions: &[usize], count: usize) -> String {
    let mut s = positions
        .iter()
        .map(|p| p.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    if count > positions.len() {
        s.push_str(&format!(", … ({} more)", count - positions.len()));
    }
    s
}

/// At most this many non-finite positions are listed in the error.
const LISTED_POSITIONS: usize = 10;

/// After each chunk: where the run stands.
#[derive(Clone, Copy, Debug)]
pub struct ChunkReport {
    /// 1-based index of the chunk just scored.
    pub chunk: usize,
    pub n_chunks: usize,
    /// PPL over every chunk so far.
    pub ppl: f64,
    /// Wall time of this chunk (forward passes and scoring).
    pub seconds: f64,
}

/// The final estimate.
#[derive(Clone, Debug)]
pub struct PerplexityResult {
    pub ppl: f64,
    /// `None` when the variance estimate is not positive (llama.cpp then
    /// prints an error instead of the estimate) or fewer than 2 tokens scored.
    pub uncertainty: Option<f64>,
    /// Tokens of the whole text, BOS included.
    pub n_tokens: usize,
    pub n_chunks: usize,
    /// Tokens scored.
    pub count: usize,
    /// PPL after each chunk, as printed by the running output.
    pub chunk_ppl: Vec<f64>,
}

/// `log softmax(logits)[token]` as llama-perplexity computes it: the max in
/// f32, `exp(l - max)` in f32 summed in f64, the result in f64. NaN or
/// infinite logits make the result non-finite (never a silent number).
pub fn log_softmax(logits: &[f32], token: u32) -> f64 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    // A NaN logit (which f32::max skips) still poisons the sum, as does an
    // infinite max (inf - inf); so does a row of only -inf.
    let sum: f64 = logits.iter().map(|&l| f64::from((l - max).exp())).sum();
    f64::from(logits[token as usize] - max) - sum.ln()
}

/// Running sums of negative log-likelihoods.
#[derive(Clone, Debug, Default)]
pub struct NllAccumulator {
    nll: f64,
    nll2: f64,
    count: usize,
}

impl NllAccumulator {
    /// Adds one chunk's log-likelihoods (one per scored token). If any is not
    /// finite nothing is added and the error names them; `chunk` is 1-based
    /// and `first` is the chunk index of the token `lls[0]` predicts.
    pub fn add_chunk(
        &mut self,
        chunk: usize,
        first: usize,
        lls: &[f64],
    ) -> Result<(), PerplexityError> {
        let bad: Vec<usize> = lls
            .iter()
            .enumerate()
            .filter(|(_, v)| !v.is_finite())
            .map(|(i, _)| first + i)
            .collect();
        if !bad.is_empty() {
            return Err(PerplexityError::NonFinite {
                chunk,
                count: bad.len(),
                scored: lls.len(),
                positions: bad.into_iter().take(LISTED_POSITIONS).collect(),
            });
        }
        for &ll in lls {
            let v = -ll;
            self.nll += v;
            self.nll2 += v * v;
        }
        self.count += lls.len();
        Ok(())
    }

    pub fn count(&self) -> usize {
        self.count
    }

    /// `exp(mean NLL)` (NaN before anything was added).
    pub fn ppl(&self) -> f64 {
        (self.nll / self.count as f64).exp()
    }

    /// llama-perplexity's uncertainty of [`NllAccumulator::ppl`].
    pub fn uncertainty(&self) -> Option<f64> {
        if self.count < 2 {
            return None;
        }
        let n = self.count as f64;
        let mean = self.nll / n;
        let var = self.nll2 / n - mean * mean;
        (var > 0.0).then(|| (var / (n - 1.0)).sqrt() * self.ppl())
    }
}

impl Engine {
    /// Tokenizes a text for perplexity as llama-perplexity does: BOS per the
    /// vocabulary, special-token text taken literally.
    pub fn tokenize_text(&self, text: &str) -> Vec<u32> {
        self.tokenizer.encode(text, true, false)
    }

    /// Log-likelihoods of tokens `first+1 .. chunk.len()-1` of one chunk
    /// evaluated on `backend` (in its sequence `seq`, whose context holds
    /// the chunk) from an empty cache in batches of `n_batch` tokens (the
    /// caller has put BOS first where wanted).
    pub fn chunk_log_likelihoods(
        &self,
        backend: &mut dyn Backend,
        seq: SeqId,
        chunk: &[u32],
        n_batch: usize,
        first: usize,
    ) -> Result<Vec<f64>, EngineError> {
        let n_ctx = chunk.len();
        let n_vocab = self.model.spec.hparams.n_vocab;
        let greedy = SamplerParams {
            temperature: 0.0,
            ..SamplerParams::default()
        };
        backend.start(seq, chunk, 0, &greedy)?;
        let n_batch = n_batch.max(1);
        let mut lls = Vec::with_capacity(n_ctx.saturating_sub(first + 1));
        for pos0 in (0..n_ctx).step_by(n_batch) {
            let to = (pos0 + n_batch).min(n_ctx);
            // A batch wholly before the scored half only fills the cache.
            let want = if to <= first {
                Want::Cache
            } else {
                Want::Logits {
                    skip: first.saturating_sub(pos0),
                }
            };
            backend.submit(&[Feed {
                seq,
                from: pos0,
                to,
                want,
            }])?;
            let out = backend
                .read()?
                .and_then(|mut o| o.pop())
                .unwrap_or_default();
            let Some(rows) = out.logits else { continue };
            let from = pos0.max(first);
            for (i, row) in rows.chunks_exact(n_vocab).enumerate() {
                let pos = from + i;
                if pos + 1 < n_ctx {
                    lls.push(log_softmax(row, chunk[pos + 1]));
                }
            }
        }
        Ok(lls)
    }

    /// Runs llama-perplexity's evaluation over `tokens` (from
    /// [`Engine::tokenize_text`]) on `device`; `on_chunk` hears about each
    /// chunk.
    pub fn perplexity(
        &self,
        tokens: &[u32],
        params: &PerplexityParams,
        device: Device,
        on_chunk: impl FnMut(&ChunkReport),
    ) -> Result<PerplexityResult, PerplexityError> {
        let n_batch = params.n_batch.min(params.n_ctx);
        let backend_err = |e: EngineError| PerplexityError::Backend(e.to_string());
        let mut backend = self
            .backend(BackendOptions {
                device,
                n_ctx: params.n_ctx.max(1),
                swa_full: params.swa_full,
            })
            .map_err(backend_err)?;
        let seq = backend.create_seq().map_err(backend_err)?;
        self.perplexity_with(
            tokens,
            params,
            |chunk, first| {
                self.chunk_log_likelihoods(&mut *backend, seq, chunk, n_batch, first)
                    .map_err(|e| e.to_string())
            },
            on_chunk,
        )
    }

    /// [`Engine::perplexity`] with the log-likelihoods of each chunk from
    /// `lls_of(chunk, first)` (those of tokens `first+1..` as
    /// [`Engine::chunk_log_likelihoods`] gives them): another backend
    /// plugs in here.
    pub fn perplexity_with(
        &self,
        tokens: &[u32],
        params: &PerplexityParams,
        mut lls_of: impl FnMut(&[u32], usize) -> Result<Vec<f64>, String>,
        mut on_chunk: impl FnMut(&ChunkReport),
    ) -> Result<PerplexityResult, PerplexityError> {
        let n_ctx = params.n_ctx;
        if n_ctx < 4 {
            return Err(PerplexityError::ContextTooSmall(n_ctx));
        }
        if params.n_batch == 0 {
            return Err(PerplexityError::ZeroBatch);
        }
        if params.n_chunks == Some(0) {
            return Err(PerplexityError::ZeroChunks);
        }
        if tokens.len() < 2 * n_ctx {
            return Err(PerplexityError::TooShort {
                tokens: tokens.len(),
                n_ctx,
                needed: 2 * n_ctx,
            });
        }
        let n_vocab = self.model.spec.hparams.n_vocab;
        if let Some(&id) = tokens.iter().find(|&&t| t as usize >= n_vocab) {
            return Err(PerplexityError::TokenOutOfRange { id, n_vocab });
        }
        let max_chunks = tokens.len() / n_ctx;
        let n_chunks = params.n_chunks.map_or(max_chunks, |n| n.min(max_chunks));
        let first = n_ctx / 2;
        let bos = self.tokenizer.bos().filter(|_| self.tokenizer.add_bos());

        let mut acc = NllAccumulator::default();
        let mut chunk_ppl = Vec::with_capacity(n_chunks);
        for i in 0..n_chunks {
            let t0 = Instant::now();
            let mut chunk = tokens[i * n_ctx..(i + 1) * n_ctx].to_vec();
            if let Some(bos) = bos {
                chunk[0] = bos;
            }
            let lls = lls_of(&chunk, first).map_err(PerplexityError::Backend)?;
            acc.add_chunk(i + 1, first + 1, &lls)?;
            chunk_ppl.push(acc.ppl());
            on_chunk(&ChunkReport {
                chunk: i + 1,
                n_chunks,
                ppl: acc.ppl(),
                seconds: t0.elapsed().as_secs_f64(),
            });
        }
        Ok(PerplexityResult {
            ppl: acc.ppl(),
            uncertainty: acc.uncertainty(),
            n_tokens: tokens.len(),
            n_chunks,
            count: acc.count(),
            chunk_ppl,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_softmax_matches_the_definition() {
        let row = [1.0f32, 2.0, 3.0];
        let z: f64 = row.iter().map(|&l| f64::from(l).exp()).sum();
        let want = 2.0 - z.ln();
        assert!((log_softmax(&row, 1) - want).abs() < 1e-6);
    }

    #[test]
    fn a_nan_logit_makes_the_log_likelihood_non_finite() {
        // The NaN is not the target: it must still poison the row.
        assert!(!log_softmax(&[1.0, f32::NAN, 0.5], 0).is_finite());
        assert!(!log_softmax(&[1.0, f32::INFINITY, 0.5], 0).is_finite());
        assert!(!log_softmax(&[1.0, f32::NEG_INFINITY, 0.5], 1).is_finite());
        assert!(log_softmax(&[1.0, f32::NEG_INFINITY, 0.5], 0).is_finite());
    }

    #[test]
    fn non_finite_values_are_reported_with_their_positions() {
        let mut acc = NllAccumulator::default();
        let good = [log_softmax(&[0.0, 1.0], 1); 3];
        acc.add_chunk(1, 5, &good).unwrap();
        let nan_row = log_softmax(&[0.0, f32::NAN, 1.0], 2);
        let lls = [good[0], nan_row, good[0], nan_row];
        let err = acc.add_chunk(2, 257, &lls).unwrap_err();
        assert_eq!(
            err,
            PerplexityError::NonFinite {
                chunk: 2,
                count: 2,
                scored: 4,
                positions: vec![258, 260],
            }
        );
        let msg = err.to_string();
        assert!(msg.contains("2 of 4") && msg.contains("chunk 2"), "{msg}");
        assert!(msg.contains("258, 260"), "{msg}");
        // Nothing of the bad chunk was added.
        assert_eq!(acc.count(), 3);
    }

    #[test]
    fn estimate_follows_llama_perplexity() {
        let mut acc = NllAccumulator::default();
        let lls = [-1.0f64, -2.0, -3.0, -2.0];
        acc.add_chunk(1, 0, &lls).unwrap();
        let mean = 2.0f64;
        assert!((acc.ppl() - mean.exp()).abs() < 1e-12);
        // E[x^2] - mean^2 = (1 + 4 + 9 + 4) / 4 - 4 = 0.5; sqrt(0.5 / 3) * ppl
        let want = (0.5f64 / 3.0).sqrt() * mean.exp();
        assert!((acc.uncertainty().unwrap() - want).abs() < 1e-12);
        let mut flat = NllAccumulator::default();
        flat.add_chunk(1, 0, &[-1.0, -1.0]).unwrap();
        assert_eq!(flat.uncertainty(), None);
    }
}
