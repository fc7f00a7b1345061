//! The context-size rule, as llama.cpp's tools read `-c`: the context is
//! shared by the slots; 0 asks for the model's training context; without
//! the flag each slot gets what one request got before batching,
//! min(4096, training context). One rule for `run` (one slot) and `serve`.

/// The largest context accepted: far above any model's, low enough that a
/// typo cannot ask for terabytes of cache.
pub const MAX_CONTEXT: usize = 1 << 20;

/// Why a context size cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ContextError {
    #[error("--ctx-size must be in 0..={MAX_CONTEXT}, got {0}")]
    TooLarge(usize),
    #[error(
        "--ctx-size 0: the model's training context of {train} tokens does not fit \
         (at most {MAX_CONTEXT}, at least 2 a slot for {slots} slots)"
    )]
    Training { train: usize, slots: usize },
    #[error(
        "--ctx-size {total} leaves {per_slot} tokens to each of the {slots} slots; \
         give at least 2 per slot"
    )]
    TooSmall {
        total: usize,
        per_slot: usize,
        slots: usize,
    },
}

/// A context shared by slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ContextSize {
    /// What one request can use.
    pub per_slot: usize,
    /// All slots together.
    pub total: usize,
}

/// The context for `slots` slots from `-c` (`requested`), for a model
/// trained on `n_ctx_train` tokens (`None` for a check before the model is
/// read: 0 then passes).
pub fn context_size(
    requested: Option<usize>,
    n_ctx_train: Option<usize>,
    slots: usize,
) -> Result<ContextSize, ContextError> {
    let slots = slots.max(1);
    let train = n_ctx_train.map(|t| t.max(1));
    let total = match (requested, train) {
        (Some(c), _) if c > MAX_CONTEXT => return Err(ContextError::TooLarge(c)),
        (Some(0), None) => {
            return Ok(ContextSize {
                per_slot: 0,
                total: 0,
            })
        }
        (Some(0), Some(t)) if t > MAX_CONTEXT || t / slots < 2 => {
            return Err(ContextError::Training { train: t, slots })
        }
        (Some(0), Some(t)) => t,
        (Some(c), _) => c,
        (None, t) => {
            let one = 4096.min(t.unwrap_or(4096));
            return Ok(ContextSize {
                per_slot: one,
                total: one * slots,
            });
        }
    };
    if total / slots < 2 {
        return Err(ContextError::TooSmall {
            total,
            per_slot: total / slots,
            slots,
        });
    }
    Ok(ContextSize {
        per_slot: total / slots,
        total,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follows_llama_cpp() {
        let c = |r, t, s| context_size(r, Some(t), s);
        assert_eq!(
            c(None, 8192, 1).unwrap(),
            ContextSize {
                per_slot: 4096,
                total: 4096
            }
        );
        assert_eq!(
            c(None, 2048, 4).unwrap(),
            ContextSize {
                per_slot: 2048,
                total: 8192
            }
        );
        assert_eq!(
            c(Some(0), 8192, 4).unwrap(),
            ContextSize {
                per_slot: 2048,
                total: 8192
            }
        );
        assert_eq!(
            c(Some(1000), 8192, 3).unwrap(),
            ContextSize {
                per_slot: 333,
                total: 1000
            }
        );
        assert_eq!(
            c(Some(2_000_000), 8192, 1),
            Err(ContextError::TooLarge(2_000_000))
        );
        assert!(matches!(
            c(Some(0), 1 << 21, 1),
            Err(ContextError::Training { .. })
        ));
        assert!(matches!(
            c(Some(0), 6, 4),
            Err(ContextError::Training { .. })
        ));
        assert!(matches!(
            c(Some(7), 8192, 4),
            Err(ContextError::TooSmall { .. })
        ));
        // Before the model is read, 0 passes.
        assert_eq!(context_size(Some(0), None, 4).unwrap().total, 0);
    }
}
