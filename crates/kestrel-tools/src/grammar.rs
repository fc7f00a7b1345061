//! Constraining generation to well-formed calls: for a family, the request's tools and its
//! `tool_choice`, an llguidance Lark grammar (text) and the triggers that start it.
//!
//! Each function's `parameters` schema is embedded with Lark's `%json { ... }`. For the
//! template families the JSON is pinned to the spacing their templates render
//! (`json.dumps`'s `", "` and `": "`), which keeps small models on the text they were trained
//! on; the generic answer allows any JSON whitespace.

use serde_json::{json, Value};

use crate::{Family, ToolChoice, ToolRequest, ToolSpec};

/// A grammar and when it applies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Constraint {
    /// The grammar, in llguidance's Lark syntax.
    pub lark: String,
    /// Empty: the grammar holds from the first generated token. Otherwise (a lazy grammar,
    /// `tool_choice: "auto"`): generation is free until its text contains one of these, and
    /// the grammar then applies to the text from that trigger's first character on.
    pub triggers: Vec<String>,
}

/// Settings a grammar needs from the model's vocabulary.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GrammarOptions {
    /// The id of Mistral's `[TOOL_CALLS]` token when it is a special (control) token, which
    /// the grammar must then name by id; `None` matches the marker as text.
    pub mistral_tool_calls_token: Option<u32>,
}

/// The constraint for `req` in `family`; `None` when no call may be made.
pub fn constraint(
    family: Family,
    req: &ToolRequest,
    options: &GrammarOptions,
) -> Option<Constraint> {
    let tools = req.callable();
    if tools.is_empty() {
        return None;
    }
    let lazy = req.choice == ToolChoice::Auto;
    let mut lark = String::new();
    let triggers: Vec<String> = match family {
        Family::Hermes => {
            let calls = if req.parallel {
                "call (\"\\n\" call)*"
            } else {
                "call"
            };
            let tagged = "\"<tool_call>\\n\" function \"\\n</tool_call>\"";
            if lazy {
                // Under `auto`, small Qwen models often write a call without its tags, or in
                // a ```json fence (free text before the trigger) that they then close.
                lark.push_str(&format!(
                    "start: {calls} \"\\n```\"?\ncall: {tagged} | function\n"
                ));
            } else {
                lark.push_str(&format!("start: {calls}\ncall: {tagged}\n"));
            }
            push_functions(&mut lark, &tools, "arguments");
            // A bare call starts the grammar only with a tool's own name, so JSON the model
            // means as text (`{"name": "Bob", ...}`) stays free. Tool names need no escaping.
            let mut triggers = vec!["<tool_call>".to_owned()];
            triggers.extend(tools.iter().map(|t| format!("{{\"name\": \"{}\"", t.name)));
            triggers
        }
        Family::Llama3 => {
            // Llama 3 templates describe one call per answer.
            lark.push_str("start: function\n");
            push_functions(&mut lark, &tools, "parameters");
            vec!["{\"name\"".into()]
        }
        Family::Mistral => {
            let marker = match options.mistral_tool_calls_token {
                Some(id) => format!("<[{id}]>"),
                None => "\"[TOOL_CALLS]\"".into(),
            };
            let mut items: Vec<Value> = tools
                .iter()
                .map(|t| {
                    let mut schema = call_schema(t, "arguments");
                    schema["properties"]["id"] =
                        json!({ "type": "string", "pattern": "^[a-zA-Z0-9]{9}$" });
                    schema
                })
                .collect();
            let mut array = json!({
                "type": "array",
                "items": one_or_any_of(&mut items),
                "minItems": 1,
            });
            if !req.parallel {
                array["maxItems"] = json!(1);
            }
            array["x-guidance"] = templated_spacing();
            lark.push_str(&format!("start: {marker} calls\ncalls: %json {array}\n"));
            vec!["[TOOL_CALLS]".into()]
        }
        Family::Generic => {
            lark.push_str(&format!("start: %json {}\n", generic_schema(req, &tools)));
            // The answer is JSON either way; its `response` branch is the free text.
            return Some(Constraint {
                lark,
                triggers: Vec::new(),
            });
        }
    };
    Some(Constraint {
        lark,
        triggers: if lazy { triggers } else { Vec::new() },
    })
}

/// `function: fn_0 | fn_1 | ...` and one `%json` rule per tool.
fn push_functions(lark: &mut String, tools: &[&ToolSpec], args_key: &str) {
    let names: Vec<String> = (0..tools.len()).map(|i| format!("fn_{i}")).collect();
    lark.push_str(&format!("function: {}\n", names.join(" | ")));
    for (name, tool) in names.iter().zip(tools) {
        let mut schema = call_schema(tool, args_key);
        schema["x-guidance"] = templated_spacing();
        lark.push_str(&format!("{name}: %json {schema}\n"));
    }
}

/// `{"name": <this tool>, <args_key>: <its parameters>}`, in that order, nothing else.
fn call_schema(tool: &ToolSpec, args_key: &str) -> Value {
    let mut properties = serde_json::Map::new();
    properties.insert("name".into(), json!({ "const": tool.name }));
    properties.insert(args_key.into(), tool.parameters.clone());
    json!({
        "type": "object",
        "properties": properties,
        "required": ["name", args_key],
        "additionalProperties": false,
    })
}

fn templated_spacing() -> Value {
    json!({ "whitespace_flexible": false, "item_separator": ", ", "key_separator": ": " })
}

fn one_or_any_of(items: &mut Vec<Value>) -> Value {
    if items.len() == 1 {
        items.remove(0)
    } else {
        json!({ "anyOf": items })
    }
}

/// The generic answer: calls (`tool_calls` array, or one `tool_call` when parallel calls are
/// off), or under `auto` a `response` string instead.
fn generic_schema(req: &ToolRequest, tools: &[&ToolSpec]) -> Value {
    let mut items: Vec<Value> = tools.iter().map(|t| call_schema(t, "arguments")).collect();
    let item = one_or_any_of(&mut items);
    let calls = if req.parallel {
        json!({
            "type": "object",
            "properties": { "tool_calls": { "type": "array", "items": item, "minItems": 1 } },
            "required": ["tool_calls"],
            "additionalProperties": false,
        })
    } else {
        json!({
            "type": "object",
            "properties": { "tool_call": item },
            "required": ["tool_call"],
            "additionalProperties": false,
        })
    };
    if req.choice == ToolChoice::Auto {
        json!({ "anyOf": [calls, {
            "type": "object",
            "properties": { "response": { "type": "string" } },
            "required": ["response"],
            "additionalProperties": false,
        }]})
    } else {
        calls
    }
}
