//! `kestrel devices`: the GPU adapters the GPU backend can use, best first.

use anyhow::{bail, Result};

pub fn devices() -> Result<()> {
    let all = kestrel_engine::adapters();
    if all.is_empty() {
        bail!("no GPU adapter found (wgpu sees no Vulkan, Metal or DX12 device)");
    }
    for (i, a) in all.iter().enumerate() {
        println!("{i}: {a}");
    }
    Ok(())
}
