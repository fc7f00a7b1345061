//! What the server says about itself: `/health`, the model list and card,
//! llama-server's `/props`, `/slots` and `/metrics` (Prometheus text), the
//! LoRA adapter list, and the 501s and 404 for what it does not serve.

use std::sync::atomic::Ordering;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use kestrel_engine::GenerateParams;
use serde_json::{json, Map, Value};

use super::answer::{fingerprint, piece};
use super::fields::{kind, parse_json};
use super::llama::generation_settings;
use super::params::no_lora;
use super::{model_name, ok, unix_time, AppState};
use crate::error::ApiError;
use crate::worker::Shared;

pub(crate) async fn health(State(s): AppState) -> Response {
    match s.loaded() {
        Ok(_) => ok(json!({"status": "ok"})),
        Err(e) => e.into_response(),
    }
}

pub(crate) async fn models(State(s): AppState) -> Response {
    ok(json!({"object": "list", "data": [model_card(&s)]}))
}

/// `GET /v1/models/{id}` (OpenAI's retrieve): the served model by its name;
/// any other name is a 404 that says which one is served.
pub(crate) async fn model(State(s): AppState, Path(id): Path<String>) -> Response {
    let name = model_name(&s);
    if id != name {
        return ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no model named '{id}'; this server serves '{name}'"),
        )
        .into_response();
    }
    ok(model_card(&s))
}

fn model_card(s: &Shared) -> Value {
    let mut meta = Map::new();
    if let Ok(l) = s.loaded() {
        let hp = &l.engine.model.spec.hparams;
        meta.insert("n_vocab".into(), json!(hp.n_vocab));
        meta.insert("n_ctx_train".into(), json!(hp.n_ctx_train));
        meta.insert("n_embd".into(), json!(hp.n_embd));
    }
    json!({
        "id": model_name(s),
        "object": "model",
        "created": unix_time(),
        "owned_by": "kestrel",
        "meta": meta,
        "capabilities": ["completion", "chat", "structured_output", "tools"],
    })
}

/// What a request may constrain its output with, and how the model's tool
/// calls are written (its template's family, or the generic JSON form).
fn structured_output(s: &Shared) -> Value {
    let family = s.loaded().ok().map(|l| {
        let source = l.engine.template.as_ref().map_or("", |t| t.source());
        format!("{:?}", kestrel_tools::Family::detect(source)).to_lowercase()
    });
    json!({
        "response_format": ["text", "json_object", "json_schema"],
        "json_schema": true,
        "grammar": "gbnf",
        "tools": true,
        "tool_choice": ["auto", "none", "required", "function"],
        "tool_call_format": family,
    })
}

pub(crate) async fn props(State(s): AppState) -> Response {
    let (n_ctx, template) = match s.loaded() {
        Ok(l) => (
            json!(l.n_ctx),
            json!(l.engine.template.as_ref().map(|t| t.source().to_owned())),
        ),
        Err(_) => (Value::Null, Value::Null),
    };
    // A request's defaults; the seed is drawn per request (-1).
    let mut defaults = generation_settings(
        &GenerateParams {
            n_predict: s.config.n_predict,
            ..GenerateParams::default()
        },
        false,
    );
    defaults["seed"] = json!(-1);
    // The special tokens' text, as llama-server gives it ("" for none).
    let (bos, eos) = match s.loaded() {
        Ok(l) => {
            let text =
                |id: Option<u32>| json!(id.map_or(String::new(), |id| piece(&l.engine, id).0));
            (
                text(l.engine.tokenizer.bos()),
                text(l.engine.tokenizer.eos()),
            )
        }
        Err(_) => (Value::Null, Value::Null),
    };
    ok(json!({
        "default_generation_settings": {
            "n_ctx": n_ctx,
            "params": defaults,
        },
        "total_slots": s.config.parallel,
        "n_ctx_total": s.loaded().map_or(Value::Null, |l| json!(l.n_ctx_total)),
        "model_alias": model_name(&s),
        "model_path": s.config.model.display().to_string(),
        "chat_template": template,
        "bos_token": bos,
        "eos_token": eos,
        "endpoint_slots": s.config.slots,
        "endpoint_props": true,
        "endpoint_metrics": s.config.metrics,
        "modalities": {"vision": false, "audio": false},
        "max_body_bytes": crate::MAX_BODY,
        "structured_output": structured_output(&s),
        "build_info": fingerprint(),
    }))
}

pub(crate) async fn slots(State(s): AppState) -> Response {
    if !s.config.slots {
        return ApiError::new(
            StatusCode::NOT_IMPLEMENTED,
            "This server does not support slots endpoint (started with --no-slots)",
        )
        .into_response();
    }
    let info = s.slots.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let n_ctx = s.loaded().map(|l| l.n_ctx).ok();
    let list: Vec<Value> = if info.is_empty() {
        // Still loading: the slots exist, idle, as configured.
        (0..s.config.parallel)
            .map(|id| json!({"id": id, "n_ctx": n_ctx, "is_processing": false}))
            .collect()
    } else {
        info.iter()
            .map(|slot| {
                let running = slot.task.is_some();
                // llama-server's n_remain: -1 without a limit.
                let remain = if slot.n_predict < 0 {
                    -1
                } else {
                    (slot.n_predict - slot.n_decoded as i64).max(0)
                };
                json!({
                    "id": slot.id,
                    "id_task": slot.task.map_or(-1, |t| t as i64),
                    "n_ctx": slot.n_ctx,
                    "speculative": false,
                    "is_processing": running,
                    "n_prompt_tokens": slot.n_prompt,
                    "n_prompt_tokens_processed": slot.n_past.min(slot.n_prompt).saturating_sub(slot.cache_n),
                    "n_prompt_tokens_cache": slot.cache_n,
                    "n_cached_tokens": slot.cache_n,
                    "n_past": slot.n_past,
                    "n_decoded": slot.n_decoded,
                    "next_token": [{
                        "has_next_token": running,
                        "n_remain": remain,
                        "n_decoded": slot.n_decoded,
                    }],
                })
            })
            .collect()
    };
    ok(Value::Array(list))
}

pub(crate) async fn metrics(State(s): AppState) -> Response {
    if !s.config.metrics {
        return ApiError::new(
            StatusCode::NOT_IMPLEMENTED,
            "This server does not support metrics endpoint (start it with --metrics)",
        )
        .into_response();
    }
    let m = &s.metrics;
    let get = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    let (pt, pus, gt, gus) = (
        get(&m.prompt_tokens),
        get(&m.prompt_us),
        get(&m.predicted_tokens),
        get(&m.predicted_us),
    );
    let rate = |n: u64, us: u64| {
        if us > 0 {
            n as f64 * 1e6 / us as f64
        } else {
            0.0
        }
    };
    let kv = m.kv_tokens.load(Ordering::SeqCst);
    let kv_total = s.loaded().map_or(0, |l| l.n_ctx_total);
    let decodes = get(&m.decodes);
    let rows: [(&str, &str, &str, String); 14] = [
        (
            "prompt_tokens_total",
            "counter",
            "Number of prompt tokens processed, excluding cached tokens.",
            pt.to_string(),
        ),
        (
            "prompt_tokens_cached_total",
            "counter",
            "Number of prompt tokens reused from the cache.",
            get(&m.prompt_cached).to_string(),
        ),
        (
            "n_decode_total",
            "counter",
            "Total number of batched forward passes.",
            decodes.to_string(),
        ),
        (
            "n_tokens_max",
            "counter",
            "Largest observed sequence length (prompt + generation).",
            get(&m.tokens_max).to_string(),
        ),
        (
            "n_busy_slots_per_decode",
            "gauge",
            "Average number of busy slots per forward pass.",
            (get(&m.busy_slot_decodes) as f64 / decodes.max(1) as f64).to_string(),
        ),
        (
            "prompt_seconds_total",
            "counter",
            "Prompt process time",
            (pus as f64 / 1e6).to_string(),
        ),
        (
            "tokens_predicted_total",
            "counter",
            "Number of generation tokens processed.",
            gt.to_string(),
        ),
        (
            "tokens_predicted_seconds_total",
            "counter",
            "Predict process time",
            (gus as f64 / 1e6).to_string(),
        ),
        (
            "prompt_tokens_seconds",
            "gauge",
            "Average prompt throughput in tokens/s.",
            rate(pt, pus).to_string(),
        ),
        (
            "predicted_tokens_seconds",
            "gauge",
            "Average generation throughput in tokens/s.",
            rate(gt, gus).to_string(),
        ),
        (
            "requests_processing",
            "gauge",
            "Number of requests processing.",
            m.processing.load(Ordering::SeqCst).to_string(),
        ),
        (
            "requests_deferred",
            "gauge",
            "Number of requests deferred.",
            m.deferred.load(Ordering::SeqCst).to_string(),
        ),
        (
            "kv_cache_tokens",
            "gauge",
            "KV-cache tokens.",
            kv.to_string(),
        ),
        (
            "kv_cache_usage_ratio",
            "gauge",
            "KV-cache usage. 1 means 100 percent usage.",
            (kv as f64 / kv_total.max(1) as f64).to_string(),
        ),
    ];
    let mut text = String::new();
    for (name, kind, help, value) in rows {
        text.push_str(&format!(
            "# HELP llamacpp:{name} {help}\n# TYPE llamacpp:{name} {kind}\nllamacpp:{name} {value}\n"
        ));
    }
    let mut r = (StatusCode::OK, text).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4"),
    );
    r
}

/// Embeddings: answered as llama-server answers them when started without
/// `--embeddings` (a 501 that the OpenAI client reports as such).
pub(crate) async fn embeddings() -> Response {
    not_supported("embeddings are not supported: this server generates text")
}

/// `POST /props`: llama-server changes nothing there either, and without
/// its `--props` flag (which Kestrel does not have) answers this 501.
pub(crate) async fn props_change() -> Response {
    not_supported(
        "This server does not support changing global properties. Start it with `--props`",
    )
}

/// `POST /slots/{id}?action=save|restore|erase`: llama-server's answer
/// without `--slot-save-path` (which Kestrel does not have), before it
/// looks at the slot or the action.
pub(crate) async fn slots_action() -> Response {
    not_supported("This server does not support slots action. Start it with `--slot-save-path`")
}

/// llama-server's reranking routes, which need a ranking model: 501, as
/// llama-server answers without `--reranking`.
pub(crate) async fn rerank() -> Response {
    not_supported("This server does not support reranking. Start it with `--reranking`")
}

/// `GET /lora-adapters`: the loaded LoRA adapters, none here (Kestrel
/// loads none), as llama-server lists them when started without `--lora`.
pub(crate) async fn lora_adapters() -> Response {
    ok(json!([]))
}

/// `POST /lora-adapters`: new scales for the loaded adapters, an array of
/// `{"id", "scale"}` (see [`no_lora`]).
pub(crate) async fn set_lora_adapters(body: Bytes) -> Response {
    let answer = || -> Result<Value, ApiError> {
        let v = parse_json(&body)?;
        let Value::Array(entries) = v else {
            return Err(ApiError::bad_request(format!(
                "Request body must be an array, got {}",
                kind(&v)
            )));
        };
        no_lora(&entries)?;
        Ok(json!({"success": true}))
    };
    match answer() {
        Ok(v) => ok(v),
        Err(e) => e.into_response(),
    }
}

/// A 501 `not_supported_error` with `message`.
fn not_supported(message: &str) -> Response {
    ApiError::new(StatusCode::NOT_IMPLEMENTED, message).into_response()
}

pub(crate) async fn not_found(uri: axum::http::Uri) -> Response {
    ApiError::new(
        StatusCode::NOT_FOUND,
        format!("no such endpoint: {}", uri.path()),
    )
    .into_response()
}
