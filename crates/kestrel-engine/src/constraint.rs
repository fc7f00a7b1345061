//! A request's constraint as the decode loop sees it: before each token
//! the loop asks what may come next ([`TokenConstraint::next`]) and hands
//! the answer to the backend as the token's [`Selection`]; after it reads
//! the token it tells the constraint ([`TokenConstraint::accept`]).
//!
//! The loop knows constraints only through these two small traits, so a
//! grammar (`kestrel-constrain`'s matcher), a lazy grammar that starts at
//! a trigger (tool calls), or a test's hand-made rule all drive it alike.

use std::fmt;
use std::sync::Arc;

use crate::backend::Selection;

/// What the next token may be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Allowed {
    /// Any token (the constraint is not active yet).
    Any,
    /// The tokens whose bits are set (see [`Selection::Allowed`]).
    Mask(Arc<[u32]>),
    /// Exactly this token: it is fed without sampling.
    Only(u32),
    /// Nothing but the end: the sequence stops here (`stop`).
    End,
}

impl Allowed {
    /// The backend's selection; `End` forces `end_token`, which the loop
    /// then treats as the end of the sequence.
    pub(crate) fn selection(&self, end_token: u32) -> Selection {
        match self {
            Allowed::Any => Selection::Free,
            Allowed::Mask(words) => Selection::Allowed(words.clone()),
            Allowed::Only(t) => Selection::Forced(*t),
            Allowed::End => Selection::Forced(end_token),
        }
    }
}

/// One sequence's constraint state.
pub trait TokenConstraint: Send {
    /// What the token after those accepted so far may be.
    fn next(&mut self) -> Result<Allowed, String>;
    /// The token chosen (one [`TokenConstraint::next`] allowed).
    fn accept(&mut self, token: u32) -> Result<(), String>;
}

/// What makes a fresh [`TokenConstraint`] for each sequence of a request
/// (a compiled grammar serves every sequence).
pub trait ConstraintSource: Send + Sync {
    fn start(&self) -> Result<Box<dyn TokenConstraint>, String>;
    /// For logs: what the constraint is ("json schema", "grammar", ...).
    fn describe(&self) -> String;
}

/// A request's constraint ([`crate::GenerateParams::constraint`]).
#[derive(Clone)]
pub struct Constraint(pub Arc<dyn ConstraintSource>);

impl fmt::Debug for Constraint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Constraint({})", self.0.describe())
    }
}
