//! OpenAI's legacy completions (`/v1/completions`): the answer's JSON and
//! stream chunks, and its logprobs, which say where each token's text starts
//! (`text_offset`). The prompt is read as llama-server's (`prompt`).

use axum::body::Bytes;
use axum::extract::State;
use axum::response::Response;
use kestrel_engine::{Engine, Generation, TokenLogprobs};
use serde_json::{json, Map, Value};

use super::answer::{fingerprint, finish_reason, piece, timings, usage, Answer};
use super::generate::generate;
use super::parse::Source;
use super::{Api, AppState};

pub(crate) async fn completions(State(s): AppState, body: Bytes) -> Response {
    generate(s, body, Api::Completions, Source::Request).await
}

/// The non-streamed answer.
pub(super) fn full(a: &Answer, g: &Generation, logprobs: Value) -> Value {
    let reason = finish_reason(g.stats.stop);
    json!({
        "id": a.id, "object": "text_completion", "created": a.created,
        "model": a.model, "system_fingerprint": fingerprint(),
        "choices": [{"index": 0, "text": g.text, "logprobs": logprobs, "finish_reason": reason}],
        "usage": usage(g), "timings": timings(g),
    })
}

/// One token's chunk.
pub(super) fn stream_token(a: &Answer, text: &str, logprobs: Value) -> Value {
    a.chunk(json!([{
        "index": 0, "text": text, "logprobs": logprobs, "finish_reason": null,
    }]))
}

/// The last choice: why the answer ended.
pub(super) fn last_choice(reason: &str) -> Value {
    json!({"index": 0, "text": "", "logprobs": null, "finish_reason": reason})
}

/// The `logprobs` of a choice covering `lps`: parallel lists of the tokens,
/// their logprobs, their `n` most likely alternatives (a map) and their
/// text offsets; `offsets` has seen the tokens before them.
pub(super) fn logprobs(
    e: &Engine,
    lps: &[TokenLogprobs],
    n: usize,
    offsets: &mut Offsets,
) -> Value {
    let entries: Vec<Value> = lps
        .iter()
        .map(|lp| {
            let (tok, _) = piece(e, lp.token);
            let top = lp.top.iter().take(n);
            json!({
                "token": tok, "logprob": lp.logprob,
                "top": top.map(|&(id, l)| (piece(e, id).0, json!(l))).collect::<Map<_, _>>(),
            })
        })
        .collect();
    let tokenizer = &e.tokenizer;
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

/// Where each token's text starts in the answer, in characters (legacy
/// completions' `text_offset`), counted from the tokens' bytes, not from
/// the text sent so far: text held back for a possible stop string, or a
/// character split across tokens, moved the count. A character that ends
/// in a token is counted after that token's offset; invalid bytes count
/// as the one replacement character the text shows for them.
#[derive(Default)]
pub(crate) struct Offsets {
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
