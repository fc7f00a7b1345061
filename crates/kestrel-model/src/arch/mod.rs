//! The supported architectures and the block description each one gives.

mod gemma3;
mod llama;
mod phi3;
mod qwen2;
mod qwen3;

use crate::ModelError;

/// A supported architecture, named as `general.architecture` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    /// llama and mistral (same block).
    Llama,
    Qwen2,
    Qwen3,
    Gemma3,
    Phi3,
}

/// How RoPE pairs dimensions: `Normal` rotates (2i, 2i+1), `Neox` rotates (i, i + n_rot/2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeStyle {
    Normal,
    Neox,
}

/// The gated activation of the feed-forward block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// silu(gate) * up
    SiluGlu,
    /// gelu_tanh(gate) * up
    GeluGlu,
}

/// The shape of one transformer block, as flags the backend interprets.
#[derive(Clone, Debug, PartialEq)]
pub struct BlockSpec {
    pub rope: RopeStyle,
    pub activation: Activation,
    /// q, k, v projections carry biases.
    pub qkv_bias: bool,
    /// RMSNorm over each head of q and k before RoPE.
    pub qk_norm: bool,
    /// RMSNorm after attention and after the FFN, before the residual add.
    pub post_norms: bool,
    /// One `attn_qkv` tensor instead of separate q, k, v.
    pub fused_qkv: bool,
    /// `ffn_up` holds gate and up stacked (gate first); no `ffn_gate`.
    pub fused_gate_up: bool,
    /// Embeddings are multiplied by sqrt(n_embd).
    pub scale_embeddings: bool,
    /// Q is multiplied by the attention scale before attention (which then uses scale 1),
    /// instead of scaling the scores; the order matters for bit-exactness.
    pub prescale_q: bool,
}

impl Arch {
    pub fn from_name(name: &str) -> Result<Arch, ModelError> {
        Ok(match name {
            "llama" | "mistral" => Arch::Llama,
            "qwen2" => Arch::Qwen2,
            "qwen3" => Arch::Qwen3,
            "gemma3" => Arch::Gemma3,
            "phi3" => Arch::Phi3,
            other => return Err(ModelError::UnknownArchitecture(other.to_string())),
        })
    }

    pub fn block_spec(self) -> BlockSpec {
        match self {
            Arch::Llama => llama::block(),
            Arch::Qwen2 => qwen2::block(),
            Arch::Qwen3 => qwen3::block(),
            Arch::Gemma3 => gemma3::block(),
            Arch::Phi3 => phi3::block(),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
            Arch::Gemma3 => "gemma3",
            Arch::Phi3 => "phi3",
        }
    }
}

/// The plain pre-norm llama block every other architecture starts from.
pub(crate) fn base_block() -> BlockSpec {
    BlockSpec {
        rope: RopeStyle::Normal,
        activation: Activation::SiluGlu,
        qkv_bias: false,
        qk_norm: false,
        post_norms: false,
        fused_qkv: false,
        fused_gate_up: false,
        scale_embeddings: false,
        prescale_q: false,
    }
}
