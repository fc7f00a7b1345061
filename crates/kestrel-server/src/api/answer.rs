//! The answer every dialect renders from: a finished or streaming
//! generation, with what its request asked for ([`Answer`]), and the
//! numbers the dialects share (finish reason, usage, timings). Which dialect
//! writes each part is decided here; how, in the dialect's own file.

use std::sync::Arc;

use kestrel_engine::{Engine, GenStats, Generation, StopReason, TokenLogprobs};
use serde_json::{json, Value};

use super::completions::Offsets;
use super::tools::{ToolStream, ToolUse};
use super::{anthropic, chat, completions, llama, responses, Api};
use crate::worker::Loaded;

/// How one request's answer is written, streamed or not.
pub(crate) struct Answer {
    pub api: Api,
    pub id: String,
    pub created: u64,
    pub model: String,
    pub loaded: Arc<Loaded>,
    pub logprobs: Option<usize>,
    /// The request's stop strings, to name the one that matched.
    pub stop: Vec<String>,
    /// The assistant turn the model continues (chat): the content starts
    /// with it, as llama-server's.
    pub prefill: String,
    /// llama-server's `generation_settings` and `prompt` (its final
    /// `/completion` object carries both).
    pub settings: Value,
    pub prompt: String,
    /// The prompt's length (Anthropic's stream states it first).
    pub n_prompt: usize,
    /// The chat's tools (its answer carries `tool_calls`), and the stream's
    /// parser of them.
    pub tools: Option<ToolUse>,
    pub tool_stream: Option<ToolStream>,
    /// Seeds the calls' ids, so that the same request answers with the same
    /// ids streamed or not.
    pub seed: u64,
}

/// OpenAI's `finish_reason` for how a generation stopped.
pub(crate) fn finish_reason(stop: StopReason) -> &'static str {
    match stop {
        StopReason::Length | StopReason::ContextFull => "length",
        StopReason::EndOfGeneration | StopReason::StopString | StopReason::Cancelled => "stop",
    }
}

/// Tokens the model predicted, as llama-server counts them: the generated
/// ones and, when it ended the answer, the end-of-generation token (it was
/// sampled like any other, though not part of the text).
pub(crate) fn predicted(s: &GenStats) -> usize {
    s.generated_tokens + usize::from(s.stop == StopReason::EndOfGeneration)
}

/// llama-server's `timings`: the prompt's and the generation's speed.
pub(crate) fn timings(g: &Generation) -> Value {
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

/// OpenAI's `usage` (chat and legacy completions).
pub(crate) fn usage(g: &Generation) -> Value {
    json!({
        "prompt_tokens": g.stats.prompt_tokens,
        "completion_tokens": predicted(&g.stats),
        "total_tokens": g.stats.prompt_tokens + predicted(&g.stats),
        // OpenAI's place for the prompt tokens a cache spared.
        "prompt_tokens_details": {"cached_tokens": g.stats.cache_n},
    })
}

/// A token's text, and its bytes (which may not be UTF-8 alone).
pub(crate) fn piece(engine: &Engine, id: u32) -> (String, Vec<u8>) {
    let bytes = engine.tokenizer.token_to_piece(id, true);
    (String::from_utf8_lossy(&bytes).into_owned(), bytes)
}

/// The `system_fingerprint` and `build_info`: Kestrel's version.
pub(crate) fn fingerprint() -> String {
    format!("kestrel-{}", env!("CARGO_PKG_VERSION"))
}

impl Answer {
    fn engine(&self) -> &Engine {
        &self.loaded.engine
    }

    /// The `logprobs` value of a choice covering `lps`; `offsets` has seen
    /// the tokens before them (legacy completions' `text_offset`).
    fn logprobs_block(&self, lps: &[TokenLogprobs], offsets: &mut Offsets) -> Value {
        let Some(n) = self.logprobs else {
            return Value::Null;
        };
        let e = self.engine();
        match self.api {
            // (Responses and Anthropic messages carry no logprobs.)
            Api::Chat | Api::Responses | Api::Messages => chat::logprobs(e, lps, n),
            Api::Llama => llama::logprobs(e, lps, n),
            Api::Completions => completions::logprobs(e, lps, n, offsets),
        }
    }

    /// The non-streamed answer.
    pub fn full(&self, g: &Generation) -> Value {
        let logprobs = self.logprobs_block(&g.logprobs, &mut Offsets::default());
        match self.api {
            Api::Chat => chat::full(self, g, logprobs),
            Api::Completions => completions::full(self, g, logprobs),
            Api::Responses => responses::full(self, g),
            Api::Messages => anthropic::full(self, g),
            Api::Llama => llama::full(self, g, logprobs),
        }
    }

    /// The stop string that ended generation: the text of all generated
    /// tokens continues the shown text with it.
    pub fn stopping_word(&self, g: &Generation) -> String {
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

    /// The OpenAI chunk envelope around one choice (or none).
    pub fn chunk(&self, choices: Value) -> Value {
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

    /// Events sent before any token.
    pub fn stream_start(&self) -> Vec<Value> {
        match self.api {
            Api::Chat => chat::stream_start(self),
            Api::Responses => responses::stream_start(self),
            Api::Messages => anthropic::stream_start(self),
            Api::Completions | Api::Llama => Vec::new(),
        }
    }

    /// The events for one token (none when there is nothing to say).
    pub fn stream_token(
        &self,
        token: Option<u32>,
        text: &str,
        lp: Option<&TokenLogprobs>,
        offsets: &mut Offsets,
    ) -> Vec<Value> {
        if let Some(t) = &self.tool_stream {
            // Content and calls as the parser lets them through (logprobs
            // are not reported beside calls).
            return match self.api {
                Api::Responses => t
                    .push_blocks(text)
                    .iter()
                    .flat_map(|b| responses::block_events(self, b, "completed"))
                    .collect(),
                Api::Messages => t
                    .push_blocks(text)
                    .iter()
                    .flat_map(anthropic::block_events)
                    .collect(),
                _ => t
                    .push(text)
                    .into_iter()
                    .map(|d| chat::delta_chunk(self, d))
                    .collect(),
            };
        }
        self.stream_event(token, text, lp, offsets)
            .into_iter()
            .collect()
    }

    fn stream_event(
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
            Api::Chat => chat::stream_token(self, text, logprobs),
            Api::Responses => responses::stream_token(self, text),
            Api::Messages => anthropic::stream_token(text),
            Api::Completions => completions::stream_token(self, text, logprobs),
            Api::Llama => llama::stream_token(self, token, text, logprobs),
        })
    }

    /// The closing events: finish_reason (with timings), then usage if asked.
    pub fn stream_end(&self, g: &Generation, include_usage: bool) -> Vec<Value> {
        if let Some(t) = self.tool_stream.as_ref() {
            // The last block closed before the dialect's closing events.
            match self.api {
                Api::Responses => {
                    let (blocks, status) = (t.finish_blocks(), responses::status(g));
                    let events = blocks
                        .iter()
                        .flat_map(|b| responses::block_events(self, b, status));
                    return events.chain(responses::stream_end(self, g)).collect();
                }
                Api::Messages => {
                    let blocks = t.finish_blocks();
                    let events = blocks.iter().flat_map(anthropic::block_events);
                    return events.chain(anthropic::stream_end(self, g)).collect();
                }
                _ => {}
            }
        }
        let mut out = Vec::new();
        let mut called = false;
        if let Some(t) = self.tool_stream.as_ref().filter(|_| self.api == Api::Chat) {
            // What was held back to the end (text that could start a call).
            out.extend(t.finish().into_iter().map(|d| chat::delta_chunk(self, d)));
            called = t.called();
        }
        let reason = if called {
            "tool_calls"
        } else {
            finish_reason(g.stats.stop)
        };
        let choice = match self.api {
            Api::Llama => return vec![llama::final_object(self, g)],
            Api::Responses => return responses::stream_end(self, g),
            Api::Messages => return anthropic::stream_end(self, g),
            Api::Chat => chat::last_choice(reason),
            Api::Completions => completions::last_choice(reason),
        };
        let mut last = self.chunk(json!([choice]));
        last["timings"] = timings(g);
        out.push(last);
        if include_usage {
            let mut u = self.chunk(json!([]));
            u["usage"] = usage(g);
            out.push(u);
        }
        out
    }
}
