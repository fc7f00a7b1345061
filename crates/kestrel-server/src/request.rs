//! Request bodies: JSON checked field by field, so that a wrong type or an
//! out-of-range value gets a 400 that names the field, and the generation
//! parameters are built the same way for every endpoint.

use kestrel_engine::{Engine, GenerateParams};
use kestrel_sampling::check::{self, Bounds};
use kestrel_sampling::SamplerParams;
use kestrel_tokenizer::chat::ChatMessage;
use kestrel_tokenizer::Tokenizer;
use serde_json::{json, Map, Value};

use crate::error::ApiError;

type Obj = Map<String, Value>;

/// A request body as JSON, or a 400 naming the parse error.
pub fn parse_json(body: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("the body is not valid JSON: {e}")))
}

/// Parses a body that must be a JSON object.
pub fn parse_object(body: &[u8]) -> Result<Obj, ApiError> {
    match parse_json(body)? {
        Value::Object(m) => Ok(m),
        other => Err(ApiError::bad_request(format!(
            "the body must be a JSON object, got {}",
            kind(&other)
        ))),
    }
}

/// A JSON value's kind, for error messages.
pub fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn wrong(name: &str, want: &str, got: &Value) -> ApiError {
    ApiError::bad_request(format!("'{name}' must be {want}, got {}", kind(got)))
}

/// A present, non-null field.
fn field<'a>(o: &'a Obj, name: &str) -> Option<&'a Value> {
    o.get(name).filter(|v| !v.is_null())
}

pub fn get_bool(o: &Obj, name: &str) -> Result<Option<bool>, ApiError> {
    field(o, name)
        .map(|v| v.as_bool().ok_or_else(|| wrong(name, "a boolean", v)))
        .transpose()
}

pub fn get_str<'a>(o: &'a Obj, name: &str) -> Result<Option<&'a str>, ApiError> {
    field(o, name)
        .map(|v| v.as_str().ok_or_else(|| wrong(name, "a string", v)))
        .transpose()
}

/// A number within `lo..=hi`.
fn get_f32(o: &Obj, name: &str, lo: f32, hi: f32) -> Result<Option<f32>, ApiError> {
    let Some(v) = field(o, name) else {
        return Ok(None);
    };
    let x = v.as_f64().ok_or_else(|| wrong(name, "a number", v))?;
    if !(f64::from(lo)..=f64::from(hi)).contains(&x) {
        return Err(ApiError::bad_request(format!(
            "'{name}' must be between {lo} and {hi}, got {x}"
        )));
    }
    Ok(Some(x as f32))
}

/// A number within a sampler parameter's `bounds` (kestrel-sampling's
/// [`check`] holds them, for the CLI too).
fn get_f32_in(o: &Obj, bounds: Bounds<f64>) -> Result<Option<f32>, ApiError> {
    let name = bounds.field;
    let Some(v) = field(o, name) else {
        return Ok(None);
    };
    let x = v.as_f64().ok_or_else(|| wrong(name, "a number", v))?;
    let x = bounds.check(x).map_err(range_error)?;
    Ok(Some(x as f32))
}

fn range_error(e: kestrel_sampling::RangeError) -> ApiError {
    ApiError::bad_request(e.to_string())
}

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

/// An integer within `lo..=hi`.
pub fn get_int(o: &Obj, name: &'static str, lo: i64, hi: i64) -> Result<Option<i64>, ApiError> {
    get_int_in(
        o,
        Bounds {
            field: name,
            lo,
            hi,
            above_lo: None,
        },
    )
}

/// An integer within `bounds`, the field they name.
fn get_int_in(o: &Obj, bounds: Bounds<i64>) -> Result<Option<i64>, ApiError> {
    let name = bounds.field;
    let Some(v) = field(o, name) else {
        return Ok(None);
    };
    let x = match v.as_i64() {
        Some(x) => x,
        // 3.0 is an integer to most JSON writers; 3.5 is not.
        None => match v.as_f64() {
            Some(f) if f.fract() == 0.0 && f.abs() < 9e15 => f as i64,
            // A whole number past i64 (an u64, 1e300) is out of range, not
            // of the wrong type.
            Some(f) if f.fract() == 0.0 => return Err(range_error(bounds.outside(v))),
            _ => return Err(wrong(name, "an integer", v)),
        },
    };
    bounds.check(x).map(Some).map_err(range_error)
}

/// Which endpoint a request came to; decides field names and defaults.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Api {
    Chat,
    Completions,
    /// llama-server's `/completion`.
    Llama,
    /// OpenAI's `/v1/responses`.
    Responses,
    /// Anthropic's `/v1/messages` (which llama-server answers too).
    Messages,
}

/// Everything a generation request asks for, beyond the prompt.
#[derive(Debug)]
pub struct GenRequest {
    pub params: GenerateParams,
    pub stream: bool,
    pub include_usage: bool,
    /// How many alternatives to report per token, when logprobs are asked for.
    pub logprobs: Option<usize>,
    /// Reuse a slot's cached prompt prefix (llama-server's default: true).
    pub cache_prompt: bool,
}

/// Rejects what this server does not do yet, with a message that says so.
/// LoRA adapter scales (`/lora-adapters`, a request's `lora`): with no
/// adapters loaded only an empty list applies. llama-server skips an
/// unknown id silently, which leaves a client believing an adapter took
/// effect; here one is a 400 that says none are loaded.
pub fn no_lora(entries: &[Value]) -> Result<(), ApiError> {
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

pub fn check_unsupported(o: &Obj) -> Result<(), ApiError> {
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
    if let Some(rf) = field(o, "response_format") {
        let rf = rf
            .as_object()
            .ok_or_else(|| wrong("response_format", "an object", rf))?;
        let t = match rf.get("type") {
            Some(Value::String(t)) => t.as_str(),
            Some(v) => return Err(wrong("response_format.type", "a string", v)),
            None => return Err(ApiError::bad_request(
                "'response_format' needs a 'type' (\"text\", \"json_object\" or \"json_schema\")",
            )),
        };
        match t {
            "text" => {}
            "json_object" | "json_schema" => {
                return Err(ApiError::bad_request(format!(
                    "response_format '{t}' is not supported yet"
                )))
            }
            other => {
                return Err(ApiError::bad_request(format!(
                    "unknown response_format type {other:?}"
                )))
            }
        }
    }
    for name in ["tools", "functions"] {
        if let Some(v) = field(o, name) {
            if v.as_array().is_none_or(|a| !a.is_empty()) {
                return Err(ApiError::bad_request(format!(
                    "'{name}' (tool calling) is not supported yet"
                )));
            }
        }
    }
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
    for name in ["json_schema", "grammar"] {
        if field(o, name).is_some() {
            return Err(ApiError::bad_request(format!(
                "'{name}' is not supported yet"
            )));
        }
    }
    Ok(())
}

/// The generation parameters of a request. `server_n_predict` is the
/// server's `-n` (negative = no limit); a request cannot ask for more.
pub fn gen_request(
    o: &Obj,
    api: Api,
    engine: &Engine,
    n_ctx: usize,
    server_n_predict: i64,
) -> Result<GenRequest, ApiError> {
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
    };
    Ok(GenRequest {
        params,
        stream,
        include_usage,
        logprobs,
        cache_prompt,
    })
}

/// A llama.cpp sampler, as `samplers` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    Penalties,
    Dry,
    TopNSigma,
    TopK,
    TypicalP,
    TopP,
    MinP,
    Xtc,
    Temperature,
    Infill,
    AdaptiveP,
}

impl Stage {
    /// llama.cpp's names (any case, `-` for `_` or neither, and its aliases)
    /// and letters.
    fn named(name: &str) -> Option<Stage> {
        let key: String = name
            .to_ascii_lowercase()
            .chars()
            .filter(|c| *c != '_' && *c != '-')
            .collect();
        Some(match key.as_str() {
            "penalties" => Stage::Penalties,
            "dry" => Stage::Dry,
            "topnsigma" => Stage::TopNSigma,
            "topk" => Stage::TopK,
            "typp" | "typ" => Stage::TypicalP,
            "topp" | "nucleus" => Stage::TopP,
            "minp" => Stage::MinP,
            "xtc" => Stage::Xtc,
            "temperature" | "temp" => Stage::Temperature,
            "infill" => Stage::Infill,
            "adaptivep" => Stage::AdaptiveP,
            _ => return None,
        })
    }

    fn lettered(c: char) -> Option<Stage> {
        Some(match c {
            'e' => Stage::Penalties,
            'd' => Stage::Dry,
            's' => Stage::TopNSigma,
            'k' => Stage::TopK,
            'y' => Stage::TypicalP,
            'p' => Stage::TopP,
            'm' => Stage::MinP,
            'x' => Stage::Xtc,
            't' => Stage::Temperature,
            'i' => Stage::Infill,
            'a' => Stage::AdaptiveP,
            _ => return None,
        })
    }
}

/// The stages Kestrel's chain runs, in its (llama.cpp's default) order.
const CHAIN: [Stage; 5] = [
    Stage::Penalties,
    Stage::TopK,
    Stage::TopP,
    Stage::MinP,
    Stage::Temperature,
];

/// llama-server's sampling fields beyond Kestrel's chain. Each is accepted
/// at the value that turns its sampler off (clients such as chat front
/// ends send the whole set with those values) and is a 400 otherwise,
/// never silently ignored. `samplers` (llama-server's order of the chain,
/// names or letters) may leave stages out, which turns them off here as
/// there, but may not reorder Kestrel's five.
fn llama_sampling(o: &Obj, s: &mut SamplerParams) -> Result<(), ApiError> {
    let any = |name| get_f32(o, name, f32::MIN, f32::MAX);
    let refuse = |what: &str| {
        Err(ApiError::bad_request(format!(
            "{what} is not supported yet"
        )))
    };
    if get_int(o, "mirostat", 0, 2)?.is_some_and(|m| m != 0) {
        return refuse("'mirostat' sampling (0 turns it off)");
    }
    if any("typical_p")?.is_some_and(|p| p < 1.0) {
        return refuse("'typical_p' below 1 (locally typical sampling)");
    }
    if any("top_n_sigma")?.is_some_and(|n| n > 0.0) {
        return refuse("'top_n_sigma' above 0");
    }
    let xtc_threshold = get_f32(o, "xtc_threshold", 0.0, 1.0)?.unwrap_or(0.1);
    if get_f32(o, "xtc_probability", 0.0, 1.0)?.is_some_and(|p| p > 0.0) && xtc_threshold <= 0.5 {
        return refuse("XTC sampling ('xtc_probability' above 0)");
    }
    if any("dynatemp_range")?.is_some_and(|r| r > 0.0) {
        return refuse("dynamic temperature ('dynatemp_range' above 0)");
    }
    if any("dry_multiplier")?.is_some_and(|m| m != 0.0) {
        return refuse("DRY sampling ('dry_multiplier' other than 0)");
    }
    if any("adaptive_target")?.is_some_and(|t| t >= 0.0) {
        return refuse("adaptive-p sampling ('adaptive_target' of 0 or more)");
    }
    if get_int(o, "min_keep", 0, i64::from(i32::MAX))?.is_some_and(|k| k > 1) {
        return refuse("'min_keep' above 1");
    }
    if get_bool(o, "post_sampling_probs")? == Some(true) {
        return refuse("'post_sampling_probs'");
    }
    let Some(v) = field(o, "samplers") else {
        return Ok(());
    };
    let stages: Vec<Stage> = match v {
        Value::Array(names) => names
            .iter()
            .map(|n| {
                n.as_str().and_then(Stage::named).ok_or_else(|| {
                    ApiError::bad_request(format!("'samplers': unknown sampler {n}"))
                })
            })
            .collect::<Result<_, _>>()?,
        Value::String(letters) => letters
            .chars()
            .map(|c| {
                Stage::lettered(c).ok_or_else(|| {
                    ApiError::bad_request(format!("'samplers': unknown sampler letter {c:?}"))
                })
            })
            .collect::<Result<_, _>>()?,
        other => {
            return Err(wrong(
                "samplers",
                "an array of names or a string of letters",
                other,
            ))
        }
    };
    if let Some(st) = stages
        .iter()
        .find(|st| matches!(st, Stage::Infill | Stage::AdaptiveP))
    {
        return refuse(&format!("the {st:?} sampler"));
    }
    // The other stages beyond the chain are off (checked above) wherever
    // they stand; Kestrel's five must keep its order.
    let ours: Vec<usize> = stages
        .iter()
        .filter_map(|st| CHAIN.iter().position(|c| c == st))
        .collect();
    if ours.windows(2).any(|w| w[0] >= w[1]) {
        return refuse(
            "'samplers' in another order than penalties, top_k, top_p, min_p, temperature",
        );
    }
    for (i, stage) in CHAIN.iter().enumerate() {
        if ours.contains(&i) {
            continue;
        }
        match stage {
            Stage::Penalties => {
                s.repeat_penalty = 1.0;
                s.frequency_penalty = 0.0;
                s.presence_penalty = 0.0;
            }
            Stage::TopK => s.top_k = 0,
            Stage::TopP => s.top_p = 1.0,
            Stage::MinP => s.min_p = 0.0,
            // Without its temperature stage llama.cpp draws from the
            // filtered logits as they are.
            _ => s.temperature = 1.0,
        }
    }
    Ok(())
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

/// llama-server's logical batch (`-b`, 2048 by default): its `/infill`
/// sizes the prefix and suffix it keeps by it.
pub const INFILL_BATCH: usize = 2048;

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
pub fn infill_tokens(
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

/// An OpenAI Responses request (`POST /v1/responses`) as the chat request
/// it asks for: `instructions` become a system turn, `input` (a string, or
/// message items whose content is a string or text parts) the turns after
/// it, `max_output_tokens` the token limit, `text.format` the
/// response_format; what has no chat equivalent here (stored responses,
/// background runs, tool items, non-text parts, logprobs) is a 400.
pub fn responses_request(o: &Obj) -> Result<Obj, ApiError> {
    let mut chat = o.clone();
    for name in [
        "input",
        "instructions",
        "max_output_tokens",
        "text",
        "messages",
    ] {
        chat.remove(name);
    }
    if field(o, "previous_response_id").is_some() {
        return Err(ApiError::bad_request(
            "'previous_response_id' is not supported: the server keeps no responses; send the whole conversation in 'input'",
        ));
    }
    if get_bool(o, "background")? == Some(true) {
        return Err(ApiError::bad_request(
            "'background' responses are not supported",
        ));
    }
    if get_int(o, "top_logprobs", 0, 20)?.is_some_and(|n| n > 0) {
        return Err(ApiError::bad_request(
            "'top_logprobs' is not supported on /v1/responses yet (use /v1/chat/completions)",
        ));
    }
    let mut messages = Vec::new();
    if let Some(text) = get_str(o, "instructions")? {
        messages.push(json!({"role": "system", "content": text}));
    }
    match o.get("input") {
        Some(Value::String(text)) => messages.push(json!({"role": "user", "content": text})),
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                messages.push(response_item(&format!("input[{i}]"), item)?);
            }
        }
        Some(v) => return Err(wrong("input", "a string or an array of items", v)),
        None => return Err(ApiError::bad_request("'input' is required")),
    }
    chat.insert("messages".into(), Value::Array(messages));
    if let Some(n) = field(o, "max_output_tokens") {
        chat.insert("max_tokens".into(), n.clone());
    }
    if let Some(text) = field(o, "text") {
        let text = text
            .as_object()
            .ok_or_else(|| wrong("text", "an object", text))?;
        if let Some(format) = field(text, "format") {
            chat.insert("response_format".into(), format.clone());
        }
    }
    Ok(chat)
}

/// An Anthropic Messages request (`POST /v1/messages`) as the chat request
/// it asks for: `system` (a string or text blocks, joined as llama-server
/// joins them) becomes a system turn, `messages` (user and assistant turns
/// whose content is a string or text blocks) the turns after it,
/// `stop_sequences` the stop strings; tool, image, document and thinking
/// blocks are a 400, as are tools (`check_unsupported`).
pub fn messages_request(o: &Obj) -> Result<Obj, ApiError> {
    let mut chat = o.clone();
    for name in ["system", "messages", "stop_sequences", "thinking"] {
        chat.remove(name);
    }
    if let Some(t) = field(o, "thinking") {
        let t = t
            .as_object()
            .ok_or_else(|| wrong("thinking", "an object", t))?;
        if get_str(t, "type")? == Some("enabled") {
            return Err(ApiError::bad_request(
                "'thinking' is not supported (this server has no thinking blocks)",
            ));
        }
    }
    let mut turns = Vec::new();
    match field(o, "system") {
        None => {}
        Some(Value::String(text)) => turns.push(json!({"role": "system", "content": text})),
        Some(Value::Array(blocks)) => {
            let text = text_blocks("system", blocks)?.concat();
            turns.push(json!({"role": "system", "content": text}));
        }
        Some(v) => return Err(wrong("system", "a string or an array of text blocks", v)),
    }
    let list = match o.get("messages") {
        Some(Value::Array(list)) => list,
        Some(v) => return Err(wrong("messages", "an array", v)),
        None => return Err(ApiError::bad_request("'messages' is required")),
    };
    for (i, m) in list.iter().enumerate() {
        let at = format!("messages[{i}]");
        let m = m.as_object().ok_or_else(|| wrong(&at, "an object", m))?;
        let role = get_str(m, "role")?
            .ok_or_else(|| ApiError::bad_request(format!("{at} has no 'role'")))?;
        if !matches!(role, "user" | "assistant") {
            return Err(ApiError::bad_request(format!(
                "{at}: unknown role {role:?} (expected user or assistant; the system prompt goes in 'system')"
            )));
        }
        let content = match m.get("content") {
            Some(Value::String(text)) => json!(text),
            Some(Value::Array(blocks)) => {
                let parts: Vec<Value> = text_blocks(&format!("{at}.content"), blocks)?
                    .into_iter()
                    .map(|t| json!({"type": "text", "text": t}))
                    .collect();
                json!(parts)
            }
            Some(v) => return Err(wrong(&format!("{at}.content"), "a string or an array", v)),
            None => return Err(ApiError::bad_request(format!("{at} has no 'content'"))),
        };
        turns.push(json!({"role": role, "content": content}));
    }
    chat.insert("messages".into(), Value::Array(turns));
    if let Some(stop) = field(o, "stop_sequences") {
        if !stop.is_array() {
            return Err(wrong("stop_sequences", "an array of strings", stop));
        }
        chat.insert("stop".into(), stop.clone());
    }
    Ok(chat)
}

/// The texts of Anthropic content blocks, which must all be text blocks.
fn text_blocks<'a>(at: &str, blocks: &'a [Value]) -> Result<Vec<&'a str>, ApiError> {
    blocks
        .iter()
        .enumerate()
        .map(|(j, b)| {
            let at = format!("{at}[{j}]");
            let b = b.as_object().ok_or_else(|| wrong(&at, "an object", b))?;
            match get_str(b, "type")? {
                Some("text") => get_str(b, "text")?
                    .ok_or_else(|| ApiError::bad_request(format!("{at} has no 'text'"))),
                Some(t) => Err(ApiError::bad_request(format!(
                    "{at}: content blocks of type {t:?} are not supported (only text)"
                ))),
                None => Err(ApiError::bad_request(format!("{at} has no 'type'"))),
            }
        })
        .collect()
}

/// One `input` item as a chat message.
fn response_item(at: &str, item: &Value) -> Result<Value, ApiError> {
    let item = item
        .as_object()
        .ok_or_else(|| wrong(at, "an object", item))?;
    match get_str(item, "type")? {
        None | Some("message") => {}
        Some(t) => {
            return Err(ApiError::bad_request(format!(
                "{at}: items of type {t:?} are not supported (only messages)"
            )))
        }
    }
    let role = get_str(item, "role")?
        .ok_or_else(|| ApiError::bad_request(format!("{at} has no 'role'")))?;
    if !matches!(role, "user" | "system" | "developer" | "assistant") {
        return Err(ApiError::bad_request(format!(
            "{at}: unknown role {role:?} (expected user, system, developer or assistant)"
        )));
    }
    let content = match item.get("content") {
        Some(Value::String(text)) => Value::String(text.clone()),
        Some(Value::Array(parts)) => {
            let mut texts = Vec::new();
            for (j, p) in parts.iter().enumerate() {
                let at = format!("{at}.content[{j}]");
                let p = p.as_object().ok_or_else(|| wrong(&at, "an object", p))?;
                match get_str(p, "type")? {
                    Some("input_text" | "output_text") => {
                        let text = get_str(p, "text")?
                            .ok_or_else(|| ApiError::bad_request(format!("{at} has no 'text'")))?;
                        texts.push(json!({"type": "text", "text": text}));
                    }
                    Some(t) => {
                        return Err(ApiError::bad_request(format!(
                            "{at}: content parts of type {t:?} are not supported (only input_text and output_text)"
                        )))
                    }
                    None => return Err(ApiError::bad_request(format!("{at} has no 'type'"))),
                }
            }
            Value::Array(texts)
        }
        Some(v) => return Err(wrong(&format!("{at}.content"), "a string or an array", v)),
        None => return Err(ApiError::bad_request(format!("{at} has no 'content'"))),
    };
    Ok(json!({"role": role, "content": content}))
}

/// The conversation of a chat request: a non-empty array of messages with
/// known roles and text content (a string or an array of text parts).
pub fn messages(o: &Obj) -> Result<Vec<ChatMessage>, ApiError> {
    let v = o
        .get("messages")
        .ok_or_else(|| ApiError::bad_request("'messages' is required"))?;
    let list = v
        .as_array()
        .ok_or_else(|| wrong("messages", "an array", v))?;
    if list.is_empty() {
        return Err(ApiError::bad_request("'messages' must not be empty"));
    }
    list.iter()
        .enumerate()
        .map(|(i, m)| {
            let m = m
                .as_object()
                .ok_or_else(|| wrong(&format!("messages[{i}]"), "an object", m))?;
            let role = match m.get("role") {
                Some(Value::String(r)) => r.as_str(),
                Some(other) => return Err(wrong(&format!("messages[{i}].role"), "a string", other)),
                None => {
                    return Err(ApiError::bad_request(format!(
                        "messages[{i}] has no 'role'"
                    )))
                }
            };
            let role = match role {
                "system" | "user" | "assistant" => role,
                // OpenAI's newer name for system instructions.
                "developer" => "system",
                other => {
                    return Err(ApiError::bad_request(format!(
                        "messages[{i}]: unknown role {other:?} (expected system, developer, user or assistant)"
                    )))
                }
            };
            // A conversation that used tools cannot be rendered faithfully
            // without them (see `unsupported`).
            if m.get("tool_calls").is_some_and(|t| !t.is_null() && t != &Value::Array(vec![])) {
                return Err(ApiError::bad_request(format!(
                    "messages[{i}].tool_calls: tool calls are not supported yet"
                )));
            }
            let content = match m.get("content") {
                Some(Value::String(s)) => s.clone(),
                // OpenAI's assistant turns may carry null (llama-server reads "").
                Some(Value::Null) => String::new(),
                Some(Value::Array(parts)) => {
                    let mut text = String::new();
                    for (j, p) in parts.iter().enumerate() {
                        let at = format!("messages[{i}].content[{j}]");
                        let p = p.as_object().ok_or_else(|| wrong(&at, "an object", p))?;
                        match p.get("type").and_then(Value::as_str) {
                            Some("text") => match p.get("text") {
                                // Parts join with a newline, as llama-server
                                // joins them for templates of plain strings.
                                Some(Value::String(t)) => {
                                    if !text.is_empty() {
                                        text.push('\n');
                                    }
                                    text.push_str(t)
                                }
                                Some(other) => {
                                    return Err(wrong(&format!("{at}.text"), "a string", other))
                                }
                                None => {
                                    return Err(ApiError::bad_request(format!(
                                        "{at} has no 'text'"
                                    )))
                                }
                            },
                            Some(t) => {
                                return Err(ApiError::bad_request(format!(
                                    "{at}: content parts of type {t:?} are not supported (only text)"
                                )))
                            }
                            None => {
                                return Err(ApiError::bad_request(format!(
                                    "{at} has no 'type'"
                                )))
                            }
                        }
                    }
                    text
                }
                Some(other) => {
                    return Err(wrong(
                        &format!("messages[{i}].content"),
                        "a string or an array of text parts",
                        other,
                    ))
                }
                None => {
                    return Err(ApiError::bad_request(format!(
                        "messages[{i}] has no 'content'"
                    )))
                }
            };
            Ok(ChatMessage {
                role: role.to_owned(),
                content,
            })
        })
        .collect()
}

/// A conversation that ends with an assistant turn asks the model to go on
/// with that turn (a prefill), as llama-server does: the turn is taken off
/// here, the rest is rendered with the assistant's opening, and its text
/// follows; the answer's content then starts with it. Two assistant turns
/// at the end are a 400, as llama-server's.
pub fn take_prefill(messages: &mut Vec<ChatMessage>) -> Result<Option<String>, ApiError> {
    let n = messages.len();
    if messages.last().is_none_or(|m| m.role != "assistant") {
        return Ok(None);
    }
    if n >= 2 && messages[n - 2].role == "assistant" {
        return Err(ApiError::bad_request(
            "messages: two or more assistant turns at the end (only the last may be continued)",
        ));
    }
    Ok(messages.pop().map(|m| m.content))
}

/// The prompt of a completion request as tokens: a string (tokenized with
/// BOS as the vocabulary asks), a one-element array of a string, or token
/// ids (used as given).
pub fn prompt_tokens(o: &Obj, engine: &Engine, n_ctx: usize) -> Result<Vec<u32>, ApiError> {
    let v = o
        .get("prompt")
        .ok_or_else(|| ApiError::bad_request("'prompt' is required"))?;
    let n_vocab = engine.model.spec.hparams.n_vocab;
    let ids = |a: &[Value]| -> Result<Vec<u32>, ApiError> {
        a.iter()
            .map(|t| match t.as_u64() {
                Some(id) if id < n_vocab as u64 => Ok(id as u32),
                Some(id) => Err(ApiError::bad_request(format!(
                    "prompt: token id {id} is outside the vocabulary of {n_vocab}"
                ))),
                None => Err(ApiError::bad_request(format!(
                    "prompt: an array prompt must hold token ids (non-negative integers) or one string, got {}",
                    kind(t)
                ))),
            })
            .collect()
    };
    let tokens = match v {
        Value::String(s) => tokenize_within(engine, s, n_ctx)?,
        Value::Array(a) => match a.as_slice() {
            [Value::String(s)] => tokenize_within(engine, s, n_ctx)?,
            [Value::Array(inner)] => ids(inner)?,
            [_, _, ..] if a.iter().all(Value::is_string) => {
                return Err(ApiError::bad_request(
                    "several prompts in one request are not supported yet",
                ))
            }
            _ => ids(a)?,
        },
        other => {
            return Err(wrong(
                "prompt",
                "a string, an array of strings or an array of token ids",
                other,
            ))
        }
    };
    Ok(tokens)
}

/// Tokenizes a prompt's text, unless its length alone shows that it cannot
/// fit `n_ctx`: no token stands for more than the vocabulary's longest
/// token's bytes, so a text of `n` bytes has at least `n / longest` tokens.
/// An 8 MiB prompt is then refused before anything is built for it.
pub fn tokenize_within(engine: &Engine, text: &str, n_ctx: usize) -> Result<Vec<u32>, ApiError> {
    let at_least = engine.tokenizer.min_tokens(text);
    if at_least >= n_ctx {
        return Err(ApiError::exceeds_context_at_least(
            at_least,
            text.len(),
            n_ctx,
        ));
    }
    Ok(engine.tokenize_prompt(text))
}

/// A prompt that the generation can take: not empty, and shorter than the
/// context (one slot is needed for the first generated token).
pub fn check_prompt_len(tokens: &[u32], n_ctx: usize) -> Result<(), ApiError> {
    if tokens.is_empty() {
        return Err(ApiError::bad_request("the prompt is empty"));
    }
    if tokens.len() >= n_ctx {
        return Err(ApiError::exceeds_context(tokens.len(), n_ctx));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Obj {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn a_responses_request_reads_as_its_chat() {
        let chat = responses_request(&obj(json!({
            "model": "m", "instructions": "Be brief.", "max_output_tokens": 7,
            "temperature": 0.5, "text": {"format": {"type": "text"}}, "store": false,
            "input": [
                {"role": "user", "content": "Hi"},
                {"type": "message", "role": "assistant",
                 "content": [{"type": "output_text", "text": "Hello"}]},
                {"role": "developer", "content": [{"type": "input_text", "text": "a"},
                    {"type": "input_text", "text": "b"}]},
            ],
        })))
        .unwrap();
        assert_eq!(
            Value::Object(chat.clone()),
            json!({
                "model": "m", "temperature": 0.5, "store": false,
                "messages": [
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "Hi"},
                    {"role": "assistant", "content": [{"type": "text", "text": "Hello"}]},
                    {"role": "developer", "content": [{"type": "text", "text": "a"},
                        {"type": "text", "text": "b"}]},
                ],
                "max_tokens": 7, "response_format": {"type": "text"},
            })
        );
        // Text parts join as a chat's do.
        let m = messages(&chat).unwrap();
        assert_eq!(m[3].content, "a\nb");
        let plain = responses_request(&obj(json!({"input": "Hi"}))).unwrap();
        assert_eq!(
            plain["messages"],
            json!([{"role": "user", "content": "Hi"}])
        );
    }

    #[test]
    fn an_anthropic_request_reads_as_its_chat() {
        let chat = messages_request(&obj(json!({
            "model": "m", "max_tokens": 9, "temperature": 0.2, "stop_sequences": ["!"],
            "system": [{"type": "text", "text": "Be "}, {"type": "text", "text": "brief."}],
            "thinking": {"type": "disabled"}, "metadata": {"user_id": "u"},
            "messages": [
                {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": [{"type": "text", "text": "Hello"}]},
            ],
        })))
        .unwrap();
        assert_eq!(
            Value::Object(chat),
            json!({
                "model": "m", "max_tokens": 9, "temperature": 0.2,
                "metadata": {"user_id": "u"},
                "messages": [
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "Hi"},
                    {"role": "assistant", "content": [{"type": "text", "text": "Hello"}]},
                ],
                "stop": ["!"],
            })
        );
        for (body, words) in [
            (json!({}), "'messages' is required"),
            (
                json!({"messages": [{"role": "system", "content": "x"}]}),
                "messages[0]: unknown role \"system\"",
            ),
            (
                json!({"messages": [{"role": "user", "content": [{"type": "tool_use"}]}]}),
                "messages[0].content[0]: content blocks of type \"tool_use\"",
            ),
            (
                json!({"messages": [], "system": [{"type": "image"}]}),
                "system[0]: content blocks of type \"image\"",
            ),
            (
                json!({"messages": [], "stop_sequences": "x"}),
                "'stop_sequences' must be an array",
            ),
            (
                json!({"messages": [], "thinking": {"type": "enabled"}}),
                "'thinking' is not supported",
            ),
        ] {
            let e = messages_request(&obj(body.clone())).unwrap_err();
            assert!(e.message.contains(words), "{body}: {}", e.message);
        }
    }

    #[test]
    fn a_responses_request_names_what_it_cannot_do() {
        for (body, words) in [
            (json!({}), "'input' is required"),
            (
                json!({"input": [{"type": "reasoning", "summary": []}]}),
                "input[0]: items of type \"reasoning\"",
            ),
            (json!({"input": ["x"]}), "'input[0]' must be an object"),
            (
                json!({"input": [{"role": "tool", "content": "x"}]}),
                "input[0]: unknown role \"tool\"",
            ),
            (
                json!({"input": [{"role": "user", "content": [{"type": "input_file"}]}]}),
                "input[0].content[0]: content parts of type \"input_file\"",
            ),
            (
                json!({"input": "x", "previous_response_id": "resp_1"}),
                "previous_response_id",
            ),
            (json!({"input": "x", "top_logprobs": 2}), "top_logprobs"),
            (json!({"input": "x", "text": 1}), "'text' must be an object"),
        ] {
            let e = responses_request(&obj(body.clone())).unwrap_err();
            assert!(e.message.contains(words), "{body}: {}", e.message);
            assert_eq!(e.status, 400);
        }
    }

    #[test]
    fn body_must_be_a_json_object() {
        assert!(parse_object(b"{\"a\":1}").is_ok());
        for bad in [&b""[..], b"{", b"[1]", b"\"x\"", b"null", b"\xff\xfe"] {
            let e = parse_object(bad).unwrap_err();
            assert_eq!(e.status.as_u16(), 400);
        }
    }

    #[test]
    fn integers_and_ranges_name_the_field() {
        let o = obj(json!({"a": 3, "b": 3.0, "c": 3.5, "d": "3", "e": 99}));
        assert_eq!(get_int(&o, "a", 0, 10).unwrap(), Some(3));
        assert_eq!(get_int(&o, "b", 0, 10).unwrap(), Some(3));
        assert_eq!(get_int(&o, "missing", 0, 10).unwrap(), None);
        assert!(get_int(&o, "c", 0, 10).unwrap_err().message.contains("'c'"));
        assert!(get_int(&o, "d", 0, 10)
            .unwrap_err()
            .message
            .contains("got a string"));
        assert!(get_int(&o, "e", 0, 10)
            .unwrap_err()
            .message
            .contains("between 0 and 10"));
        let o = obj(json!({"t": 1e300, "u": null}));
        assert!(get_f32(&o, "t", 0.0, 100.0).is_err());
        assert_eq!(get_f32(&o, "u", 0.0, 1.0).unwrap(), None);
    }

    #[test]
    fn whole_numbers_past_i64_are_out_of_range_not_the_wrong_type() {
        let o = obj(json!({"n": 18446744073709551615u64, "m": 1e300, "f": -1e19}));
        for name in ["n", "m", "f"] {
            let e = get_int(&o, name, -1, 10).unwrap_err();
            assert!(
                e.message
                    .contains(&format!("'{name}' must be between -1 and 10")),
                "{}",
                e.message
            );
        }
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
    fn messages_accept_strings_and_text_parts() {
        let o = obj(json!({"messages": [
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Hel"}, {"type": "text", "text": "lo"}]},
        ]}));
        let m = messages(&o).unwrap();
        assert_eq!(m[0].role, "system");
        assert_eq!(m[1].content, "Hel\nlo");
        let o = obj(json!({"messages": [
            {"role": "user", "content": "Hi", "name": "bob"},
            {"role": "assistant", "content": null, "tool_calls": []},
        ]}));
        assert_eq!(messages(&o).unwrap()[1].content, "");
        let calls = json!({"messages": [{"role": "assistant", "content": null,
            "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{}"}}]}]});
        let e = messages(&obj(calls)).unwrap_err();
        assert!(e.message.contains("tool_calls"), "{}", e.message);
        for bad in [
            json!({"messages": [{"role": "user"}]}),
            json!({"messages": []}),
            json!({"messages": [{"role": "tool", "content": "x"}]}),
            json!({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}),
            json!({"messages": [{"role": "user", "content": [{"type": "text"}]}]}),
            json!({"messages": [{"role": 1, "content": "x"}]}),
            json!({}),
        ] {
            assert_eq!(messages(&obj(bad)).unwrap_err().status.as_u16(), 400);
        }
    }

    #[test]
    fn a_last_assistant_turn_is_a_prefill() {
        let mut m = messages(&obj(json!({"messages": [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Well,"},
        ]})))
        .unwrap();
        assert_eq!(take_prefill(&mut m).unwrap().as_deref(), Some("Well,"));
        assert_eq!(m.len(), 1);
        assert_eq!(take_prefill(&mut m).unwrap(), None);
        let mut two = messages(&obj(json!({"messages": [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "A"},
            {"role": "assistant", "content": "B"},
        ]})))
        .unwrap();
        assert_eq!(take_prefill(&mut two).unwrap_err().status.as_u16(), 400);
    }

    #[test]
    fn unsupported_features_say_so() {
        for (v, want) in [
            (json!({"n": 3}), "'n' must be 1"),
            (json!({"n_cmpl": 2}), "'n_cmpl' must be 1"),
            (
                json!({"response_format": {"type": "json_schema"}}),
                "not supported yet",
            ),
            (
                json!({"tools": [{"type": "function"}]}),
                "not supported yet",
            ),
            (json!({"grammar": "root ::= x"}), "not supported yet"),
            (
                json!({"response_format": {"type": 1}}),
                "'response_format.type' must be a string",
            ),
            (json!({"response_format": {}}), "needs a 'type'"),
            (json!({"echo": true}), "'echo'"),
            (json!({"best_of": 2}), "'best_of' must be 1"),
            (json!({"suffix": "}"}), "'suffix'"),
        ] {
            let e = check_unsupported(&obj(v)).unwrap_err();
            assert!(e.message.contains(want), "{}", e.message);
        }
        let fine = json!({"n": 1, "tools": [], "response_format": {"type": "text"},
            "echo": false, "best_of": 1, "suffix": ""});
        assert!(check_unsupported(&obj(fine)).is_ok());
    }

    #[test]
    fn llama_samplers_off_are_accepted_on_are_refused() {
        let d = SamplerParams::default();
        let run = |v: Value| {
            let mut s = d.clone();
            llama_sampling(&obj(v), &mut s).map(|_| s)
        };
        // llama-server's defaults, as front ends send them.
        let off = json!({"mirostat": 0, "typical_p": 1.0, "top_n_sigma": -1.0,
            "xtc_probability": 0.0, "xtc_threshold": 0.1, "dynatemp_range": 0.0,
            "dry_multiplier": 0.0, "adaptive_target": -1.0, "min_keep": 0,
            "post_sampling_probs": false,
            "samplers": ["penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p",
                "min_p", "xtc", "temperature"]});
        let s = run(off).unwrap();
        assert_eq!((s.top_k, s.top_p, s.min_p), (d.top_k, d.top_p, d.min_p));
        assert_eq!(s.temperature, d.temperature);
        assert_eq!(
            run(json!({"samplers": "edskypmxt"})).unwrap().top_k,
            d.top_k
        );
        // XTC above its threshold of 0.5 does nothing.
        assert!(run(json!({"xtc_probability": 0.5, "xtc_threshold": 0.9})).is_ok());
        for (on, want) in [
            (json!({"mirostat": 2}), "mirostat"),
            (json!({"typical_p": 0.9}), "typical_p"),
            (json!({"top_n_sigma": 1.5}), "top_n_sigma"),
            (json!({"xtc_probability": 0.5}), "XTC"),
            (json!({"dynatemp_range": 0.5}), "dynatemp_range"),
            (json!({"dry_multiplier": 0.8}), "dry_multiplier"),
            (json!({"adaptive_target": 0.3}), "adaptive_target"),
            (json!({"min_keep": 5}), "min_keep"),
            (json!({"post_sampling_probs": true}), "post_sampling_probs"),
            (json!({"samplers": ["temperature", "top_k"]}), "order"),
            (json!({"samplers": "tk"}), "order"),
            (json!({"samplers": ["top_k", "bogus"]}), "bogus"),
            (json!({"samplers": "kq"}), "'q'"),
            (json!({"samplers": ["infill"]}), "Infill"),
            (json!({"samplers": 3}), "samplers"),
        ] {
            let e = run(on.clone()).unwrap_err();
            assert!(e.message.contains(want), "{on}: {}", e.message);
        }
        // Stages left out are off, as in llama.cpp's chain.
        let mut pen = d.clone();
        pen.repeat_penalty = 1.3;
        pen.presence_penalty = 0.5;
        let o = obj(json!({"samplers": ["Top-K", "temp"]}));
        llama_sampling(&o, &mut pen).unwrap();
        assert_eq!((pen.repeat_penalty, pen.presence_penalty), (1.0, 0.0));
        assert_eq!((pen.top_k, pen.top_p, pen.min_p), (d.top_k, 1.0, 0.0));
        assert_eq!(pen.temperature, d.temperature);
        let s = run(json!({"samplers": ["top_k", "min_p"]})).unwrap();
        assert_eq!((s.temperature, s.min_p, s.top_p), (1.0, d.min_p, 1.0));
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

    #[test]
    fn prompt_length_names_both_numbers() {
        assert!(check_prompt_len(&[1, 2], 3).is_ok());
        let e = check_prompt_len(&[1, 2, 3], 3).unwrap_err();
        assert!(e.message.contains('3') && e.message.contains("context of 3"));
        let body = e.body();
        assert_eq!(body["error"]["type"], "exceed_context_size_error");
        assert_eq!(body["error"]["n_prompt_tokens"], 3);
        assert_eq!(body["error"]["n_ctx"], 3);
        assert_eq!(body["error"]["code"], 400);
        assert!(check_prompt_len(&[], 3).is_err());
    }
}
