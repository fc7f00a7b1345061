//! Fork-join on the model's pool for the forward pass's parallel sections,
//! waiting by spinning. Rayon's own wait for a stolen job (the end of a
//! `scope`, a `join` whose other half another worker runs) calls
//! `sched_yield` every round and sleeps on a futex after 33: a syscall per
//! round, the CPU handed to any runnable thread (a server's
//! HTTP threads, its client), and a sleeping leader waits for a wake-up.
//! In `kestrel serve` at four streams the leading worker's syscalls (most
//! of them `sched_yield` and futex waits) were 4% of all samples. The
//! other worker already spins through a pass (`keep_warm`); now the leader
//! does as well.
//!
//! A wait that outlasts [`SPIN`] yields the CPU every round, though: with
//! more runnable threads than cores (another process, a server's HTTP
//! threads and its clients) the thread being waited for may be off its
//! CPU, and a pure spinner then held its core for the rest of a time
//! slice. Two `kestrel bench` runs at once (SmolLM2 tg, 2 threads each on
//! 2 cores) made 147-163 t/s together when spinning, 222-225 yielding; a
//! lone run is as fast as before.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

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
        wait_until(|| pending.load(Ordering::Acquire) == 0);
    });
}

/// How long a waiting worker spins before it yields its CPU each round:
/// far longer than a join's usual wait (microseconds), so an uncontended
/// pass seldom makes a system call, and short beside a time slice (~3 ms).
const SPIN: Duration = Duration::from_micros(100);

/// Waits until `done()` holds, running the pool's queued jobs meanwhile:
/// spinning at first, then, once [`SPIN`] has passed without a job to run,
/// yielding the CPU every round.
pub(crate) fn wait_until(done: impl Fn() -> bool) {
    let (mut spun, mut started, mut yielding) = (0u32, None::<Instant>, false);
    while !done() {
        if rayon::yield_now() == Some(rayon::Yield::Executed) {
            (spun, started, yielding) = (0, None, false);
            continue;
        }
        if yielding {
            std::thread::yield_now();
            continue;
        }
        // The clock is read every 64 rounds, which keeps the spin tight.
        if spun % 64 == 0 {
            yielding = started.get_or_insert_with(Instant::now).elapsed() > SPIN;
        }
        spun = spun.wrapping_add(1);
        std::hint::spin_loop();
    }
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

    #[test]
    fn a_long_wait_ends_when_its_condition_holds() {
        use std::sync::atomic::AtomicBool;
        // Set by another thread well past SPIN, so the wait has gone over
        // to yielding by then.
        let flag = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(SPIN * 20);
                flag.store(true, Ordering::Release);
            });
            let t0 = Instant::now();
            wait_until(|| flag.load(Ordering::Acquire));
            assert!(t0.elapsed() >= SPIN * 20);
        });
        // On a one-thread pool only the waiter can run a queued job.
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        let ran = Arc::new(AtomicBool::new(false));
        pool.install(|| {
            let r = ran.clone();
            rayon::spawn(move || r.store(true, Ordering::Release));
            wait_until(|| ran.load(Ordering::Acquire));
        });
    }
}
