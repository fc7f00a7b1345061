//! llama-server's own dialect: `/completion` (also at `/completions`) and
//! `/infill`, whose fill-in-the-middle prompt is laid out here; the answer
//! object, its stream events and logprobs (`completion_probabilities`), and
//! `generation_settings`, which `/props` shows too.

use axum::body::Bytes;
use axum::extract::State;
use axum::response::Response;
use kestrel_engine::{Engine, GenerateParams, Generation, StopReason, TokenLogprobs};
use kestrel_tokenizer::Tokenizer;
use serde_json::{json, Value};

use super::answer::{piece, predicted, timings, Answer};
use super::fields::{field, get_str, wrong, Obj};
use super::generate::generate;
use super::parse::Source;
use super::{Api, AppState};
use crate::error::ApiError;

pub(crate) async fn completion(State(s): AppState, body: Bytes) -> Response {
    generate(s, body, Api::Llama, Source::Request).await
}

/// llama-server's `POST /infill`: code completion between a prefix and a
/// suffix ([`infill_tokens`]), answered as `/completion`.
pub(crate) async fn infill(State(s): AppState, body: Bytes) -> Response {
    generate(s, body, Api::Llama, Source::Infill).await
}

/// llama-server's logical batch (`-b`, 2048 by default): its `/infill`
/// sizes the prefix and suffix it keeps by it.
pub(crate) const INFILL_BATCH: usize = 2048;

/// The prompt of llama-server's `POST /infill`: a code model's
/// fill-in-the-middle tokens around `input_prefix` and `input_suffix`, after
/// the `input_extra` chunks as the repo-level pattern lays them out (the
/// repository marker and "myproject", each chunk after a file separator and
/// its `filename`, then a separator for the current file), with `prompt`
/// after the prefix; the prefix, suffix and extra chunks cut to the same
/// budgets as llama-server's (three quarters of `batch` for the prefix's
/// end, the rest of a quarter for the suffix's start, what `n_ctx` leaves
/// after `batch` and twice `n_predict` for the chunks' end). A model without
/// the three FIM tokens answers 501, as llama-server.
pub(crate) fn infill_tokens(
    o: &Obj,
    tok: &Tokenizer,
    batch: usize,
    n_predict: i64,
    n_ctx: usize,
) -> Result<Vec<u32>, ApiError> {
    let fim = tok.fim();
    let (Some(pre), Some(suf), Some(mid)) = (fim.pre, fim.suf, fim.mid) else {
        let missing: String = [
            (fim.pre, "prefix"),
            (fim.suf, "suffix"),
            (fim.mid, "middle"),
        ]
        .iter()
        .filter(|(id, _)| id.is_none())
        .map(|(_, name)| format!("{name} token is missing. "))
        .collect();
        return Err(ApiError::new(
            axum::http::StatusCode::NOT_IMPLEMENTED,
            format!(
                "Infill is not supported by this model: {}",
                missing.trim_end()
            ),
        ));
    };
    let text = |name: &str| {
        get_str(o, name)?.ok_or_else(|| ApiError::bad_request(format!("'{name}' is required")))
    };
    let (prefix, suffix) = (text("input_prefix")?, text("input_suffix")?);
    let prompt = get_str(o, "prompt")?.unwrap_or("");
    let plain = |t: &str| tok.encode(t, false, false);
    let mut extra = Vec::new();
    if let Some(rep) = fim.rep {
        extra.push(rep);
        extra.extend(plain("myproject\n"));
    }
    match field(o, "input_extra") {
        None => {}
        Some(Value::Array(chunks)) => {
            for (i, c) in chunks.iter().enumerate() {
                let at = format!("input_extra[{i}]");
                let c = c.as_object().ok_or_else(|| wrong(&at, "an object", c))?;
                let chunk = get_str(c, "text")?
                    .ok_or_else(|| ApiError::bad_request(format!("{at} has no 'text'")))?;
                let filename = get_str(c, "filename")?.unwrap_or("tmp");
                match fim.sep {
                    Some(sep) => {
                        extra.push(sep);
                        extra.extend(plain(&format!("{filename}\n")));
                    }
                    // Without a file separator, a plain-text divider.
                    None => extra.extend(plain("\n\n--- snippet ---\n\n")),
                }
                extra.extend(plain(chunk));
            }
        }
        Some(v) => {
            return Err(wrong(
                "input_extra",
                "an array of {\"filename\", \"text\"} objects",
                v,
            ))
        }
    }
    if let Some(sep) = fim.sep {
        extra.push(sep);
        extra.extend(plain("filename\n"));
    }
    let prompt = tok.encode(prompt, false, true);
    let prefix = plain(prefix);
    let suffix = plain(suffix);
    let prefix_take = prefix.len().min(3 * (batch / 4));
    let suffix_take = suffix
        .len()
        .min((batch / 4).saturating_sub(2 + prompt.len()));
    let room = n_ctx as i64 - batch as i64 - 2 * n_predict;
    let extra_take = extra.len().min(room.max(0) as usize);
    let mut out: Vec<u32> = extra[extra.len() - extra_take..].to_vec();
    if tok.add_bos() {
        out.extend(tok.bos());
    }
    out.push(pre);
    out.extend_from_slice(&prefix[prefix.len() - prefix_take..]);
    out.extend_from_slice(&prompt);
    out.push(suf);
    out.extend_from_slice(&suffix[..suffix_take]);
    out.push(mid);
    Ok(out)
}

/// The non-streamed answer: the closing object with the text and tokens.
pub(super) fn full(a: &Answer, g: &Generation, logprobs: Value) -> Value {
    let mut v = final_object(a, g);
    v["content"] = json!(g.text);
    v["tokens"] = json!(g.tokens);
    if a.logprobs.is_some() {
        v["completion_probabilities"] = logprobs;
    }
    v
}

/// llama-server's closing object (its last stream event has content "").
pub(super) fn final_object(a: &Answer, g: &Generation) -> Value {
    json!({
        "index": 0, "content": "", "tokens": [], "id_slot": 0, "stop": true,
        "model": a.model,
        "generation_settings": a.settings,
        "prompt": a.prompt,
        "tokens_predicted": predicted(&g.stats),
        "tokens_evaluated": g.stats.prompt_tokens,
        "tokens_cached": g.stats.prompt_tokens + g.stats.generated_tokens,
        "truncated": false,
        "stop_type": stop_type(g.stats.stop),
        "stopping_word": a.stopping_word(g),
        "has_new_line": g.text.contains('\n'),
        "timings": timings(g),
    })
}

/// One token's event: its text, and the token even when the text is held
/// back, so that a stream's `tokens` are the non-streamed answer's.
pub(super) fn stream_token(a: &Answer, token: Option<u32>, text: &str, logprobs: Value) -> Value {
    let mut v = json!({
        "index": 0, "content": text, "tokens": token.into_iter().collect::<Vec<_>>(),
        "stop": false, "id_slot": 0,
    });
    if a.logprobs.is_some() {
        v["completion_probabilities"] = logprobs;
    }
    v
}

/// `completion_probabilities`: each token's, with its id and its `n` most
/// likely alternatives.
pub(super) fn logprobs(e: &Engine, lps: &[TokenLogprobs], n: usize) -> Value {
    let entries: Vec<Value> = lps
        .iter()
        .map(|lp| {
            let (tok, bytes) = piece(e, lp.token);
            let top = lp.top.iter().take(n);
            json!({
                "id": lp.token, "token": tok, "logprob": lp.logprob, "bytes": bytes,
                "top_logprobs": top.map(|&(id, l)| {
                    let (t, b) = piece(e, id);
                    json!({"id": id, "token": t, "logprob": l, "bytes": b})
                }).collect::<Vec<_>>(),
            })
        })
        .collect();
    Value::Array(entries)
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
pub(crate) fn generation_settings(p: &GenerateParams, stream: bool) -> Value {
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
