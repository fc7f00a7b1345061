//! The decode loop on a lent backend: `bench` and `profile` hold one
//! backend (a GPU one uploads the model) for their direct steps, lend it
//! to a one-slot [`Batch`] for a generation as `run` and `serve` make
//! one, and keep it (and its profile) after the loop is gone.

use anyhow::{bail, Result};
use kestrel_engine::backend::{Feed, Output, Selection, SeqId};
use kestrel_engine::{
    AdmitError, Backend, Batch, DeviceFacts, Engine, EngineError, GenerateParams, Generation,
    Profile, PROMPT_CHUNK,
};
use kestrel_sampling::SamplerParams;

/// A one-slot loop on a lent backend; its sequences start from an empty
/// cache each time (no prompt reuse).
pub(crate) struct Loop<'e> {
    batch: Batch<'e>,
}

impl<'e> Loop<'e> {
    pub(crate) fn new(engine: &'e Engine, backend: &'e mut dyn Backend) -> Result<Loop<'e>> {
        let batch = Batch::new(engine, Box::new(Lent(backend)), 1, PROMPT_CHUNK)?;
        Ok(Loop { batch })
    }

    /// One pipelined generation from `prompt` (its text is detokenized and
    /// dropped, as a caller's sink would take it).
    pub(crate) fn generate(
        &mut self,
        prompt: Vec<u32>,
        params: &GenerateParams,
    ) -> Result<Generation> {
        match self
            .batch
            .admit(0, prompt, params, false, Box::new(|_| true))
        {
            Ok(_) => {}
            Err(AdmitError::Invalid(e)) => return Err(e.into()),
            Err(AdmitError::Busy) => bail!("internal error: the slot is busy"),
        }
        loop {
            if let Some((_, r)) = self.batch.step().pop() {
                return Ok(r?);
            }
        }
    }
}

/// Every call goes to the borrowed backend.
struct Lent<'a>(&'a mut dyn Backend);

impl Backend for Lent<'_> {
    fn facts(&self) -> &DeviceFacts {
        self.0.facts()
    }
    fn create_seq(&mut self) -> Result<SeqId, EngineError> {
        self.0.create_seq()
    }
    fn free_seq(&mut self, seq: SeqId) {
        self.0.free_seq(seq)
    }
    fn start(
        &mut self,
        seq: SeqId,
        tokens: &[u32],
        keep: usize,
        sampler: &SamplerParams,
    ) -> Result<(), EngineError> {
        self.0.start(seq, tokens, keep, sampler)
    }
    fn reusable_prefix(&self, seq: SeqId, common: usize, prompt_len: usize, chunk: usize) -> usize {
        self.0.reusable_prefix(seq, common, prompt_len, chunk)
    }
    fn truncate(&mut self, seq: SeqId, n: usize) -> Result<(), EngineError> {
        self.0.truncate(seq, n)
    }
    fn submit(&mut self, feeds: &[Feed]) -> Result<(), EngineError> {
        self.0.submit(feeds)
    }
    fn select(&mut self, seq: SeqId, choice: Selection) -> Result<(), EngineError> {
        self.0.select(seq, choice)
    }
    fn read(&mut self) -> Result<Option<Vec<Output>>, EngineError> {
        self.0.read()
    }
    fn set_profiling(&mut self, on: bool) -> Result<(), EngineError> {
        self.0.set_profiling(on)
    }
    fn take_profile(&mut self) -> Result<Profile, EngineError> {
        self.0.take_profile()
    }
}
