//! The error a malformed tool request gets: which field, and what is wrong with it.

/// A `tools` / `tool_choice` / `parallel_tool_calls` value the request cannot be served with.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid `{field}`: {message}")]
pub struct ToolError {
    /// The request field at fault, as a path (`tools[2].function.name`).
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

impl ToolError {
    pub(crate) fn new(field: impl Into<String>, message: impl Into<String>) -> ToolError {
        ToolError {
            field: field.into(),
            message: message.into(),
        }
    }
}
