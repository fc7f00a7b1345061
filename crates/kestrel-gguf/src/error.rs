//! The error type for everything that can be wrong with a GGUF file.
//!
//! Each variant carries the key or tensor name and the numbers involved, so a
//! message alone is enough to tell what in the file is broken and where.

use std::path::PathBuf;

/// Why a GGUF file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    /// The reason is in the message and not a `source`: a chain printer
    /// (anyhow's `{:#}`) would say it twice.
    #[error("cannot read GGUF file {}: {reason}", path.display())]
    Io {
        path: PathBuf,
        reason: std::io::Error,
    },

    #[error("cannot read GGUF file {}: it is {what}, not a file", path.display())]
    NotAFile { path: PathBuf, what: &'static str },

    #[error("not a GGUF file: magic bytes are {found:02x?} ({}), expected \"GGUF\"", String::from_utf8_lossy(found).escape_debug())]
    BadMagic { found: Vec<u8> },

    #[error("big-endian GGUF file (version field reads {raw:#010x}, i.e. version {swapped} byte-swapped); only little-endian files are supported")]
    BigEndian { raw: u32, swapped: u32 },

    #[error("{}", version_message(*version))]
    UnsupportedVersion { version: u32 },

    #[error("file truncated while reading {what}: need {needed} bytes at offset {offset}, but the file is {file_size} bytes")]
    Truncated {
        what: String,
        offset: u64,
        needed: u64,
        file_size: u64,
    },

    #[error("{what} is {count}, impossible: that needs at least {min_bytes} bytes but only {remaining} bytes remain after offset {offset}")]
    ImpossibleCount {
        what: String,
        count: u64,
        /// `count` times the smallest possible encoding of one item (saturating).
        min_bytes: u64,
        remaining: u64,
        offset: u64,
    },

    #[error("invalid UTF-8 in {what} at offset {offset}: {source}")]
    InvalidUtf8 {
        what: String,
        offset: u64,
        #[source]
        source: std::str::Utf8Error,
    },

    #[error("metadata key #{index} at offset {offset} is empty")]
    EmptyKey { index: u64, offset: u64 },

    #[error("duplicate metadata key '{key}' (entry #{index})")]
    DuplicateKey { key: String, index: u64 },

    #[error("metadata key '{key}' has unknown value type id {type_id} at offset {offset}")]
    UnknownValueType {
        key: String,
        type_id: u32,
        offset: u64,
    },

    #[error("metadata key '{key}' has a bool byte of {byte} at offset {offset}; expected 0 or 1")]
    InvalidBool { key: String, byte: u8, offset: u64 },

    #[error("metadata key '{key}' nests arrays deeper than {max} levels at offset {offset}")]
    ArrayTooDeep { key: String, max: u32, offset: u64 },

    #[error("general.alignment must be a u32, but it is a {found}")]
    AlignmentType { found: &'static str },

    #[error("general.alignment is {alignment}; it must be a nonzero power of two")]
    BadAlignment { alignment: u64 },

    #[error("duplicate tensor name '{name}' (tensor #{index})")]
    DuplicateTensor { name: String, index: u64 },

    #[error("tensor '{tensor}' has {n_dims} dimensions; between 1 and {max} are supported")]
    BadDimCount {
        tensor: String,
        n_dims: u32,
        max: u32,
    },

    #[error(
        "tensor '{tensor}' dimension {index} is {value}; each dimension must be between 1 and {}",
        i64::MAX
    )]
    BadDim {
        tensor: String,
        index: usize,
        value: u64,
    },

    #[error("tensor '{tensor}' shape {dims:?} has more elements than fit in 64 bits")]
    ElementCountOverflow { tensor: String, dims: Vec<u64> },

    #[error("tensor '{tensor}' has unknown or unsupported ggml type id {type_id}")]
    UnknownTensorType { tensor: String, type_id: u32 },

    #[error("tensor '{tensor}' of type {ty} has rows of {row_len} elements, not a multiple of the block size {block_size}")]
    RowNotBlockMultiple {
        tensor: String,
        ty: crate::GgmlType,
        row_len: u64,
        block_size: u64,
    },

    #[error("tensor '{tensor}' of type {ty} and shape {dims:?} is too large to address")]
    TensorTooLarge {
        tensor: String,
        ty: crate::GgmlType,
        dims: Vec<u64>,
    },

    #[error(
        "tensor '{tensor}' data offset {offset} is not a multiple of the alignment {alignment}"
    )]
    MisalignedTensor {
        tensor: String,
        offset: u64,
        alignment: u64,
    },

    #[error("tensor '{tensor}' data (offset {offset}, {size} bytes) runs past the end of the {file_size}-byte file")]
    TensorOutOfBounds {
        tensor: String,
        offset: u64,
        size: u64,
        file_size: u64,
    },

    #[error("tensors '{first}' (bytes {first_start}..{first_end}) and '{second}' (from byte {second_start}) overlap")]
    OverlappingTensors {
        first: String,
        first_start: u64,
        first_end: u64,
        second: String,
        second_start: u64,
    },
}

fn version_message(version: u32) -> String {
    if version == 1 {
        "GGUF version 1 is not supported (it predates 64-bit counts); re-convert the model to GGUF v3".to_string()
    } else {
        format!("unsupported GGUF version {version}; only versions 2 and 3 are supported")
    }
}

/// Result with [`GgufError`].
pub type Result<T> = std::result::Result<T, GgufError>;
