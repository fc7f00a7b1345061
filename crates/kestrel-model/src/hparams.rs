//! Hyperparameters read from `{arch}.*` metadata, with llama.cpp's defaults.

use crate::{Arch, ModelError};
use kestrel_gguf::GgufFile;

/// Numbers that size and parameterise the forward pass.
#[derive(Clone, Debug, PartialEq)]
pub struct HParams {
    pub n_vocab: usize,
    pub n_ctx_train: usize,
    pub n_embd: usize,
    pub n_layer: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    /// Per-head width of q and k.
    pub head_dim_k: usize,
    /// Per-head width of v.
    pub head_dim_v: usize,
    pub n_ff: usize,
    pub rms_eps: f32,
    /// Dimensions of each head that RoPE rotates.
    pub n_rot: usize,
    pub rope_base: f32,
    /// Multiplier on positions (1 / linear scaling factor).
    pub rope_freq_scale: f32,
    /// RoPE base of sliding-window layers.
    pub rope_base_swa: f32,
    /// Sliding window in tokens; 0 when no layer slides.
    pub sliding_window: usize,
    /// Per layer: does it attend through the sliding window?
    pub swa_layers: Vec<bool>,
    /// Scale applied to attention scores (or to Q for `prescale_q` architectures).
    pub attn_scale: f32,
    /// tanh soft-capping of the final logits; 0 = off.
    pub final_logit_softcap: f32,
}

struct Keys<'a> {
    f: &'a GgufFile,
    prefix: &'a str,
}

impl Keys<'_> {
    fn key(&self, k: &str) -> String {
        format!("{}.{}", self.prefix, k)
    }
    fn req_usize(&self, k: &str) -> Result<usize, ModelError> {
        let key = self.key(k);
        match self.f.get(&key) {
            None => Err(ModelError::MissingKey(key)),
            Some(_) => self
                .f
                .get_u64(&key)
                .and_then(|v| usize::try_from(v).ok())
                .ok_or_else(|| {
                    ModelError::BadValue(format!(
                        "'{key}' must be a non-negative integer (per-layer arrays are not supported)"
                    ))
                }),
        }
    }
    fn opt_usize(&self, k: &str) -> Result<Option<usize>, ModelError> {
        if self.f.get(&self.key(k)).is_none() {
            return Ok(None);
        }
        self.req_usize(k).map(Some)
    }
    fn opt_f32(&self, k: &str) -> Result<Option<f32>, ModelError> {
        let key = self.key(k);
        match self.f.get(&key) {
            None => Ok(None),
            Some(_) => self
                .f
                .get_f32(&key)
                .map(Some)
                .ok_or_else(|| ModelError::BadValue(format!("'{key}' must be a number"))),
        }
    }
}

/// Upper bounds that keep a hostile file from sizing absurd buffers.
const MAX_DIM: usize = 1 << 20;
const MAX_LAYERS: usize = 4096;

impl HParams {
    pub fn from_gguf(f: &GgufFile, arch: Arch) -> Result<HParams, ModelError> {
        let prefix = f.architecture().unwrap_or(arch.name());
        let k = Keys { f, prefix };
        let n_embd = k.req_usize("embedding_length")?;
        let n_layer = k.req_usize("block_count")?;
        let n_ff = k.req_usize("feed_forward_length")?;
        let n_head = k.req_usize("attention.head_count")?;
        let n_head_kv = k.opt_usize("attention.head_count_kv")?.unwrap_or(n_head);
        let n_ctx_train = k.opt_usize("context_length")?.unwrap_or(2048);
        if n_embd == 0 || n_embd > MAX_DIM {
            return Err(ModelError::BadValue(format!(
                "embedding_length {n_embd} out of range 1..={MAX_DIM}"
            )));
        }
        if n_layer == 0 || n_layer > MAX_LAYERS {
            return Err(ModelError::BadValue(format!(
                "block_count {n_layer} out of range 1..={MAX_LAYERS}"
            )));
        }
        if n_head == 0 || n_head_kv == 0 || n_head % n_head_kv != 0 || n_head > MAX_DIM {
            return Err(ModelError::BadValue(format!(
                "head counts {n_head} / {n_head_kv}: both must be positive and the first a multiple of the second"
            )));
        }
        if n_ff == 0 || n_ff > 8 * MAX_DIM {
            return Err(ModelError::BadValue(format!(
                "feed_forward_length {n_ff} out of range"
            )));
        }
        let head_dim_k = k
            .opt_usize("attention.key_length")?
            .unwrap_or(n_embd / n_head);
        let head_dim_v = k
            .opt_usize("attention.value_length")?
            .unwrap_or(n_embd / n_head);
        if head_dim_k == 0 || head_dim_v == 0 || head_dim_k > 4096 || head_dim_v > 4096 {
            return Err(ModelError::BadValue(format!(
                "head widths k={head_dim_k} v={head_dim_v} out of range"
            )));
        }
        let n_rot = k.opt_usize("rope.dimension_count")?.unwrap_or(head_dim_k);
        if n_rot > head_dim_k || n_rot % 2 != 0 {
            return Err(ModelError::BadValue(format!(
                "rope.dimension_count {n_rot} must be even and at most the head width {head_dim_k}"
            )));
        }
        let rms_eps = k
            .opt_f32("attention.layer_norm_rms_epsilon")?
            .ok_or_else(|| ModelError::MissingKey(k.key("attention.layer_norm_rms_epsilon")))?;
        let rope_base = k.opt_f32("rope.freq_base")?.unwrap_or(10000.0);
        let scaling = f
            .get_str(&k.key("rope.scaling.type"))
            .unwrap_or("linear")
            .to_string();
        if !matches!(scaling.as_str(), "linear" | "none") {
            return Err(ModelError::BadValue(format!(
                "rope scaling type '{scaling}' is not supported yet (linear, none)"
            )));
        }
        let factor = match k.opt_f32("rope.scaling.factor")? {
            Some(v) => v,
            None => k.opt_f32("rope.scale_linear")?.unwrap_or(0.0),
        };
        let rope_freq_scale = if factor == 0.0 || scaling == "none" {
            1.0
        } else {
            1.0 / factor
        };
        let n_vocab = match f.get_str_array("tokenizer.ggml.tokens") {
            Some(t) => t.len(),
            None => f
                .tensor("token_embd.weight")
                .and_then(|t| t.dims.get(1).copied())
                .map(|v| v as usize)
                .ok_or_else(|| ModelError::MissingKey("tokenizer.ggml.tokens".into()))?,
        };

        let mut sliding_window = 0;
        let mut swa_layers = vec![false; n_layer];
        let mut rope_base_swa = 10000.0;
        if arch == Arch::Gemma3 {
            if let Some(w) = k.opt_usize("attention.sliding_window")? {
                if w > 0 {
                    sliding_window = w;
                    let pattern = k
                        .opt_usize("attention.sliding_window_pattern")?
                        .unwrap_or(6);
                    // Every `pattern`-th layer is global, the rest slide (llama.cpp's rule).
                    for (il, s) in swa_layers.iter_mut().enumerate() {
                        *s = pattern == 0 || il % pattern < pattern - 1;
                    }
                    if let Some(b) = k.opt_f32("rope.freq_base_swa")? {
                        rope_base_swa = b;
                    }
                }
            }
        }
        // phi3 ships a sliding_window key, but llama.cpp ignores it; so do we, for parity.

        let attn_scale = if arch == Arch::Gemma3 && n_layer == 62 {
            // Gemma-3 27B scales by the model width per head, not the head width.
            1.0 / ((n_embd / n_head) as f32).sqrt()
        } else {
            1.0 / (head_dim_k as f32).sqrt()
        };
        let final_logit_softcap = if arch == Arch::Gemma3 {
            k.opt_f32("final_logit_softcapping")?.unwrap_or(0.0)
        } else {
            0.0
        };

        Ok(HParams {
            n_vocab,
            n_ctx_train,
            n_embd,
            n_layer,
            n_head,
            n_head_kv,
            head_dim_k,
            head_dim_v,
            n_ff,
            rms_eps,
            n_rot,
            rope_base,
            rope_freq_scale,
            rope_base_swa,
            sliding_window,
            swa_layers,
            attn_scale,
            final_logit_softcap,
        })
    }
}
