//! Helpers shared by the CLI's test binaries.
pub mod server;
