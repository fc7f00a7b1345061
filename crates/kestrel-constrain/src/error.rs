//! The crate's one error type: what went wrong, worded for the person who
//! wrote the schema or grammar (where it is, which keyword).

/// Why a vocabulary, a compile or a matcher step failed.
#[derive(Debug, thiserror::Error)]
pub enum ConstraintError {
    /// The vocabulary could not be turned into a token trie.
    #[error("vocabulary: {0}")]
    Vocabulary(String),
    /// Schema or grammar text past the size limit.
    #[error("{what} is {size} bytes; the limit is {limit}")]
    TooLarge {
        what: &'static str,
        size: usize,
        limit: usize,
    },
    /// A JSON schema that is invalid or uses something unsupported; the
    /// message names the keyword (and the path, where llguidance gives one).
    #[error("JSON schema: {0}")]
    Schema(String),
    /// A regular expression that does not compile.
    #[error("regex: {0}")]
    Regex(String),
    /// A Lark grammar that does not compile (llguidance's message gives
    /// the line and column).
    #[error("grammar: {0}")]
    Grammar(String),
    /// A GBNF syntax error, at 1-based `line` and `column` (in characters).
    #[error("GBNF {line}:{column}: {message}")]
    Gbnf {
        line: usize,
        column: usize,
        message: String,
    },
    /// The constraint allows no output at all.
    #[error("the constraint accepts nothing: no token can start its output")]
    AcceptsNothing,
    /// Compiling ran out of its budget (an explosive schema or grammar).
    #[error("too complex: {0}")]
    TooComplex(String),
    /// The sampler chose a token the mask did not allow.
    #[error("token {token} is not allowed here")]
    NotAllowed { token: u32 },
    /// The matcher could not go on (llguidance's stop reason).
    #[error("matcher: {0}")]
    Matcher(String),
}
