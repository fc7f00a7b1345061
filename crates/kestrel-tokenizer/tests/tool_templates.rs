//! Rendering with tools (`ChatTemplate::render_with_tools`) against Qwen2.5-Coder's template,
//! whose fixtures scripts/tool-template-fixture.py writes with Python Jinja2 set up as Hugging
//! Face does, and against small templates for the arguments probe.

use std::path::PathBuf;

use kestrel_tokenizer::chat::{ChatMessage, ChatTemplate};
use serde_json::{json, Value};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn read(rel: &str) -> String {
    let path = fixtures().join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn qwen() -> ChatTemplate {
    let tokens: Value = serde_json::from_str(&read("chat/qwen2.5-coder.tokens.json")).unwrap();
    ChatTemplate::new(
        &read("chat/qwen2.5-coder.jinja"),
        tokens["bos_token"].as_str().unwrap(),
        tokens["eos_token"].as_str().unwrap(),
    )
    .unwrap()
}

#[test]
fn qwen_renders_tools_calls_and_results_as_transformers_does() {
    let data: Value = serde_json::from_str(&read("tools/conversations.json")).unwrap();
    let tools = data["tools"].as_array().unwrap();
    let template = qwen();
    assert!(template.wants_object_arguments());
    let conversations = data["conversations"].as_object().unwrap();
    assert_eq!(conversations.len(), 2);
    for (name, messages) in conversations {
        let expected = read(&format!("tools/qwen2.5-coder.{name}.txt"));
        let got = template
            .render_with_tools(messages.as_array().unwrap(), Some(tools), true)
            .unwrap();
        assert_eq!(got, expected, "{name}");
    }
}

#[test]
fn qwen_tool_call_text_read_by_hand() {
    // Independent of the generator: what the template says an assistant call turn is.
    let messages = [
        json!({"role": "user", "content": "hi"}),
        json!({"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function",
            "function": {"name": "f", "arguments": "{\"a\": [1, 2.5], \"b\": \"é\"}"}}]}),
        json!({"role": "tool", "tool_call_id": "c", "content": "ok"}),
    ];
    let got = qwen().render_with_tools(&messages, None, false).unwrap();
    assert_eq!(
        got,
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n\
         <|im_start|>user\nhi<|im_end|>\n\
         <|im_start|>assistant\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": [1, 2.5], \"b\": \"é\"}}\n</tool_call><|im_end|>\n\
         <|im_start|>user\n<tool_response>\nok\n</tool_response><|im_end|>\n"
    );
}

#[test]
fn without_tools_render_with_tools_matches_render() {
    let template = qwen();
    let messages = [
        ChatMessage::new("system", "s"),
        ChatMessage::new("user", "u"),
    ];
    let json: Vec<Value> = messages.iter().map(ChatMessage::to_json).collect();
    assert_eq!(
        template.render_with_tools(&json, None, true).unwrap(),
        template.render(&messages, true).unwrap()
    );
}

#[test]
fn string_arguments_stay_strings_for_templates_that_print_them() {
    let source = "{% for m in messages %}{% for c in m.tool_calls %}\
                  [{{ c.function.name }}:{{ c.function.arguments }}]{% endfor %}{% endfor %}";
    let template = ChatTemplate::new(source, "", "").unwrap();
    assert!(!template.wants_object_arguments());
    let messages = [json!({"role": "assistant", "content": null, "tool_calls": [
        {"type": "function", "function": {"name": "f", "arguments": "{\"x\": 1}"}}]})];
    assert_eq!(
        template.render_with_tools(&messages, None, false).unwrap(),
        "[f:{\"x\": 1}]"
    );
    // The built-in ChatML fallback ignores tool calls altogether.
    assert!(!ChatTemplate::chatml().wants_object_arguments());
}

#[test]
fn tools_reach_the_template_as_given() {
    let template = ChatTemplate::new(
        "{% if tools %}{% for t in tools %}{{ t | tojson }};{% endfor %}{% else %}none{% endif %}",
        "",
        "",
    )
    .unwrap();
    let tools = [
        json!({"type": "function", "function": {"name": "z", "parameters": {"type": "object", "b": 1, "a": 2}}}),
    ];
    assert_eq!(
        template.render_with_tools(&[], Some(&tools), false).unwrap(),
        "{\"type\": \"function\", \"function\": {\"name\": \"z\", \"parameters\": {\"type\": \"object\", \"b\": 1, \"a\": 2}}};"
    );
    assert_eq!(
        template.render_with_tools(&[], None, false).unwrap(),
        "none"
    );
}
