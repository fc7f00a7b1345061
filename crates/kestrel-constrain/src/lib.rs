//! kestrel-constrain: structured output. Turns a request's constraint — a
//! JSON schema, "any JSON object", a regex, a Lark grammar or a llama.cpp
//! GBNF grammar — into, per decode step, the set of tokens that may come
//! next; the sampler sets the others' logits to minus infinity.
//!
//! The grammar engine is llguidance (with its token trie, toktrie), not our
//! own: it computes a mask over a 150k-token vocabulary in tens of
//! microseconds by walking the trie against a lazily built lexer DFA and an
//! Earley parser, has a broad JSON-schema compiler, and bounds its own work
//! (fuel limits), which hostile schemas need. This crate owns what is
//! Kestrel's: the vocabulary's token bytes and end-of-generation ids
//! ([`Vocabulary`]), the limits and error policy (unsupported schema
//! keywords fail; [`Compiler`]), the per-sequence API the decode loop drives
//! ([`Matcher`]: `next`, `accept`, `forced`, `rollback`), and the GBNF to
//! Lark translation (`gbnf`).

mod compile;
mod error;
mod gbnf;
mod mask;
mod matcher;
mod vocab;

pub use compile::{Compiler, Grammar, Spec, MAX_SCHEMA_DEPTH, MAX_SPEC_BYTES};
pub use error::ConstraintError;
pub use gbnf::to_lark as gbnf_to_lark;
pub use mask::TokenMask;
pub use matcher::{Matcher, Next};
pub use vocab::Vocabulary;
