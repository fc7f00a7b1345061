//! Answers split into content and calls, whole and streamed, for each family.

use kestrel_tools::{
    parse, parse_request, parse_with_tools, CallIds, Delta, Family, ParsedMessage, StreamParser,
    ToolCall, ToolRequest,
};
use serde_json::json;

/// A request whose tools are the names these tests' calls use.
fn tools() -> ToolRequest {
    let tool = |name: &str| json!({"type": "function", "function": {"name": name}});
    let tools = ["f", "g", "get_weather", "get_time"].map(tool);
    let body = json!({ "tools": tools });
    parse_request(body.as_object().unwrap()).unwrap().unwrap()
}

fn whole(family: Family, text: &str) -> ParsedMessage {
    parse_with_tools(family, &tools(), text, &mut CallIds::new(1))
}

fn parser(family: Family, eager: bool) -> StreamParser {
    StreamParser::new(family, CallIds::new(1), eager).with_tools(&tools())
}

fn call(name: &str, arguments: &str) -> (String, String) {
    (name.to_owned(), arguments.to_owned())
}

fn calls(m: &ParsedMessage) -> Vec<(String, String)> {
    m.tool_calls
        .iter()
        .map(|c| (c.name.clone(), c.arguments.clone()))
        .collect()
}

/// Streams `text` in pieces of every size from 1 to 7 bytes (on char boundaries), in both
/// modes, and checks the deltas add up to the whole parse, with the same ids.
fn check_stream(family: Family, text: &str) -> ParsedMessage {
    check_stream_modes(family, text, &[false, true])
}

/// [`check_stream`] for text with broken calls, which only careful streaming keeps out of
/// the calls (eager streaming trusts a grammar to keep call text well formed).
fn check_careful_stream(family: Family, text: &str) -> ParsedMessage {
    check_stream_modes(family, text, &[false])
}

fn check_stream_modes(family: Family, text: &str, modes: &[bool]) -> ParsedMessage {
    let expected = whole(family, text);
    for &eager in modes {
        for step in 1..=7 {
            let mut parser = parser(family, eager);
            let mut deltas = Vec::new();
            let mut rest = text;
            while !rest.is_empty() {
                let mut cut = step.min(rest.len());
                while !rest.is_char_boundary(cut) {
                    cut += 1;
                }
                deltas.extend(parser.push(&rest[..cut]));
                rest = &rest[cut..];
            }
            let (last, message) = parser.finish();
            deltas.extend(last);
            let mut content = String::new();
            let mut streamed: Vec<ToolCall> = Vec::new();
            for delta in deltas {
                match delta {
                    Delta::Content(t) => content.push_str(&t),
                    Delta::CallStart { index, id, name } => {
                        assert_eq!(index, streamed.len());
                        streamed.push(ToolCall {
                            id,
                            name,
                            arguments: String::new(),
                        });
                    }
                    Delta::CallArguments { index, fragment } => {
                        streamed[index].arguments.push_str(&fragment)
                    }
                }
            }
            let ctx = format!("{family:?} eager={eager} step={step} text={text:?}");
            assert_eq!(
                content,
                expected.content.clone().unwrap_or_default(),
                "{ctx}"
            );
            assert_eq!(streamed, expected.tool_calls, "{ctx}");
            assert_eq!(message, expected, "{ctx}");
        }
    }
    expected
}

#[test]
fn hermes_calls_and_content() {
    let text = "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"n\": [1, 2.5]}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";
    let m = check_stream(Family::Hermes, text);
    assert_eq!(m.content.as_deref(), Some("Let me look."));
    assert_eq!(
        calls(&m),
        [
            call("get_weather", "{\"city\": \"Paris\", \"n\": [1, 2.5]}"),
            call("get_time", "{}")
        ]
    );
    assert!(m.tool_calls[0].id.starts_with("call_"));
    assert_ne!(m.tool_calls[0].id, m.tool_calls[1].id);
}

#[test]
fn hermes_call_without_closing_tag_at_the_end_counts() {
    let m = check_stream(
        Family::Hermes,
        "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": \"}\"}}\n",
    );
    assert_eq!(m.content, None);
    assert_eq!(calls(&m), [call("f", "{\"a\": \"}\"}")]);
}

#[test]
fn plain_text_is_content_exactly() {
    for family in [
        Family::Hermes,
        Family::Llama3,
        Family::Mistral,
        Family::Generic,
    ] {
        let text = "  Hello <b>world</b> {not json} [TOOL <tool  \n";
        let m = check_stream(family, text);
        assert_eq!(m.content.as_deref(), Some(text), "{family:?}");
        assert!(m.tool_calls.is_empty());
    }
    assert_eq!(whole(Family::Hermes, ""), ParsedMessage::default());
}

#[test]
fn malformed_calls_fall_back_to_content() {
    let cases = [
        "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}\n</tool_call>",
        "<tool_call>\n{\"name\": \"f\" \"arguments\": {}}\n</tool_call>",
        "<tool_call>\n{\"name\": 3, \"arguments\": {}}\n</tool_call>",
        "<tool_call>\n{\"name\": \"f\", \"arguments\": \"{}\"}\n</tool_call>",
        "<tool_call>\n{\"arguments\": {}}\n</tool_call>",
        "<tool_call>\n{\"name\": \"f\", \"arguments\": {}} trailing</tool_call>",
        "<tool_call>\nnot json</tool_call>",
        "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": [1, ",
    ];
    for text in cases {
        let m = whole(Family::Hermes, text);
        assert_eq!(m.content.as_deref(), Some(text), "{text}");
        assert!(m.tool_calls.is_empty(), "{text}");
        // Careful streaming never sends a call for it.
        let mut parser = StreamParser::new(Family::Hermes, CallIds::new(1), false);
        let mut deltas = parser.push(text);
        deltas.extend(parser.finish().0);
        assert!(
            deltas.iter().all(|d| matches!(d, Delta::Content(_))),
            "{text}"
        );
        check_careful_stream(Family::Hermes, text);
    }
    // A good call after a broken one still counts.
    let text = "<tool_call>oops <tool_call>\n{\"name\": \"g\", \"arguments\": {}}\n</tool_call>";
    let m = check_careful_stream(Family::Hermes, text);
    assert_eq!(m.content.as_deref(), Some("<tool_call>oops"));
    assert_eq!(calls(&m), [call("g", "{}")]);
}

#[test]
fn llama3_json_calls() {
    let m = check_stream(
        Family::Llama3,
        "{\"name\": \"get_time\", \"parameters\": {\"zone\": \"UTC\"}}",
    );
    assert_eq!(
        (m.content.clone(), calls(&m)),
        (None, vec![call("get_time", "{\"zone\": \"UTC\"}")])
    );
    let m = check_stream(
        Family::Llama3,
        "<|python_tag|>{\"name\": \"f\", \"arguments\": {}}",
    );
    assert_eq!(calls(&m), [call("f", "{}")]);
    let m = check_careful_stream(Family::Llama3, "Use {\"name\": 1} here");
    assert_eq!(m.content.as_deref(), Some("Use {\"name\": 1} here"));
}

#[test]
fn mistral_call_arrays() {
    let text = "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"x\": 1}, \"id\": \"abcdefghi\"}, {\"name\": \"g\", \"arguments\": {}}]";
    let m = check_stream(Family::Mistral, text);
    assert_eq!(m.content, None);
    assert_eq!(calls(&m), [call("f", "{\"x\": 1}"), call("g", "{}")]);
    let bad = "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}, 7]";
    assert_eq!(
        check_careful_stream(Family::Mistral, bad)
            .content
            .as_deref(),
        Some(bad)
    );
    assert_eq!(
        check_careful_stream(Family::Mistral, "[TOOL_CALLS][]")
            .content
            .as_deref(),
        Some("[TOOL_CALLS][]")
    );
}

#[test]
fn generic_answers() {
    let m = check_stream(
        Family::Generic,
        "{\"tool_calls\": [{\"name\": \"f\", \"arguments\": {\"q\": \"a b\"}}, {\"name\": \"g\", \"arguments\": {}}]}",
    );
    assert_eq!(
        (m.content.clone(), calls(&m)),
        (None, vec![call("f", "{\"q\": \"a b\"}"), call("g", "{}")])
    );
    let m = check_stream(
        Family::Generic,
        "{\"tool_call\": {\"name\": \"f\", \"arguments\": {}}}",
    );
    assert_eq!(calls(&m), [call("f", "{}")]);
    let m = check_stream(
        Family::Generic,
        "{\"response\": \"Hi \\\"there\\\" \\u00e9\\ud83d\\ude00\\n\"}",
    );
    assert_eq!(
        (m.content.as_deref(), m.tool_calls.len()),
        (Some("Hi \"there\" é😀\n"), 0)
    );
    // Cut short: what the response said so far.
    assert_eq!(
        whole(Family::Generic, "{\"response\": \"Hel")
            .content
            .as_deref(),
        Some("Hel")
    );
    for bad in [
        "{\"tool_calls\": [{\"name\": \"f\"}]}",
        "{\"other\": 1}",
        "{\"tool_calls\": [",
        "[1]",
    ] {
        assert_eq!(
            check_careful_stream(Family::Generic, bad)
                .content
                .as_deref(),
            Some(bad),
            "{bad}"
        );
    }
}

#[test]
fn eager_streaming_sends_arguments_as_they_grow() {
    let mut parser = StreamParser::new(Family::Hermes, CallIds::new(5), true);
    assert_eq!(parser.push("Sure<tool"), [Delta::Content("Sure".into())]);
    assert!(parser.push("_call>\n{\"name\": \"f").is_empty());
    let d = parser.push("\", \"arguments\": {\"a\":");
    assert!(
        matches!(&d[0], Delta::CallStart { index: 0, name, .. } if name == "f"),
        "{d:?}"
    );
    assert_eq!(
        d[1],
        Delta::CallArguments {
            index: 0,
            fragment: "{\"a\":".into()
        }
    );
    assert_eq!(
        parser.push(" 1}"),
        [Delta::CallArguments {
            index: 0,
            fragment: " 1}".into()
        }]
    );
    assert!(parser.push("}\n</tool_call>").is_empty());
    let (rest, message) = parser.finish();
    assert!(rest.is_empty());
    assert_eq!(message.tool_calls[0].arguments, "{\"a\": 1}");
    // Careful mode holds the call until it closes.
    let mut parser = StreamParser::new(Family::Hermes, CallIds::new(5), false);
    assert!(parser
        .push("<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}")
        .is_empty());
    assert_eq!(parser.push("\n</tool_call>").len(), 2);
}

const WEATHER: &str = "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}";

#[test]
fn hermes_bare_calls() {
    let m = check_stream(Family::Hermes, WEATHER);
    assert_eq!(m.content, None);
    assert_eq!(calls(&m), [call("get_weather", "{\"city\": \"Paris\"}")]);
    // Any JSON spacing; several calls, bare or tagged, one after another.
    let text = format!(
        "{{ \"name\":\"get_time\",\"arguments\":{{}} }}\n{WEATHER}\n<tool_call>\n{{\"name\": \"g\", \"arguments\": {{}}}}\n</tool_call>"
    );
    let m = check_stream(Family::Hermes, &text);
    assert_eq!(m.content, None);
    assert_eq!(
        calls(&m),
        [
            call("get_time", "{}"),
            call("get_weather", "{\"city\": \"Paris\"}"),
            call("g", "{}")
        ]
    );
}

#[test]
fn hermes_bare_call_after_prose_and_before_more() {
    let text = format!("I'll check the weather: {WEATHER}\n\nOne moment.");
    let m = check_stream(Family::Hermes, &text);
    assert_eq!(
        m.content.as_deref(),
        Some("I'll check the weather:One moment.")
    );
    assert_eq!(calls(&m), [call("get_weather", "{\"city\": \"Paris\"}")]);
}

#[test]
fn hermes_fenced_calls() {
    let pretty = "```json\n{\n  \"name\": \"get_weather\",\n  \"arguments\": {\n    \"city\": \"Paris\"\n  }\n}\n```";
    let m = check_stream(Family::Hermes, pretty);
    assert_eq!(m.content, None);
    assert_eq!(
        calls(&m),
        [call("get_weather", "{\n    \"city\": \"Paris\"\n  }")]
    );
    // Several calls in one fence, a plain fence, prose around it.
    let text = format!("Sure.\n```\n{WEATHER}\n<tool_call>\n{WEATHER}\n</tool_call>\n```\nDone.");
    let m = check_stream(Family::Hermes, &text);
    assert_eq!(m.content.as_deref(), Some("Sure.Done."));
    assert_eq!(m.tool_calls.len(), 2);
    // A grammar ends the answer after the call, before a closing fence.
    let m = check_stream(Family::Hermes, &format!("```json\n{WEATHER}"));
    assert_eq!((m.content, m.tool_calls.len()), (None, 1));
    // Prose inside the fence: the fence is text, the call still a call.
    let text = format!("```json\n{WEATHER}\nThat is all.\n```");
    let m = check_stream(Family::Hermes, &text);
    assert_eq!(m.content.as_deref(), Some("```jsonThat is all.\n```"));
    assert_eq!(m.tool_calls.len(), 1);
}

#[test]
fn bare_calls_need_the_request_tools_and_one_of_their_names() {
    let joke = "{\"name\": \"Joke\", \"arguments\": {\"topic\": \"cats\"}}";
    let m = check_careful_stream(Family::Hermes, joke);
    assert_eq!((m.content.as_deref(), m.tool_calls.len()), (Some(joke), 0));
    let fenced = format!("```json\n{joke}\n```");
    let m = check_careful_stream(Family::Hermes, &fenced);
    assert_eq!(m.content.as_deref(), Some(fenced.as_str()));
    // Without the tools, only tagged calls count.
    let m = parse(Family::Hermes, WEATHER, &mut CallIds::new(1));
    assert_eq!(
        (m.content.as_deref(), m.tool_calls.len()),
        (Some(WEATHER), 0)
    );
    let mut parser = StreamParser::new(Family::Hermes, CallIds::new(1), false);
    let mut deltas = parser.push(WEATHER);
    deltas.extend(parser.finish().0);
    assert_eq!(deltas, [Delta::Content(WEATHER.into())]);
}

#[test]
fn json_that_is_not_a_bare_call_is_content() {
    for text in [
        "{\"name\": \"Bob\", \"age\": 3}",
        "{\"name\": \"f\", \"arguments\": {}, \"id\": \"x\"}",
        "{\"name\": \"f\", \"name\": \"g\", \"arguments\": {}}",
        "{\"name\": \"f\"}",
        "{\"name\": \"f\", \"arguments\": \"{}\"}",
        "{\"name\": \"\", \"arguments\": {}}",
        "{\"arguments\": {}, \"name\": \"f\"}",
        "{\"name\": \"f\", \"arguments\": {\"a\": 1}",
        "{\"name\": \"f\", \"arguments\": {}} }",
        "```json\n{\"a\": 1}\n```",
        "```json\n{\"name\": \"Bob\"}\n```",
        "```rust\nfn main() {}\n```",
        "Use `{` and ``` fences { \"name",
    ] {
        let m = check_careful_stream(Family::Hermes, text);
        if text.ends_with("} }") {
            // A complete call, then a stray brace as text.
            assert_eq!((m.content.as_deref(), m.tool_calls.len()), (Some("}"), 1));
            continue;
        }
        assert_eq!(m.content.as_deref(), Some(text), "{text}");
        assert!(m.tool_calls.is_empty(), "{text}");
    }
}

#[test]
fn careful_streaming_holds_what_may_open_a_bare_call() {
    let mut parser = parser(Family::Hermes, false);
    assert_eq!(parser.push("Sure {"), [Delta::Content("Sure".into())]);
    assert!(parser.push(" \"na").is_empty());
    assert!(parser.push("me\": \"f\", \"arguments\": {}").is_empty());
    let d = parser.push("}\n```");
    assert!(
        matches!(&d[..], [Delta::CallStart { name, .. }, Delta::CallArguments { fragment, .. }]
            if name == "f" && fragment == "{}"),
        "{d:?}"
    );
    assert_eq!(parser.push("js"), []);
    assert_eq!(parser.push("x"), [Delta::Content("```jsx".into())]);
    let mut parser = self::parser(Family::Hermes, false);
    assert_eq!(parser.push("a {b"), [Delta::Content("a {b".into())]);
}

/// Every answer made of up to four of these pieces streams to its whole parse: careful
/// streaming never sends text it must take back.
#[test]
fn hermes_piece_mixtures_stream_to_their_whole_parse() {
    let pieces = [
        "{\"name\": \"f\"",
        ", \"arguments\": {\"a\": 1}",
        "}",
        "```json\n",
        "\n```",
        "<tool_call>\n",
        "\n</tool_call>",
        " hi ",
        "{",
    ];
    let n = pieces.len();
    for count in 1..=4u32 {
        for mut code in 0..n.pow(count) {
            let mut text = String::new();
            for _ in 0..count {
                text.push_str(pieces[code % n]);
                code /= n;
            }
            check_careful_stream(Family::Hermes, &text);
        }
    }
}
