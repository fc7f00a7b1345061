//! GGUF v2/v3: parse and validate, typed metadata, tensor table, mmap; a writer for tests.
pub mod types;
pub use types::GgmlType;
