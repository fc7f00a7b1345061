//! Structured output's request fields, read the same way for every dialect:
//! OpenAI's `response_format` (`json_object`, `json_schema`; the Responses
//! API's `text.format` arrives here as it), and llama-server's
//! `json_schema` and `grammar` (GBNF). The constraint is compiled here,
//! while the request is prepared off the decode loop, so a schema that is
//! wrong, unsupported or too large is the request's 400 and never a stall
//! of the running streams (the compiler's size and work limits bound it).

use std::sync::Arc;

use kestrel_engine::{Constraint, Engine, GrammarConstraint, Spec};
use serde_json::Value;

use super::fields::{field, wrong, Obj};
use crate::error::ApiError;

/// The output constraint a request asks for, with a name for logs; none
/// for plain text.
pub(crate) fn requested(o: &Obj) -> Result<Option<(Spec, &'static str)>, ApiError> {
    let mut found: Vec<(Spec, &'static str)> = Vec::new();
    if let Some(rf) = field(o, "response_format") {
        found.extend(response_format(rf)?);
    }
    if let Some(schema) = field(o, "json_schema") {
        if !schema.is_object() && !schema.is_boolean() {
            return Err(wrong("json_schema", "a JSON schema (an object)", schema));
        }
        found.push((Spec::JsonSchema(schema.clone()), "json schema"));
    }
    if let Some(g) = field(o, "grammar") {
        let g = g
            .as_str()
            .ok_or_else(|| wrong("grammar", "a string (a GBNF grammar)", g))?;
        // llama-server reads an empty grammar as none.
        if !g.trim().is_empty() {
            found.push((Spec::Gbnf(g.to_owned()), "grammar"));
        }
    }
    if found.len() > 1 {
        return Err(ApiError::bad_request(
            "give at most one of 'response_format' (json), 'json_schema' and 'grammar'",
        ));
    }
    Ok(found.pop())
}

/// OpenAI's `response_format` (and the Responses API's `text.format`, whose
/// `json_schema` fields sit beside `type`; llama-server also takes a
/// `schema` inside `json_object`).
fn response_format(rf: &Value) -> Result<Option<(Spec, &'static str)>, ApiError> {
    let rf = rf
        .as_object()
        .ok_or_else(|| wrong("response_format", "an object", rf))?;
    let t =
        match rf.get("type") {
            Some(Value::String(t)) => t.as_str(),
            Some(v) => return Err(wrong("response_format.type", "a string", v)),
            None => return Err(ApiError::bad_request(
                "'response_format' needs a 'type' (\"text\", \"json_object\" or \"json_schema\")",
            )),
        };
    match t {
        "text" => Ok(None),
        "json_object" => Ok(Some(match rf.get("schema") {
            Some(schema) => (Spec::JsonSchema(schema.clone()), "json schema"),
            None => (Spec::JsonObject, "json object"),
        })),
        "json_schema" => {
            let inner = match rf.get("json_schema") {
                Some(Value::Object(js)) => js,
                Some(v) => return Err(wrong("response_format.json_schema", "an object", v)),
                None => rf,
            };
            let schema = inner.get("schema").ok_or_else(|| {
                ApiError::bad_request("response_format 'json_schema' needs its 'schema'")
            })?;
            if !schema.is_object() && !schema.is_boolean() {
                return Err(wrong(
                    "response_format.json_schema.schema",
                    "a JSON schema (an object)",
                    schema,
                ));
            }
            Ok(Some((Spec::JsonSchema(schema.clone()), "json schema")))
        }
        other => Err(ApiError::bad_request(format!(
            "unknown response_format type {other:?} (expected \"text\", \"json_object\" or \"json_schema\")"
        ))),
    }
}

/// Compiles a constraint for `engine`'s vocabulary: a 400 that names the
/// problem when it cannot be (syntax with line and column, the unsupported
/// keyword, the limit it passed).
pub(crate) fn compile(
    engine: &Engine,
    spec: &Spec,
    what: &'static str,
    triggers: &[String],
) -> Result<Constraint, ApiError> {
    let grammar = engine
        .compile(spec)
        .map_err(|e| ApiError::bad_request(format!("{what}: {e}")))?;
    Ok(Constraint(Arc::new(GrammarConstraint::lazy(
        grammar, triggers, what,
    ))))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn obj(v: Value) -> Obj {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn each_dialects_field_names_its_constraint() {
        let schema = json!({"type": "object"});
        let cases = [
            (json!({"response_format": {"type": "text"}}), None),
            (
                json!({"response_format": {"type": "json_object"}}),
                Some(Spec::JsonObject),
            ),
            (
                json!({"response_format": {"type": "json_schema",
                    "json_schema": {"name": "x", "schema": schema, "strict": true}}}),
                Some(Spec::JsonSchema(schema.clone())),
            ),
            // The Responses API's text.format.
            (
                json!({"response_format": {"type": "json_schema", "name": "x", "schema": schema}}),
                Some(Spec::JsonSchema(schema.clone())),
            ),
            (
                json!({"json_schema": schema}),
                Some(Spec::JsonSchema(schema.clone())),
            ),
            (
                json!({"grammar": "root ::= \"a\""}),
                Some(Spec::Gbnf("root ::= \"a\"".into())),
            ),
            (json!({"grammar": ""}), None),
        ];
        for (body, want) in cases {
            let got = requested(&obj(body.clone())).unwrap().map(|(s, _)| s);
            assert_eq!(got, want, "{body}");
        }
    }

    #[test]
    fn wrong_fields_are_named() {
        let cases = [
            (
                json!({"response_format": {"type": "json_schema"}}),
                "needs its 'schema'",
            ),
            (
                json!({"response_format": {"type": "xml"}}),
                "unknown response_format type",
            ),
            (json!({"response_format": {}}), "needs a 'type'"),
            (json!({"grammar": 3}), "'grammar' must be a string"),
            (
                json!({"json_schema": "x"}),
                "'json_schema' must be a JSON schema",
            ),
            (
                json!({"grammar": "root ::= \"a\"", "json_schema": {}}),
                "at most one",
            ),
        ];
        for (body, want) in cases {
            let e = requested(&obj(body.clone())).unwrap_err();
            assert!(e.message.contains(want), "{body}: {}", e.message);
        }
    }
}
