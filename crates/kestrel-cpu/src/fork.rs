//! Fork-join on the model's pool for the forward pass's parallel sections,
//! waiting by spinning. Rayon's own wait for a stolen job (the end of a
//! `scope`, a `join` whose other half another worker runs) calls
//! `sched_yield` every round and sleeps on a futex after 33: a syscall per
//! round in this VM, the CPU handed to any runnable thread (a server's
//! HTTP threads, its client), and a sleeping leader waits for a wake-up.
//! In `kestrel serve` at four streams the leading worker's syscalls (most
//! of them `sched_yield` and futex waits) were 4% of all samples. The
//! other worker already spins through a pass (`keep_warm`); now the leader
//! does as well.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use rayon::ThreadPool;

/// Spawns jobs into a [`scope`] and counts them until they finish.
pub(crate) struct Spawner<'a, 's> {
    scope: &'a rayon::Scope<'s>,
    pending: Arc<AtomicUsize>,
}

impl<'s> Spawner<'_, 's> {
    /// Queues `job` for whichever worker takes it first (the caller
    /// included, while it waits).
    pub(crate) fn spawn(&self, job: impl FnOnce() + Send + 's) {
        self.pending.fetch_add(1, Ordering::Relaxed);
        let pending = self.pending.clone();
        self.scope.spawn(move |_| {
            // Decremented on unwinding too, so the waiter never spins on a
            // job that panicked (the scope then re-raises the panic).
            let _done = Decrement(&pending);
            job();
        });
    }
}

struct Decrement<'a>(&'a AtomicUsize);

impl Drop for Decrement<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Release);
    }
}

/// `pool.scope(body)`, except that the caller waits for the spawned jobs by
/// running the ones nobody took and otherwise spinning, never yielding its
/// thread. By the time the scope itself checks, its jobs are done.
pub(crate) fn scope<'s>(pool: &ThreadPool, body: impl for<'a> FnOnce(&Spawner<'a, 's>) + Send) {
    let pending = Arc::new(AtomicUsize::new(0));
    pool.scope(|s| {
        body(&Spawner {
            scope: s,
            pending: pending.clone(),
        });
        while pending.load(Ordering::Acquire) != 0 {
            if rayon::yield_now() != Some(rayon::Yield::Executed) {
                std::hint::spin_loop();
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_job_runs_once_before_the_scope_returns() {
        for threads in [1, 2, 3] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            let mut slots = vec![0u32; 37];
            scope(&pool, |s| {
                for (i, slot) in slots.iter_mut().enumerate() {
                    s.spawn(move || *slot += i as u32 + 1);
                }
            });
            let want: Vec<u32> = (1..=37).collect();
            assert_eq!(slots, want, "{threads} threads");
        }
    }

    #[test]
    fn a_panicking_job_reaches_the_caller() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            scope(&pool, |s| {
                s.spawn(|| panic!("job failed"));
                s.spawn(|| {});
            })
        }));
        assert!(r.is_err());
    }
}
