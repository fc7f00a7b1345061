//! The engine thread and its queue. The model loads on this thread while the
//! HTTP side already answers (`/health` says 503 until it is ready); then the
//! thread takes jobs from a bounded queue and runs them one at a time: there
//! is no batched multi-sequence decode yet, so requests wait their turn. A
//! job's tokens go back over a channel; when the client has gone (the
//! receiver is dropped) or the server shuts down, the callback returns false
//! and the generation stops.

use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::{Arc, RwLock};

use kestrel_engine::{Engine, GenerateParams, Generation, TokenLogprobs};
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
    pub events: UnboundedSender<Event>,
}

/// The model once loaded, with facts the endpoints report.
pub struct Loaded {
    pub engine: Engine,
    pub n_ctx: usize,
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
    /// Jobs in the queue, not yet started.
    pub deferred: AtomicUsize,
    pub processing: AtomicBool,
}

/// State shared by the HTTP handlers and the engine thread.
pub struct Shared {
    pub config: ServeConfig,
    pub state: RwLock<LoadState>,
    pub queue: SyncSender<Job>,
    pub shutdown: AtomicBool,
    pub metrics: Metrics,
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
    ) -> Result<UnboundedReceiver<Event>, ApiError> {
        if self.shutdown.load(Ordering::SeqCst) {
            return Err(ApiError::unavailable("the server is shutting down"));
        }
        let (events, rx) = unbounded_channel();
        self.metrics.deferred.fetch_add(1, Ordering::SeqCst);
        let sent = self.queue.try_send(Job {
            prompt,
            params,
            events,
        });
        if let Err(e) = sent {
            self.metrics.deferred.fetch_sub(1, Ordering::SeqCst);
            return Err(match e {
                TrySendError::Full(_) => ApiError::unavailable(format!(
                    "the server is busy: {} requests are already waiting",
                    self.config.queue
                )),
                TrySendError::Disconnected(_) => {
                    ApiError::unavailable("the generation thread has stopped")
                }
            });
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
        Err(e) => {
            let msg = e.to_string();
            *shared.state.write().unwrap_or_else(|e| e.into_inner()) =
                LoadState::Failed(msg.clone());
            let _ = loaded.send(Err(msg));
            return;
        }
    };
    let train = engine.model.spec.hparams.n_ctx_train.max(1);
    let n_ctx = cfg.n_ctx.unwrap_or(4096.min(train));
    let l = Arc::new(Loaded { engine, n_ctx });
    *shared.state.write().unwrap_or_else(|e| e.into_inner()) = LoadState::Ready(l.clone());
    eprintln!("model loaded: n_ctx {n_ctx}; ready");
    let _ = loaded.send(Ok(()));

    let m = &shared.metrics;
    for job in jobs {
        m.deferred.fetch_sub(1, Ordering::SeqCst);
        // A client that left while waiting, or a shutdown, skips the job;
        // dropping its sender tells a waiting handler.
        if shared.shutdown.load(Ordering::SeqCst) || job.events.is_closed() {
            continue;
        }
        m.processing.store(true, Ordering::SeqCst);
        let events = &job.events;
        let result = std::panic::catch_unwind(AssertUnwindSafe(|| {
            l.engine.generate(&job.prompt, &job.params, |ev| {
                let sent = events.send(Event::Token {
                    token: ev.token,
                    text: ev.text.to_owned(),
                    logprobs: ev.logprobs.cloned(),
                });
                sent.is_ok() && !shared.shutdown.load(Ordering::SeqCst)
            })
        }));
        let result = match result {
            Ok(Ok(g)) => {
                let s = &g.stats;
                eprintln!(
                    "request: prompt {} tokens, {:.1} t/s | generated {} tokens, {:.1} t/s | stop: {:?}",
                    s.prompt_tokens,
                    s.prompt_tps(),
                    s.generated_tokens,
                    s.generate_tps(),
                    s.stop
                );
                m.requests.fetch_add(1, Ordering::Relaxed);
                m.prompt_tokens
                    .fetch_add(s.prompt_tokens as u64, Ordering::Relaxed);
                m.prompt_us
                    .fetch_add((s.prompt_ms * 1000.0) as u64, Ordering::Relaxed);
                m.predicted_tokens
                    .fetch_add(s.generated_tokens as u64, Ordering::Relaxed);
                m.predicted_us
                    .fetch_add((s.generate_ms * 1000.0) as u64, Ordering::Relaxed);
                Ok(g)
            }
            Ok(Err(e)) => {
                eprintln!("request failed: {e}");
                Err(e.to_string())
            }
            // A bug, not the client's fault: this request fails, the server
            // goes on (the panic message is already on stderr).
            Err(_) => Err("internal error: generation panicked".to_owned()),
        };
        m.processing.store(false, Ordering::SeqCst);
        let _ = job.events.send(Event::Done(result));
    }
}
