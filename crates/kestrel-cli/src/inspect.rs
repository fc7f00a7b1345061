//! `kestrel inspect`: a GGUF file's metadata and tensors, and whether
//! Kestrel can run it.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;

#[derive(Args)]
pub struct InspectArgs {
    /// Path to a GGUF file.
    model: PathBuf,
}

pub fn inspect(a: InspectArgs) -> Result<()> {
    let file = kestrel_gguf::GgufFile::open(&a.model)
        .with_context(|| format!("opening {}", a.model.display()))?;
    print!("{}", kestrel_gguf::inspect_report(&file));
    match kestrel_model::ModelSpec::from_gguf(&file) {
        Ok(spec) => println!(
            "\nkestrel: supported ({:?} block: {:?})",
            spec.arch, spec.block
        ),
        Err(e) => println!("\nkestrel: cannot run this model: {e}"),
    }
    Ok(())
}
