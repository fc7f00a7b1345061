//! A generation request's settings beyond its prompt, built the same way
//! for every dialect: the sampler's parameters, the token limit, stop
//! strings, logit bias, logprobs, streaming, the output constraint; and the
//! features not supported yet, each refused with a 400 that says so.

use kestrel_engine::{Engine, GenerateParams};
use kestrel_sampling::check::{self, Bounds};
use kestrel_sampling::SamplerParams;
use serde_json::Value;

use super::fields::{
    field, get_bool, get_f32_in, get_int, get_int_in, get_str, range_error, wrong, Obj,
};
use super::samplers::llama_sampling;
use super::Api;
use crate::error::ApiError;

/// The request's stop strings (`stop`: one or an array), within the caps.
fn stop_strings(o: &Obj) -> Result<Vec<String>, ApiError> {
    let stop: Vec<String> = match field(o, "stop") {
        None => Vec::new(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| wrong("stop[]", "a string", v))
            })
            .collect::<Result<_, _>>()?,
        Some(v) => return Err(wrong("stop", "a string or an array of strings", v)),
    };
    // Every stop string is looked for after every token, on the thread
    // that steps every slot: hundreds of thousands of them slowed all the
    // running requests 50 ms a step.
    if stop.len() > MAX_STOPS {
        return Err(ApiError::bad_request(format!(
            "'stop' may hold at most {MAX_STOPS} strings, got {}",
            stop.len()
        )));
    }
    if let Some(long) = stop.iter().find(|s| s.len() > MAX_STOP_BYTES) {
        return Err(ApiError::bad_request(format!(
            "a stop string may be at most {MAX_STOP_BYTES} bytes long, got one of {}",
            long.len()
        )));
    }
    Ok(stop)
}

/// The tokens a request asks for (`n_predict`, `max_tokens`,
/// `max_completion_tokens`; -1 for no limit). Where it gives several, the
/// tightest holds, whatever their order.
fn requested_n_predict(o: &Obj) -> Result<i64, ApiError> {
    let mut n_predict = -1i64;
    for name in ["n_predict", "max_tokens", "max_completion_tokens"] {
        let bounds = Bounds {
            field: name,
            ..check::N_PREDICT
        };
        if let Some(n) = get_int_in(o, bounds)? {
            if n >= 0 && (n_predict < 0 || n < n_predict) {
                n_predict = n;
            }
        }
    }
    Ok(n_predict)
}

/// Most stop strings a request may give (OpenAI's API takes 4).
const MAX_STOPS: usize = 64;

/// Longest stop string, in bytes.
const MAX_STOP_BYTES: usize = 1024;

/// `repeat_penalty`: logits are divided by it, so it must be above 0.
fn repeat_penalty(o: &Obj) -> Result<Option<f32>, ApiError> {
    get_f32_in(o, check::REPEAT_PENALTY)
}

/// Everything a generation request asks for, beyond the prompt.
#[derive(Debug)]
pub(crate) struct Settings {
    pub params: GenerateParams,
    pub stream: bool,
    pub include_usage: bool,
    /// How many alternatives to report per token, when logprobs are asked for.
    pub logprobs: Option<usize>,
    /// Reuse a slot's cached prompt prefix (llama-server's default: true).
    pub cache_prompt: bool,
}

/// LoRA adapter scales (`/lora-adapters`, a request's `lora`): with no
/// adapters loaded only an empty list applies. llama-server skips an
/// unknown id silently, which leaves a client believing an adapter took
/// effect; here one is a 400 that says none are loaded.
pub(crate) fn no_lora(entries: &[Value]) -> Result<(), ApiError> {
    match entries.first() {
        Some(e) => {
            let id = e
                .get("id")
                .map_or_else(|| "-1".to_owned(), Value::to_string);
            Err(ApiError::bad_request(format!(
                "no LoRA adapter with id {id}: this server has none loaded"
            )))
        }
        None => Ok(()),
    }
}

/// Rejects what this server does not do yet, with a message that says so.
pub(crate) fn check_unsupported(o: &Obj) -> Result<(), ApiError> {
    if let Some(v) = field(o, "lora") {
        let entries = v
            .as_array()
            .ok_or_else(|| wrong("lora", "an array of objects with 'id' and 'scale'", v))?;
        no_lora(entries)?;
    }
    // llama-server's `n_cmpl` is `n` by another name.
    for name in ["n", "n_cmpl"] {
        if let Some(n) = get_int(o, name, i64::MIN, i64::MAX)? {
            if n != 1 {
                return Err(ApiError::bad_request(format!(
                    "'{name}' must be 1 (one choice per request), got {n}"
                )));
            }
        }
    }
    // (`response_format`, `json_schema`, `grammar`: structured.rs; tools:
    // the chat's own file.)
    // Legacy completions' echo (the prompt, with its logprobs, leading the
    // text), best_of and suffix (insertion) change what the answer holds: a
    // client that sent them (lm-eval's loglikelihood sends echo) would read
    // an answer to another question, so they are refused, as llama-server
    // refuses them.
    if get_bool(o, "echo")? == Some(true) {
        return Err(ApiError::bad_request(
            "'echo' (the prompt in the answer) is not supported yet",
        ));
    }
    if let Some(n) = get_int(o, "best_of", i64::MIN, i64::MAX)? {
        if n != 1 {
            return Err(ApiError::bad_request(format!(
                "'best_of' must be 1 (one candidate per request), got {n}"
            )));
        }
    }
    if get_str(o, "suffix")?.is_some_and(|s| !s.is_empty()) {
        return Err(ApiError::bad_request(
            "'suffix' (insertion) is not supported yet",
        ));
    }
    Ok(())
}

/// The settings of a request beyond its prompt. `server_n_predict` is the
/// server's `-n` (negative = no limit); a request cannot ask for more.
pub(crate) fn settings(
    o: &Obj,
    api: Api,
    engine: &Engine,
    n_ctx: usize,
    server_n_predict: i64,
) -> Result<Settings, ApiError> {
    check_unsupported(o)?;
    if let Some(m) = field(o, "model") {
        m.as_str().ok_or_else(|| wrong("model", "a string", m))?;
    }
    let mut n_predict = requested_n_predict(o)?;
    if server_n_predict >= 0 && (n_predict < 0 || n_predict > server_n_predict) {
        n_predict = server_n_predict;
    }
    let d = SamplerParams::default();
    let seed = match get_int(o, "seed", -1, i64::MAX)? {
        // A drawn seed is reported (`generation_settings.seed`): 53 bits
        // keep it a number every JSON reader holds exactly and within this
        // field's range, so sending it back repeats the answer.
        None | Some(-1) => d.seed >> 11,
        Some(s) => s as u64,
    };
    let n_vocab = engine.model.spec.hparams.n_vocab;
    let mut sampler = SamplerParams {
        temperature: get_f32_in(o, check::TEMPERATURE)?.unwrap_or(d.temperature),
        // 0 or less is off, as llama-server reads it (it clamps to 0) and
        // as vLLM's clients send it (-1).
        top_k: get_int_in(o, check::TOP_K)?.map_or(d.top_k, |k| k.max(0) as i32),
        top_p: get_f32_in(o, check::TOP_P)?.unwrap_or(d.top_p),
        min_p: get_f32_in(o, check::MIN_P)?.unwrap_or(d.min_p),
        seed,
        repeat_penalty: repeat_penalty(o)?.unwrap_or(d.repeat_penalty),
        repeat_last_n: get_int_in(o, check::REPEAT_LAST_N)?.map_or(d.repeat_last_n, |n| n as i32),
        frequency_penalty: get_f32_in(o, check::FREQUENCY_PENALTY)?.unwrap_or(d.frequency_penalty),
        presence_penalty: get_f32_in(o, check::PRESENCE_PENALTY)?.unwrap_or(d.presence_penalty),
        logit_bias: logit_bias(o, n_vocab, &|t| engine.tokenizer.encode(t, false, false))?,
    };
    llama_sampling(o, &mut sampler)?;
    let stop = stop_strings(o)?;
    let stream = get_bool(o, "stream")?.unwrap_or(false);
    let include_usage = match field(o, "stream_options") {
        None => false,
        Some(Value::Object(so)) => get_bool(so, "include_usage")?.unwrap_or(false),
        Some(v) => return Err(wrong("stream_options", "an object", v)),
    };
    let cache_prompt = get_bool(o, "cache_prompt")?.unwrap_or(true);
    let logprobs = match api {
        Api::Chat => {
            let top = get_int(o, "top_logprobs", 0, 20)?;
            match get_bool(o, "logprobs")? {
                Some(true) => Some(top.unwrap_or(0) as usize),
                _ if top.is_some_and(|t| t > 0) => {
                    return Err(ApiError::bad_request(
                        "'top_logprobs' needs 'logprobs': true",
                    ))
                }
                _ => None,
            }
        }
        Api::Completions => get_int(o, "logprobs", 0, 20)?.map(|n| n as usize),
        Api::Llama => get_int(o, "n_probs", 0, 100)?
            .filter(|&n| n > 0)
            .map(|n| n as usize),
        // Refused in `responses_request`; Anthropic's API has none.
        Api::Responses | Api::Messages => None,
    };
    let params = GenerateParams {
        n_predict,
        n_ctx,
        sampler,
        ignore_eos: get_bool(o, "ignore_eos")?.unwrap_or(false),
        stop,
        // The engine reports the chosen token's logprob only with at least
        // one alternative; extra alternatives are cut when formatting.
        n_probs: logprobs.map_or(0, |n| n.max(1)),
        pipelined: true,
        // The slots' caches are set up once, for the server (`--swa-full`).
        swa_full: false,
        // Set by `parse` (structured output, tools).
        constraint: None,
    };
    Ok(Settings {
        params,
        stream,
        include_usage,
        logprobs,
        cache_prompt,
    })
}

/// OpenAI's `{"token id": bias}` or llama-server's `[[id, bias], ...]`, where
/// a bias of `false` bans the token.
/// A key or first element that is text, not a token id, biases each token
/// of that text (`tokenize`, without special tokens), as llama-server does.
fn logit_bias(
    o: &Obj,
    n_vocab: usize,
    tokenize: &dyn Fn(&str) -> Vec<u32>,
) -> Result<Vec<(u32, f32)>, ApiError> {
    // `shown` is the id as the request wrote it (it may not fit any type).
    let token = |id: Option<i128>, shown: &dyn std::fmt::Display| {
        id.and_then(|id| u32::try_from(id).ok())
            .filter(|&t| (t as usize) < n_vocab)
            .ok_or_else(|| {
                ApiError::bad_request(format!(
                    "logit_bias: token id {shown} is outside the vocabulary of {n_vocab}"
                ))
            })
    };
    let bias = |v: &Value| -> Result<f32, ApiError> {
        match v {
            Value::Bool(false) => Ok(f32::NEG_INFINITY),
            // (A JSON number is never NaN: `as_f64` always answers.)
            Value::Number(n) => check::check_logit_bias(n.as_f64().unwrap_or(f64::NAN))
                .map(|b| b as f32)
                .map_err(range_error),
            other => Err(wrong("logit_bias value", "a number or false", other)),
        }
    };
    let text = |t: &str, b: f32| tokenize(t).into_iter().map(move |id| (id, b));
    let mut out = Vec::new();
    match field(o, "logit_bias") {
        None => {}
        Some(Value::Object(m)) => {
            for (k, v) in m {
                let b = bias(v)?;
                let digits = k.trim().trim_start_matches('-');
                if !digits.is_empty() && digits.bytes().all(|c| c.is_ascii_digit()) {
                    out.push((token(k.trim().parse().ok(), k)?, b));
                } else {
                    out.extend(text(k, b));
                }
            }
        }
        Some(Value::Array(pairs)) => {
            for pair in pairs {
                match pair.as_array().map(Vec::as_slice) {
                    Some([Value::String(t), b]) => out.extend(text(t, bias(b)?)),
                    Some([id @ Value::Number(n), b]) if n.is_i64() || n.is_u64() => {
                        let v = n.as_i64().map(i128::from).or(n.as_u64().map(i128::from));
                        out.push((token(v, id)?, bias(b)?));
                    }
                    Some([id, _]) => return Err(wrong("logit_bias token id", "an integer", id)),
                    _ => {
                        return Err(ApiError::bad_request(
                            "logit_bias entries must be [token id or text, bias] pairs",
                        ))
                    }
                }
            }
        }
        Some(v) => return Err(wrong("logit_bias", "an object or an array", v)),
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Obj {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn repeat_penalty_must_be_above_zero() {
        let e = repeat_penalty(&obj(json!({"repeat_penalty": 0}))).unwrap_err();
        assert!(e.message.contains("must be above 0"), "{}", e.message);
        let e = repeat_penalty(&obj(json!({"repeat_penalty": -1}))).unwrap_err();
        assert!(e.message.contains("between 0 and 100"), "{}", e.message);
        assert_eq!(
            repeat_penalty(&obj(json!({"repeat_penalty": 1e-30}))).unwrap(),
            Some(1e-30)
        );
        assert_eq!(repeat_penalty(&obj(json!({}))).unwrap(), None);
    }

    #[test]
    fn stop_strings_are_capped_in_number_and_length() {
        let many: Vec<String> = (0..=MAX_STOPS).map(|i| format!("s{i}")).collect();
        let e = stop_strings(&obj(json!({ "stop": many }))).unwrap_err();
        assert!(
            e.message.contains("at most 64 strings, got 65"),
            "{}",
            e.message
        );
        let ok: Vec<String> = many[..MAX_STOPS].to_vec();
        assert_eq!(stop_strings(&obj(json!({ "stop": ok }))).unwrap().len(), 64);
        let long = "x".repeat(MAX_STOP_BYTES + 1);
        let e = stop_strings(&obj(json!({ "stop": ["a", long] }))).unwrap_err();
        assert!(e.message.contains("got one of 1025"), "{}", e.message);
        assert_eq!(
            stop_strings(&obj(json!({"stop": "end"}))).unwrap(),
            vec!["end".to_owned()]
        );
    }

    #[test]
    fn the_tightest_token_limit_holds() {
        let n = |v: Value| requested_n_predict(&obj(v)).unwrap();
        assert_eq!(n(json!({})), -1);
        assert_eq!(n(json!({"max_tokens": 3, "max_completion_tokens": -1})), 3);
        assert_eq!(n(json!({"max_completion_tokens": 7, "max_tokens": 9})), 7);
        assert_eq!(n(json!({"n_predict": 0, "max_tokens": 5})), 0);
        assert_eq!(n(json!({"n_predict": -1})), -1);
    }

    #[test]
    fn unsupported_features_say_so() {
        for (v, want) in [
            (json!({"n": 3}), "'n' must be 1"),
            (json!({"n_cmpl": 2}), "'n_cmpl' must be 1"),
            (json!({"echo": true}), "'echo'"),
            (json!({"best_of": 2}), "'best_of' must be 1"),
            (json!({"suffix": "}"}), "'suffix'"),
        ] {
            let e = check_unsupported(&obj(v)).unwrap_err();
            assert!(e.message.contains(want), "{}", e.message);
        }
        let fine = json!({"n": 1, "echo": false, "best_of": 1, "suffix": ""});
        assert!(check_unsupported(&obj(fine)).is_ok());
    }

    #[test]
    fn logit_bias_in_both_shapes() {
        // A stand-in tokenizer: one token per byte, id = byte % 10.
        let tok = |t: &str| t.bytes().map(|b| u32::from(b % 10)).collect::<Vec<u32>>();
        let logit_bias = |o: &Obj, n| logit_bias(o, n, &tok);
        let o = obj(json!({"logit_bias": {"5": -1.5, "7": false}}));
        let mut b = logit_bias(&o, 10).unwrap();
        b.sort_by_key(|p| p.0);
        assert_eq!(b, vec![(5, -1.5), (7, f32::NEG_INFINITY)]);
        let o = obj(json!({"logit_bias": [[3, 2.0]]}));
        assert_eq!(logit_bias(&o, 10).unwrap(), vec![(3, 2.0)]);
        // Text instead of an id: each of its tokens, as llama-server.
        let o = obj(json!({"logit_bias": [["ab", false]]}));
        let ban = f32::NEG_INFINITY;
        assert_eq!(logit_bias(&o, 10).unwrap(), vec![(7, ban), (8, ban)]);
        let o = obj(json!({"logit_bias": {"c": 1.0}}));
        assert_eq!(logit_bias(&o, 10).unwrap(), vec![(9, 1.0)]);
        for bad in [
            json!({"logit_bias": {"10": 1}}),
            json!({"logit_bias": {"x": "big"}}),
            json!({"logit_bias": [[1]]}),
            json!({"logit_bias": [[[1], 1]]}),
            json!({"logit_bias": 3}),
            json!({"logit_bias": {"1": "big"}}),
        ] {
            assert!(logit_bias(&obj(bad), 10).is_err());
        }
        let huge = obj(json!({"logit_bias": [[18446744073709551615u64, 1]]}));
        let e = logit_bias(&huge, 10).unwrap_err();
        assert!(
            e.message.contains("outside the vocabulary"),
            "{}",
            e.message
        );
    }
}
