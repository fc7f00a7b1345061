//! llama (SmolLM2, Llama 2/3.x, Mistral): pre-norm block, normal RoPE (the
//! GGUF converter permutes q/k for it), SwiGLU.
use super::{base_block, BlockSpec};

pub fn block() -> BlockSpec {
    base_block()
}
