//! Chat templates: turning a conversation into the prompt text a model was trained on.
//!
//! This module owns rendering of a model's Jinja `tokenizer.chat_template` (GGUF metadata key),
//! with the semantics Hugging Face `transformers` gives it in `apply_chat_template`, and
//! Kestrel's fallback template (ChatML) for models that ship none.
//!
//! What a template sees, as in Hugging Face:
//! - context: `messages` (a list of `{role, content}` maps), `add_generation_prompt`,
//!   `bos_token`, `eos_token`, `tools` (`none`, or with [`ChatTemplate::render_with_tools`] the
//!   tool dicts as the request gave them) and `documents` set to `none`;
//! - messages with tool calls pass through as given, as `transformers` passes them, except that
//!   a tool call's `function.arguments` JSON string is parsed into a map when the template only
//!   renders map arguments correctly (see [`ChatTemplate::wants_object_arguments`]);
//! - environment: `trim_blocks` and `lstrip_blocks` on, trailing newline of the source dropped,
//!   no HTML auto-escaping, lenient undefined values, booleans and none printed as Python prints
//!   them (`True`, `False`, `None`);
//! - functions: `raise_exception(msg)` (rendering fails with [`ChatError::Raised`] carrying
//!   `msg`) and `strftime_now(format)` (the current date/time, in UTC, formatted with the usual
//!   `strftime` directives);
//! - filters: `tojson` behaves like Python's `json.dumps(x, ensure_ascii=False)` — `", "` and
//!   `": "` separators, no HTML escaping — and takes the `indent`, `sort_keys`, `ensure_ascii`
//!   and `separators` keyword arguments;
//! - Python string/dict/list methods (`strip`, `split`, `startswith`, `items`, `get`, ...)
//!   through minijinja-contrib's pycompat layer;
//! - the `{% generation %}` block Hugging Face uses to mark assistant text renders its body
//!   unchanged.
//!
//! Known differences from Python Jinja2: map keys are ordered by minijinja's map type (sorted
//! unless minijinja's `preserve_order` feature is on), `{% break %}`/`{% continue %}` need
//! minijinja's `loop_controls` feature, and `strftime_now` reports UTC rather than local time.

use std::fmt::Write as _;
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

use minijinja::value::{Kwargs, Value, ValueKind};
use minijinja::{context, AutoEscape, Environment, Error, ErrorKind, UndefinedBehavior};
use serde::Serialize;

/// Name the template source is registered under inside its environment (shows in errors).
const TEMPLATE_NAME: &str = "chat_template";

/// Kestrel's fallback chat template (ChatML), used for models without `tokenizer.chat_template`.
///
/// Each message renders as `<|im_start|>{role}\n{content}<|im_end|>\n`; the generation prompt
/// is `<|im_start|>assistant\n`. No system message is inserted.
pub const CHATML_TEMPLATE: &str = "{% for message in messages %}\
{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}\
{% endfor %}\
{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/// One turn of a conversation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant`, or whatever roles the template understands.
    pub role: String,
    /// The text of the turn.
    pub content: String,
}

impl ChatMessage {
    /// A message with the given role and content.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> ChatMessage {
        ChatMessage {
            role: role.into(),
            content: content.into(),
        }
    }

    /// The message as a `{"role", "content"}` JSON map, the shape
    /// [`ChatTemplate::render_with_tools`] takes.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({ "role": self.role, "content": self.content })
    }
}

/// Why a chat template could not be compiled or rendered.
#[derive(Debug, thiserror::Error)]
pub enum ChatError {
    /// The template source is not valid Jinja.
    #[error("chat template syntax error: {0}")]
    Syntax(String),
    /// The template called `raise_exception(message)`; this is the message.
    #[error("chat template raised an exception: {0}")]
    Raised(String),
    /// Rendering failed for another reason (bad operation, unknown filter, ...).
    #[error("chat template render error: {0}")]
    Render(String),
}

/// A compiled chat template together with the special tokens it is rendered with.
#[derive(Clone)]
pub struct ChatTemplate {
    env: Environment<'static>,
    source: String,
    bos_token: String,
    eos_token: String,
    /// Whether tool-call arguments must be maps to render; probed on first use.
    object_arguments: OnceLock<bool>,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("source_len", &self.source.len())
            .field("bos_token", &self.bos_token)
            .field("eos_token", &self.eos_token)
            .finish()
    }
}

impl ChatTemplate {
    /// Compiles `source` (a Jinja chat template). `bos_token` and `eos_token` are the texts of
    /// the model's BOS/EOS tokens, exposed to the template as `bos_token` and `eos_token`.
    pub fn new(source: &str, bos_token: &str, eos_token: &str) -> Result<ChatTemplate, ChatError> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_keep_trailing_newline(false);
        env.set_auto_escape_callback(|_| AutoEscape::None);
        env.set_undefined_behavior(UndefinedBehavior::Lenient);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_filter("tojson", tojson);
        env.set_formatter(python_formatter);
        env.add_template_owned(TEMPLATE_NAME, rewrite_generation_blocks(source))
            .map_err(|e| ChatError::Syntax(e.to_string()))?;
        Ok(ChatTemplate {
            env,
            source: source.to_owned(),
            bos_token: bos_token.to_owned(),
            eos_token: eos_token.to_owned(),
            object_arguments: OnceLock::new(),
        })
    }

    /// Kestrel's documented fallback for models without `tokenizer.chat_template`: ChatML
    /// ([`CHATML_TEMPLATE`]), with an empty `bos_token` and `eos_token = "<|im_end|>"`.
    pub fn chatml() -> ChatTemplate {
        ChatTemplate::new(CHATML_TEMPLATE, "", "<|im_end|>")
            .expect("the built-in ChatML template compiles")
    }

    /// The template source as given to [`ChatTemplate::new`].
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Renders `messages` into prompt text. With `add_generation_prompt`, the template appends
    /// whatever opens an assistant turn.
    pub fn render(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<String, ChatError> {
        self.render_values(
            Value::from_serialize(messages),
            Value::from(()),
            add_generation_prompt,
        )
    }

    /// Renders OpenAI-shaped messages (JSON maps that may carry `tool_calls`, `tool_call_id`,
    /// `name`, and a `null` content) with `tools` (the request's tool dicts,
    /// `{"type": "function", "function": {...}}`, passed as given; `None` renders as without
    /// tools), as `apply_chat_template(messages, tools=tools)` does.
    ///
    /// A tool call's `function.arguments` given as a JSON string is parsed into a map first when
    /// [`ChatTemplate::wants_object_arguments`] says the template needs one (Qwen's template,
    /// for instance, writes `arguments | tojson`, which would quote a string); arguments that
    /// are not a JSON object stay as given.
    pub fn render_with_tools(
        &self,
        messages: &[serde_json::Value],
        tools: Option<&[serde_json::Value]>,
        add_generation_prompt: bool,
    ) -> Result<String, ChatError> {
        let tools = match tools {
            Some(tools) => Value::from_serialize(tools),
            None => Value::from(()),
        };
        let messages = if self.wants_object_arguments() {
            Value::from_serialize(
                messages
                    .iter()
                    .map(arguments_as_objects)
                    .collect::<Vec<_>>(),
            )
        } else {
            Value::from_serialize(messages)
        };
        self.render_values(messages, tools, add_generation_prompt)
    }

    /// Whether this template renders a tool call right only when `function.arguments` is a
    /// map: probed by rendering one call both ways and looking for the arguments' JSON text,
    /// which such a template writes for a map but not for a string.
    pub fn wants_object_arguments(&self) -> bool {
        *self.object_arguments.get_or_init(|| {
            let needle = r#"{"probe_argument": 1}"#;
            let probe = |arguments: serde_json::Value| {
                let messages = serde_json::json!([
                    { "role": "user", "content": "probe" },
                    { "role": "assistant", "content": null, "tool_calls": [{
                        "id": "call_probe", "type": "function",
                        "function": { "name": "probe_function", "arguments": arguments },
                    }]},
                ]);
                self.render_values(Value::from_serialize(&messages), Value::from(()), false)
                    .map(|text| text.contains(needle))
                    .unwrap_or(false)
            };
            let as_string = probe(serde_json::Value::from(needle));
            !as_string && probe(serde_json::json!({ "probe_argument": 1 }))
        })
    }

    fn render_values(
        &self,
        messages: Value,
        tools: Value,
        add_generation_prompt: bool,
    ) -> Result<String, ChatError> {
        let template = self
            .env
            .get_template(TEMPLATE_NAME)
            .map_err(|e| ChatError::Syntax(e.to_string()))?;
        let ctx = context! {
            messages => messages,
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos_token.as_str(),
            eos_token => self.eos_token.as_str(),
            tools => tools,
            documents => Value::from(()),
        };
        template.render(ctx).map_err(classify_error)
    }
}

/// `message` with each `tool_calls[].function.arguments` that is a string holding a JSON object
/// replaced by that object (key order kept).
fn arguments_as_objects(message: &serde_json::Value) -> serde_json::Value {
    let mut message = message.clone();
    let calls = message
        .get_mut("tool_calls")
        .and_then(serde_json::Value::as_array_mut);
    for call in calls.into_iter().flatten() {
        let Some(arguments) = call.pointer_mut("/function/arguments") else {
            continue;
        };
        let parsed = arguments
            .as_str()
            .and_then(|text| serde_json::from_str::<serde_json::Value>(text).ok());
        if let Some(object @ serde_json::Value::Object(_)) = parsed {
            *arguments = object;
        }
    }
    message
}

/// The error a `raise_exception` call attaches as the source of the minijinja error, so that
/// the message can be told apart from engine errors however the error was wrapped.
#[derive(Debug)]
struct Raised(String);

impl std::fmt::Display for Raised {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Raised {}

fn raise_exception(message: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message.clone()).with_source(Raised(message)))
}

fn classify_error(err: Error) -> ChatError {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(&err);
    while let Some(e) = cause {
        if let Some(raised) = e.downcast_ref::<Raised>() {
            return ChatError::Raised(raised.0.clone());
        }
        cause = e.source();
    }
    match err.kind() {
        ErrorKind::SyntaxError => ChatError::Syntax(err.to_string()),
        _ => ChatError::Render(err.to_string()),
    }
}

/// Turns Hugging Face's `{% generation %}` / `{% endgeneration %}` tags into
/// `{% if true %}` / `{% endif %}`, keeping their whitespace-control markers, so the body renders
/// as it does under `transformers`.
fn rewrite_generation_blocks(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(start) = rest.find("{%") {
        let tag = &rest[start..];
        let Some(end) = tag.find("%}") else {
            break;
        };
        out.push_str(&rest[..start]);
        let inner = &tag[2..end];
        let lead = inner.starts_with(['-', '+']);
        let trail = inner.ends_with(['-', '+']) && inner.len() > usize::from(lead);
        let body = &inner[usize::from(lead)..inner.len() - usize::from(trail)];
        let replacement = match body.trim() {
            "generation" => Some("if true"),
            "endgeneration" => Some("endif"),
            _ => None,
        };
        match replacement {
            Some(word) => {
                out.push_str("{%");
                if lead {
                    out.push_str(&inner[..1]);
                }
                out.push(' ');
                out.push_str(word);
                out.push(' ');
                if trail {
                    out.push_str(&inner[inner.len() - 1..]);
                }
                out.push_str("%}");
            }
            None => out.push_str(&tag[..end + 2]),
        }
        rest = &tag[end + 2..];
    }
    out.push_str(rest);
    out
}

/// Prints `true`/`false`/`none` the way Python does (`True`/`False`/`None`); everything else as
/// minijinja prints it.
fn python_formatter(
    out: &mut minijinja::Output,
    state: &minijinja::State,
    value: &Value,
) -> Result<(), Error> {
    let text = match value.kind() {
        ValueKind::Bool if value.is_true() => "True",
        ValueKind::Bool => "False",
        ValueKind::None => "None",
        _ => return minijinja::escape_formatter(out, state, value),
    };
    out.write_str(text).map_err(Error::from)
}

/// `tojson` as Hugging Face defines it: Python's `json.dumps` with `ensure_ascii=False` unless
/// asked otherwise, Python's default separators, no HTML escaping.
fn tojson(value: &Value, kwargs: Kwargs) -> Result<Value, Error> {
    let indent: Option<Value> = kwargs.get("indent")?;
    let indent = match indent {
        None => None,
        Some(v) if v.is_none() || v.is_undefined() => None,
        Some(v) => Some(usize::try_from(v)?),
    };
    let sort_keys = kwargs.get::<Option<bool>>("sort_keys")?.unwrap_or(false);
    let ensure_ascii = kwargs.get::<Option<bool>>("ensure_ascii")?.unwrap_or(false);
    let separators: Option<Vec<String>> = kwargs.get("separators")?;
    kwargs.assert_all_used()?;
    let (item_sep, key_sep) = match separators {
        Some(seps) if seps.len() == 2 => (seps[0].clone(), seps[1].clone()),
        Some(_) => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                "tojson: separators must be a pair of strings",
            ))
        }
        // Python drops the space after ',' when indenting (it would end each line).
        None if indent.is_some() => (",".to_owned(), ": ".to_owned()),
        None => (", ".to_owned(), ": ".to_owned()),
    };
    let mut writer = JsonWriter {
        out: String::new(),
        indent,
        sort_keys,
        ensure_ascii,
        item_sep,
        key_sep,
    };
    writer.value(value, 0)?;
    Ok(Value::from(writer.out))
}

struct JsonWriter {
    out: String,
    indent: Option<usize>,
    sort_keys: bool,
    ensure_ascii: bool,
    item_sep: String,
    key_sep: String,
}

impl JsonWriter {
    fn newline(&mut self, depth: usize) {
        if let Some(n) = self.indent {
            self.out.push('\n');
            self.out.extend(std::iter::repeat_n(' ', n * depth));
        }
    }

    fn value(&mut self, v: &Value, depth: usize) -> Result<(), Error> {
        match v.kind() {
            ValueKind::Undefined | ValueKind::None => self.out.push_str("null"),
            ValueKind::Bool => self
                .out
                .push_str(if v.is_true() { "true" } else { "false" }),
            ValueKind::Number => {
                if v.is_integer() {
                    let _ = write!(self.out, "{v}");
                } else {
                    let f = f64::try_from(v.clone())?;
                    self.out.push_str(&python_float_repr(f));
                }
            }
            ValueKind::String => self.string(v.as_str().unwrap_or_default()),
            ValueKind::Seq | ValueKind::Iterable => {
                let items: Vec<Value> = v.try_iter()?.collect();
                self.sequence(&items, depth)?;
            }
            ValueKind::Map => {
                let mut keys: Vec<Value> = v.try_iter()?.collect();
                if self.sort_keys {
                    keys.sort();
                }
                if keys.is_empty() {
                    self.out.push_str("{}");
                    return Ok(());
                }
                self.out.push('{');
                for (i, key) in keys.iter().enumerate() {
                    if i > 0 {
                        let sep = self.item_sep.clone();
                        self.out.push_str(&sep);
                    }
                    self.newline(depth + 1);
                    match key.as_str() {
                        Some(s) => self.string(s),
                        None => self.string(&key.to_string()),
                    }
                    let sep = self.key_sep.clone();
                    self.out.push_str(&sep);
                    self.value(&v.get_item(key)?, depth + 1)?;
                }
                self.newline(depth);
                self.out.push('}');
            }
            ValueKind::Bytes | ValueKind::Plain | ValueKind::Invalid => {
                return Err(Error::new(
                    ErrorKind::InvalidOperation,
                    format!("tojson: cannot serialize a value of type {}", v.kind()),
                ))
            }
            // ValueKind is non-exhaustive.
            _ => self.string(&v.to_string()),
        }
        Ok(())
    }

    fn sequence(&mut self, items: &[Value], depth: usize) -> Result<(), Error> {
        if items.is_empty() {
            self.out.push_str("[]");
            return Ok(());
        }
        self.out.push('[');
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                let sep = self.item_sep.clone();
                self.out.push_str(&sep);
            }
            self.newline(depth + 1);
            self.value(item, depth + 1)?;
        }
        self.newline(depth);
        self.out.push(']');
        Ok(())
    }

    fn string(&mut self, s: &str) {
        self.out.push('"');
        for c in s.chars() {
            match c {
                '"' => self.out.push_str("\\\""),
                '\\' => self.out.push_str("\\\\"),
                '\n' => self.out.push_str("\\n"),
                '\r' => self.out.push_str("\\r"),
                '\t' => self.out.push_str("\\t"),
                '\u{08}' => self.out.push_str("\\b"),
                '\u{0c}' => self.out.push_str("\\f"),
                c if (c as u32) < 0x20 || (self.ensure_ascii && !c.is_ascii()) => {
                    let mut units = [0u16; 2];
                    for unit in c.encode_utf16(&mut units) {
                        let _ = write!(self.out, "\\u{unit:04x}");
                    }
                }
                c => self.out.push(c),
            }
        }
        self.out.push('"');
    }
}

/// A float as Python's `repr` writes it: shortest round-trip digits, `.0` on integral values,
/// exponent form with a sign and at least two digits (`1e-05`, `1e+16`).
fn python_float_repr(f: f64) -> String {
    if f.is_nan() {
        return "NaN".to_owned();
    }
    if f.is_infinite() {
        return if f > 0.0 { "Infinity" } else { "-Infinity" }.to_owned();
    }
    let s = format!("{f:?}");
    match s.split_once('e') {
        None => s,
        Some((mantissa, exp)) => {
            let (sign, digits) = match exp.strip_prefix('-') {
                Some(d) => ('-', d),
                None => ('+', exp),
            };
            format!("{mantissa}e{sign}{digits:0>2}")
        }
    }
}

/// `strftime_now(format)`: the current UTC time formatted like C's `strftime`.
fn strftime_now(format: String) -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    format_utc(secs, &format)
}

/// Formats a Unix timestamp (seconds, UTC) with the `strftime` directives `%Y %y %m %d %e %j
/// %H %I %M %S %p %a %A %b %h %B %u %w %F %T %D %R %Z %z %%`; other directives are copied
/// through as written.
pub(crate) fn format_utc(unix_secs: i64, format: &str) -> String {
    const DAYS: [&str; 7] = [
        "Sunday",
        "Monday",
        "Tuesday",
        "Wednesday",
        "Thursday",
        "Friday",
        "Saturday",
    ];
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    let days = unix_secs.div_euclid(86_400);
    let secs_of_day = unix_secs.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    let (hour, minute, second) = (secs_of_day / 3600, secs_of_day / 60 % 60, secs_of_day % 60);
    // 1970-01-01 was a Thursday.
    let weekday = (days + 4).rem_euclid(7) as usize;
    let day_of_year = days - days_from_civil(year, 1, 1) + 1;
    let hour12 = if hour % 12 == 0 { 12 } else { hour % 12 };
    let month_name = MONTHS[(month - 1) as usize];

    let mut out = String::with_capacity(format.len() + 16);
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let Some(d) = chars.next() else {
            out.push('%');
            break;
        };
        let _ = match d {
            'Y' => write!(out, "{year}"),
            'y' => write!(out, "{:02}", year.rem_euclid(100)),
            'm' => write!(out, "{month:02}"),
            'd' => write!(out, "{day:02}"),
            'e' => write!(out, "{day:>2}"),
            'j' => write!(out, "{day_of_year:03}"),
            'H' => write!(out, "{hour:02}"),
            'I' => write!(out, "{hour12:02}"),
            'M' => write!(out, "{minute:02}"),
            'S' => write!(out, "{second:02}"),
            'p' => write!(out, "{}", if hour < 12 { "AM" } else { "PM" }),
            'a' => write!(out, "{}", &DAYS[weekday][..3]),
            'A' => write!(out, "{}", DAYS[weekday]),
            'b' | 'h' => write!(out, "{}", &month_name[..3]),
            'B' => write!(out, "{month_name}"),
            'u' => write!(out, "{}", if weekday == 0 { 7 } else { weekday }),
            'w' => write!(out, "{weekday}"),
            'F' => write!(out, "{year}-{month:02}-{day:02}"),
            'T' => write!(out, "{hour:02}:{minute:02}:{second:02}"),
            'R' => write!(out, "{hour:02}:{minute:02}"),
            'D' => write!(out, "{month:02}/{day:02}/{:02}", year.rem_euclid(100)),
            'Z' => write!(out, "UTC"),
            'z' => write!(out, "+0000"),
            '%' => write!(out, "%"),
            other => write!(out, "%{other}"),
        };
    }
    out
}

/// Days since 1970-01-01 → proleptic Gregorian (year, month 1..=12, day 1..=31).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    // Shift the epoch to 0000-03-01 so leap days fall at the end of each 400-year era's years.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153; // 0 = March
    let day = day_of_year - (153 * shifted_month + 2) / 5 + 1;
    let month = if shifted_month < 10 {
        shifted_month + 3
    } else {
        shifted_month - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Proleptic Gregorian date → days since 1970-01-01 (inverse of [`civil_from_days`]).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let year_of_era = y.rem_euclid(400);
    let shifted_month = if month > 2 { month - 3 } else { month + 9 };
    let day_of_year = (153 * shifted_month + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_round_trip_and_format() {
        // 2024-02-29 12:34:56 UTC (a leap day, a Thursday).
        let t = 1_709_210_096;
        assert_eq!(
            format_utc(t, "%Y-%m-%d %H:%M:%S %a %A %b %B %j %y %I%p %u %w %%"),
            "2024-02-29 12:34:56 Thu Thursday Feb February 060 24 12PM 4 4 %"
        );
        assert_eq!(format_utc(0, "%d %b %Y"), "01 Jan 1970");
        assert_eq!(format_utc(-1, "%F %T"), "1969-12-31 23:59:59");
        assert_eq!(format_utc(951_782_400, "%F %a"), "2000-02-29 Tue");
        for days in [-800_000i64, -1, 0, 1, 59, 60, 11_016, 19_782, 2_000_000] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days, "{y}-{m}-{d}");
        }
    }

    #[test]
    fn python_float_reprs() {
        assert_eq!(python_float_repr(1.0), "1.0");
        assert_eq!(python_float_repr(0.1), "0.1");
        assert_eq!(python_float_repr(1e-5), "1e-05");
        assert_eq!(python_float_repr(1.5e16), "1.5e+16");
        assert_eq!(python_float_repr(-2.5), "-2.5");
    }

    #[test]
    fn generation_tags_become_plain_blocks() {
        assert_eq!(
            rewrite_generation_blocks("a{%- generation %}b{% endgeneration -%}c{% if x %}"),
            "a{%- if true %}b{% endif -%}c{% if x %}"
        );
        assert_eq!(rewrite_generation_blocks("{{ x }} %}{%"), "{{ x }} %}{%");
    }
}
