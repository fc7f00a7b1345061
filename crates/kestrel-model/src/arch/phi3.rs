//! phi3: fused qkv and fused gate/up projections, NeoX RoPE, Q pre-scaled.
use super::{base_block, BlockSpec, RopeStyle};

pub fn block() -> BlockSpec {
    BlockSpec {
        rope: RopeStyle::Neox,
        fused_qkv: true,
        fused_gate_up: true,
        prescale_q: true,
        ..base_block()
    }
}
