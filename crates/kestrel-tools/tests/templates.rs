//! The tool crate with the real chat templates of the test models (as kestrel-tokenizer's
//! fixtures hold them): family detection, and prompts that render with tools.

use std::path::PathBuf;

use kestrel_tokenizer::chat::ChatTemplate;
use kestrel_tools::{generic, parse, parse_request, CallIds, Family, ToolRequest};
use serde_json::{json, Value};

fn chat_fixture(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../kestrel-tokenizer/tests/fixtures/chat")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn template(model: &str) -> ChatTemplate {
    let tokens: Value =
        serde_json::from_str(&chat_fixture(&format!("{model}.tokens.json"))).unwrap();
    ChatTemplate::new(
        &chat_fixture(&format!("{model}.jinja")),
        tokens["bos_token"].as_str().unwrap(),
        tokens["eos_token"].as_str().unwrap(),
    )
    .unwrap()
}

fn request() -> ToolRequest {
    let body = json!({"tools": [{"type": "function", "function": {"name": "get_time",
        "description": "Local time.", "parameters": {"type": "object",
        "properties": {"zone": {"type": "string"}}, "required": ["zone"]}}}]});
    parse_request(body.as_object().unwrap()).unwrap().unwrap()
}

fn conversation() -> Vec<Value> {
    vec![
        json!({"role": "system", "content": "Be brief."}),
        json!({"role": "user", "content": "Time in UTC?"}),
        json!({"role": "assistant", "content": null, "tool_calls": [{"id": "call_a", "type": "function",
            "function": {"name": "get_time", "arguments": "{\"zone\": \"UTC\"}"}}]}),
        json!({"role": "tool", "tool_call_id": "call_a", "content": "12:00"}),
    ]
}

#[test]
fn model_templates_map_to_families() {
    assert_eq!(
        Family::detect(template("qwen2.5-coder").source()),
        Family::Hermes
    );
    assert_eq!(
        Family::detect(template("smollm2").source()),
        Family::Generic
    );
    assert_eq!(Family::detect(template("gemma3").source()), Family::Generic);
}

#[test]
fn qwen_prompt_and_answer_round_trip() {
    let req = request();
    let prompt = template("qwen2.5-coder")
        .render_with_tools(&conversation(), Some(&req.raw_tools()), true)
        .unwrap();
    assert!(
        prompt.contains("<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_time\"")
    );
    assert!(prompt.contains(
        "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\": \"UTC\"}}\n</tool_call>"
    ));
    assert!(prompt
        .ends_with("<tool_response>\n12:00\n</tool_response><|im_end|>\n<|im_start|>assistant\n"));
    // The model answers in the format its prompt shows.
    let answer =
        "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\": \"CET\"}}\n</tool_call>";
    let m = parse(Family::Hermes, answer, &mut CallIds::new(0));
    assert_eq!(
        (m.tool_calls.len(), m.tool_calls[0].arguments.as_str()),
        (1, "{\"zone\": \"CET\"}")
    );
}

#[test]
fn generic_prompts_render_with_templates_without_tools() {
    let req = request();
    let messages = generic::prepare_messages(&conversation(), &req);
    assert_eq!(messages.len(), 4);
    assert_eq!(messages[0]["role"], "system");
    let system = messages[0]["content"].as_str().unwrap();
    assert!(
        system.starts_with("Be brief.\n\nYou can call these tools"),
        "{system}"
    );
    assert!(system.contains("\"name\": \"get_time\"") && system.contains("{\"response\""));
    assert_eq!(
        messages[2]["content"],
        "{\n  \"tool_calls\": [\n    {\n      \"name\": \"get_time\",\n      \"arguments\": {\n        \"zone\": \"UTC\"\n      }\n    }\n  ]\n}"
    );
    assert_eq!(messages[3]["role"], "user");
    for model in ["smollm2", "gemma3"] {
        let prompt = template(model)
            .render_with_tools(&messages, None, true)
            .unwrap();
        assert!(prompt.contains("You can call these tools"), "{model}");
        assert!(prompt.contains("\"tool_results\""), "{model}");
    }
    // No system message: one is put first; required choice drops the response option.
    let body =
        json!({"tools": req.raw_tools(), "tool_choice": "required", "parallel_tool_calls": false});
    let required = parse_request(body.as_object().unwrap()).unwrap().unwrap();
    let messages =
        generic::prepare_messages(&[json!({"role": "user", "content": "hi"})], &required);
    let system = messages[0]["content"].as_str().unwrap();
    assert!(
        system.contains("{\"tool_call\": {") && !system.contains("response"),
        "{system}"
    );
}
