//! qwen3: NeoX RoPE, RMSNorm over each q and k head before RoPE, no biases.
use super::{base_block, BlockSpec, RopeStyle};

pub fn block() -> BlockSpec {
    BlockSpec {
        rope: RopeStyle::Neox,
        qk_norm: true,
        ..base_block()
    }
}
