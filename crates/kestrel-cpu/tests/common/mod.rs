//! Shared fixtures for the kestrel-cpu integration tests: a builder of tiny
//! random GGUF models for every supported architecture (any weight type),
//! and a naive f64 reference forward pass that reads the same file.
//!
//! The reference is deliberately independent of `kestrel_model::BlockSpec`:
//! each architecture's block is described here again ([`ArchFlags`]), so a
//! wrong flag in `kestrel-model` shows up as a disagreement with the CPU
//! backend rather than being copied into both sides.

#![allow(dead_code)]

use kestrel_gguf::{Array, GgmlType, GgufFile, Value};
use kestrel_quant::{dequantize_row, quantize_row};

/// The architectures the tiny-model builder knows.
pub const ARCHES: [&str; 5] = ["llama", "qwen2", "qwen3", "gemma3", "phi3"];

/// Every weight type the tests run each architecture with. All matrix row
/// lengths of the tiny models (256 and 512) are multiples of 256, so every
/// type, K-quants included, can hold every matrix.
pub const WEIGHT_TYPES: [GgmlType; 13] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
];

/// Deterministic xorshift64* generator.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        // Mix the seed so that small seeds still give different streams.
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in [-1, 1).
    pub fn uniform(&mut self) -> f32 {
        ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }

    pub fn below(&mut self, n: u32) -> u32 {
        (self.next_u64() % u64::from(n)) as u32
    }
}

/// Sizes and hyperparameters of one tiny model.
#[derive(Clone, Debug)]
pub struct TinyConfig {
    pub arch: &'static str,
    pub n_embd: usize,
    pub n_layer: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
    pub n_ff: usize,
    pub n_vocab: usize,
    pub n_ctx_train: usize,
    pub rms_eps: f32,
    pub rope_base: f32,
    /// RoPE base of sliding-window layers (gemma3; llama.cpp's default 10000).
    pub rope_base_swa: f32,
    /// Sliding window in tokens; 0 = none.
    pub sliding_window: usize,
    /// Every `swa_pattern`-th layer is global, the others slide.
    pub swa_pattern: usize,
    /// Write a separate `output.weight` instead of tying it to the embeddings.
    pub separate_output: bool,
}

impl TinyConfig {
    pub fn q_dim(&self) -> usize {
        self.n_head * self.head_dim
    }
    pub fn kv_dim(&self) -> usize {
        self.n_head_kv * self.head_dim
    }
    /// Does layer `il` attend through the sliding window?
    pub fn is_swa(&self, il: usize) -> bool {
        self.sliding_window > 0 && il % self.swa_pattern < self.swa_pattern - 1
    }
}

/// The tiny configuration of an architecture.
pub fn config(arch: &str) -> TinyConfig {
    let base = TinyConfig {
        arch: "llama",
        n_embd: 256,
        n_layer: 2,
        n_head: 4,
        n_head_kv: 2,
        head_dim: 64,
        n_ff: 512,
        n_vocab: 300,
        n_ctx_train: 256,
        rms_eps: 1e-5,
        rope_base: 10000.0,
        rope_base_swa: 10000.0,
        sliding_window: 0,
        swa_pattern: 1,
        separate_output: false,
    };
    match arch {
        "llama" => TinyConfig {
            separate_output: true,
            ..base
        },
        "qwen2" => TinyConfig {
            arch: "qwen2",
            rms_eps: 1e-6,
            rope_base: 1_000_000.0,
            separate_output: true,
            ..base
        },
        "qwen3" => TinyConfig {
            arch: "qwen3",
            rms_eps: 1e-6,
            rope_base: 1_000_000.0,
            ..base
        },
        // Heads wider than n_embd / n_head (read from attention.key_length), as
        // in real Gemma 3; layers 0 and 1 slide over 4 tokens, layer 2 is global.
        "gemma3" => TinyConfig {
            arch: "gemma3",
            n_layer: 3,
            head_dim: 128,
            rms_eps: 1e-6,
            rope_base: 1_000_000.0,
            rope_base_swa: 10000.0,
            sliding_window: 4,
            swa_pattern: 3,
            ..base
        },
        "phi3" => TinyConfig {
            arch: "phi3",
            ..base
        },
        other => panic!("no tiny config for '{other}'"),
    }
}

/// One tensor of a tiny model, still in f32.
#[derive(Clone, Debug)]
pub struct TinyTensor {
    pub name: String,
    /// ggml order: dims[0] is the row length.
    pub dims: Vec<u64>,
    pub values: Vec<f32>,
    /// Matrices take the model's weight type; vectors (norms, biases) stay F32.
    pub is_matrix: bool,
}

/// A tiny model before encoding: metadata and f32 tensors, editable by tests
/// that need a broken file.
#[derive(Clone, Debug)]
pub struct TinyParts {
    pub metadata: Vec<(String, Value)>,
    pub tensors: Vec<TinyTensor>,
}

impl TinyParts {
    pub fn tensor_mut(&mut self, name: &str) -> &mut TinyTensor {
        self.tensors
            .iter_mut()
            .find(|t| t.name == name)
            .unwrap_or_else(|| panic!("no tensor '{name}'"))
    }

    pub fn remove_tensor(&mut self, name: &str) {
        let before = self.tensors.len();
        self.tensors.retain(|t| t.name != name);
        assert_eq!(before, self.tensors.len() + 1, "no tensor '{name}'");
    }

    pub fn set_meta(&mut self, key: &str, value: Value) {
        match self.metadata.iter_mut().find(|(k, _)| k == key) {
            Some((_, v)) => *v = value,
            None => self.metadata.push((key.to_string(), value)),
        }
    }

    pub fn remove_meta(&mut self, key: &str) {
        let before = self.metadata.len();
        self.metadata.retain(|(k, _)| k != key);
        assert_eq!(before, self.metadata.len() + 1, "no key '{key}'");
    }

    /// GGUF bytes with every matrix stored as `weight_type`.
    pub fn to_bytes(&self, weight_type: GgmlType) -> Vec<u8> {
        let mut w = kestrel_gguf::GgufWriter::new();
        for (k, v) in &self.metadata {
            w.add(k, v.clone());
        }
        for t in &self.tensors {
            let ty = if t.is_matrix {
                weight_type
            } else {
                GgmlType::F32
            };
            w.add_tensor(
                &t.name,
                &t.dims,
                ty,
                encode(ty, &t.values, t.dims[0] as usize),
            );
        }
        w.to_bytes()
    }
}

/// Rows of `row_len` f32 values encoded as `ty`.
pub fn encode(ty: GgmlType, values: &[f32], row_len: usize) -> Vec<u8> {
    let rb = ty
        .row_bytes(row_len as u64)
        .unwrap_or_else(|| panic!("{ty} cannot hold rows of {row_len}")) as usize;
    let n_rows = values.len() / row_len;
    let mut out = vec![0u8; rb * n_rows];
    for (src, dst) in values.chunks_exact(row_len).zip(out.chunks_exact_mut(rb)) {
        quantize_row(ty, src, dst);
    }
    out
}

/// The metadata and f32 tensors of a tiny model.
pub fn tiny_parts(arch: &str, seed: u64) -> TinyParts {
    let c = config(arch);
    let a = c.arch;
    let mut meta: Vec<(String, Value)> = Vec::new();
    let mut put = |k: String, v: Value| meta.push((k, v));
    put("general.architecture".into(), Value::String(a.into()));
    put("general.name".into(), Value::String(format!("tiny-{a}")));
    put(
        format!("{a}.context_length"),
        Value::U32(c.n_ctx_train as u32),
    );
    put(format!("{a}.embedding_length"), Value::U32(c.n_embd as u32));
    put(format!("{a}.block_count"), Value::U32(c.n_layer as u32));
    put(
        format!("{a}.feed_forward_length"),
        Value::U32(c.n_ff as u32),
    );
    put(
        format!("{a}.attention.head_count"),
        Value::U32(c.n_head as u32),
    );
    put(
        format!("{a}.attention.head_count_kv"),
        Value::U32(c.n_head_kv as u32),
    );
    put(
        format!("{a}.attention.layer_norm_rms_epsilon"),
        Value::F32(c.rms_eps),
    );
    put(format!("{a}.rope.freq_base"), Value::F32(c.rope_base));
    match a {
        "llama" => {
            put(
                format!("{a}.rope.dimension_count"),
                Value::U32(c.head_dim as u32),
            );
        }
        "qwen3" | "gemma3" => {
            put(
                format!("{a}.attention.key_length"),
                Value::U32(c.head_dim as u32),
            );
            put(
                format!("{a}.attention.value_length"),
                Value::U32(c.head_dim as u32),
            );
        }
        _ => {}
    }
    if c.sliding_window > 0 {
        put(
            format!("{a}.attention.sliding_window"),
            Value::U32(c.sliding_window as u32),
        );
        put(
            format!("{a}.attention.sliding_window_pattern"),
            Value::U32(c.swa_pattern as u32),
        );
    }
    put("tokenizer.ggml.model".into(), Value::String("gpt2".into()));
    let tokens: Vec<String> = (0..c.n_vocab).map(|i| format!("<t{i}>")).collect();
    put(
        "tokenizer.ggml.tokens".into(),
        Value::Array(Array::String(tokens)),
    );
    put(
        "tokenizer.ggml.token_type".into(),
        Value::Array(Array::I32(vec![1; c.n_vocab])),
    );
    put("tokenizer.ggml.bos_token_id".into(), Value::U32(1));
    put("tokenizer.ggml.eos_token_id".into(), Value::U32(2));

    let mut rng = Rng::new(seed);
    let mut tensors = Vec::new();
    // Matrices: uniform with variance 1/cols, so each product keeps the scale of its input.
    let mut matrix = |name: String, cols: usize, rows: usize, rng: &mut Rng| {
        let amp = (3.0 / cols as f32).sqrt();
        tensors.push(TinyTensor {
            name,
            dims: vec![cols as u64, rows as u64],
            values: (0..cols * rows).map(|_| rng.uniform() * amp).collect(),
            is_matrix: true,
        });
    };
    let (e, q, kv, ff) = (c.n_embd, c.q_dim(), c.kv_dim(), c.n_ff);
    matrix("token_embd.weight".into(), e, c.n_vocab, &mut rng);
    if c.separate_output {
        matrix("output.weight".into(), e, c.n_vocab, &mut rng);
    }
    for il in 0..c.n_layer {
        let n = |s: &str| format!("blk.{il}.{s}");
        if a == "phi3" {
            matrix(n("attn_qkv.weight"), e, q + 2 * kv, &mut rng);
        } else {
            matrix(n("attn_q.weight"), e, q, &mut rng);
            matrix(n("attn_k.weight"), e, kv, &mut rng);
            matrix(n("attn_v.weight"), e, kv, &mut rng);
        }
        matrix(n("attn_output.weight"), q, e, &mut rng);
        if a == "phi3" {
            matrix(n("ffn_up.weight"), e, 2 * ff, &mut rng);
        } else {
            matrix(n("ffn_gate.weight"), e, ff, &mut rng);
            matrix(n("ffn_up.weight"), e, ff, &mut rng);
        }
        matrix(n("ffn_down.weight"), ff, e, &mut rng);
    }
    let mut vector = |name: String, n: usize, center: f32, amp: f32, rng: &mut Rng| {
        tensors.push(TinyTensor {
            name,
            dims: vec![n as u64],
            values: (0..n).map(|_| center + amp * rng.uniform()).collect(),
            is_matrix: false,
        });
    };
    vector("output_norm.weight".into(), e, 1.0, 0.2, &mut rng);
    for il in 0..c.n_layer {
        let n = |s: &str| format!("blk.{il}.{s}");
        vector(n("attn_norm.weight"), e, 1.0, 0.2, &mut rng);
        vector(n("ffn_norm.weight"), e, 1.0, 0.2, &mut rng);
        if a == "qwen2" {
            vector(n("attn_q.bias"), q, 0.0, 0.5, &mut rng);
            vector(n("attn_k.bias"), kv, 0.0, 0.5, &mut rng);
            vector(n("attn_v.bias"), kv, 0.0, 0.5, &mut rng);
        }
        if a == "qwen3" || a == "gemma3" {
            // Spread wide enough that dropping these norms visibly changes the logits.
            vector(n("attn_q_norm.weight"), c.head_dim, 1.0, 0.6, &mut rng);
            vector(n("attn_k_norm.weight"), c.head_dim, 1.0, 0.6, &mut rng);
        }
        if a == "gemma3" {
            vector(n("post_attention_norm.weight"), e, 1.0, 0.2, &mut rng);
            vector(n("post_ffw_norm.weight"), e, 1.0, 0.2, &mut rng);
        }
    }
    TinyParts {
        metadata: meta,
        tensors,
    }
}

/// GGUF bytes of a tiny random model: every matrix (token_embd included) of
/// `weight_type`, norms and biases F32.
pub fn tiny_model(arch: &str, weight_type: GgmlType, seed: u64) -> Vec<u8> {
    tiny_parts(arch, seed).to_bytes(weight_type)
}

/// `n` token ids below `n_vocab`.
pub fn prompt(n: usize, n_vocab: usize, seed: u64) -> Vec<u32> {
    let mut rng = Rng::new(seed ^ 0x5EED);
    (0..n).map(|_| rng.below(n_vocab as u32)).collect()
}

// ---------------------------------------------------------------------------
// The naive reference forward pass.
// ---------------------------------------------------------------------------

/// How an architecture's block works, restated here from the model papers /
/// llama.cpp, independently of `kestrel_model`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArchFlags {
    /// RoPE pairs (i, i + n_rot/2) instead of (2i, 2i+1).
    pub neox: bool,
    /// GELU-tanh GLU instead of SiLU GLU.
    pub gelu: bool,
    pub qkv_bias: bool,
    pub qk_norm: bool,
    pub post_norms: bool,
    /// Embeddings times sqrt(n_embd).
    pub scale_embeddings: bool,
    /// Honour the sliding window on sliding layers.
    pub sliding_window: bool,
    /// Fused ffn_up holds [gate; up] (false: [up; gate], only for mutation tests).
    pub gate_first: bool,
}

impl ArchFlags {
    pub fn of(arch: &str) -> ArchFlags {
        let base = ArchFlags {
            neox: false,
            gelu: false,
            qkv_bias: false,
            qk_norm: false,
            post_norms: false,
            scale_embeddings: false,
            sliding_window: false,
            gate_first: true,
        };
        match arch {
            "llama" => base,
            "qwen2" => ArchFlags {
                neox: true,
                qkv_bias: true,
                ..base
            },
            "qwen3" => ArchFlags {
                neox: true,
                qk_norm: true,
                ..base
            },
            "gemma3" => ArchFlags {
                neox: true,
                gelu: true,
                qk_norm: true,
                post_norms: true,
                scale_embeddings: true,
                sliding_window: true,
                ..base
            },
            "phi3" => ArchFlags { neox: true, ..base },
            other => panic!("no flags for '{other}'"),
        }
    }
}

/// A dequantized weight matrix: `rows` rows of `cols`.
pub struct Mat {
    pub rows: usize,
    pub cols: usize,
    pub w: Vec<f32>,
}

impl Mat {
    fn mul(&self, x: &[f64]) -> Vec<f64> {
        assert_eq!(x.len(), self.cols);
        self.w
            .chunks_exact(self.cols)
            .map(|row| row.iter().zip(x).map(|(&a, &b)| a as f64 * b).sum())
            .collect()
    }

    /// Rows r0..r1 as their own matrix.
    fn rows(&self, r0: usize, r1: usize) -> Mat {
        Mat {
            rows: r1 - r0,
            cols: self.cols,
            w: self.w[r0 * self.cols..r1 * self.cols].to_vec(),
        }
    }
}

fn read_vec(f: &GgufFile, name: &str) -> Vec<f64> {
    let m = read_mat(f, name);
    m.w.iter().map(|&v| v as f64).collect()
}

fn read_mat(f: &GgufFile, name: &str) -> Mat {
    let t = f
        .tensor(name)
        .unwrap_or_else(|| panic!("reference: no tensor '{name}'"));
    let cols = t.dims[0] as usize;
    let rows = t.dims[1..].iter().product::<u64>() as usize;
    let data = f.tensor_data(t);
    let rb = data.len() / rows;
    let mut w = vec![0f32; rows * cols];
    for (src, dst) in data.chunks_exact(rb).zip(w.chunks_exact_mut(cols)) {
        dequantize_row(t.ty, src, dst);
    }
    Mat { rows, cols, w }
}

struct RefLayer {
    attn_norm: Vec<f64>,
    wq: Mat,
    wk: Mat,
    wv: Mat,
    bias: Option<[Vec<f64>; 3]>,
    q_norm: Option<Vec<f64>>,
    k_norm: Option<Vec<f64>>,
    wo: Mat,
    post_attn_norm: Option<Vec<f64>>,
    ffn_norm: Vec<f64>,
    gate: Mat,
    up: Mat,
    down: Mat,
    post_ffn_norm: Option<Vec<f64>>,
}

/// The reference model: every weight dequantized to f32, all arithmetic in f64.
pub struct Reference {
    pub cfg: TinyConfig,
    pub flags: ArchFlags,
    tok_embd: Mat,
    output: Option<Mat>,
    output_norm: Vec<f64>,
    layers: Vec<RefLayer>,
}

impl Reference {
    pub fn new(f: &GgufFile, cfg: TinyConfig, flags: ArchFlags) -> Reference {
        let (q, kv, ff) = (cfg.q_dim(), cfg.kv_dim(), cfg.n_ff);
        let layers = (0..cfg.n_layer)
            .map(|il| {
                let n = |s: &str| format!("blk.{il}.{s}");
                let (wq, wk, wv) = if f.tensor(&n("attn_qkv.weight")).is_some() {
                    let m = read_mat(f, &n("attn_qkv.weight"));
                    (m.rows(0, q), m.rows(q, q + kv), m.rows(q + kv, q + 2 * kv))
                } else {
                    (
                        read_mat(f, &n("attn_q.weight")),
                        read_mat(f, &n("attn_k.weight")),
                        read_mat(f, &n("attn_v.weight")),
                    )
                };
                let (gate, up) = if f.tensor(&n("ffn_gate.weight")).is_some() {
                    (
                        read_mat(f, &n("ffn_gate.weight")),
                        read_mat(f, &n("ffn_up.weight")),
                    )
                } else {
                    let m = read_mat(f, &n("ffn_up.weight"));
                    let (a, b) = (m.rows(0, ff), m.rows(ff, 2 * ff));
                    if flags.gate_first {
                        (a, b)
                    } else {
                        (b, a)
                    }
                };
                let opt = |s: &str, on: bool| on.then(|| read_vec(f, &n(s)));
                RefLayer {
                    attn_norm: read_vec(f, &n("attn_norm.weight")),
                    wq,
                    wk,
                    wv,
                    bias: flags.qkv_bias.then(|| {
                        [
                            read_vec(f, &n("attn_q.bias")),
                            read_vec(f, &n("attn_k.bias")),
                            read_vec(f, &n("attn_v.bias")),
                        ]
                    }),
                    q_norm: opt("attn_q_norm.weight", flags.qk_norm),
                    k_norm: opt("attn_k_norm.weight", flags.qk_norm),
                    wo: read_mat(f, &n("attn_output.weight")),
                    post_attn_norm: opt("post_attention_norm.weight", flags.post_norms),
                    ffn_norm: read_vec(f, &n("ffn_norm.weight")),
                    gate,
                    up,
                    down: read_mat(f, &n("ffn_down.weight")),
                    post_ffn_norm: opt("post_ffw_norm.weight", flags.post_norms),
                }
            })
            .collect();
        Reference {
            tok_embd: read_mat(f, "token_embd.weight"),
            output: f
                .tensor("output.weight")
                .map(|_| read_mat(f, "output.weight")),
            output_norm: read_vec(f, "output_norm.weight"),
            layers,
            cfg,
            flags,
        }
    }

    /// Logits of every position for `tokens` at positions 0.., each n_vocab long.
    pub fn forward(&self, tokens: &[u32]) -> Vec<Vec<f64>> {
        let c = &self.cfg;
        let fl = &self.flags;
        let (e, hd) = (c.n_embd, c.head_dim);
        let n = tokens.len();
        let mut x: Vec<Vec<f64>> = tokens
            .iter()
            .map(|&t| {
                let t = t as usize;
                let s = if fl.scale_embeddings {
                    (e as f64).sqrt()
                } else {
                    1.0
                };
                self.tok_embd.w[t * e..(t + 1) * e]
                    .iter()
                    .map(|&v| v as f64 * s)
                    .collect()
            })
            .collect();
        for (il, l) in self.layers.iter().enumerate() {
            let swa = c.is_swa(il) && fl.sliding_window;
            let base = if c.is_swa(il) {
                c.rope_base_swa
            } else {
                c.rope_base
            } as f64;
            let mut qs = Vec::with_capacity(n);
            let mut ks = Vec::with_capacity(n);
            let mut vs = Vec::with_capacity(n);
            for (p, xt) in x.iter().enumerate() {
                let h = rms_norm(xt, &l.attn_norm, c.rms_eps);
                let (mut q, mut k, mut v) = (l.wq.mul(&h), l.wk.mul(&h), l.wv.mul(&h));
                if let Some([bq, bk, bv]) = &l.bias {
                    add(&mut q, bq);
                    add(&mut k, bk);
                    add(&mut v, bv);
                }
                for (buf, norm) in [(&mut q, &l.q_norm), (&mut k, &l.k_norm)] {
                    for head in buf.chunks_exact_mut(hd) {
                        if let Some(w) = norm {
                            let y = rms_norm(head, w, c.rms_eps);
                            head.copy_from_slice(&y);
                        }
                        rope(head, p, hd, base, fl.neox);
                    }
                }
                qs.push(q);
                ks.push(k);
                vs.push(v);
            }
            let scale = 1.0 / (hd as f64).sqrt();
            let group = c.n_head / c.n_head_kv;
            for (p, xt) in x.iter_mut().enumerate() {
                let lo = if swa {
                    (p + 1).saturating_sub(c.sliding_window)
                } else {
                    0
                };
                let mut attn = vec![0f64; c.q_dim()];
                for h in 0..c.n_head {
                    let kh = h / group;
                    let qh = &qs[p][h * hd..(h + 1) * hd];
                    let scores: Vec<f64> = (lo..=p)
                        .map(|j| dot(qh, &ks[j][kh * hd..(kh + 1) * hd]) * scale)
                        .collect();
                    let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let w: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
                    let z: f64 = w.iter().sum();
                    for (wi, j) in w.iter().zip(lo..=p) {
                        for d in 0..hd {
                            attn[h * hd + d] += wi / z * vs[j][kh * hd + d];
                        }
                    }
                }
                let mut o = l.wo.mul(&attn);
                if let Some(w) = &l.post_attn_norm {
                    o = rms_norm(&o, w, c.rms_eps);
                }
                add(xt, &o);
                let h = rms_norm(xt, &l.ffn_norm, c.rms_eps);
                let (g, u) = (l.gate.mul(&h), l.up.mul(&h));
                let act: Vec<f64> = g
                    .iter()
                    .zip(&u)
                    .map(|(&g, &u)| if fl.gelu { gelu(g) } else { silu(g) } * u)
                    .collect();
                let mut d = l.down.mul(&act);
                if let Some(w) = &l.post_ffn_norm {
                    d = rms_norm(&d, w, c.rms_eps);
                }
                add(xt, &d);
            }
        }
        let out = self.output.as_ref().unwrap_or(&self.tok_embd);
        x.iter()
            .map(|xt| out.mul(&rms_norm(xt, &self.output_norm, c.rms_eps)))
            .collect()
    }
}

fn add(a: &mut [f64], b: &[f64]) {
    a.iter_mut().zip(b).for_each(|(x, y)| *x += y);
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn rms_norm(x: &[f64], w: &[f64], eps: f32) -> Vec<f64> {
    let ms = x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64;
    let s = 1.0 / (ms + eps as f64).sqrt();
    x.iter().zip(w).map(|(v, w)| v * s * w).collect()
}

/// Rotates all `n_rot` dims of one head by θ_i = pos · base^(-2i/n_rot).
fn rope(head: &mut [f64], pos: usize, n_rot: usize, base: f64, neox: bool) {
    let half = n_rot / 2;
    for i in 0..half {
        let theta = pos as f64 * base.powf(-2.0 * i as f64 / n_rot as f64);
        let (s, c) = theta.sin_cos();
        let (a, b) = if neox {
            (i, i + half)
        } else {
            (2 * i, 2 * i + 1)
        };
        let (x0, x1) = (head[a], head[b]);
        head[a] = x0 * c - x1 * s;
        head[b] = x0 * s + x1 * c;
    }
}

fn silu(x: f64) -> f64 {
    x / (1.0 + (-x).exp())
}

fn gelu(x: f64) -> f64 {
    0.5 * x * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x)).tanh())
}

/// How far `got` is from `want`: the largest absolute difference divided by
/// the spread (max - min) of `want`.
pub fn rel_err(got: &[f32], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len());
    let hi = want.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let lo = want.iter().cloned().fold(f64::INFINITY, f64::min);
    let worst = got
        .iter()
        .zip(want)
        .map(|(&g, &w)| (g as f64 - w).abs())
        .fold(0.0, f64::max);
    worst / (hi - lo)
}

/// Index of the largest value, and the gap to the second largest.
pub fn top2(v: &[f64]) -> (usize, f64) {
    let mut idx: Vec<usize> = (0..v.len()).collect();
    idx.sort_by(|&a, &b| v[b].total_cmp(&v[a]));
    (idx[0], v[idx[0]] - v[idx[1]])
}

pub fn argmax_f32(v: &[f32]) -> usize {
    (0..v.len()).max_by(|&a, &b| v[a].total_cmp(&v[b])).unwrap()
}
