//! Machine measurements that put decode speed in context: the memory read
//! bandwidth a plain multi-threaded scan reaches, and the process's peak RSS.

use std::time::Instant;

use anyhow::{anyhow, Result};

/// The result of the bandwidth probe.
#[derive(Clone, Debug)]
pub struct Bandwidth {
    /// Bytes read per run (the whole buffer).
    pub bytes: u64,
    pub threads: usize,
    pub runs: usize,
    /// Best run, in 10^9 bytes per second.
    pub gb_per_s: f64,
}

/// Reads a `bytes`-sized buffer with `threads` threads `runs` times and
/// reports the fastest run.
pub fn read_bandwidth(bytes: u64, threads: usize, runs: usize) -> Result<Bandwidth> {
    Probe::new(bytes, threads)?.best_of(runs)
}

/// The probe's buffer, filled once, for probes taken again and again (the
/// paired rounds of `--bw-paired`).
pub struct Probe {
    chunks: Vec<Vec<u64>>,
}

impl Probe {
    /// Each of `threads` threads allocates and fills its own slice of
    /// `bytes`, so the pages are real (a zeroed allocation would map one
    /// shared zero page and read from cache) and sit near the thread that
    /// reads them.
    pub fn new(bytes: u64, threads: usize) -> Result<Probe> {
        let threads = threads.max(1);
        let words_per_thread = usize::try_from(bytes / 8 / threads as u64)
            .map_err(|_| anyhow!("bandwidth buffer of {bytes} bytes is too large"))?
            .max(1);
        let chunks: Vec<Vec<u64>> = std::thread::scope(|s| {
            let handles = (0..threads)
                .map(|t| {
                    std::thread::Builder::new()
                        .spawn_scoped(s, move || fill_chunk(words_per_thread, t as u64))
                        .map_err(|e| anyhow!("starting a bandwidth thread: {e}"))
                })
                .collect::<Result<Vec<_>>>()?;
            handles
                .into_iter()
                .map(|h| h.join().map_err(|_| anyhow!("a bandwidth thread failed"))?)
                .collect::<Result<Vec<Vec<u64>>>>()
        })?;
        Ok(Probe { chunks })
    }

    /// Reads the whole buffer, one thread a slice, `runs` times; the
    /// fastest run.
    pub fn best_of(&self, runs: usize) -> Result<Bandwidth> {
        let runs = runs.max(1);
        let total: u64 = self.chunks.iter().map(|c| c.len() as u64 * 8).sum();
        let mut best = f64::INFINITY;
        let mut checksum = 0u64;
        for _ in 0..runs {
            let t0 = Instant::now();
            let sums = std::thread::scope(|s| {
                let handles = self
                    .chunks
                    .iter()
                    .map(|c| {
                        std::thread::Builder::new()
                            .spawn_scoped(s, move || sum_words(c))
                            .map_err(|e| anyhow!("starting a bandwidth thread: {e}"))
                    })
                    .collect::<Result<Vec<_>>>()?;
                handles
                    .into_iter()
                    .map(|h| h.join().map_err(|_| anyhow!("a bandwidth thread failed")))
                    .collect::<Result<Vec<u64>>>()
            })?;
            let secs = t0.elapsed().as_secs_f64();
            best = best.min(secs);
            checksum = sums.iter().fold(checksum, |a, &b| a.wrapping_add(b));
        }
        // Keeps the sums observable so the reads cannot be optimized away.
        std::hint::black_box(checksum);
        Ok(Bandwidth {
            bytes: total,
            threads: self.chunks.len(),
            runs,
            gb_per_s: if best > 0.0 {
                total as f64 / best / 1e9
            } else {
                0.0
            },
        })
    }
}

fn fill_chunk(words: usize, seed: u64) -> Result<Vec<u64>> {
    let mut v: Vec<u64> = Vec::new();
    v.try_reserve_exact(words).map_err(|_| {
        anyhow!(
            "cannot allocate {} MiB for the bandwidth probe",
            (words * 8) >> 20
        )
    })?;
    v.extend((0..words as u64).map(|i| i ^ seed.wrapping_mul(0x9e37_79b9_7f4a_7c15)));
    Ok(v)
}

/// Sums with eight independent accumulators so the loop vectorizes and is
/// bound by memory, not by one add chain.
fn sum_words(words: &[u64]) -> u64 {
    let mut acc = [0u64; 8];
    let mut blocks = words.chunks_exact(8);
    for b in &mut blocks {
        for (a, &w) in acc.iter_mut().zip(b) {
            *a = a.wrapping_add(w);
        }
    }
    let tail = blocks
        .remainder()
        .iter()
        .fold(0u64, |a, &w| a.wrapping_add(w));
    acc.iter().fold(tail, |a, &w| a.wrapping_add(w))
}

/// Peak resident set size of this process in bytes (`VmHWM`), where /proc has it.
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_vm_hwm(&status)
}

/// Reads the `VmHWM:  1234 kB` line of a /proc/PID/status text.
pub fn parse_vm_hwm(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let mut parts = line["VmHWM:".len()..].split_whitespace();
    let n: u64 = parts.next()?.parse().ok()?;
    match parts.next() {
        Some("kB") => n.checked_mul(1024),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_every_word() {
        let v: Vec<u64> = (1..=21).collect();
        assert_eq!(sum_words(&v), 21 * 22 / 2);
        assert_eq!(sum_words(&[]), 0);
        assert_eq!(sum_words(&[u64::MAX, 2]), 1);
    }

    #[test]
    fn probe_reports_its_buffer() {
        let bw = read_bandwidth(4 << 20, 2, 2).unwrap();
        assert_eq!(bw.bytes, 4 << 20);
        assert_eq!((bw.threads, bw.runs), (2, 2));
        assert!(bw.gb_per_s > 0.0 && bw.gb_per_s.is_finite());
    }

    #[test]
    fn vm_hwm() {
        let s = "Name:\tkestrel\nVmPeak:\t  999 kB\nVmHWM:\t   20480 kB\nVmRSS:\t 100 kB\n";
        assert_eq!(parse_vm_hwm(s), Some(20480 * 1024));
        assert_eq!(parse_vm_hwm("VmRSS:\t 100 kB\n"), None);
        assert_eq!(parse_vm_hwm("VmHWM:\t x kB\n"), None);
        assert_eq!(parse_vm_hwm("VmHWM:\t 12 MB\n"), None);
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn own_peak_rss_is_plausible() {
        let rss = peak_rss_bytes().unwrap();
        assert!(rss > 100 * 1024, "{rss}");
    }
}
