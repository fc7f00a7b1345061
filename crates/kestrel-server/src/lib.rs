//! `kestrel serve`: an HTTP server with OpenAI's and llama-server's
//! endpoints in front of one engine. This module owns the configuration,
//! the listener (TCP, or a Unix socket for a host ending in `.sock`) and its
//! connections' read timeouts, the routes, API-key checks, the JSON shape
//! of every error (including the router's own 404/405/408/413;
//! [`parse_errors`] gives hyper's own 400/414/431 the same body) and graceful
//! shutdown; `api` owns the
//! endpoints (one file per API dialect) and the reading of request bodies,
//! [`worker`] the engine thread and its queue.
//!
//! Requests run together in a continuous batch of `--parallel` slots; more
//! wait in a bounded queue.

mod api;
pub mod error;
mod memory;
mod parse_errors;
pub mod prepare;
pub mod worker;

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::{Context, Result};
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;

use crate::error::ApiError;
use crate::worker::{LoadState, Metrics, Shared};

/// How `kestrel serve` was started.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    pub model: PathBuf,
    pub host: String,
    pub port: u16,
    /// Context size shared by the slots; `Some(0)` = the model's training
    /// context, `None` = min(4096, the model's training context) a slot.
    pub n_ctx: Option<usize>,
    /// Slots: sequences decoded together, each with its share of the context.
    pub parallel: usize,
    pub threads: usize,
    pub api_key: Option<String>,
    pub metrics: bool,
    pub slots: bool,
    pub alias: Option<String>,
    /// The most tokens a request may generate (negative = no limit).
    pub n_predict: i64,
    /// Requests that may wait for the engine; one more is a 503.
    pub queue: usize,
    pub backing: kestrel_gguf::Backing,
    /// Run the batch on the GPU (token selection on the device).
    pub gpu: bool,
    /// Sliding-window layers over a full-size cache (`--swa-full`).
    pub swa_full: bool,
    /// How long a client may take to send a request's head, or its body
    /// (`--timeout`); an idle kept-alive connection is closed after it too.
    pub timeout: Duration,
    /// Browser origins whose pages may read the answers (`--cors-origins`).
    pub cors: CorsOrigins,
}

/// How long in-flight requests get after SIGINT/SIGTERM before the server exits.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// The largest request body accepted (413 above); `/props` states it.
pub const MAX_BODY: usize = 8 << 20;

/// Runs the server until SIGINT/SIGTERM; fails if the model cannot be loaded
/// or the address cannot be bound.
pub fn serve(config: ServeConfig) -> Result<()> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?
        .block_on(run(config))
}

async fn run(config: ServeConfig) -> Result<()> {
    let (queue, jobs) = std::sync::mpsc::channel();
    let model = config.model.clone();
    let shared = Arc::new(Shared {
        config,
        state: RwLock::new(LoadState::Loading),
        queue,
        shutdown: Default::default(),
        metrics: Metrics::default(),
        slots: Default::default(),
        prepare: Default::default(),
    });
    let app = router(shared.clone());
    let cfg = &shared.config;

    // Bind before loading, so that /health can say "Loading model".
    let unix_path = cfg
        .host
        .ends_with(".sock")
        .then(|| PathBuf::from(&cfg.host));
    let (loaded_tx, loaded_rx) = tokio::sync::oneshot::channel();
    let start_engine = |shared: Arc<Shared>| {
        std::thread::Builder::new()
            .name("kestrel-engine".into())
            .spawn(move || worker::run(shared, jobs, model, loaded_tx))
            .context("starting the engine thread")
    };
    let stop = Arc::new(tokio::sync::Notify::new());
    let shutdown = {
        let (shared, stop) = (shared.clone(), stop.clone());
        async move {
            signal().await;
            eprintln!("shutting down: cancelling generation, closing connections");
            shared.shutdown.store(true, Ordering::SeqCst);
            stop.notify_one();
        }
    };
    let server = async {
        match &unix_path {
            Some(path) => {
                remove_stale_socket(path);
                let listener = tokio::net::UnixListener::bind(path)
                    .with_context(|| format!("binding the Unix socket {}", path.display()))?;
                eprintln!("listening on unix:{}", path.display());
                start_engine(shared.clone())?;
                serve_on(listener, app, cfg.timeout, shutdown).await;
                Ok(())
            }
            None => {
                let addr = (cfg.host.as_str(), cfg.port);
                let listener = tokio::net::TcpListener::bind(addr)
                    .await
                    .with_context(|| format!("binding {}:{}", cfg.host, cfg.port))?;
                eprintln!("listening on http://{}", listener.local_addr()?);
                start_engine(shared.clone())?;
                serve_on(listener, app, cfg.timeout, shutdown).await;
                Ok(())
            }
        }
    };
    let result = tokio::select! {
        r = server => r,
        Ok(Err(e)) = loaded_rx => Err(anyhow::anyhow!("{e}")),
        _ = async { stop.notified().await; tokio::time::sleep(SHUTDOWN_GRACE).await } => {
            eprintln!("shutdown: connections still open after {SHUTDOWN_GRACE:?}; exiting");
            Ok(())
        }
    };
    if let Some(path) = unix_path {
        let _ = std::fs::remove_file(path);
    }
    result
}

/// Serves `app` on `listener` until `shutdown` resolves, then asks each
/// open connection to close after its current request and returns when all
/// have (the caller bounds the wait). `axum::serve` gives hyper no timer, so
/// a client that sent half a request head, or idled between requests, held
/// its connection (a task and a descriptor) for ever; here hyper closes a
/// connection whose next head has not fully arrived within `timeout`.
async fn serve_on<L: axum::serve::Listener>(
    mut listener: L,
    app: Router,
    timeout: Duration,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let (close_tx, close_rx) = tokio::sync::watch::channel(());
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let io = tokio::select! {
            (io, _) = listener.accept() => io,
            _ = &mut shutdown => break,
        };
        let service = hyper_util::service::TowerToHyperService::new(app.clone());
        let mut close = close_rx.clone();
        tokio::spawn(async move {
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(timeout)
                .serve_connection(
                    hyper_util::rt::TokioIo::new(parse_errors::JsonParseErrors::new(io)),
                    service,
                );
            let mut conn = std::pin::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => return,
                _ = close.changed() => conn.as_mut().graceful_shutdown(),
            }
            let _ = conn.await;
            // `close` (a receiver) drops here: the server waits for all of them.
        });
    }
    let _ = close_tx.send(());
    drop(close_rx);
    close_tx.closed().await;
}

/// Removes a socket file left by a server that died without cleaning up
/// (nothing accepts on it), so that binding works; anything else at the
/// path is left alone and binding reports it.
fn remove_stale_socket(path: &std::path::Path) {
    use std::os::unix::fs::FileTypeExt;
    let is_socket = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket());
    if is_socket && std::os::unix::net::UnixStream::connect(path).is_err() {
        let _ = std::fs::remove_file(path);
    }
}

/// Resolves on SIGINT or SIGTERM.
async fn signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("warning: cannot watch SIGTERM: {e}");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

pub fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/health", get(api::health))
        .route("/v1/health", get(api::health))
        .route("/v1/models", get(api::models))
        .route("/models", get(api::models))
        .route("/v1/models/{id}", get(api::model))
        .route("/v1/chat/completions", post(api::chat_completions))
        .route("/chat/completions", post(api::chat_completions))
        .route("/v1/completions", post(api::completions))
        // llama-server answers /completions in its own shape, as /completion.
        .route("/completions", post(api::completion))
        .route("/completion", post(api::completion))
        .route("/v1/responses", post(api::responses))
        .route("/responses", post(api::responses))
        .route(
            "/v1/responses/input_tokens",
            post(api::responses_input_tokens),
        )
        .route("/responses/input_tokens", post(api::responses_input_tokens))
        .route("/v1/messages", post(api::anthropic_messages))
        .route(
            "/v1/messages/count_tokens",
            post(api::anthropic_count_tokens),
        )
        .route("/infill", post(api::infill))
        .route("/apply-template", post(api::apply_template))
        .route(
            "/v1/chat/completions/input_tokens",
            post(api::chat_input_tokens),
        )
        .route(
            "/chat/completions/input_tokens",
            post(api::chat_input_tokens),
        )
        .route("/tokenize", post(api::tokenize))
        .route("/detokenize", post(api::detokenize))
        .route("/props", get(api::props).post(api::props_change))
        .route("/slots", get(api::slots))
        .route("/slots/{id}", post(api::slots_action))
        .route(
            "/lora-adapters",
            get(api::lora_adapters).post(api::set_lora_adapters),
        )
        .route("/rerank", post(api::rerank))
        .route("/reranking", post(api::rerank))
        .route("/v1/rerank", post(api::rerank))
        .route("/v1/reranking", post(api::rerank))
        .route("/metrics", get(api::metrics))
        .route("/v1/embeddings", post(api::embeddings))
        .route("/embeddings", post(api::embeddings))
        .route("/embedding", post(api::embeddings))
        .fallback(api::not_found)
        // `read_body` is the one body limit (MAX_BODY, 413 in Kestrel's
        // shape); axum's own 2 MB default for the `Bytes` extractor would
        // refuse bodies between the two in plain text.
        .layer(DefaultBodyLimit::disable())
        // The body is read after the key is checked: a client without one
        // makes the server buffer nothing.
        .layer(middleware::from_fn_with_state(shared.clone(), read_body))
        .layer(middleware::from_fn_with_state(shared.clone(), auth))
        .layer(middleware::from_fn(json_errors))
        .layer(middleware::from_fn_with_state(shared.clone(), cors))
        .with_state(shared)
}

/// Which browser origins may read the answers (`--cors-origins`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CorsOrigins {
    /// Any (llama-server's default `*`): the request's Origin is echoed.
    Any,
    /// Only `http(s)://localhost`, `127.0.0.1` or `[::1]`, on any port.
    Localhost,
    /// These origins exactly (scheme, host and port, as the browser sends them).
    List(Vec<String>),
}

impl CorsOrigins {
    /// `*`, `localhost`, or a comma-separated list of origins.
    pub fn parse(s: &str) -> Result<CorsOrigins, String> {
        match s.trim() {
            "*" => Ok(CorsOrigins::Any),
            "localhost" => Ok(CorsOrigins::Localhost),
            list => {
                let origins: Vec<String> = list
                    .split(',')
                    .map(|o| o.trim().trim_end_matches('/').to_owned())
                    .filter(|o| !o.is_empty())
                    .collect();
                match origins.iter().find(|o| !o.contains("://")) {
                    _ if origins.is_empty() => Err("no origin given".into()),
                    Some(bad) => Err(format!(
                        "'{bad}' is not an origin (scheme://host[:port]), '*' or 'localhost'"
                    )),
                    None => Ok(CorsOrigins::List(origins)),
                }
            }
        }
    }

    fn allows(&self, origin: &str) -> bool {
        match self {
            CorsOrigins::Any => true,
            CorsOrigins::Localhost => {
                let host = origin.split_once("://").map(|(_, rest)| rest).unwrap_or("");
                let host = match host.strip_prefix('[') {
                    Some(v6) => v6.split_once(']').map(|(h, _)| h).unwrap_or(""),
                    None => host.split(':').next().unwrap_or(""),
                };
                matches!(host, "localhost" | "127.0.0.1" | "::1")
            }
            CorsOrigins::List(list) => list.iter().any(|o| o == origin),
        }
    }
}

/// Lets web pages call the server as llama-server does: an allowed
/// `Origin` is echoed (with credentials, so a page may send its API key),
/// and a preflight `OPTIONS` is answered here, before the key is checked,
/// since browsers send no credentials with it.
async fn cors(State(s): State<Arc<Shared>>, req: Request, next: Next) -> Response {
    let origin = req
        .headers()
        .get(header::ORIGIN)
        .filter(|o| o.to_str().is_ok_and(|o| s.config.cors.allows(o)))
        .cloned();
    let mut r = if req.method() == axum::http::Method::OPTIONS {
        let mut r = StatusCode::NO_CONTENT.into_response();
        let h = r.headers_mut();
        h.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            header::HeaderValue::from_static("GET, POST, OPTIONS"),
        );
        // What the page asked for (Authorization is never covered by `*`).
        let asked = req
            .headers()
            .get(header::ACCESS_CONTROL_REQUEST_HEADERS)
            .cloned()
            .unwrap_or(header::HeaderValue::from_static("*"));
        h.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, asked);
        h.insert(
            header::ACCESS_CONTROL_MAX_AGE,
            header::HeaderValue::from_static("600"),
        );
        r
    } else {
        next.run(req).await
    };
    let h = r.headers_mut();
    h.append(header::VARY, header::HeaderValue::from_static("Origin"));
    if let Some(origin) = origin {
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
        h.insert(
            header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
            header::HeaderValue::from_static("true"),
        );
    }
    r
}

/// Reads the whole request body before routing, bounded in size (413) and
/// in time (408, after `--timeout`): a client that announced a body and
/// sent it slowly, or not at all, held its request open for ever.
async fn read_body(State(s): State<Arc<Shared>>, req: Request, next: Next) -> Response {
    use http_body_util::{BodyExt, Limited};
    let (parts, body) = req.into_parts();
    let collected = tokio::time::timeout(s.config.timeout, Limited::new(body, MAX_BODY).collect());
    let bytes = match collected.await {
        Ok(Ok(c)) => c.to_bytes(),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => {
            return ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("the request body is larger than {MAX_BODY} bytes"),
            )
            .into_response();
        }
        Ok(Err(e)) => {
            // The causes too: hyper's own text says only "error reading a
            // body from connection", its source what was wrong.
            let mut why = format!("reading the request body: {e}");
            let mut cause = e.source();
            while let Some(c) = cause {
                // axum's error repeats its source's text.
                let c_text = c.to_string();
                if !why.ends_with(&c_text) {
                    why.push_str(&format!(": {c_text}"));
                }
                cause = c.source();
            }
            return ApiError::bad_request(why).into_response();
        }
        Err(_) => {
            return ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                format!(
                    "the request body did not arrive within {} s",
                    s.config.timeout.as_secs_f64()
                ),
            )
            .into_response();
        }
    };
    next.run(Request::from_parts(parts, axum::body::Body::from(bytes)))
        .await
}

/// Endpoints that answer without an API key, as llama-server's; one
/// model's card (`/v1/models/{id}`) with them, as the list that holds it.
const PUBLIC: &[&str] = &["/health", "/v1/health", "/models", "/v1/models"];

fn is_public(path: &str) -> bool {
    PUBLIC.contains(&path)
        || path
            .strip_prefix("/v1/models/")
            .is_some_and(|id| !id.contains('/'))
}

/// Checks `Authorization: Bearer KEY` (or `X-Api-Key: KEY`) when the server
/// has a key.
async fn auth(State(s): State<Arc<Shared>>, req: Request, next: Next) -> Response {
    if let Some(key) = &s.config.api_key {
        if !is_public(req.uri().path()) {
            let h = req.headers();
            let given = h
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .or_else(|| h.get("x-api-key").and_then(|v| v.to_str().ok()));
            if given.map(str::trim) != Some(key.as_str()) {
                return ApiError::new(StatusCode::UNAUTHORIZED, "Invalid API Key").into_response();
            }
        }
    }
    next.run(req).await
}

/// Gives the router's own error answers (405, 413, ...) the JSON error shape.
async fn json_errors(req: Request, next: Next) -> Response {
    let r = next.run(req).await;
    let status = r.status();
    let is_json = r
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if (status.is_client_error() || status.is_server_error()) && !is_json {
        let (parts, body) = r.into_parts();
        let detail = axum::body::to_bytes(body, 4096).await.unwrap_or_default();
        let detail = String::from_utf8_lossy(&detail);
        let reason = status.canonical_reason().unwrap_or("error");
        let message = if detail.trim().is_empty() {
            reason.to_owned()
        } else {
            format!("{reason}: {}", detail.trim())
        };
        let mut out = ApiError::new(status, message).into_response();
        // Keep headers such as Allow on a 405.
        for (k, v) in parts.headers.iter() {
            if k != header::CONTENT_TYPE && k != header::CONTENT_LENGTH {
                out.headers_mut().insert(k.clone(), v.clone());
            }
        }
        return out;
    }
    r
}

#[cfg(test)]
mod tests {
    use super::CorsOrigins;

    #[test]
    fn cors_origins_parse_and_match() {
        assert_eq!(CorsOrigins::parse("*"), Ok(CorsOrigins::Any));
        assert!(CorsOrigins::Any.allows("https://anything.example"));

        let local = CorsOrigins::parse("localhost").unwrap();
        for o in [
            "http://localhost",
            "http://localhost:3000",
            "https://127.0.0.1:8443",
            "http://[::1]:5173",
        ] {
            assert!(local.allows(o), "{o}");
        }
        for o in [
            "http://localhost.evil.example",
            "http://evil.example",
            "http://127.0.0.1.nip.io",
            "null",
            "",
        ] {
            assert!(!local.allows(o), "{o}");
        }

        let list = CorsOrigins::parse(" http://a.example:3000/ , https://b.example").unwrap();
        assert!(list.allows("http://a.example:3000"));
        assert!(list.allows("https://b.example"));
        assert!(!list.allows("http://a.example"));
        assert!(!list.allows("http://b.example"));

        assert!(CorsOrigins::parse("a.example")
            .unwrap_err()
            .contains("a.example"));
        assert!(CorsOrigins::parse(" , ").is_err());
    }
}
