//! The CPU backend: the model's passes on its thread pool, led by one
//! worker thread that owns every sequence's cache, history and sampler.
//! [`Backend::submit`] hands a step to that thread and returns, so the
//! host emits step N while step N+1 computes, as the GPU's submissions
//! do; tokens are chosen inside the pass's hand-off to the pool, a
//! sequence per worker (see `CpuModel::forward_batch_map`).
//!
//! While steps keep coming the worker stays inside `CpuModel::install`,
//! so each pass starts on a pool thread without waking one; once idle for
//! [`STAY_ON_POOL`] it leaves the pool and waits outside it, where it
//! holds no worker that another backend of the same model needs (a
//! worker blocked inside the pool would stall every pass of the model).
//!
//! A held feed's selection comes through a channel of its own: the pool
//! thread that chooses its token waits there, after the pass, while the
//! host computes the mask (the host reads the step before first, so it
//! never waits on a step that waits on it).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, sync_channel, Receiver, Sender, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use kestrel_cpu::attention::TILED_MIN_QUERIES;
use kestrel_cpu::{CpuModel, KvCache, Logits, SeqInput, N_UBATCH};
use kestrel_sampling::mask::mask_logits;
use kestrel_sampling::{Sampler, SamplerParams};

use super::{
    nothing_held, Backend, DeviceFacts, Feed, Output, Profile, ProfileEntry, Selection, SeqId, Want,
};
use crate::EngineError;

/// What the worker is told, in order.
enum Command {
    Create,
    Free(SeqId),
    Start {
        seq: SeqId,
        tokens: Vec<u32>,
        sampler: SamplerParams,
    },
    Truncate {
        seq: SeqId,
        n: usize,
    },
    /// The feeds, and for each held one the channel its selection comes
    /// through.
    Step(Vec<Feed>, Vec<Option<Receiver<Selection>>>),
}

/// Time spent choosing tokens while profiling: (time, calls).
#[derive(Default)]
struct SamplingClock {
    on: AtomicBool,
    spent: Mutex<(Duration, u64)>,
}

impl SamplingClock {
    fn lock(&self) -> std::sync::MutexGuard<'_, (Duration, u64)> {
        self.spent.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A sequence as the worker holds it.
struct SeqState {
    cache: KvCache,
    history: Vec<u32>,
    sampler: Sampler,
}

/// What the host knows of a sequence without asking the worker.
#[derive(Default)]
struct Mirror {
    /// Tokens of the history the worker will know once the steps
    /// submitted so far have run.
    known: usize,
    /// Per position written to the cache: whether its pass took the tiled
    /// attention path (a reused prefix must keep each position's path).
    tiled: Vec<bool>,
}

pub struct CpuBackend {
    model: Arc<CpuModel>,
    facts: DeviceFacts,
    /// The window ring's size (0: none) and the model's window.
    swa_ring: usize,
    window: usize,
    seqs: Vec<Option<Mirror>>,
    /// Token selection's time, which the model's own probes do not see.
    sampling: Arc<SamplingClock>,
    commands: Option<Sender<Command>>,
    results: Receiver<Vec<Output>>,
    worker: Option<JoinHandle<()>>,
    /// Steps submitted and not read yet.
    pending: usize,
    /// The latest step's held feeds still waiting for their selection.
    held: Vec<(SeqId, SyncSender<Selection>)>,
}

impl CpuBackend {
    /// A backend whose sequences hold `n_ctx` tokens each.
    pub fn new(model: Arc<CpuModel>, n_ctx: usize, swa_full: bool) -> Result<Self, EngineError> {
        let (commands, worker_commands) = channel::<Command>();
        let (worker_results, results) = channel();
        let m = model.clone();
        let sampling = Arc::new(SamplingClock::default());
        let clock = sampling.clone();
        let worker = std::thread::Builder::new()
            .name("kestrel-cpu".into())
            .spawn(move || serve(&m, n_ctx, swa_full, &clock, worker_commands, worker_results))
            .map_err(|_| EngineError::DecodeWorker)?;
        let swa_ring = if swa_full {
            0
        } else {
            kestrel_cpu::swa_ring(&model.spec.hparams, n_ctx)
        };
        Ok(CpuBackend {
            facts: DeviceFacts {
                name: "CPU".into(),
                api: "CPU".into(),
                n_ctx,
                timed: true,
                pass_rows: N_UBATCH,
            },
            window: model.spec.hparams.sliding_window,
            model,
            swa_ring,
            seqs: Vec::new(),
            sampling,
            commands: Some(commands),
            results,
            worker: Some(worker),
            pending: 0,
            held: Vec::new(),
        })
    }

    fn send(&mut self, c: Command) -> Result<(), EngineError> {
        let sent = self.commands.as_ref().map(|tx| tx.send(c));
        match sent {
            Some(Ok(())) => Ok(()),
            _ => Err(self.worker_died()),
        }
    }

    /// The worker stopped: a panic there is raised again here (the server
    /// catches it and starts afresh); otherwise an error.
    fn worker_died(&mut self) -> EngineError {
        self.commands = None;
        if let Some(w) = self.worker.take() {
            if let Err(panic) = w.join() {
                std::panic::resume_unwind(panic);
            }
        }
        EngineError::DecodeWorker
    }

    fn mirror(&mut self, seq: SeqId) -> Result<&mut Mirror, EngineError> {
        self.seqs
            .get_mut(seq)
            .and_then(Option::as_mut)
            .ok_or_else(|| EngineError::Backend(format!("no sequence {seq}")))
    }
}

impl Drop for CpuBackend {
    fn drop(&mut self) {
        // Closing the channel ends the worker once its queue is done; a
        // held feed still waiting is chosen freely, not waited on forever.
        self.held.clear();
        self.commands = None;
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
    }
}

impl Backend for CpuBackend {
    fn facts(&self) -> &DeviceFacts {
        &self.facts
    }

    fn create_seq(&mut self) -> Result<SeqId, EngineError> {
        self.send(Command::Create)?;
        self.seqs.push(Some(Mirror::default()));
        Ok(self.seqs.len() - 1)
    }

    fn free_seq(&mut self, seq: SeqId) {
        if let Some(m) = self.seqs.get_mut(seq) {
            *m = None;
            let _ = self.send(Command::Free(seq));
        }
    }

    fn start(
        &mut self,
        seq: SeqId,
        tokens: &[u32],
        keep: usize,
        sampler: &SamplerParams,
    ) -> Result<(), EngineError> {
        let n_ctx = self.facts.n_ctx;
        let m = self.mirror(seq)?;
        if keep > m.tiled.len() || keep > tokens.len() || tokens.len() > n_ctx + 1 {
            return Err(EngineError::Backend(format!(
                "sequence {seq}: {} tokens keeping {keep} of {} cached (context {n_ctx})",
                tokens.len(),
                m.tiled.len()
            )));
        }
        m.known = tokens.len();
        // Positions past `keep` are written again before they are read.
        m.tiled.truncate(keep);
        self.send(Command::Start {
            seq,
            tokens: tokens.to_vec(),
            sampler: sampler.clone(),
        })
    }

    fn reusable_prefix(&self, seq: SeqId, common: usize, prompt_len: usize, chunk: usize) -> usize {
        let Some(Some(m)) = self.seqs.get(seq) else {
            return 0;
        };
        // The reused positions' keys and values must be those a fresh run
        // computes: each was computed on its chunk's attention path then,
        // which must be the one this prompt's chunks give it (a 260-token
        // prompt's first tokens were tiled; a 31-token prompt's are not).
        let fresh_tiled = |t: usize| {
            let start = t / chunk * chunk;
            (start + chunk).min(prompt_len) - start >= TILED_MIN_QUERIES
        };
        let same_path = m
            .tiled
            .iter()
            .take(common)
            .enumerate()
            .take_while(|&(t, &tiled)| tiled == fresh_tiled(t))
            .count();
        let n = reusable_prefix(common.min(same_path), prompt_len, chunk);
        // A window ring keeps the last positions only: the window before
        // the reused prefix's end must still be there.
        let from = n.saturating_sub(self.window);
        let kept = self.swa_ring == 0 || from >= n || m.tiled.len() <= from + self.swa_ring;
        if kept {
            n
        } else {
            0
        }
    }

    fn truncate(&mut self, seq: SeqId, n: usize) -> Result<(), EngineError> {
        let m = self.mirror(seq)?;
        m.known = m.known.min(n);
        m.tiled.truncate(n);
        self.send(Command::Truncate { seq, n })
    }

    fn submit(&mut self, feeds: &[Feed]) -> Result<(), EngineError> {
        let n_ctx = self.facts.n_ctx;
        for (i, f) in feeds.iter().enumerate() {
            if feeds[..i].iter().any(|g| g.seq == f.seq) {
                return Err(EngineError::Backend(format!(
                    "sequence {} fed twice in one step",
                    f.seq
                )));
            }
            let m = self.mirror(f.seq)?;
            if f.from >= f.to || f.to > m.known || f.to > n_ctx || f.from > m.tiled.len() {
                return Err(EngineError::Backend(format!(
                    "sequence {}: positions {}..{} with {} tokens known, {} cached (context {n_ctx})",
                    f.seq,
                    f.from,
                    f.to,
                    m.known,
                    m.tiled.len()
                )));
            }
            // The path `attend` takes: by the rows of each micro-batch.
            m.tiled.truncate(f.from);
            let mut at = f.from;
            while at < f.to {
                let end = (at + N_UBATCH).min(f.to);
                m.tiled.resize(end, end - at >= TILED_MIN_QUERIES);
                at = end;
            }
            if matches!(f.want, Want::Next { .. }) {
                m.known = m.known.max(f.to + 1);
            }
        }
        // A selection never given is free (its sender is dropped here).
        self.held.clear();
        let mut receivers = Vec::with_capacity(feeds.len());
        for f in feeds {
            receivers.push(if f.want.is_held() {
                let (tx, rx) = sync_channel(1);
                self.held.push((f.seq, tx));
                Some(rx)
            } else {
                None
            });
        }
        self.send(Command::Step(feeds.to_vec(), receivers))?;
        self.pending += 1;
        Ok(())
    }

    fn select(&mut self, seq: SeqId, choice: Selection) -> Result<(), EngineError> {
        let i = self
            .held
            .iter()
            .position(|(s, _)| *s == seq)
            .ok_or_else(|| nothing_held(seq))?;
        let (_, tx) = self.held.swap_remove(i);
        // The worker is gone only with the backend broken: `read` says so.
        let _ = tx.send(choice);
        Ok(())
    }

    fn read(&mut self) -> Result<Option<Vec<Output>>, EngineError> {
        if self.pending == 0 {
            return Ok(None);
        }
        if self.pending == 1 {
            // The step read is the latest: its unselected feeds go free.
            self.held.clear();
        }
        match self.results.recv() {
            Ok(out) => {
                self.pending -= 1;
                Ok(Some(out))
            }
            Err(_) => Err(self.worker_died()),
        }
    }

    fn set_profiling(&mut self, on: bool) -> Result<(), EngineError> {
        self.model.set_profiling(on);
        self.sampling.on.store(on, Ordering::Relaxed);
        Ok(())
    }

    fn take_profile(&mut self) -> Result<Profile, EngineError> {
        let mut p = self.model.take_profile();
        let (time, calls) = std::mem::take(&mut *self.sampling.lock());
        if calls > 0 {
            p.entries.push(ProfileEntry {
                class: "sampling".into(),
                time,
                bytes: 0,
                calls,
            });
        }
        Ok(p)
    }
}

/// How long the worker waits on the pool for the next command before it
/// leaves: longer than the host's work between two steps (a pipelined
/// decode submits step N+1 before step N ends, so it rarely waits at all).
const STAY_ON_POOL: Duration = Duration::from_millis(2);

/// The worker's loop: commands in order until the backend is dropped; on
/// the pool while they keep coming, off it while idle.
fn serve(
    model: &CpuModel,
    n_ctx: usize,
    swa_full: bool,
    clock: &SamplingClock,
    commands: Receiver<Command>,
    results: Sender<Vec<Output>>,
) {
    let mut seqs: Vec<Option<SeqState>> = Vec::new();
    let mut commands = commands;
    while let Ok(first) = commands.recv() {
        // (The receiver goes to the pool thread and comes back.)
        let (back, go_on) = model.install(|| {
            let mut next = Some(first);
            while let Some(c) = next.take() {
                if !handle(model, (n_ctx, swa_full), clock, &mut seqs, c, &results) {
                    return (commands, false);
                }
                next = commands.recv_timeout(STAY_ON_POOL).ok();
            }
            (commands, true)
        });
        commands = back;
        if !go_on {
            break;
        }
    }
}

/// Carries out one command; `false` when the backend is gone.
fn handle(
    model: &CpuModel,
    (n_ctx, swa_full): (usize, bool),
    clock: &SamplingClock,
    seqs: &mut Vec<Option<SeqState>>,
    c: Command,
    results: &Sender<Vec<Output>>,
) -> bool {
    {
        match c {
            Command::Create => {
                let mut cache = model.new_cache(n_ctx);
                if swa_full {
                    cache.full_swa();
                }
                seqs.push(Some(SeqState {
                    cache,
                    history: Vec::new(),
                    sampler: Sampler::new(SamplerParams::default()),
                }));
            }
            Command::Free(seq) => seqs[seq] = None,
            Command::Start {
                seq,
                tokens,
                sampler,
            } => {
                if let Some(s) = seqs[seq].as_mut() {
                    s.history = tokens;
                    s.sampler = Sampler::new(sampler);
                }
            }
            Command::Truncate { seq, n } => {
                if let Some(s) = seqs[seq].as_mut() {
                    s.history.truncate(n);
                }
            }
            Command::Step(feeds, held) => {
                let out = step(model, clock, seqs, &feeds, held);
                // The receiver is gone when the backend was dropped with
                // this step in flight: nobody wants its outputs.
                if results.send(out).is_err() {
                    return false;
                }
            }
        }
    }
    true
}

/// Which logits a feed's pass returns.
fn logits_of(want: Want) -> Logits {
    match want {
        Want::Logits { .. } => Logits::All,
        Want::Cache | Want::Next { .. } => Logits::Last,
    }
}

/// One step on the worker (the host checked every feed in `submit`).
fn step(
    model: &CpuModel,
    clock: &SamplingClock,
    seqs: &mut [Option<SeqState>],
    feeds: &[Feed],
    held: Vec<Option<Receiver<Selection>>>,
) -> Vec<Output> {
    let n_vocab = model.spec.hparams.n_vocab;
    // A feed longer than a micro-batch goes alone through `forward`,
    // which cuts it as llama.cpp's `llama_decode` cuts a batch.
    if feeds.iter().any(|f| f.to - f.from > N_UBATCH) {
        return feeds
            .iter()
            .zip(held)
            .map(|(f, held)| {
                let s = seqs[f.seq].as_mut().expect("a live sequence");
                let tokens = &s.history[f.from..f.to];
                let logits = model.forward(tokens, f.from, &mut s.cache, logits_of(f.want));
                let out = answer(
                    f.want,
                    n_vocab,
                    clock,
                    (&mut s.sampler, held),
                    &s.history[..f.to],
                    &logits,
                );
                s.history.extend(out.token);
                out
            })
            .collect();
    }
    // Each feed's sequence, in feed order (each at most once).
    let mut live: Vec<&mut SeqState> = Vec::with_capacity(feeds.len());
    {
        let mut by_id: Vec<Option<&mut SeqState>> = seqs.iter_mut().map(|s| s.as_mut()).collect();
        for f in feeds {
            live.push(by_id[f.seq].take().expect("a live sequence fed once"));
        }
    }
    let mut inputs: Vec<SeqInput<'_>> = Vec::with_capacity(feeds.len());
    type Draw<'a> = (&'a mut Sampler, Option<Receiver<Selection>>, &'a [u32]);
    let mut draws: Vec<Mutex<Draw<'_>>> = Vec::with_capacity(feeds.len());
    for ((s, f), held) in live.iter_mut().zip(feeds).zip(held) {
        let SeqState {
            cache,
            history,
            sampler,
        } = &mut **s;
        let history: &[u32] = history;
        inputs.push(SeqInput {
            tokens: &history[f.from..f.to],
            pos0: f.from,
            cache,
            logits: logits_of(f.want),
        });
        draws.push(Mutex::new((sampler, held, &history[..f.to])));
    }
    let outs = model.forward_batch_map(&mut inputs, |i, logits| {
        let mut d = draws[i].lock().unwrap_or_else(|e| e.into_inner());
        let (sampler, held, history) = &mut *d;
        answer(
            feeds[i].want,
            n_vocab,
            clock,
            (sampler, held.take()),
            history,
            logits,
        )
    });
    drop(inputs);
    drop(draws);
    for (s, out) in live.iter_mut().zip(&outs) {
        s.history.extend(out.token);
    }
    outs
}

/// A feed's output from its pass's logits.
fn answer(
    want: Want,
    n_vocab: usize,
    clock: &SamplingClock,
    (sampler, held): (&mut Sampler, Option<Receiver<Selection>>),
    history: &[u32],
    logits: &[f32],
) -> Output {
    match want {
        Want::Cache => Output::default(),
        Want::Next { logits: keep, .. } => {
            // A dropped sender: the host gave no selection (free).
            let choice = held.map_or(Selection::Free, |rx| rx.recv().unwrap_or(Selection::Free));
            let t0 = clock.on.load(Ordering::Relaxed).then(Instant::now);
            let token = match choice {
                Selection::Free => sampler.sample_with_history(logits, history),
                Selection::Allowed(words) => {
                    let mut row = logits.to_vec();
                    mask_logits(&mut row, &words);
                    sampler.sample_with_history(&row, history)
                }
                Selection::Forced(token) => token,
            };
            if let Some(t0) = t0 {
                let mut c = clock.lock();
                c.0 += t0.elapsed();
                c.1 += 1;
            }
            Output {
                token: Some(token),
                logits: keep.then(|| logits.to_vec()),
            }
        }
        Want::Logits { skip } => Output {
            token: None,
            logits: Some(logits[(skip * n_vocab).min(logits.len())..].to_vec()),
        },
    }
}

/// How much of a `common` shared prefix a `prompt_len` prompt reuses: at
/// least its last token is fed again (its logits are needed), and the first
/// chunk fed must take the attention path its tokens take in an unshared
/// run (chunks at multiples of `chunk`): one of at least
/// `TILED_MIN_QUERIES` tokens stays at least that long.
pub(crate) fn reusable_prefix(common: usize, prompt_len: usize, chunk: usize) -> usize {
    let p = common.min(prompt_len.saturating_sub(1));
    let start = p / chunk * chunk;
    let end = (start + chunk).min(prompt_len);
    if end - start >= TILED_MIN_QUERIES && end - p < TILED_MIN_QUERIES {
        end - TILED_MIN_QUERIES
    } else {
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The end of the chunk that starts at `from`.
    fn chunk_end(from: usize, len: usize, chunk: usize) -> usize {
        ((from / chunk + 1) * chunk).min(len)
    }

    #[test]
    fn reuse_keeps_the_attention_path_of_every_prompt_token() {
        let chunk = 256;
        for prompt_len in 1..700usize {
            for common in 0..=prompt_len {
                let p = reusable_prefix(common, prompt_len, chunk);
                assert!(p < prompt_len && p <= common, "{common}/{prompt_len}: {p}");
                // Each token fed takes the path of its chunk in a fresh run.
                let fresh_tiled = |t: usize| {
                    let start = t / chunk * chunk;
                    (start + chunk).min(prompt_len) - start >= TILED_MIN_QUERIES
                };
                let mut from = p;
                while from < prompt_len {
                    let to = chunk_end(from, prompt_len, chunk);
                    let tiled = to - from >= TILED_MIN_QUERIES;
                    for t in from..to {
                        assert_eq!(tiled, fresh_tiled(t), "{common}/{prompt_len}: token {t}");
                    }
                    from = to;
                }
            }
        }
        // The shortening costs at most TILED_MIN_QUERIES tokens.
        assert_eq!(reusable_prefix(250, 600, 256), 192);
        assert_eq!(reusable_prefix(100, 150, 256), 86);
        assert_eq!(reusable_prefix(599, 600, 256), 536);
        // A short last chunk is one-query attention either way.
        assert_eq!(reusable_prefix(530, 560, 256), 530);
    }
}
