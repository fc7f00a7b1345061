//! gemma3: embeddings scaled by sqrt(n_embd), q/k norms, norms after attention
//! and FFN, GELU-tanh GLU, NeoX RoPE, Q pre-scaled, sliding-window layers
//! (five local to one global) with their own RoPE base.
use super::{base_block, Activation, BlockSpec, RopeStyle};

pub fn block() -> BlockSpec {
    BlockSpec {
        rope: RopeStyle::Neox,
        activation: Activation::GeluGlu,
        qk_norm: true,
        post_norms: true,
        scale_embeddings: true,
        prescale_q: true,
        ..base_block()
    }
}
