//! Tool-call formats ("families") and telling which one a model's chat template trains.

/// How a model writes tool calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    /// Hermes / Qwen 2.5: `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`, one
    /// block per call; also read when written bare (the object without the tags) or in a
    /// ```` ```json ```` fence.
    Hermes,
    /// Llama 3.x: one JSON object `{"name": ..., "parameters": {...}}`, plain or after
    /// `<|python_tag|>`.
    Llama3,
    /// Mistral: `[TOOL_CALLS]` and a JSON array of `{"name", "arguments", "id"}` objects.
    Mistral,
    /// Templates without tool support: the tools are described in a system message Kestrel
    /// writes ([`crate::generic`]) and the whole answer is one JSON object,
    /// `{"tool_calls": [{"name", "arguments"}, ...]}` (or `{"tool_call": {...}}` when parallel
    /// calls are off) or `{"response": "..."}`.
    Generic,
}

impl Family {
    /// The family a chat template's source trains, from the call markers it writes.
    pub fn detect(template_source: &str) -> Family {
        let has = |s: &str| template_source.contains(s);
        if has("[TOOL_CALLS]") {
            Family::Mistral
        } else if has("<tool_call>") {
            Family::Hermes
        } else if has("<|start_header_id|>")
            && (has("<|python_tag|>") || has("\"parameters\""))
            && has("tools")
        {
            Family::Llama3
        } else {
            Family::Generic
        }
    }

    /// The literal texts that open a call, which the parser looks for. Hermes calls also open
    /// bare or fenced, in any JSON spacing, which its parser finds by their shape instead.
    /// Empty for [`Family::Generic`], whose answer is JSON from the first token. (The lazy
    /// grammar's triggers are [`crate::Constraint::triggers`].)
    pub fn triggers(self) -> &'static [&'static str] {
        match self {
            Family::Hermes => &["<tool_call>"],
            Family::Llama3 => &["{\"name\"", "{ \"name\"", "{\n\"name\"", "<|python_tag|>"],
            Family::Mistral => &["[TOOL_CALLS]"],
            Family::Generic => &[],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_families_from_template_markers() {
        assert_eq!(
            Family::detect("{{- '<tool_call>\\n' }}{% if tools %}"),
            Family::Hermes
        );
        assert_eq!(
            Family::detect("{%- if tools %}<|start_header_id|>ipython{{ '<|python_tag|>' }}"),
            Family::Llama3
        );
        assert_eq!(
            Family::detect("{% if tools %}<|start_header_id|>{\"name\": function name, \"parameters\": dictionary"),
            Family::Llama3
        );
        assert_eq!(
            Family::detect("{{ '[TOOL_CALLS]' }}{{ tools }}"),
            Family::Mistral
        );
        assert_eq!(
            Family::detect("<|im_start|>{{ message.content }}"),
            Family::Generic
        );
        // A Llama 3 template that never mentions tools cannot format calls.
        assert_eq!(
            Family::detect("<|start_header_id|>{{ m.content }}"),
            Family::Generic
        );
    }
}
