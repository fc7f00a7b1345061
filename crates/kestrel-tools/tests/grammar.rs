//! The produced Lark grammars compile under llguidance and accept exactly the call text each
//! family writes (checked byte by byte with a one-byte-per-token vocabulary).

use std::sync::Arc;

use kestrel_tools::{constraint, parse_request, Constraint, Family, GrammarOptions, ToolRequest};
use llguidance::api::TopLevelGrammar;
use llguidance::{Matcher, ParserFactory};
use serde_json::json;
use toktrie::{ApproximateTokEnv, TokEnv};

fn factory() -> ParserFactory {
    let env: TokEnv = Arc::new(ApproximateTokEnv::single_byte());
    let mut f = ParserFactory::new_simple(&env).unwrap();
    f.quiet();
    f
}

fn request(choice: serde_json::Value, parallel: bool) -> ToolRequest {
    let body = json!({
        "tools": [
            {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}}},
            {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object",
                "properties": {"zone": {"type": "string", "enum": ["UTC", "CET"]}}, "required": ["zone"]}}},
        ],
        "tool_choice": choice,
        "parallel_tool_calls": parallel,
    });
    parse_request(body.as_object().unwrap()).unwrap().unwrap()
}

/// Whether the grammar takes all of `text` and may end there.
fn accepts(factory: &ParserFactory, c: &Constraint, text: &str) -> bool {
    let parser = factory.create_parser(TopLevelGrammar::from_lark(c.lark.clone()));
    let mut m = Matcher::new(parser);
    assert!(
        !m.is_error(),
        "grammar does not compile: {:?}\n{}",
        m.get_error(),
        c.lark
    );
    // The single-byte vocabulary's token ids are the bytes themselves.
    let tokens: Vec<u32> = text.bytes().map(u32::from).collect();
    m.consume_tokens(&tokens).is_ok() && m.is_accepting().unwrap_or(false)
}

fn get(family: Family, choice: serde_json::Value, parallel: bool) -> Constraint {
    constraint(
        family,
        &request(choice, parallel),
        &GrammarOptions::default(),
    )
    .unwrap()
}

#[test]
fn hermes_grammar() {
    let f = factory();
    let one = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}\n</tool_call>";
    let two = format!("{one}\n<tool_call>\n{{\"name\": \"get_time\", \"arguments\": {{\"zone\": \"UTC\"}}}}\n</tool_call>");
    let auto = get(Family::Hermes, json!("auto"), true);
    assert_eq!(auto.triggers[0], "<tool_call>");
    assert!(accepts(&f, &auto, one));
    assert!(accepts(&f, &auto, &two));
    let required = get(Family::Hermes, json!("required"), false);
    assert!(required.triggers.is_empty());
    assert!(accepts(&f, &required, one));
    assert!(
        !accepts(&f, &required, &two),
        "parallel_tool_calls: false allows one call"
    );
    for bad in [
        "<tool_call>\n{\"name\": \"nope\", \"arguments\": {}}\n</tool_call>",
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>",
        "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\": \"PST\"}}\n</tool_call>",
        "Hello",
    ] {
        assert!(!accepts(&f, &auto, bad), "{bad}");
    }
    let named = get(
        Family::Hermes,
        json!({"type": "function", "function": {"name": "get_time"}}),
        true,
    );
    assert!(named.triggers.is_empty());
    assert!(!accepts(&f, &named, one));
    assert!(accepts(
        &f,
        &named,
        "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\": \"CET\"}}\n</tool_call>"
    ));
}

/// Whether the grammar takes all of `text` (as the start of a longer answer).
fn takes_prefix(factory: &ParserFactory, c: &Constraint, text: &str) -> bool {
    let parser = factory.create_parser(TopLevelGrammar::from_lark(c.lark.clone()));
    let mut m = Matcher::new(parser);
    let tokens: Vec<u32> = text.bytes().map(u32::from).collect();
    m.consume_tokens(&tokens).is_ok()
}

#[test]
fn hermes_lazy_grammar_takes_bare_calls() {
    let f = factory();
    let weather = "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}";
    let time = "{\"name\": \"get_time\", \"arguments\": {\"zone\": \"UTC\"}}";
    let auto = get(Family::Hermes, json!("auto"), true);
    assert_eq!(
        auto.triggers,
        [
            "<tool_call>",
            "{\"name\": \"get_weather\"",
            "{\"name\": \"get_time\""
        ]
    );
    // The grammar starts at a trigger's first character, so it takes each trigger's text.
    for trigger in &auto.triggers {
        assert!(takes_prefix(&f, &auto, trigger), "{trigger}");
    }
    assert!(accepts(&f, &auto, weather));
    assert!(accepts(&f, &auto, &format!("{weather}\n{time}")));
    assert!(accepts(
        &f,
        &auto,
        &format!("{weather}\n<tool_call>\n{time}\n</tool_call>")
    ));
    assert!(!accepts(
        &f,
        &auto,
        "{\"name\": \"nope\", \"arguments\": {}}"
    ));
    // The fence a call was written in may close (the parser knows whether it opened).
    assert!(accepts(&f, &auto, &format!("{weather}\n```")));
    assert!(!accepts(&f, &auto, &format!("{weather}\n```\nmore")));
    let single = get(Family::Hermes, json!("auto"), false);
    assert!(accepts(&f, &single, weather));
    assert!(!accepts(&f, &single, &format!("{weather}\n{time}")));
    // A grammar from the first token keeps the trained, tagged form.
    let required = get(Family::Hermes, json!("required"), true);
    assert!(!accepts(&f, &required, weather));
}

#[test]
fn llama3_and_mistral_grammars() {
    let f = factory();
    let llama = get(Family::Llama3, json!("auto"), true);
    assert_eq!(llama.triggers, ["{\"name\""]);
    assert!(accepts(
        &f,
        &llama,
        "{\"name\": \"get_time\", \"parameters\": {\"zone\": \"UTC\"}}"
    ));
    assert!(!accepts(
        &f,
        &llama,
        "{\"name\": \"get_time\", \"arguments\": {\"zone\": \"UTC\"}}"
    ));
    let mistral = get(Family::Mistral, json!("required"), true);
    let calls = "[TOOL_CALLS][{\"name\": \"get_time\", \"arguments\": {\"zone\": \"UTC\"}, \"id\": \"abcDEF123\"}, {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}]";
    assert!(accepts(&f, &mistral, calls));
    let single = get(Family::Mistral, json!("required"), false);
    assert!(!accepts(&f, &single, calls));
    // A special [TOOL_CALLS] token is named by id.
    let by_id = constraint(
        Family::Mistral,
        &request(json!("auto"), true),
        &GrammarOptions {
            mistral_tool_calls_token: Some(5),
        },
    )
    .unwrap();
    assert!(
        by_id.lark.starts_with("start: <[5]> calls"),
        "{}",
        by_id.lark
    );
    let parser = f.create_parser(TopLevelGrammar::from_lark(by_id.lark.clone()));
    assert!(parser.is_ok(), "{:?}", parser.err());
}

#[test]
fn generic_grammar() {
    let f = factory();
    let auto = get(Family::Generic, json!("auto"), true);
    assert!(
        auto.triggers.is_empty(),
        "the generic answer is JSON from the first token"
    );
    assert!(accepts(&f, &auto, "{\"response\": \"Hi!\"}"));
    assert!(accepts(
        &f,
        &auto,
        "{\"tool_calls\": [{\"name\": \"get_time\", \"arguments\": {\"zone\": \"UTC\"}}]}"
    ));
    assert!(!accepts(&f, &auto, "Hi!"));
    let required = get(Family::Generic, json!("required"), false);
    assert!(!accepts(&f, &required, "{\"response\": \"Hi!\"}"));
    assert!(accepts(
        &f,
        &required,
        "{\"tool_call\": {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}}"
    ));
}

#[test]
fn no_constraint_without_callable_tools() {
    assert_eq!(
        constraint(
            Family::Hermes,
            &request(json!("none"), true),
            &GrammarOptions::default()
        ),
        None
    );
}
