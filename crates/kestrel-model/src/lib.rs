//! Model descriptions: hyperparameters read from GGUF metadata and, per
//! architecture, the shape of a transformer block in terms of the backend's
//! op set. A new architecture is one new file under `arch/`.

mod arch;
mod hparams;
pub mod rope;

pub use arch::{Activation, Arch, BlockSpec, RopeStyle};
pub use hparams::HParams;

use kestrel_gguf::GgufFile;

/// Why a model could not be described.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("the file has no general.architecture key")]
    NoArchitecture,
    #[error("unknown architecture '{0}' (supported: llama, mistral, qwen2, qwen3, gemma3, phi3)")]
    UnknownArchitecture(String),
    #[error("missing metadata key '{0}'")]
    MissingKey(String),
    #[error("bad metadata: {0}")]
    BadValue(String),
}

/// Everything the backend needs to know about a model besides its weights.
#[derive(Clone, Debug)]
pub struct ModelSpec {
    pub arch: Arch,
    pub hparams: HParams,
    pub block: BlockSpec,
}

impl ModelSpec {
    /// Reads the architecture and its hyperparameters from the file's metadata.
    pub fn from_gguf(f: &GgufFile) -> Result<ModelSpec, ModelError> {
        let name = f.architecture().ok_or(ModelError::NoArchitecture)?;
        let arch = Arch::from_name(name)?;
        let hparams = HParams::from_gguf(f, arch)?;
        let block = arch.block_spec();
        Ok(ModelSpec {
            arch,
            hparams,
            block,
        })
    }
}
