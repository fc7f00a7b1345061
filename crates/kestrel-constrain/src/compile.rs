//! From a request's constraint ([`Spec`]) to a compiled [`Grammar`]: size
//! and complexity limits for hostile input, unsupported JSON-schema keywords
//! as errors, and the check that the constraint allows any output at all.

use std::sync::Arc;

use llguidance::api::{ParserLimits, StopReason, TopLevelGrammar};
use llguidance::{ParserFactory, TokenParser};
use serde_json::Value;

use crate::{gbnf, ConstraintError, Matcher, Vocabulary};

/// The most bytes of schema or grammar text a request may send.
pub const MAX_SPEC_BYTES: usize = 1 << 20;

/// The deepest a JSON schema may nest (arrays and objects). Compiling is
/// recursive, and a deeper schema is a denial of service, not a use case;
/// serde_json's parser stops at 128 anyway.
pub const MAX_SCHEMA_DEPTH: usize = 100;

/// Compiling runs on its own thread with this much stack: llguidance's
/// schema and grammar compilers recurse over the input's structure.
const COMPILE_STACK_BYTES: usize = 64 << 20;

/// A request's output constraint.
#[derive(Clone, Debug, PartialEq)]
pub enum Spec {
    /// A JSON schema (llguidance's subset; anything unsupported is an error).
    JsonSchema(Value),
    /// Any JSON object.
    JsonObject,
    /// A regular expression (Rust `regex` syntax) the whole output matches.
    Regex(String),
    /// An llguidance Lark grammar.
    Lark(String),
    /// A llama.cpp GBNF grammar (start rule `root`).
    Gbnf(String),
}

/// Compiles constraints against one model's vocabulary. One per model;
/// `Send + Sync`, so threads share it.
pub struct Compiler {
    vocab: Arc<Vocabulary>,
    factory: Arc<ParserFactory>,
}

/// A compiled constraint. Cloning is cheap; every matcher made from one
/// compile (and its clones) shares the lexer's lazily built states, so work
/// done for one sequence serves the others.
#[derive(Clone)]
pub struct Grammar {
    parser: TokenParser,
    vocab: Arc<Vocabulary>,
    /// JSON: the longest run of digits a matcher lets through.
    digit_cap: Option<usize>,
}

/// The most digits in a row JSON output may hold, as llama.cpp's schema
/// grammars bound a number's integer and fraction parts (16 each):
/// llguidance's number lexeme has no bound, and Gemma-3 at temperature 0.8
/// wrote fractions of hundreds of digits until the token limit.
const JSON_DIGIT_CAP: usize = 16;

/// The limits compiling and masking run under: llguidance's defaults, whose
/// fuel bounds bound both a compile and each mask (an explosive lexer runs
/// out of fuel and fails instead of stalling); errors without llguidance's
/// grammar dump, which can be as large as the input.
fn limits() -> ParserLimits {
    ParserLimits {
        verbose_errors: false,
        ..ParserLimits::default()
    }
}

impl Compiler {
    pub fn new(vocab: Arc<Vocabulary>) -> Result<Compiler, ConstraintError> {
        let mut factory = ParserFactory::new_simple(vocab.env())
            .map_err(|e| ConstraintError::Vocabulary(e.to_string()))?;
        // Errors come back as values; nothing goes to stderr.
        factory.quiet();
        *factory.limits_mut() = limits();
        Ok(Compiler {
            vocab,
            factory: Arc::new(factory),
        })
    }

    pub fn vocabulary(&self) -> &Arc<Vocabulary> {
        &self.vocab
    }

    /// Compiles `spec`; fails on bad syntax, unsupported features, limits,
    /// or a constraint that no output satisfies.
    pub fn compile(&self, spec: &Spec) -> Result<Grammar, ConstraintError> {
        std::thread::scope(|scope| {
            let worker = std::thread::Builder::new()
                .name("constrain-compile".into())
                .stack_size(COMPILE_STACK_BYTES)
                .spawn_scoped(scope, || self.compile_here(spec))
                .map_err(|e| ConstraintError::TooComplex(format!("no compile thread: {e}")))?;
            worker.join().unwrap_or_else(|_| {
                Err(ConstraintError::Grammar(
                    "internal error in the grammar compiler".into(),
                ))
            })
        })
    }

    fn compile_here(&self, spec: &Spec) -> Result<Grammar, ConstraintError> {
        let top = top_level(spec)?;
        let err = |e: String| classify(spec, e);
        let mut parser = self
            .factory
            .create_parser(top)
            .map_err(|e| err(e.to_string()))?;
        let warnings = parser.grammar_warnings();
        if !warnings.is_empty() {
            return Err(err(warnings.join("; ")));
        }
        let grammar = Grammar {
            parser,
            vocab: self.vocab.clone(),
            digit_cap: matches!(spec, Spec::JsonSchema(_) | Spec::JsonObject)
                .then_some(JSON_DIGIT_CAP),
        };
        // The first mask: also warms the shared lexer for the matchers.
        let mut probe = grammar.parser.clone();
        probe.start_without_prompt();
        match probe.compute_mask() {
            Ok(m) if !m.is_zero() => Ok(grammar),
            Ok(_) => Err(ConstraintError::AcceptsNothing),
            Err(_) if probe.stop_reason() == StopReason::NoExtensionBias => {
                Err(ConstraintError::AcceptsNothing)
            }
            Err(e) => Err(err(e.to_string())),
        }
    }
}

impl Grammar {
    /// The vocabulary it was compiled against.
    pub fn vocabulary(&self) -> &Arc<Vocabulary> {
        &self.vocab
    }

    /// A fresh matcher at the start of the output.
    pub fn matcher(&self) -> Matcher {
        Matcher::new(self.inner_matcher(), self.vocab.clone(), self.digit_cap)
    }

    fn inner_matcher(&self) -> llguidance::Matcher {
        llguidance::Matcher::new(Ok(self.parser.clone()))
    }
}

fn check_size(what: &'static str, size: usize) -> Result<(), ConstraintError> {
    if size > MAX_SPEC_BYTES {
        return Err(ConstraintError::TooLarge {
            what,
            size,
            limit: MAX_SPEC_BYTES,
        });
    }
    Ok(())
}

/// Fails on a schema nested deeper than [`MAX_SCHEMA_DEPTH`], without
/// recursing itself.
fn check_depth(schema: &Value) -> Result<(), ConstraintError> {
    let mut todo = vec![(schema, 1usize)];
    while let Some((v, depth)) = todo.pop() {
        if depth > MAX_SCHEMA_DEPTH {
            return Err(ConstraintError::TooComplex(format!(
                "the JSON schema nests deeper than {MAX_SCHEMA_DEPTH} levels"
            )));
        }
        match v {
            Value::Array(items) => todo.extend(items.iter().map(|i| (i, depth + 1))),
            Value::Object(map) => todo.extend(map.values().map(|i| (i, depth + 1))),
            _ => {}
        }
    }
    Ok(())
}

/// Whitespace between JSON tokens as llama.cpp's schema grammars allow it:
/// a space, or a newline and at most 20 spaces or tabs of indent. Without
/// a bound, small models at temperature 0.8 were seen filling the rest of
/// their token budget with newlines and tabs inside an object.
const JSON_WHITESPACE: &str = r"(?:\x20|\n[\x20\x09]{0,20})";

/// The schema with [`JSON_WHITESPACE`] as its whitespace, unless it sets
/// llguidance's options (`x-guidance`) itself.
fn bounded_whitespace(mut schema: Value) -> Value {
    if let Some(o) = schema.as_object_mut() {
        if !o.contains_key("x-guidance") {
            o.insert(
                "x-guidance".into(),
                serde_json::json!({ "whitespace_pattern": JSON_WHITESPACE }),
            );
        }
    }
    schema
}

fn top_level(spec: &Spec) -> Result<TopLevelGrammar, ConstraintError> {
    Ok(match spec {
        Spec::JsonSchema(schema) => {
            check_depth(schema)?;
            let size = serde_json::to_vec(schema).map_or(usize::MAX, |v| v.len());
            check_size("the JSON schema", size)?;
            TopLevelGrammar::from_json_schema(bounded_whitespace(schema.clone()))
        }
        Spec::JsonObject => TopLevelGrammar::from_json_schema(bounded_whitespace(
            serde_json::json!({"type": "object"}),
        )),
        Spec::Regex(rx) => {
            check_size("the regex", rx.len())?;
            TopLevelGrammar::from_regex(rx)
        }
        Spec::Lark(lark) => {
            check_size("the grammar", lark.len())?;
            TopLevelGrammar::from_lark(lark.clone())
        }
        Spec::Gbnf(text) => {
            check_size("the grammar", text.len())?;
            TopLevelGrammar::from_lark(gbnf::to_lark(text)?)
        }
    })
}

/// llguidance reports limits as plain errors; those become
/// [`ConstraintError::TooComplex`], the rest name the kind of spec.
fn classify(spec: &Spec, msg: String) -> ConstraintError {
    const LIMIT_WORDS: &[&str] = &[
        "fuel",
        "too many",
        "too large",
        "too deeply",
        "limit",
        "exceeded",
    ];
    if LIMIT_WORDS.iter().any(|w| msg.contains(w)) {
        return ConstraintError::TooComplex(msg);
    }
    match spec {
        Spec::JsonSchema(_) | Spec::JsonObject => ConstraintError::Schema(msg),
        Spec::Regex(_) => ConstraintError::Regex(msg),
        Spec::Lark(_) | Spec::Gbnf(_) => ConstraintError::Grammar(msg),
    }
}
