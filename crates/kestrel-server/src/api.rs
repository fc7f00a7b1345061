//! The endpoints: OpenAI's `/v1/chat/completions`, `/v1/completions` and
//! `/v1/models`, llama-server's `/completion`, `/tokenize`, `/detokenize`,
//! `/props`, `/slots`, `/metrics` and `/health`, and the JSON and SSE shapes
//! of their answers.

use std::convert::Infallible;
use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use kestrel_engine::{Engine, GenStats, GenerateParams, Generation, StopReason, TokenLogprobs};
use serde_json::{json, Map, Value};
use tokio::sync::mpsc::UnboundedReceiver;

use crate::error::ApiError;
use crate::prepare::Preparation;
use crate::request::{self, Api, GenRequest};
use crate::worker::{Event, Loaded, Shared};

type AppState = State<Arc<Shared>>;

pub fn json_response(status: StatusCode, v: &Value) -> Response {
    json_text(status, v.to_string())
}

/// A response whose body is JSON already written out.
fn json_text(status: StatusCode, body: String) -> Response {
    let mut r = (status, body).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json; charset=utf-8"),
    );
    r
}

fn ok(v: Value) -> Response {
    json_response(StatusCode::OK, &v)
}

fn unix_time() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The name clients see: `--alias`, else the model file's name.
fn model_name(s: &Shared) -> String {
    s.config.alias.clone().unwrap_or_else(|| {
        s.config
            .model
            .file_name()
            .map_or_else(|| "model".into(), |n| n.to_string_lossy().into_owned())
    })
}

pub async fn health(State(s): AppState) -> Response {
    match s.loaded() {
        Ok(_) => ok(json!({"status": "ok"})),
        Err(e) => e.into_response(),
    }
}

pub async fn models(State(s): AppState) -> Response {
    ok(json!({"object": "list", "data": [model_card(&s)]}))
}

/// `GET /v1/models/{id}` (OpenAI's retrieve): the served model by its name;
/// any other name is a 404 that says which one is served.
pub async fn model(State(s): AppState, Path(id): Path<String>) -> Response {
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
    })
}

pub async fn chat_completions(State(s): AppState, body: Bytes) -> Response {
    generate(s, body, Api::Chat)
        .await
        .unwrap_or_else(|e| e.into_response())
}

pub async fn completions(State(s): AppState, body: Bytes) -> Response {
    generate(s, body, Api::Completions)
        .await
        .unwrap_or_else(|e| e.into_response())
}

pub async fn completion(State(s): AppState, body: Bytes) -> Response {
    generate(s, body, Api::Llama)
        .await
        .unwrap_or_else(|e| e.into_response())
}

pub async fn responses(State(s): AppState, body: Bytes) -> Response {
    generate(s, body, Api::Responses)
        .await
        .unwrap_or_else(|e| e.into_response())
}

pub async fn anthropic_messages(State(s): AppState, body: Bytes) -> Response {
    generate(s, body, Api::Messages)
        .await
        .unwrap_or_else(|e| e.into_response())
}

/// llama-server's `POST /infill`: code completion between a prefix and a
/// suffix (`request::infill_tokens`), answered as `/completion`.
pub async fn infill(State(s): AppState, body: Bytes) -> Response {
    generate_from(s, body, Api::Llama, Source::Infill)
        .await
        .unwrap_or_else(|e| e.into_response())
}

/// Where a generation's prompt comes from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Source {
    /// The endpoint's own fields (`messages`, `prompt`, `input`).
    Request,
    /// An infill request's prefix and suffix.
    Infill,
}

/// Validates a generation request completely (so that a stream, once
/// started with 200, rarely fails), queues it, and answers as JSON or SSE.
async fn generate(s: Arc<Shared>, body: Bytes, api: Api) -> Result<Response, ApiError> {
    generate_from(s, body, api, Source::Request).await
}

async fn generate_from(
    s: Arc<Shared>,
    body: Bytes,
    api: Api,
    source: Source,
) -> Result<Response, ApiError> {
    let shared = s.clone();
    let (l, req, rx, prefill, prompt, n_prompt) =
        off_async(s.prepare.clone(), body.len(), move || {
            let l = shared.loaded()?;
            let o = parse_request(&body, api)?;
            let (tokens, prefill) = match (source, api) {
                (Source::Infill, _) => {
                    let tokens = request::infill_tokens(
                        &o,
                        &l.engine.tokenizer,
                        request::INFILL_BATCH,
                        shared.config.n_predict,
                        l.n_ctx,
                    )?;
                    (tokens, None)
                }
                (_, Api::Chat | Api::Responses | Api::Messages) => {
                    let (text, prefill) = chat_prompt(&l.engine, &o)?;
                    let tokens = request::tokenize_within(&l.engine, &text, l.n_ctx)?;
                    (tokens, prefill)
                }
                (_, Api::Completions | Api::Llama) => {
                    (request::prompt_tokens(&o, &l.engine, l.n_ctx)?, None)
                }
            };
            let prompt = match api {
                // Special tokens written out, as llama-server shows the prompt.
                Api::Llama => l.engine.tokenizer.decode(&tokens, true),
                _ => String::new(),
            };
            let req = request::gen_request(&o, api, &l.engine, l.n_ctx, shared.config.n_predict)?;
            request::check_prompt_len(&tokens, l.n_ctx)?;
            let n_prompt = tokens.len();
            let rx = shared.submit(tokens, req.params.clone(), req.cache_prompt)?;
            Ok((l, req, rx, prefill, prompt, n_prompt))
        })
        .await?;
    let shape = Shape {
        api,
        id: new_id(api),
        created: unix_time(),
        model: model_name(&s),
        loaded: l,
        logprobs: req.logprobs,
        stop: req.params.stop.clone(),
        prefill: prefill.unwrap_or_default(),
        settings: generation_settings(&req.params, req.stream),
        prompt,
        n_prompt,
    };
    if req.stream {
        Ok(sse(rx, shape, req))
    } else {
        let g = wait(rx).await?;
        if g.stats.stop == StopReason::Cancelled {
            return Err(cut_short());
        }
        Ok(ok(shape.full(&g)))
    }
}

/// A generation cancelled while its client still listens: only a shutdown
/// does that, and the partial answer must not pass for a whole one.
fn cut_short() -> ApiError {
    ApiError::unavailable("the server is shutting down: the answer was cut short")
}

/// Waits for the end of a generation, ignoring the token events.
async fn wait(mut rx: UnboundedReceiver<Event>) -> Result<Generation, ApiError> {
    loop {
        match rx.recv().await {
            Some(Event::Token { .. }) => {}
            Some(Event::Done(r)) => return r.map_err(ApiError::internal),
            None => return Err(ApiError::unavailable("the server is shutting down")),
        }
    }
}

fn new_id(api: Api) -> String {
    let prefix = match api {
        Api::Chat => "chatcmpl-",
        Api::Completions | Api::Llama => "cmpl-",
        Api::Responses => "resp_",
        Api::Messages => "msg_",
    };
    format!("{prefix}{:016x}", kestrel_sampling::random_seed())
}

/// How one request's answer is written, streamed or not.
struct Shape {
    api: Api,
    id: String,
    created: u64,
    model: String,
    loaded: Arc<Loaded>,
    logprobs: Option<usize>,
    /// The request's stop strings, to name the one that matched.
    stop: Vec<String>,
    /// The assistant turn the model continues (chat): the content starts
    /// with it, as llama-server's.
    prefill: String,
    /// llama-server's `generation_settings` and `prompt` (its final
    /// `/completion` object carries both).
    settings: Value,
    prompt: String,
    /// The prompt's length (Anthropic's stream states it first).
    n_prompt: usize,
}

fn finish_reason(stop: StopReason) -> &'static str {
    match stop {
        StopReason::Length | StopReason::ContextFull => "length",
        StopReason::EndOfGeneration | StopReason::StopString | StopReason::Cancelled => "stop",
    }
}

/// llama-server's `stop_type`.
fn stop_type(stop: StopReason) -> &'static str {
    match stop {
        StopReason::EndOfGeneration => "eos",
        StopReason::StopString => "word",
        StopReason::Length | StopReason::ContextFull => "limit",
        StopReason::Cancelled => "none",
    }
}

/// The sampling a request runs with, in llama-server's
/// `generation_settings` names: Kestrel's chain, and llama-server's other
/// samplers at the values that turn them off (the only ones accepted).
fn generation_settings(p: &GenerateParams, stream: bool) -> Value {
    let s = &p.sampler;
    json!({
        "n_predict": p.n_predict, "seed": s.seed,
        "temperature": s.temperature, "top_k": s.top_k, "top_p": s.top_p, "min_p": s.min_p,
        "repeat_last_n": s.repeat_last_n, "repeat_penalty": s.repeat_penalty,
        "presence_penalty": s.presence_penalty, "frequency_penalty": s.frequency_penalty,
        "typical_p": 1.0, "top_n_sigma": -1.0, "xtc_probability": 0.0, "dynatemp_range": 0.0,
        "dry_multiplier": 0.0, "mirostat": 0,
        "logit_bias": s.logit_bias.iter().map(|&(id, b)| json!([id, b])).collect::<Vec<_>>(),
        "stop": p.stop, "ignore_eos": p.ignore_eos, "n_probs": p.n_probs, "stream": stream,
        "samplers": ["penalties", "top_k", "top_p", "min_p", "temperature"],
    })
}

/// Tokens the model predicted, as llama-server counts them: the generated
/// ones and, when it ended the answer, the end-of-generation token (it was
/// sampled like any other, though not part of the text).
pub fn predicted(s: &GenStats) -> usize {
    s.generated_tokens + usize::from(s.stop == StopReason::EndOfGeneration)
}

pub fn timings(g: &Generation) -> Value {
    let s = &g.stats;
    let per_token = |ms: f64, n: usize| if n > 0 { ms / n as f64 } else { 0.0 };
    let n = predicted(s);
    json!({
        "cache_n": s.cache_n,
        "prompt_n": s.prompt_n,
        "prompt_ms": s.prompt_ms,
        "prompt_per_token_ms": per_token(s.prompt_ms, s.prompt_n),
        "prompt_per_second": s.prompt_tps(),
        "predicted_n": n,
        "predicted_ms": s.generate_ms,
        "predicted_per_token_ms": per_token(s.generate_ms, n),
        "predicted_per_second": if s.generate_ms > 0.0 { n as f64 * 1000.0 / s.generate_ms } else { 0.0 },
    })
}

fn usage(g: &Generation) -> Value {
    json!({
        "prompt_tokens": g.stats.prompt_tokens,
        "completion_tokens": predicted(&g.stats),
        "total_tokens": g.stats.prompt_tokens + predicted(&g.stats),
        // OpenAI's place for the prompt tokens a cache spared.
        "prompt_tokens_details": {"cached_tokens": g.stats.cache_n},
    })
}

fn piece(engine: &Engine, id: u32) -> (String, Vec<u8>) {
    let bytes = engine.tokenizer.token_to_piece(id, true);
    (String::from_utf8_lossy(&bytes).into_owned(), bytes)
}

impl Shape {
    fn engine(&self) -> &Engine {
        &self.loaded.engine
    }

    /// One token's logprobs in the endpoint's format (`n` alternatives).
    fn token_logprobs(&self, lp: &TokenLogprobs, n: usize) -> Value {
        let e = self.engine();
        let (tok, bytes) = piece(e, lp.token);
        let top = lp.top.iter().take(n);
        match self.api {
            // (Responses and Anthropic messages carry no logprobs.)
            Api::Chat | Api::Responses | Api::Messages => json!({
                "token": tok, "logprob": lp.logprob, "bytes": bytes,
                "top_logprobs": top.map(|&(id, l)| {
                    let (t, b) = piece(e, id);
                    json!({"token": t, "logprob": l, "bytes": b})
                }).collect::<Vec<_>>(),
            }),
            Api::Llama => json!({
                "id": lp.token, "token": tok, "logprob": lp.logprob, "bytes": bytes,
                "top_logprobs": top.map(|&(id, l)| {
                    let (t, b) = piece(e, id);
                    json!({"id": id, "token": t, "logprob": l, "bytes": b})
                }).collect::<Vec<_>>(),
            }),
            // Legacy completions: assembled per list in `logprobs_block`.
            Api::Completions => json!({
                "token": tok, "logprob": lp.logprob,
                "top": top.map(|&(id, l)| (piece(e, id).0, json!(l))).collect::<Map<_, _>>(),
            }),
        }
    }

    /// The `logprobs` value of a choice covering `lps`; `offsets` has seen
    /// the tokens before them (legacy completions' `text_offset`).
    fn logprobs_block(&self, lps: &[TokenLogprobs], offsets: &mut Offsets) -> Value {
        let Some(n) = self.logprobs else {
            return Value::Null;
        };
        let entries: Vec<Value> = lps.iter().map(|lp| self.token_logprobs(lp, n)).collect();
        match self.api {
            Api::Chat | Api::Responses | Api::Messages => json!({"content": entries}),
            Api::Llama => Value::Array(entries),
            Api::Completions => {
                let tokenizer = &self.engine().tokenizer;
                let text_offset: Vec<usize> = lps
                    .iter()
                    .map(|lp| offsets.next(&tokenizer.token_to_piece(lp.token, true)))
                    .collect();
                json!({
                    "tokens": entries.iter().map(|e| e["token"].clone()).collect::<Vec<_>>(),
                    "token_logprobs": entries.iter().map(|e| e["logprob"].clone()).collect::<Vec<_>>(),
                    "top_logprobs": entries.iter().map(|e| e["top"].clone()).collect::<Vec<_>>(),
                    "text_offset": text_offset,
                })
            }
        }
    }

    /// The non-streamed answer.
    fn full(&self, g: &Generation) -> Value {
        let reason = finish_reason(g.stats.stop);
        let logprobs = self.logprobs_block(&g.logprobs, &mut Offsets::default());
        match self.api {
            Api::Chat => json!({
                "id": self.id, "object": "chat.completion", "created": self.created,
                "model": self.model, "system_fingerprint": fingerprint(),
                "choices": [{
                    "index": 0,
                    "message": {"role": "assistant", "content": format!("{}{}", self.prefill, g.text)},
                    "logprobs": logprobs,
                    "finish_reason": reason,
                }],
                "usage": usage(g), "timings": timings(g),
            }),
            Api::Completions => json!({
                "id": self.id, "object": "text_completion", "created": self.created,
                "model": self.model, "system_fingerprint": fingerprint(),
                "choices": [{"index": 0, "text": g.text, "logprobs": logprobs, "finish_reason": reason}],
                "usage": usage(g), "timings": timings(g),
            }),
            Api::Responses => self.response(g),
            Api::Messages => self.anthropic_message(g),
            Api::Llama => {
                let mut v = self.llama_final(g);
                v["content"] = json!(g.text);
                v["tokens"] = json!(g.tokens);
                if self.logprobs.is_some() {
                    v["completion_probabilities"] = logprobs;
                }
                v
            }
        }
    }

    /// The stop string that ended generation: the text of all generated
    /// tokens continues the shown text with it.
    fn stopping_word(&self, g: &Generation) -> String {
        if g.stats.stop != StopReason::StopString {
            return String::new();
        }
        let all = self.engine().tokenizer.decode(&g.tokens, false);
        let after = all.get(g.text.len()..).unwrap_or("");
        self.stop
            .iter()
            .filter(|w| !w.is_empty() && after.starts_with(w.as_str()))
            .max_by_key(|w| w.len())
            .cloned()
            .unwrap_or_default()
    }

    /// llama-server's closing object (its last stream event has content "").
    fn llama_final(&self, g: &Generation) -> Value {
        json!({
            "index": 0, "content": "", "tokens": [], "id_slot": 0, "stop": true,
            "model": self.model,
            "generation_settings": self.settings,
            "prompt": self.prompt,
            "tokens_predicted": predicted(&g.stats),
            "tokens_evaluated": g.stats.prompt_tokens,
            "tokens_cached": g.stats.prompt_tokens + g.stats.generated_tokens,
            "truncated": false,
            "stop_type": stop_type(g.stats.stop),
            "stopping_word": self.stopping_word(g),
            "has_new_line": g.text.contains('\n'),
            "timings": timings(g),
        })
    }

    /// The OpenAI chunk envelope around one choice (or none).
    fn chunk(&self, choices: Value) -> Value {
        let object = match self.api {
            Api::Chat => "chat.completion.chunk",
            _ => "text_completion",
        };
        json!({
            "id": self.id, "object": object, "created": self.created,
            "model": self.model, "system_fingerprint": fingerprint(),
            "choices": choices,
        })
    }

    /// Events sent before any token: the chat role.
    fn stream_start(&self) -> Vec<Value> {
        match self.api {
            Api::Chat => vec![self.chunk(json!([{
                "index": 0,
                "delta": {"role": "assistant", "content": ""},
                "logprobs": null,
                "finish_reason": null,
            }]))],
            Api::Responses => {
                let pending = json!({
                    "id": self.id, "object": "response", "created_at": self.created,
                    "status": "in_progress", "model": self.model, "output": [],
                });
                vec![
                    json!({"type": "response.created", "response": pending}),
                    json!({"type": "response.in_progress", "response": pending}),
                    json!({"type": "response.output_item.added", "output_index": 0,
                        "item": self.message_item("in_progress", None)}),
                    json!({"type": "response.content_part.added", "item_id": self.message_id(),
                        "output_index": 0, "content_index": 0, "part": output_text("")}),
                ]
            }
            Api::Messages => vec![
                json!({"type": "message_start", "message": {
                    "id": self.id, "type": "message", "role": "assistant", "content": [],
                    "model": self.model, "stop_reason": null, "stop_sequence": null,
                    "usage": {"input_tokens": self.n_prompt, "output_tokens": 0},
                }}),
                json!({"type": "content_block_start", "index": 0,
                    "content_block": {"type": "text", "text": ""}}),
            ],
            _ => Vec::new(),
        }
    }

    /// Anthropic: why the answer ended, and the stop string that ended it.
    fn anthropic_stop(&self, g: &Generation) -> (&'static str, Value) {
        match g.stats.stop {
            StopReason::StopString => ("stop_sequence", json!(self.stopping_word(g))),
            StopReason::Length | StopReason::ContextFull => ("max_tokens", Value::Null),
            StopReason::EndOfGeneration | StopReason::Cancelled => ("end_turn", Value::Null),
        }
    }

    /// Anthropic: token counts, the cached part of the prompt apart (as
    /// Anthropic's `input_tokens` leaves cache reads out).
    fn anthropic_usage(&self, g: &Generation) -> Value {
        json!({
            "input_tokens": g.stats.prompt_tokens - g.stats.cache_n.min(g.stats.prompt_tokens),
            "cache_read_input_tokens": g.stats.cache_n,
            "output_tokens": predicted(&g.stats),
        })
    }

    /// Anthropic: the whole message.
    fn anthropic_message(&self, g: &Generation) -> Value {
        let (reason, sequence) = self.anthropic_stop(g);
        json!({
            "id": self.id, "type": "message", "role": "assistant",
            "content": [{"type": "text", "text": format!("{}{}", self.prefill, g.text)}],
            "model": self.model, "stop_reason": reason, "stop_sequence": sequence,
            "usage": self.anthropic_usage(g),
        })
    }

    /// Responses: the one output item's id (the response's own, retyped).
    fn message_id(&self) -> String {
        format!("msg_{}", self.id.trim_start_matches("resp_"))
    }

    /// Responses: the assistant message item, with its text once known.
    fn message_item(&self, status: &str, text: Option<&str>) -> Value {
        json!({
            "id": self.message_id(), "type": "message", "status": status, "role": "assistant",
            "content": text.map(|t| vec![output_text(t)]).unwrap_or_default(),
        })
    }

    /// Responses: the whole response object. A generation that ran into
    /// its token limit (or the context's end) is "incomplete", as OpenAI
    /// reports `max_output_tokens`.
    fn response(&self, g: &Generation) -> Value {
        let cut = finish_reason(g.stats.stop) == "length";
        let status = if cut { "incomplete" } else { "completed" };
        let text = format!("{}{}", self.prefill, g.text);
        json!({
            "id": self.id, "object": "response", "created_at": self.created,
            "status": status,
            "completed_at": (!cut).then(unix_time),
            "error": null,
            "incomplete_details": cut.then(|| json!({"reason": "max_output_tokens"})),
            "model": self.model,
            "output": [self.message_item(status, Some(&text))],
            "usage": {
                "input_tokens": g.stats.prompt_tokens,
                "input_tokens_details": {"cached_tokens": g.stats.cache_n},
                "output_tokens": predicted(&g.stats),
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": g.stats.prompt_tokens + predicted(&g.stats),
            },
            "timings": timings(g),
        })
    }

    /// The event for one token, or none when there is nothing to say.
    fn stream_token(
        &self,
        token: Option<u32>,
        text: &str,
        lp: Option<&TokenLogprobs>,
        offsets: &mut Offsets,
    ) -> Option<Value> {
        // Text held back (a stop string's possible start, part of a UTF-8
        // character) leaves an OpenAI chunk nothing to carry; llama-server's
        // event still carries the token, so that a stream's `tokens` are the
        // non-streamed answer's.
        let carries_token = self.api == Api::Llama && token.is_some();
        if text.is_empty() && lp.is_none() && !carries_token {
            return None;
        }
        let logprobs = match lp {
            Some(lp) => self.logprobs_block(std::slice::from_ref(lp), offsets),
            None => Value::Null,
        };
        Some(match self.api {
            Api::Chat => self.chunk(json!([{
                "index": 0, "delta": {"content": text},
                "logprobs": logprobs, "finish_reason": null,
            }])),
            Api::Responses => json!({
                "type": "response.output_text.delta", "item_id": self.message_id(),
                "output_index": 0, "content_index": 0, "delta": text, "logprobs": [],
            }),
            Api::Messages => json!({
                "type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": text},
            }),
            Api::Completions => self.chunk(json!([{
                "index": 0, "text": text, "logprobs": logprobs, "finish_reason": null,
            }])),
            Api::Llama => {
                let mut v = json!({
                    "index": 0, "content": text, "tokens": token.into_iter().collect::<Vec<_>>(),
                    "stop": false, "id_slot": 0,
                });
                if self.logprobs.is_some() {
                    v["completion_probabilities"] = logprobs;
                }
                v
            }
        })
    }

    /// The closing events: finish_reason (with timings), then usage if asked.
    fn stream_end(&self, g: &Generation, include_usage: bool) -> Vec<Value> {
        let reason = finish_reason(g.stats.stop);
        let mut out = Vec::new();
        match self.api {
            Api::Llama => out.push(self.llama_final(g)),
            Api::Responses => {
                let response = self.response(g);
                let item = &response["output"][0];
                let (id, part) = (self.message_id(), &item["content"][0]);
                out.push(json!({"type": "response.output_text.done", "item_id": id,
                    "output_index": 0, "content_index": 0, "text": part["text"], "logprobs": []}));
                out.push(json!({"type": "response.content_part.done", "item_id": id,
                    "output_index": 0, "content_index": 0, "part": part}));
                out.push(
                    json!({"type": "response.output_item.done", "output_index": 0,
                    "item": item}),
                );
                let kind = match response["status"].as_str() {
                    Some("incomplete") => "response.incomplete",
                    _ => "response.completed",
                };
                out.push(json!({"type": kind, "response": response}));
            }
            Api::Messages => {
                let (reason, sequence) = self.anthropic_stop(g);
                out.push(json!({"type": "content_block_stop", "index": 0}));
                out.push(json!({"type": "message_delta",
                    "delta": {"stop_reason": reason, "stop_sequence": sequence},
                    "usage": self.anthropic_usage(g)}));
                out.push(json!({"type": "message_stop"}));
            }
            _ => {
                let choice = match self.api {
                    Api::Chat => {
                        json!({"index": 0, "delta": {}, "logprobs": null, "finish_reason": reason})
                    }
                    _ => {
                        json!({"index": 0, "text": "", "logprobs": null, "finish_reason": reason})
                    }
                };
                let mut last = self.chunk(json!([choice]));
                last["timings"] = timings(g);
                out.push(last);
                if include_usage {
                    let mut u = self.chunk(json!([]));
                    u["usage"] = usage(g);
                    out.push(u);
                }
            }
        }
        out
    }
}

/// Responses: an output text content part.
fn output_text(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []})
}

fn fingerprint() -> String {
    format!("kestrel-{}", env!("CARGO_PKG_VERSION"))
}

/// Where each token's text starts in the answer, in characters (legacy
/// completions' `text_offset`), counted from the tokens' bytes, not from
/// the text sent so far: text held back for a possible stop string, or a
/// character split across tokens, moved the count. A character that ends
/// in a token is counted after that token's offset; invalid bytes count
/// as the one replacement character the text shows for them.
#[derive(Default)]
struct Offsets {
    chars: usize,
    /// The start of a character still incomplete.
    tail: Vec<u8>,
}

impl Offsets {
    /// The offset of the token whose bytes are `piece`; then counts them.
    fn next(&mut self, piece: &[u8]) -> usize {
        let at = self.chars;
        self.tail.extend_from_slice(piece);
        let mut rest: &[u8] = &self.tail;
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    self.chars += s.chars().count();
                    rest = &[];
                    break;
                }
                Err(e) => {
                    let (valid, after) = rest.split_at(e.valid_up_to());
                    self.chars += String::from_utf8_lossy(valid).chars().count();
                    match e.error_len() {
                        Some(n) => {
                            self.chars += 1;
                            rest = &after[n..];
                        }
                        None => {
                            rest = after;
                            break;
                        }
                    }
                }
            }
        }
        self.tail = rest.to_vec();
        at
    }
}

/// A stream's events as SSE frames. Responses and Anthropic events are
/// named (`event:`), Responses' also numbered (`sequence_number`, from 0),
/// as OpenAI and Anthropic send them; an error among them is an `error`
/// event in each one's shape.
struct Framer {
    api: Api,
    sequence: u64,
}

impl Framer {
    fn frame(&mut self, mut v: Value) -> Bytes {
        let error = v.get("error").cloned();
        match self.api {
            Api::Responses => {
                if let Some(e) = error {
                    v = json!({"type": "error", "code": e["type"], "message": e["message"],
                        "param": null});
                }
                v["sequence_number"] = json!(self.sequence);
                self.sequence += 1;
            }
            Api::Messages => {
                if let Some(e) = error {
                    v = json!({"type": "error",
                        "error": {"type": e["type"], "message": e["message"]}});
                }
            }
            _ => return Bytes::from(format!("data: {v}\n\n")),
        }
        let kind = v["type"].as_str().unwrap_or("message").to_owned();
        Bytes::from(format!("event: {kind}\ndata: {v}\n\n"))
    }
}

/// A server-sent-event body fed by the generation's events. Dropping the
/// body (the client went away) drops `rx`, which cancels the generation.
fn sse(rx: UnboundedReceiver<Event>, shape: Shape, req: GenRequest) -> Response {
    struct St {
        rx: UnboundedReceiver<Event>,
        shape: Shape,
        include_usage: bool,
        started: bool,
        done: bool,
        offsets: Offsets,
        framer: Framer,
    }
    let st = St {
        framer: Framer {
            api: shape.api,
            sequence: 0,
        },
        rx,
        shape,
        include_usage: req.include_usage,
        started: false,
        done: false,
        offsets: Offsets::default(),
    };
    let stream = futures_util::stream::unfold(st, |mut st| async move {
        if st.done {
            return None;
        }
        let mut out = Vec::new();
        if !st.started {
            st.started = true;
            out.extend(st.shape.stream_start());
            // The continued assistant turn comes first, as its own delta.
            if let Some(v) = st
                .shape
                .stream_token(None, &st.shape.prefill, None, &mut st.offsets)
            {
                out.push(v);
            }
        }
        // Each body chunk carries at least one event (or ends the stream).
        while out.is_empty() {
            match st.rx.recv().await {
                Some(Event::Token {
                    token,
                    text,
                    logprobs,
                }) => {
                    if let Some(v) =
                        st.shape
                            .stream_token(token, &text, logprobs.as_ref(), &mut st.offsets)
                    {
                        out.push(v);
                    }
                }
                // Cut short by a shutdown (a client that left reads nothing).
                Some(Event::Done(Ok(g))) if g.stats.stop == StopReason::Cancelled => {
                    out.push(cut_short().body());
                    st.done = true;
                    break;
                }
                Some(Event::Done(Ok(g))) => {
                    out.extend(st.shape.stream_end(&g, st.include_usage));
                    st.done = true;
                    break;
                }
                Some(Event::Done(Err(e))) => {
                    out.push(ApiError::internal(e).body());
                    st.done = true;
                    break;
                }
                None => {
                    out.push(ApiError::unavailable("the server is shutting down").body());
                    st.done = true;
                    break;
                }
            }
        }
        let mut bytes: Vec<u8> = out.into_iter().flat_map(|v| st.framer.frame(v)).collect();
        // OpenAI's chat and completion streams end so; Responses end with
        // their `response.completed` event, llama-server's with `stop`.
        if st.done && matches!(st.shape.api, Api::Chat | Api::Completions) {
            bytes.extend_from_slice(b"data: [DONE]\n\n");
        }
        Some((Ok::<_, Infallible>(Bytes::from(bytes)), st))
    });
    let mut r = Response::new(Body::from_stream(stream));
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    // A proxy (nginx) in front would otherwise hold the events back.
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    r
}

/// A request's JSON object; a Responses request as the chat it asks for.
fn parse_request(body: &[u8], api: Api) -> Result<Map<String, Value>, ApiError> {
    let o = request::parse_object(body)?;
    match api {
        Api::Responses => request::responses_request(&o),
        Api::Messages => request::messages_request(&o),
        _ => Ok(o),
    }
}

/// A chat request's messages as the model's template writes them, with a
/// trailing assistant turn continued (llama-server's prefill, returned too).
fn chat_prompt(
    engine: &Engine,
    o: &Map<String, Value>,
) -> Result<(String, Option<String>), ApiError> {
    let mut messages = request::messages(o)?;
    let prefill = request::take_prefill(&mut messages)?;
    let mut text = engine
        .render_chat(&messages)
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    text.push_str(prefill.as_deref().unwrap_or(""));
    Ok((text, prefill))
}

/// llama-server's `POST /apply-template`: the prompt a chat request's
/// messages become, without generating.
pub async fn apply_template(State(s): AppState, body: Bytes) -> Response {
    off_async(s.prepare.clone(), body.len(), move || {
        let l = s.loaded()?;
        let o = request::parse_object(&body)?;
        let (prompt, _) = chat_prompt(&l.engine, &o)?;
        Ok(ok(json!({ "prompt": prompt })))
    })
    .await
    .unwrap_or_else(|e| e.into_response())
}

/// llama-server's `POST /v1/chat/completions/input_tokens`: how many tokens
/// a chat request's prompt takes, without generating.
pub async fn chat_input_tokens(State(s): AppState, body: Bytes) -> Response {
    input_tokens(s, body, Api::Chat).await
}

/// `POST /v1/responses/input_tokens`: the same for a Responses request.
pub async fn responses_input_tokens(State(s): AppState, body: Bytes) -> Response {
    input_tokens(s, body, Api::Responses).await
}

/// `POST /v1/messages/count_tokens`: the same for an Anthropic request.
pub async fn anthropic_count_tokens(State(s): AppState, body: Bytes) -> Response {
    input_tokens(s, body, Api::Messages).await
}

async fn input_tokens(s: Arc<Shared>, body: Bytes, api: Api) -> Response {
    off_async(s.prepare.clone(), body.len(), move || {
        let l = s.loaded()?;
        let o = parse_request(&body, api)?;
        let (prompt, _) = chat_prompt(&l.engine, &o)?;
        let n = l.engine.tokenize_prompt(&prompt).len();
        Ok(ok(match api {
            Api::Messages => json!({ "input_tokens": n }),
            _ => json!({ "object": "response.input_tokens", "input_tokens": n }),
        }))
    })
    .await
    .unwrap_or_else(|e| e.into_response())
}

pub async fn tokenize(State(s): AppState, body: Bytes) -> Response {
    off_async(s.prepare.clone(), body.len(), move || {
        let l = s.loaded()?;
        let o = request::parse_object(&body)?;
        let content = request::get_str(&o, "content")?
            .ok_or_else(|| ApiError::bad_request("'content' is required"))?;
        let add_special = request::get_bool(&o, "add_special")?.unwrap_or(false);
        let parse_special = request::get_bool(&o, "parse_special")?.unwrap_or(true);
        let with_pieces = request::get_bool(&o, "with_pieces")?.unwrap_or(false);
        let ids = l
            .engine
            .tokenizer
            .encode(content, add_special, parse_special);
        // Written straight out: a JSON value per id cost 150 bytes a token
        // (an 8 MB run of digits: 8M ids, +1.2 GB for one request).
        let mut out = String::with_capacity(ids.len() * 7 + 16);
        out.push_str("{\"tokens\":[");
        for (i, &id) in ids.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            if !with_pieces {
                let _ = write!(out, "{id}");
                continue;
            }
            let (text, bytes) = piece(&l.engine, id);
            // llama-server gives bytes when the piece is not valid UTF-8.
            let p = if std::str::from_utf8(&bytes).is_ok() {
                Value::from(text)
            } else {
                json!(bytes)
            };
            let _ = write!(out, "{{\"id\":{id},\"piece\":{p}}}");
        }
        out.push_str("]}");
        Ok(json_text(StatusCode::OK, out))
    })
    .await
    .unwrap_or_else(|e| e.into_response())
}

pub async fn detokenize(State(s): AppState, body: Bytes) -> Response {
    off_async(s.prepare.clone(), body.len(), move || {
        let l = s.loaded()?;
        let o = request::parse_object(&body)?;
        let n_vocab = l.engine.model.spec.hparams.n_vocab;
        let ids = match o.get("tokens") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(a)) => a
                .iter()
                .map(|t| match t.as_u64() {
                    Some(id) if id < n_vocab as u64 => Ok(id as u32),
                    _ => Err(ApiError::bad_request(format!(
                        "'tokens' must hold token ids below {n_vocab}, got {t}"
                    ))),
                })
                .collect::<Result<_, _>>()?,
            Some(v) => {
                return Err(ApiError::bad_request(format!(
                    "'tokens' must be an array, got {}",
                    request::kind(v)
                )))
            }
        };
        let content = l.engine.tokenizer.decode(&ids, true);
        Ok(ok(json!({ "content": content })))
    })
    .await
    .unwrap_or_else(|e| e.into_response())
}

/// Runs a request's CPU work (parsing a body of up to 8 MiB, rendering a
/// chat, tokenizing or detokenizing) on tokio's blocking threads: on the
/// two async workers three 8 MB `/tokenize` requests held `/health` up
/// for a second. A panic there is this request's 500, not the server's.
///
/// Work on a body of `body_len` bytes from [`crate::prepare::HEAVY_BODY`] up
/// waits its turn ([`Preparation`]), so that a burst of large
/// bodies costs the memory of a few at a time; smaller ones go at once.
async fn off_async<T: Send + 'static>(
    prepare: Preparation,
    body_len: usize,
    work: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    let turn = prepare.turn(body_len).await;
    tokio::task::spawn_blocking(move || {
        let out = work();
        drop(turn);
        out
    })
    .await
    .unwrap_or_else(|e| Err(ApiError::internal(format!("internal error: {e}"))))
}

pub async fn props(State(s): AppState) -> Response {
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
        "build_info": fingerprint(),
    }))
}

pub async fn slots(State(s): AppState) -> Response {
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

pub async fn metrics(State(s): AppState) -> Response {
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
pub async fn embeddings() -> Response {
    not_supported("embeddings are not supported: this server generates text")
}

/// `POST /props`: llama-server changes nothing there either, and without
/// its `--props` flag (which Kestrel does not have) answers this 501.
pub async fn props_change() -> Response {
    not_supported(
        "This server does not support changing global properties. Start it with `--props`",
    )
}

/// `POST /slots/{id}?action=save|restore|erase`: llama-server's answer
/// without `--slot-save-path` (which Kestrel does not have), before it
/// looks at the slot or the action.
pub async fn slots_action() -> Response {
    not_supported("This server does not support slots action. Start it with `--slot-save-path`")
}

/// llama-server's reranking routes, which need a ranking model: 501, as
/// llama-server answers without `--reranking`.
pub async fn rerank() -> Response {
    not_supported("This server does not support reranking. Start it with `--reranking`")
}

/// `GET /lora-adapters`: the loaded LoRA adapters, none here (Kestrel
/// loads none), as llama-server lists them when started without `--lora`.
pub async fn lora_adapters() -> Response {
    ok(json!([]))
}

/// `POST /lora-adapters`: new scales for the loaded adapters, an array of
/// `{"id", "scale"}` (see [`request::no_lora`]).
pub async fn set_lora_adapters(body: Bytes) -> Response {
    let answer = || -> Result<Value, ApiError> {
        let v = request::parse_json(&body)?;
        let Value::Array(entries) = v else {
            return Err(ApiError::bad_request(format!(
                "Request body must be an array, got {}",
                request::kind(&v)
            )));
        };
        request::no_lora(&entries)?;
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

pub async fn not_found(uri: axum::http::Uri) -> Response {
    ApiError::new(
        StatusCode::NOT_FOUND,
        format!("no such endpoint: {}", uri.path()),
    )
    .into_response()
}

#[cfg(test)]
mod tests {
    use super::Offsets;

    #[test]
    fn text_offsets_count_characters_of_the_tokens_bytes() {
        let mut o = Offsets::default();
        let pieces: [&[u8]; 6] = [
            b"ab",
            "é".as_bytes(),
            &[0xE4, 0xBD],
            &[0xA0, b'x'],
            &[0xFF],
            b"z",
        ];
        let got: Vec<usize> = pieces.iter().map(|p| o.next(p)).collect();
        // "ab" 0, "é" 2, the first bytes of "你" 3, its last byte and "x"
        // still 3 (the character starts before them), an invalid byte 5
        // (after "你x"), "z" 6.
        assert_eq!(got, [0, 2, 3, 3, 5, 6]);
        assert_eq!(o.next(b""), 7);
    }
}
