//! `kestrel serve`: the command line of the HTTP server (llama-server's
//! flag names and defaults where they overlap); the server itself is
//! `kestrel_server`.

use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::Args;

use crate::{threads_arg, WeightArgs};

/// `kestrel serve`: llama-server's flag names and defaults where they overlap.
#[derive(Args)]
pub struct ServeArgs {
    /// Path to a GGUF model.
    #[arg(short = 'm', long = "model")]
    model: PathBuf,
    /// Address to listen on; a path ending in .sock listens on a Unix socket.
    #[arg(long = "host", default_value = "127.0.0.1")]
    host: String,
    #[arg(long = "port", default_value_t = 8080)]
    port: u16,
    /// Context size in tokens, shared by the slots; 0 = the model's training
    /// context, as llama-server's (default: each slot gets min(4096, the
    /// model's training context)).
    #[arg(short = 'c', long = "ctx-size")]
    ctx_size: Option<usize>,
    /// Slots (`-np`): requests decoded together in one batch, each with its
    /// share of the context; more requests wait in the queue.
    #[arg(long = "parallel", default_value_t = 4)]
    parallel: usize,
    /// Worker threads (default, or 0 or less, as llama.cpp: every core).
    #[arg(short = 't', long = "threads", allow_negative_numbers = true)]
    threads: Option<i64>,
    /// Require this key (`Authorization: Bearer KEY`) on every endpoint but
    /// /health and /v1/models.
    #[arg(long = "api-key")]
    api_key: Option<String>,
    /// Enable the Prometheus /metrics endpoint.
    #[arg(long = "metrics")]
    metrics: bool,
    /// Enable the /slots endpoint (the default).
    #[arg(long = "slots", conflicts_with = "no_slots")]
    slots: bool,
    /// Disable the /slots endpoint.
    #[arg(long = "no-slots")]
    no_slots: bool,
    /// The model name clients see (default: the file name).
    #[arg(short = 'a', long = "alias")]
    alias: Option<String>,
    /// The most tokens a request may generate (-1 = no limit).
    #[arg(short = 'n', long = "n-predict", default_value_t = -1, allow_negative_numbers = true)]
    n_predict: i64,
    /// Requests that may wait while every slot is busy; beyond that, 503.
    #[arg(long = "max-queue", default_value_t = 64)]
    max_queue: usize,
    /// Seconds a client may take to send a request's head or its body, as
    /// llama-server's `--timeout`; an idle kept-alive connection closes
    /// after it too.
    #[arg(long = "timeout", default_value_t = 600)]
    timeout: u64,
    /// Web pages whose scripts may call the server (CORS): `*` (any, the
    /// default, as llama-server's), `localhost`, or a comma-separated list
    /// of origins such as `http://localhost:3000`.
    #[arg(long = "cors-origins", default_value = "*")]
    cors_origins: String,
    /// Sliding-window layers (Gemma 3) attend over a full-size cache, as
    /// llama.cpp's `--swa-full`; by default as its default window cache, a
    /// ring whose visiting order differs in the last bits past its size.
    #[arg(long = "swa-full")]
    swa_full: bool,
    #[command(flatten)]
    devices: crate::device::DeviceArgs,
    #[command(flatten)]
    weights: WeightArgs,
}

pub fn serve(a: ServeArgs) -> Result<()> {
    let threads = threads_arg(a.threads)?;
    if a.parallel == 0 || a.parallel > 256 {
        bail!("--parallel must be in 1..=256, got {}", a.parallel);
    }
    if a.max_queue == 0 {
        bail!("--max-queue must be at least 1");
    }
    let cors = kestrel_server::CorsOrigins::parse(&a.cors_origins)
        .map_err(|e| anyhow::anyhow!("--cors-origins: {e}"))?;
    if !(1..=86_400).contains(&a.timeout) {
        bail!("--timeout must be in 1..=86400 seconds, got {}", a.timeout);
    }
    // (0: the model's training context, checked once it is read.)
    kestrel_engine::context_size(a.ctx_size, None, a.parallel)?;
    if !a.model.is_file() {
        bail!("model file {} does not exist", a.model.display());
    }
    kestrel_server::serve(kestrel_server::ServeConfig {
        model: a.model,
        host: a.host,
        port: a.port,
        n_ctx: a.ctx_size,
        parallel: a.parallel,
        threads,
        api_key: a.api_key,
        metrics: a.metrics,
        slots: a.slots || !a.no_slots,
        alias: a.alias,
        n_predict: a.n_predict,
        queue: a.max_queue,
        backing: a.weights.backing(),
        gpu: a.devices.device() == kestrel_engine::Device::Gpu,
        swa_full: a.swa_full,
        timeout: std::time::Duration::from_secs(a.timeout),
        cors,
    })
}
