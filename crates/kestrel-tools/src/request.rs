//! The request side: reading and checking `tools`, `tool_choice` and `parallel_tool_calls`
//! from an OpenAI chat request body.

use serde_json::{Map, Value};

use crate::ToolError;

/// Most tools one request may declare (OpenAI's limit too).
pub const MAX_TOOLS: usize = 512;

/// One declared function.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolSpec {
    /// The function's name: 1 to 64 of `a-z A-Z 0-9 _ -`.
    pub name: String,
    /// What the function does, if the request said.
    pub description: Option<String>,
    /// The JSON schema of its arguments (an object schema); `{"type": "object",
    /// "properties": {}}` when the request gave none.
    pub parameters: Value,
    /// The tool entry exactly as the request gave it, for the chat template.
    pub raw: Value,
}

/// Which calls the model may or must make.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolChoice {
    /// Free text or calls, as the model decides.
    Auto,
    /// No calls.
    None,
    /// One or more calls, no free text.
    Required,
    /// Calls of this one function only.
    Function(String),
}

/// A request's tool settings, checked.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolRequest {
    pub tools: Vec<ToolSpec>,
    pub choice: ToolChoice,
    /// Whether one answer may hold several calls (`parallel_tool_calls`, default true).
    pub parallel: bool,
}

impl ToolRequest {
    /// The tool entries as the request gave them, as a chat template's `tools` takes them.
    pub fn raw_tools(&self) -> Vec<Value> {
        self.tools.iter().map(|t| t.raw.clone()).collect()
    }

    /// The tools a call may name under `choice` (all, or the chosen one).
    pub fn callable(&self) -> Vec<&ToolSpec> {
        match &self.choice {
            ToolChoice::Function(name) => self.tools.iter().filter(|t| &t.name == name).collect(),
            ToolChoice::None => Vec::new(),
            ToolChoice::Auto | ToolChoice::Required => self.tools.iter().collect(),
        }
    }
}

/// Reads the tool fields of a chat request body. `Ok(None)` when it declares no tools (no
/// `tools`, `null`, or `[]`) and asks for none.
pub fn parse_request(body: &Map<String, Value>) -> Result<Option<ToolRequest>, ToolError> {
    let tools = parse_tools(body.get("tools"))?;
    let choice = parse_choice(body.get("tool_choice"), &tools)?;
    let parallel = match body.get("parallel_tool_calls") {
        None | Some(Value::Null) => true,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(ToolError::new("parallel_tool_calls", "must be a boolean")),
    };
    if tools.is_empty() {
        return Ok(None);
    }
    Ok(Some(ToolRequest {
        tools,
        choice,
        parallel,
    }))
}

fn parse_tools(tools: Option<&Value>) -> Result<Vec<ToolSpec>, ToolError> {
    let list = match tools {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(list)) => list,
        Some(_) => return Err(ToolError::new("tools", "must be an array")),
    };
    if list.len() > MAX_TOOLS {
        return Err(ToolError::new(
            "tools",
            format!("{} tools given, at most {MAX_TOOLS} allowed", list.len()),
        ));
    }
    let mut specs: Vec<ToolSpec> = Vec::with_capacity(list.len());
    for (i, tool) in list.iter().enumerate() {
        let spec = parse_tool(tool, i)?;
        if specs.iter().any(|s| s.name == spec.name) {
            return Err(ToolError::new(
                format!("tools[{i}].function.name"),
                format!("duplicate function name {:?}", spec.name),
            ));
        }
        specs.push(spec);
    }
    Ok(specs)
}

fn parse_tool(tool: &Value, i: usize) -> Result<ToolSpec, ToolError> {
    let at = |field: &str| format!("tools[{i}]{field}");
    let tool_obj = tool
        .as_object()
        .ok_or_else(|| ToolError::new(at(""), "must be an object"))?;
    match tool_obj.get("type") {
        Some(Value::String(t)) if t == "function" => {}
        None => {
            return Err(ToolError::new(
                at(".type"),
                "missing (must be \"function\")",
            ))
        }
        Some(_) => return Err(ToolError::new(at(".type"), "must be \"function\"")),
    }
    let function = tool_obj
        .get("function")
        .and_then(Value::as_object)
        .ok_or_else(|| ToolError::new(at(".function"), "must be an object"))?;
    let name = function
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| ToolError::new(at(".function.name"), "must be a string"))?;
    if !valid_name(name) {
        return Err(ToolError::new(
            at(".function.name"),
            format!("{name:?} must be 1 to 64 characters of a-z, A-Z, 0-9, _ and -"),
        ));
    }
    let description = match function.get("description") {
        None | Some(Value::Null) => None,
        Some(Value::String(d)) => Some(d.clone()),
        Some(_) => {
            return Err(ToolError::new(
                at(".function.description"),
                "must be a string",
            ))
        }
    };
    let parameters = match function.get("parameters") {
        None | Some(Value::Null) => serde_json::json!({ "type": "object", "properties": {} }),
        Some(schema @ Value::Object(map)) => match map.get("type") {
            None => schema.clone(),
            Some(Value::String(t)) if t == "object" => schema.clone(),
            Some(_) => {
                return Err(ToolError::new(
                    at(".function.parameters"),
                    "must be an object schema (\"type\": \"object\")",
                ))
            }
        },
        Some(_) => {
            return Err(ToolError::new(
                at(".function.parameters"),
                "must be a JSON schema object",
            ))
        }
    };
    Ok(ToolSpec {
        name: name.to_owned(),
        description,
        parameters,
        raw: tool.clone(),
    })
}

fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn parse_choice(choice: Option<&Value>, tools: &[ToolSpec]) -> Result<ToolChoice, ToolError> {
    let default = if tools.is_empty() {
        ToolChoice::None
    } else {
        ToolChoice::Auto
    };
    let choice = match choice {
        None | Some(Value::Null) => return Ok(default),
        Some(Value::String(s)) => match s.as_str() {
            "auto" => default,
            "none" => ToolChoice::None,
            "required" => ToolChoice::Required,
            other => {
                return Err(ToolError::new(
                    "tool_choice",
                    format!("{other:?} is not one of \"auto\", \"none\", \"required\""),
                ))
            }
        },
        Some(Value::Object(o)) => {
            if o.get("type").and_then(Value::as_str) != Some("function") {
                return Err(ToolError::new("tool_choice.type", "must be \"function\""));
            }
            let name = o
                .get("function")
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str)
                .ok_or_else(|| ToolError::new("tool_choice.function.name", "must be a string"))?;
            if !tools.iter().any(|t| t.name == name) {
                return Err(ToolError::new(
                    "tool_choice.function.name",
                    format!("{name:?} is not among the declared tools"),
                ));
            }
            ToolChoice::Function(name.to_owned())
        }
        Some(_) => {
            return Err(ToolError::new(
                "tool_choice",
                "must be a string or a {\"type\": \"function\", ...} object",
            ))
        }
    };
    if tools.is_empty() && choice == ToolChoice::Required {
        return Err(ToolError::new("tool_choice", "\"required\" needs `tools`"));
    }
    Ok(choice)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn body(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    fn tool(name: &str) -> Value {
        json!({"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}}})
    }

    fn err(v: Value) -> ToolError {
        parse_request(&body(v)).unwrap_err()
    }

    #[test]
    fn reads_tools_choice_and_parallel() {
        let r = parse_request(&body(json!({"tools": [tool("a"), tool("b")],
            "tool_choice": {"type": "function", "function": {"name": "b"}}, "parallel_tool_calls": false})))
        .unwrap()
        .unwrap();
        assert_eq!(r.tools.len(), 2);
        assert_eq!(r.choice, ToolChoice::Function("b".into()));
        assert!(!r.parallel);
        assert_eq!(r.callable().len(), 1);
        assert_eq!(r.raw_tools()[0], tool("a"));
        let r = parse_request(&body(json!({"tools": [tool("a")]})))
            .unwrap()
            .unwrap();
        assert_eq!((r.choice, r.parallel), (ToolChoice::Auto, true));
        assert_eq!(parse_request(&body(json!({"tools": []}))).unwrap(), None);
        assert_eq!(
            parse_request(&body(json!({"tool_choice": "none"}))).unwrap(),
            None
        );
        let r = parse_request(&body(
            json!({"tools": [{"type": "function", "function": {"name": "n"}}]}),
        ))
        .unwrap()
        .unwrap();
        assert_eq!(
            r.tools[0].parameters,
            json!({"type": "object", "properties": {}})
        );
    }

    #[test]
    fn errors_name_the_field() {
        let field = |v| err(v).field;
        assert_eq!(field(json!({"tools": {}})), "tools");
        assert_eq!(
            field(json!({"tools": [tool("a"), tool("a")]})),
            "tools[1].function.name"
        );
        assert_eq!(
            field(json!({"tools": [tool("a b")]})),
            "tools[0].function.name"
        );
        assert_eq!(
            field(json!({"tools": [{"type": "retrieval"}]})),
            "tools[0].type"
        );
        assert_eq!(
            field(json!({"tools": [{"type": "function"}]})),
            "tools[0].function"
        );
        assert_eq!(
            field(
                json!({"tools": [{"type": "function", "function": {"name": "a", "parameters": {"type": "string"}}}]})
            ),
            "tools[0].function.parameters"
        );
        assert_eq!(
            field(
                json!({"tools": [{"type": "function", "function": {"name": "a", "parameters": []}}]})
            ),
            "tools[0].function.parameters"
        );
        assert_eq!(
            field(
                json!({"tools": [tool("a")], "tool_choice": {"type": "function", "function": {"name": "zz"}}})
            ),
            "tool_choice.function.name"
        );
        assert_eq!(
            field(json!({"tools": [tool("a")], "tool_choice": "sometimes"})),
            "tool_choice"
        );
        assert_eq!(field(json!({"tool_choice": "required"})), "tool_choice");
        assert_eq!(
            field(json!({"tools": [tool("a")], "parallel_tool_calls": "yes"})),
            "parallel_tool_calls"
        );
        let many: Vec<Value> = (0..=MAX_TOOLS).map(|i| tool(&format!("f{i}"))).collect();
        let e = err(json!({ "tools": many }));
        assert_eq!(e.field, "tools");
        assert!(e.to_string().contains("at most 512"), "{e}");
    }
}
