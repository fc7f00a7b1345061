//! GGUF v2/v3: parse and validate, typed metadata, tensor table, mmap; a writer for tests.
pub mod error;
pub mod inspect;
pub mod reader;
pub mod types;
pub mod value;
pub mod writer;

pub use error::{GgufError, Result};
pub use inspect::inspect_report;
pub use reader::{Backing, GgufFile, TensorInfo};
pub use types::GgmlType;
pub use value::{Array, Value};
pub use writer::GgufWriter;
