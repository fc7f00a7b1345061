//! qwen2: the llama block with q/k/v biases and NeoX RoPE.
use super::{base_block, BlockSpec, RopeStyle};

pub fn block() -> BlockSpec {
    BlockSpec {
        rope: RopeStyle::Neox,
        qkv_bias: true,
        ..base_block()
    }
}
