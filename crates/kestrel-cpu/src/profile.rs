//! Optional per-op timing of the forward pass (`kestrel profile`): wall time
//! by kernel class, and for matrix products the weight bytes read. Off by
//! default; when off, each probe is one relaxed atomic load.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Accumulated time per class, in first-seen order.
#[derive(Debug, Default, Clone)]
pub struct Profile {
    pub entries: Vec<ProfileEntry>,
}

#[derive(Debug, Clone)]
pub struct ProfileEntry {
    /// "matmul q4_K", "attention", "norm", ...
    pub class: String,
    pub time: Duration,
    /// Weight bytes read (matrix products only).
    pub bytes: u64,
    pub calls: u64,
}

impl Profile {
    pub fn total(&self) -> Duration {
        self.entries.iter().map(|e| e.time).sum()
    }
}

#[derive(Default)]
pub(crate) struct Profiler {
    on: AtomicBool,
    data: Mutex<Profile>,
}

impl Profiler {
    pub(crate) fn set(&self, on: bool) {
        self.on.store(on, Ordering::Relaxed);
    }

    /// A start time, when profiling.
    #[inline]
    pub(crate) fn tick(&self) -> Option<Instant> {
        self.on.load(Ordering::Relaxed).then(Instant::now)
    }

    /// Adds the time since `start` (from [`Profiler::tick`]) to `class`.
    pub(crate) fn tock(&self, start: Option<Instant>, class: &str, bytes: u64) {
        let Some(start) = start else { return };
        let time = start.elapsed();
        let mut d = self.data.lock().unwrap_or_else(|e| e.into_inner());
        match d.entries.iter_mut().find(|e| e.class == class) {
            Some(e) => {
                e.time += time;
                e.bytes += bytes;
                e.calls += 1;
            }
            None => d.entries.push(ProfileEntry {
                class: class.to_string(),
                time,
                bytes,
                calls: 1,
            }),
        }
    }

    pub(crate) fn take(&self) -> Profile {
        std::mem::take(&mut *self.data.lock().unwrap_or_else(|e| e.into_inner()))
    }
}
