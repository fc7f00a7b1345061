//! Turns for preparing large requests (parsing, chat templates,
//! tokenizing), and giving their memory back afterwards.
//!
//! Preparing a request costs a few times its body in memory. Sixteen 2 MB
//! bodies prepared at once multiplied that by sixteen while a normal request
//! waited behind them for the cores; here bodies from [`HEAVY_BODY`] up take
//! one of [`TURNS`] turns and the rest queue (their bodies, already read, are
//! all they hold meanwhile), while smaller bodies need no turn.
//!
//! The process keeps freed memory for its decode loop (`kestrel`'s glibc
//! tunables: no trimming), so after the last heavy preparation of a burst
//! the freed blocks are handed back to the system explicitly.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Bodies of this many bytes or more wait for a turn.
pub const HEAVY_BODY: usize = 256 << 10;

/// Heavy preparations at once: one a core on the two-core machines this
/// was measured on, which is also what keeps them from starving the engine.
pub const TURNS: usize = 2;

/// The shared turn counter (cheap to clone).
#[derive(Clone)]
pub struct Preparation {
    turns: Arc<Semaphore>,
    /// Heavy preparations holding or waiting for a turn.
    heavy: Arc<AtomicUsize>,
}

impl Default for Preparation {
    fn default() -> Self {
        Preparation {
            turns: Arc::new(Semaphore::new(TURNS)),
            heavy: Arc::new(AtomicUsize::new(0)),
        }
    }
}

/// A turn (or none, for a light body), held while the work runs.
pub struct Turn {
    _held: Option<(OwnedSemaphorePermit, Heavy)>,
}

impl Preparation {
    /// Waits for a turn if a body of `body_len` bytes needs one.
    pub async fn turn(&self, body_len: usize) -> Turn {
        if body_len < HEAVY_BODY {
            return Turn { _held: None };
        }
        // Counted in before the wait, so that the last one out of a burst
        // knows that it is the last (a request whose client leaves while it
        // waits counts out as it is dropped).
        let heavy = Heavy::enter(&self.heavy);
        match self.turns.clone().acquire_owned().await {
            Ok(permit) => Turn {
                _held: Some((permit, heavy)),
            },
            // The semaphore is never closed.
            Err(_) => Turn { _held: None },
        }
    }
}

/// One heavy preparation, counted in and out; the last one out gives the
/// freed memory back.
struct Heavy(Arc<AtomicUsize>);

impl Heavy {
    fn enter(count: &Arc<AtomicUsize>) -> Heavy {
        count.fetch_add(1, Ordering::SeqCst);
        Heavy(count.clone())
    }
}

/// How long after the last heavy preparation of a burst the freed memory
/// goes back: its answer and its connection's buffers are freed after the
/// preparation itself (16 bodies of 4.6 MB kept 60 MB when the trim ran at
/// once).
const RELEASE_AFTER: std::time::Duration = std::time::Duration::from_millis(500);

impl Drop for Heavy {
    fn drop(&mut self) {
        if self.0.fetch_sub(1, Ordering::SeqCst) == 1 {
            let count = self.0.clone();
            // A thread of its own: the wait holds up no request, and a new
            // burst that started meanwhile trims when it ends instead.
            let _ = std::thread::Builder::new()
                .name("kestrel-trim".into())
                .spawn(move || {
                    std::thread::sleep(RELEASE_AFTER);
                    if count.load(Ordering::SeqCst) == 0 {
                        crate::memory::release_freed();
                    }
                });
        }
    }
}
