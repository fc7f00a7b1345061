//! kestrel-tools: OpenAI-style tool calling around a chat model.
//!
//! - [`request`]: reading and checking a request's `tools`, `tool_choice` and
//!   `parallel_tool_calls`;
//! - [`Family`]: the call format a model's chat template trains (Hermes/Qwen, Llama 3,
//!   Mistral, or the generic JSON answer for templates without tools, whose prompt side is
//!   [`generic`]);
//! - [`grammar`]: the llguidance Lark grammar that keeps generated calls well formed, and the
//!   triggers that start it in `auto` mode;
//! - [`parse()`] and [`StreamParser`]: the answer split into content and calls, whole or as
//!   streamed deltas that add up to the same message. Given the request's tools
//!   ([`parse_with_tools`], [`StreamParser::with_tools`]), Hermes calls written without their
//!   tags count too.

mod error;
mod family;
pub mod generic;
pub mod grammar;
mod hermes;
mod ids;
mod json_scan;
mod parse;
pub mod request;
mod stream;

pub use error::ToolError;
pub use family::Family;
pub use grammar::{constraint, Constraint, GrammarOptions};
pub use ids::CallIds;
pub use parse::{parse, parse_with_tools, ParsedMessage, ToolCall};
pub use request::{parse_request, ToolChoice, ToolRequest, ToolSpec};
pub use stream::{Delta, StreamParser};
