//! The seam between the scheduler ([`crate::Batch`]) and a device: the
//! [`Backend`] trait, which the CPU ([`cpu::CpuBackend`]) and the GPU
//! ([`gpu::GpuBackend`]) implement, and the words of a step ([`Feed`],
//! [`Want`], [`Output`]).
//!
//! A backend holds sequences: each a KV cache, a token history and a
//! sampler. A step feeds positions of several sequences' histories at once
//! (one token to decode, a prompt chunk, or k tokens whose logits are all
//! wanted); where a feed asks for the next token, the backend chooses it
//! (the whole sampler chain, on the device that ran the pass) and appends
//! it to that sequence's history, so the next step can feed it before the
//! host has seen it. [`Backend::submit`] starts a step and returns;
//! [`Backend::read`] returns the oldest submitted step's outputs. The
//! scheduler submits step N+1 before it reads step N: the device never
//! waits for the host's detokenizing, stop strings and callbacks.
//!
//! A constrained sequence (a grammar, a JSON schema) cannot know which
//! tokens step N+1 may choose before the host has read token N. Its feed
//! is submitted *held* ([`Want::Next`] with `held`): the pass runs at
//! once, and the token is chosen when the host hands over the
//! [`Selection`] ([`Backend::select`]), computed while the pass runs.

use std::sync::Arc;

use kestrel_sampling::SamplerParams;

use crate::EngineError;

pub mod cpu;
pub mod gpu;

/// A sequence of a backend (an index the backend gave out).
pub type SeqId = usize;

/// What one sequence feeds in a step: positions `from..to` of its history
/// (each known to the backend: given by [`Backend::start`] or chosen by an
/// earlier step).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Feed {
    pub seq: SeqId,
    pub from: usize,
    pub to: usize,
    pub want: Want,
}

/// What a feed asks back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Want {
    /// Only the keys and values (a prompt chunk whose successor is known).
    Cache,
    /// The token after the last fed position, chosen by the sequence's
    /// sampler and appended to its history; with `logits`, that
    /// position's logits too (for logprobs, before any mask). With
    /// `held`, the choice waits for [`Backend::select`].
    Next { logits: bool, held: bool },
    /// The logits of the fed positions after the first `skip`, one row
    /// each (scoring a known text; a speculative verify). No token is
    /// chosen.
    Logits { skip: usize },
}

impl Want {
    /// The next token, chosen freely, without its logits.
    pub const NEXT: Want = Want::Next {
        logits: false,
        held: false,
    };

    /// Whether the token waits for a [`Selection`].
    pub fn is_held(self) -> bool {
        matches!(self, Want::Next { held: true, .. })
    }
}

/// The error of a [`Backend::select`] for a sequence with no held feed
/// waiting.
pub(crate) fn nothing_held(seq: SeqId) -> EngineError {
    EngineError::Backend(format!(
        "sequence {seq}: a selection with no held token waiting for one"
    ))
}

/// How a held feed's token is chosen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Selection {
    /// By the sampler, as an unheld feed's.
    Free,
    /// By the sampler among the tokens whose bits are set (bit `t % 32`
    /// of word `t / 32`): every other token's logit is `-inf` before the
    /// whole chain, so bias and penalties cannot revive it.
    Allowed(Arc<[u32]>),
    /// This token, without sampling (the generator does not advance).
    Forced(u32),
}

/// A feed's answer, in the order the feeds were submitted.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Output {
    /// The chosen token ([`Want::Next`]).
    pub token: Option<u32>,
    /// Logits rows, `n_vocab` each, where asked.
    pub logits: Option<Vec<f32>>,
}

/// Facts about the device a backend runs on.
#[derive(Clone, Debug)]
pub struct DeviceFacts {
    /// For logs and reports ("CPU", or the GPU's adapter).
    pub name: String,
    /// The graphics API (`Vulkan`, `Metal`, ...) or "CPU".
    pub api: String,
    /// The longest context one sequence holds.
    pub n_ctx: usize,
    /// Whether passes can be timed per kernel class ([`Backend::set_profiling`]).
    pub timed: bool,
    /// The most prompt positions one pass takes (a longer feed is cut).
    pub pass_rows: usize,
}

/// Where a pass's time went, by kernel class.
pub use kestrel_cpu::{Profile, ProfileEntry};

/// A device that runs the model's forward passes and chooses tokens.
pub trait Backend {
    fn facts(&self) -> &DeviceFacts;

    /// A new, empty sequence.
    fn create_seq(&mut self) -> Result<SeqId, EngineError>;

    /// Gives the sequence's memory back; the id is not valid after.
    fn free_seq(&mut self, seq: SeqId);

    /// Starts a generation in `seq`: its history becomes `tokens`, whose
    /// first `keep` positions' keys and values are already in the cache (a
    /// reused prefix, at most [`Backend::reusable_prefix`]); its sampler
    /// starts afresh from `sampler` (and its seed).
    fn start(
        &mut self,
        seq: SeqId,
        tokens: &[u32],
        keep: usize,
        sampler: &SamplerParams,
    ) -> Result<(), EngineError>;

    /// How many of the `common` first positions that `seq`'s cache shares
    /// with a `prompt_len`-token prompt can be kept: the rest must be fed
    /// again for the prompt to get the bits a fresh run gives it (at least
    /// the last prompt token always is). `chunk` is the scheduler's prompt
    /// chunk (prompts are fed from multiples of it).
    fn reusable_prefix(&self, seq: SeqId, common: usize, prompt_len: usize, chunk: usize) -> usize;

    /// Drops positions `n..` of `seq`: its history and, for what follows,
    /// its cache (a rollback).
    fn truncate(&mut self, seq: SeqId, n: usize) -> Result<(), EngineError>;

    /// Starts one step over `feeds` (each sequence at most once) and
    /// returns without waiting for it.
    fn submit(&mut self, feeds: &[Feed]) -> Result<(), EngineError>;

    /// Chooses how the held feed of `seq` in the latest submitted step
    /// picks its token. Every held feed gets one selection before the
    /// next step is submitted; one that gets none when its step is read
    /// is chosen [`Selection::Free`]ly.
    fn select(&mut self, seq: SeqId, choice: Selection) -> Result<(), EngineError>;

    /// The outputs of the oldest submitted step not read yet, one per feed
    /// in order (waits for the device). `Ok(None)` when none is pending.
    fn read(&mut self) -> Result<Option<Vec<Output>>, EngineError>;

    /// Times the passes by kernel class from now on (where the device can).
    fn set_profiling(&mut self, on: bool) -> Result<(), EngineError>;

    /// The time by class since the last call (or since profiling began).
    fn take_profile(&mut self) -> Result<Profile, EngineError>;
}

/// Where a model runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Device {
    Cpu,
    Gpu,
    /// The GPU when wgpu finds a hardware adapter, else the CPU.
    Auto,
}

impl Device {
    /// Resolves `Auto`, and llama.cpp's `-ngl N` (any N > 0 means every
    /// layer on the GPU).
    pub fn resolve(self, n_gpu_layers: Option<i64>) -> Device {
        match (self, n_gpu_layers) {
            (Device::Cpu, Some(n)) if n > 0 => Device::Gpu,
            (Device::Auto, _) => {
                let hardware = kestrel_gpu::adapters()
                    .first()
                    .is_some_and(|a| a.kind != "Cpu");
                if hardware {
                    Device::Gpu
                } else {
                    Device::Cpu
                }
            }
            (d, _) => d,
        }
    }
}

/// How to build a backend for a model.
#[derive(Clone, Copy, Debug)]
pub struct BackendOptions {
    pub device: Device,
    /// The longest context one sequence holds.
    pub n_ctx: usize,
    /// Sliding-window layers as llama.cpp's `--swa-full` has them (see
    /// [`crate::GenerateParams::swa_full`]; the GPU's always are).
    pub swa_full: bool,
}
