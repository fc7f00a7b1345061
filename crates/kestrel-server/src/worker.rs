//! The engine thread and its queue. The model loads on this thread while the
//! HTTP side already answers (`/health` says 503 until it is ready); then the
//! thread runs a continuous batch ([`kestrel_engine::Batch`]): between steps
//! it takes queued jobs into free slots and cancels sequences whose client
//! has gone (the event receiver was dropped), then runs one batched step for
//! every running sequence. Jobs wait in a bounded queue while every slot is
//! busy; one whose client leaves gives up its place at the next step. A
//! job's tokens go back over a channel. The batch steps on the CPU
//! backend or, with `--device gpu`, on the GPU one (the model is uploaded
//! here, before the server says it is ready).

use std::collections::{HashMap, VecDeque};
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex, RwLock};

use kestrel_engine::{
    AdmitError, BackendOptions, Batch, Device, Engine, GenerateParams, Generation, SlotInfo,
    TokenLogprobs, PROMPT_CHUNK,
};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

use crate::error::ApiError;
use crate::ServeConfig;

/// What the generation thread reports for a job.
pub enum Event {
    /// Text that became final (possibly empty), its token (`None` for the
    /// last flush) and the token's logprobs when asked for.
    Token {
        token: Option<u32>,
        text: String,
        logprobs: Option<TokenLogprobs>,
    },
    /// The end: the whole generation, or why it failed.
    Done(Result<Generation, String>),
}

pub struct Job {
    pub prompt: Vec<u32>,
    pub params: GenerateParams,
    /// Reuse the longest cached prefix of a free slot.
    pub cache_prompt: bool,
    pub events: UnboundedSender<Event>,
}

/// The model once loaded, with facts the endpoints report.
pub struct Loaded {
    pub engine: Engine,
    /// The context of one slot: what one request can use.
    pub n_ctx: usize,
    /// All slots together.
    pub n_ctx_total: usize,
}

pub enum LoadState {
    Loading,
    Ready(Arc<Loaded>),
    Failed(String),
}

/// Counters for `/metrics` (llama-server's names) and `/slots`.
#[derive(Default)]
pub struct Metrics {
    pub prompt_tokens: AtomicU64,
    pub prompt_us: AtomicU64,
    pub predicted_tokens: AtomicU64,
    pub predicted_us: AtomicU64,
    pub requests: AtomicU64,
    /// Jobs in the queue, not yet started: the queue's bound counts these
    /// (places are taken in `submit`, given back when the engine thread
    /// starts or drops a job).
    pub deferred: AtomicUsize,
    /// Sequences running in the batch.
    pub processing: AtomicUsize,
    /// Tokens held in the slots' KV caches.
    pub kv_tokens: AtomicUsize,
    /// Prompt tokens reused from a slot's cache instead of computed.
    pub prompt_cached: AtomicU64,
    /// Batched forward passes, and the running sequences summed over them
    /// (llama-server's `n_decode_total` and `n_busy_slots_per_decode`).
    pub decodes: AtomicU64,
    pub busy_slot_decodes: AtomicU64,
    /// The longest sequence seen in a slot (prompt and generated).
    pub tokens_max: AtomicU64,
}

/// State shared by the HTTP handlers and the engine thread.
pub struct Shared {
    pub config: ServeConfig,
    pub state: RwLock<LoadState>,
    pub queue: Sender<Job>,
    pub shutdown: AtomicBool,
    pub metrics: Metrics,
    /// The slots as of the last step, for `/slots`.
    pub slots: Mutex<Vec<SlotInfo>>,
    /// Turns for preparing large requests.
    pub prepare: crate::prepare::Preparation,
}

impl Shared {
    /// The loaded model, or the 503 that says why there is none.
    pub fn loaded(&self) -> Result<Arc<Loaded>, ApiError> {
        match &*self.state.read().unwrap_or_else(|e| e.into_inner()) {
            LoadState::Ready(l) => Ok(l.clone()),
            LoadState::Loading => Err(ApiError::unavailable("Loading model")),
            LoadState::Failed(e) => Err(ApiError::unavailable(format!(
                "the model failed to load: {e}"
            ))),
        }
    }

    /// Queues a generation; a full queue is a 503.
    pub fn submit(
        &self,
        prompt: Vec<u32>,
        params: GenerateParams,
        cache_prompt: bool,
    ) -> Result<UnboundedReceiver<Event>, ApiError> {
        if self.shutdown.load(Ordering::SeqCst) {
            return Err(ApiError::unavailable("the server is shutting down"));
        }
        // A place in the queue first: the channel itself is unbounded, so
        // that the engine thread can take out the jobs whose client left
        // (a bounded channel held their places until a slot came free).
        let waiting = self.metrics.deferred.fetch_add(1, Ordering::SeqCst);
        if waiting >= self.config.queue {
            self.metrics.deferred.fetch_sub(1, Ordering::SeqCst);
            return Err(ApiError::unavailable(format!(
                "the server is busy: {} requests are already waiting",
                self.config.queue
            )));
        }
        let (events, rx) = unbounded_channel();
        let sent = self.queue.send(Job {
            prompt,
            params,
            cache_prompt,
            events,
        });
        if sent.is_err() {
            self.metrics.deferred.fetch_sub(1, Ordering::SeqCst);
            return Err(ApiError::unavailable("the generation thread has stopped"));
        }
        Ok(rx)
    }
}

/// The engine thread: loads the model (reporting the outcome on `loaded`),
/// then serves jobs until the queue closes.
pub fn run(
    shared: Arc<Shared>,
    jobs: Receiver<Job>,
    model: PathBuf,
    loaded: tokio::sync::oneshot::Sender<Result<(), String>>,
) {
    let cfg = &shared.config;
    let engine = match Engine::load_backed(&model, cfg.threads, cfg.backing) {
        Ok(e) => e,
        Err(e) => return load_failed(&shared, loaded, e.to_string()),
    };
    let slots = cfg.parallel.max(1);
    let swa_full = cfg.swa_full;
    let train = engine.model.spec.hparams.n_ctx_train;
    let (n_ctx, n_ctx_total) = match kestrel_engine::context_size(cfg.n_ctx, Some(train), slots) {
        Ok(c) => (c.per_slot, c.total),
        Err(e) => return load_failed(&shared, loaded, e.to_string()),
    };
    let l = Arc::new(Loaded {
        engine,
        n_ctx,
        n_ctx_total,
    });
    let engine = &l.engine;
    let opts = BackendOptions {
        device: if cfg.gpu { Device::Gpu } else { Device::Cpu },
        n_ctx,
        swa_full,
    };
    let new_batch = || engine.batch(opts, slots, PROMPT_CHUNK);
    // The first batch before the model is announced: a GPU upload that
    // fails is a model that failed to load.
    let batch = match new_batch() {
        Ok(b) => b,
        Err(e) => return load_failed(&shared, loaded, e.to_string()),
    };
    if cfg.gpu {
        eprintln!("device: {}", batch.device().name);
    }
    *shared.state.write().unwrap_or_else(|e| e.into_inner()) = LoadState::Ready(l.clone());
    eprintln!("model loaded: {slots} slots of {n_ctx} tokens; ready");
    let _ = loaded.send(Ok(()));
    serve_jobs(&shared, &jobs, batch, &new_batch);
}

/// Reports a model that could not be loaded (to `/health` and to `serve`).
fn load_failed(
    shared: &Shared,
    loaded: tokio::sync::oneshot::Sender<Result<(), String>>,
    msg: String,
) {
    *shared.state.write().unwrap_or_else(|e| e.into_inner()) = LoadState::Failed(msg.clone());
    let _ = loaded.send(Err(msg));
}

/// The batching loop (see the module documentation).
fn serve_jobs<'e>(
    shared: &Arc<Shared>,
    jobs: &Receiver<Job>,
    mut batch: Batch<'e>,
    new_batch: &dyn Fn() -> Result<Batch<'e>, kestrel_engine::EngineError>,
) {
    let m = &shared.metrics;
    let mut running: HashMap<u64, UnboundedSender<Event>> = HashMap::new();
    let mut waiting: VecDeque<Job> = VecDeque::new();
    let mut next_id = 0u64;
    loop {
        let stopping = shared.shutdown.load(Ordering::SeqCst);
        // A client that left (or a shutdown) ends its sequence here, between
        // steps, which frees the slot for the next job.
        for id in batch.ids() {
            let gone = running.get(&id).is_none_or(|tx| tx.is_closed());
            if gone || stopping {
                let g = batch.cancel(id);
                if let (Some(tx), Some(g)) = (running.remove(&id), g) {
                    log(&g);
                    record(m, &g);
                    let _ = tx.send(Event::Done(Ok(g)));
                }
            }
        }
        // The jobs queued since the last step join the waiting line; those
        // whose client left while waiting (all, at a shutdown) leave it,
        // and with them their places in the queue; dropping a job's sender
        // tells a handler that still waits.
        while let Ok(job) = jobs.try_recv() {
            waiting.push_back(job);
        }
        let before = waiting.len();
        waiting.retain(|job| !stopping && !job.events.is_closed());
        m.deferred
            .fetch_sub(before - waiting.len(), Ordering::SeqCst);
        // Waiting jobs into free slots; with nothing running, wait for one.
        while batch.has_free_slot() {
            let job = match waiting.pop_front() {
                Some(job) => job,
                None if batch.is_idle() => {
                    // `/slots` and `/metrics` show the slots freed above
                    // before the loop sleeps: they read what was last
                    // published.
                    publish(shared, &batch);
                    match jobs.recv() {
                        Ok(j) => j,
                        Err(_) => return,
                    }
                }
                None => break,
            };
            m.deferred.fetch_sub(1, Ordering::SeqCst);
            // (A job that came in while the loop slept, from a client that
            // left or at a shutdown, is skipped here.)
            if shared.shutdown.load(Ordering::SeqCst) || job.events.is_closed() {
                continue;
            }
            let id = next_id;
            next_id += 1;
            let (events, sd) = (job.events.clone(), shared.clone());
            let sink = Box::new(move |ev: &kestrel_engine::TokenEvent<'_>| {
                let sent = events.send(Event::Token {
                    token: ev.token,
                    text: ev.text.to_owned(),
                    logprobs: ev.logprobs.cloned(),
                });
                sent.is_ok() && !sd.shutdown.load(Ordering::SeqCst)
            });
            match batch.admit(id, job.prompt, &job.params, job.cache_prompt, sink) {
                Ok(_) => {
                    running.insert(id, job.events);
                }
                Err(AdmitError::Invalid(e)) => {
                    let _ = job.events.send(Event::Done(Err(e.to_string())));
                }
                Err(AdmitError::Busy) => {
                    let _ = job
                        .events
                        .send(Event::Done(Err("internal error: no free slot".into())));
                }
            }
        }
        publish(shared, &batch);
        if batch.is_idle() {
            continue;
        }
        let busy = batch.running() as u64;
        match std::panic::catch_unwind(AssertUnwindSafe(|| batch.step())) {
            Ok(finished) => {
                m.decodes.fetch_add(1, Ordering::Relaxed);
                m.busy_slot_decodes.fetch_add(busy, Ordering::Relaxed);
                // The finished sequences' slots read idle before their
                // answers go out: a client that asks `/slots` or `/metrics`
                // on receiving its answer sees it done, as llama-server
                // shows it.
                publish(shared, &batch);
                for (id, result) in finished {
                    let Some(tx) = running.remove(&id) else {
                        continue;
                    };
                    let result = match result {
                        Ok(g) => {
                            log(&g);
                            record(m, &g);
                            Ok(g)
                        }
                        Err(e) => {
                            eprintln!("request failed: {e}");
                            Err(e.to_string())
                        }
                    };
                    let _ = tx.send(Event::Done(result));
                }
            }
            // A bug, not a client's fault: the running requests fail, the
            // server goes on with fresh slots (the panic message is already
            // on stderr).
            Err(_) => {
                for (_, tx) in running.drain() {
                    let _ = tx.send(Event::Done(Err(
                        "internal error: generation panicked".to_owned()
                    )));
                }
                match new_batch() {
                    Ok(b) => batch = b,
                    Err(e) => {
                        eprintln!("error: the batch could not be set up again: {e}");
                        return;
                    }
                }
                publish(shared, &batch);
            }
        }
    }
}

/// Copies the batch's state where `/slots` and `/metrics` read it.
fn publish(shared: &Shared, batch: &Batch<'_>) {
    let info = batch.slot_info();
    let m = &shared.metrics;
    m.processing.store(batch.running(), Ordering::SeqCst);
    m.kv_tokens
        .store(info.iter().map(|s| s.n_past).sum(), Ordering::SeqCst);
    let longest = info.iter().map(|s| s.n_past).max().unwrap_or(0);
    m.tokens_max.fetch_max(longest as u64, Ordering::Relaxed);
    *shared.slots.lock().unwrap_or_else(|e| e.into_inner()) = info;
}

fn log(g: &Generation) {
    let s = &g.stats;
    eprintln!(
        "request: prompt {} tokens ({} cached), {:.1} t/s | generated {} tokens, {:.1} t/s | stop: {:?}",
        s.prompt_tokens,
        s.cache_n,
        s.prompt_tps(),
        s.generated_tokens,
        s.generate_tps(),
        s.stop
    );
}

fn record(m: &Metrics, g: &Generation) {
    let s = &g.stats;
    m.requests.fetch_add(1, Ordering::Relaxed);
    m.prompt_tokens
        .fetch_add(s.prompt_n as u64, Ordering::Relaxed);
    m.prompt_cached
        .fetch_add(s.cache_n as u64, Ordering::Relaxed);
    m.prompt_us
        .fetch_add((s.prompt_ms * 1000.0) as u64, Ordering::Relaxed);
    m.predicted_tokens
        .fetch_add(crate::api::predicted(s) as u64, Ordering::Relaxed);
    m.predicted_us
        .fetch_add((s.generate_ms * 1000.0) as u64, Ordering::Relaxed);
}
