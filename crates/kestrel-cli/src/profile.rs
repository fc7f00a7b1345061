//! `kestrel profile`: where the time of a prompt and of a decode step goes,
//! by kernel class (matrix products per weight type with the GB/s they
//! reach, attention, norms, RoPE, activations, activation quantization,
//! sampling), with what no class accounts for shown as "sync, other".
//!
//! One path for both devices, through the engine's backend calls: a
//! warm-up, then the prompt and `-n` pipelined decode steps on the wall
//! clock, then the same steps again with the backend timing every pass by
//! class (on the CPU with the model's own probes; on the GPU with
//! timestamp queries, where the adapter has them). The timed prompt goes
//! in passes of at most the device's `pass_rows` positions.
//!
//! With `-j`, the evidence that a constraint's mask costs the step little:
//! `-n` tokens from one token through the decode loop (`kestrel_engine::Batch`,
//! as `run` generates), unconstrained and then under the JSON schema, each
//! with the classes timed, reported per token as the step (wall), the
//! forward pass (the timed classes but sampling) and the host's time in
//! the constraint, which runs while the next pass computes.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use clap::Args;
use kestrel_engine::backend::{Feed, SeqId, Want};
use kestrel_engine::{Backend, BackendOptions, Device, Engine, GenerateParams, Profile};
use kestrel_sampling::SamplerParams;

#[derive(Args, Debug)]
pub struct ProfileArgs {
    /// Path to a GGUF model.
    #[arg(short = 'm', long = "model")]
    model: PathBuf,
    /// Prompt batch size profiled (also the context the decode steps follow).
    #[arg(short = 'p', long = "n-prompt", default_value_t = 128)]
    n_prompt: usize,
    /// Decode steps averaged for the per-step figures.
    #[arg(short = 'n', long = "n-gen", default_value_t = 16)]
    n_gen: usize,
    /// Worker threads (default, or 0 or less, as llama.cpp: every core).
    #[arg(short = 't', long = "threads", allow_negative_numbers = true)]
    threads: Option<i64>,
    #[command(flatten)]
    weights: crate::WeightArgs,
    #[command(flatten)]
    schema: crate::structured::SchemaArgs,
    #[command(flatten)]
    devices: crate::device::DeviceArgs,
}

pub fn profile(a: ProfileArgs) -> Result<()> {
    if a.n_prompt == 0 || a.n_gen == 0 {
        bail!("-p and -n must be at least 1");
    }
    let threads = crate::threads_arg(a.threads)?;
    let schema = a.schema.read()?;
    let engine = Engine::load_backed(&a.model, threads, a.weights.backing())?;
    let n_ctx = a.n_prompt + a.n_gen + 1;
    let train = engine.model.spec.hparams.n_ctx_train;
    if n_ctx > train.max(1) {
        bail!(
            "-p {} plus -n {} exceeds the model's context of {train}",
            a.n_prompt,
            a.n_gen,
        );
    }
    let lead = engine
        .tokenizer
        .bos()
        .filter(|_| engine.tokenizer.add_bos());
    let tokens = crate::bench::draw_tokens(a.n_prompt, engine.tokenizer.vocab_size(), lead);
    let device = a.devices.device();
    let backend = engine.backend(BackendOptions {
        device,
        n_ctx,
        swa_full: false,
    })?;
    let mut p = Profiler::new(backend, a.n_gen)?;
    let facts = p.backend.facts().clone();

    // Warm-up (page the weights in), then the wall clock, then the classes.
    p.prompt(&tokens, tokens.len())?;
    let prefill_wall = p.prompt(&tokens, tokens.len())?;
    let decode_wall = p.decode()?;
    // Each table is a share of its own run's wall time.
    let (prefill, decode) = if facts.timed {
        p.backend.set_profiling(true)?;
        let wall = p.prompt(&tokens, facts.pass_rows)?;
        let prefill = (p.backend.take_profile()?, wall);
        let wall = p.decode()?;
        let decode = (p.backend.take_profile()?, wall);
        p.backend.set_profiling(false)?;
        (Some(prefill), Some(decode))
    } else {
        (None, None)
    };

    let on_gpu = device == Device::Gpu;
    let kernels = if on_gpu {
        facts.name.clone()
    } else {
        format!("threads: {threads} | {}", cpu_kernels())
    };
    println!(
        "model: {} | device: {kernels}{}",
        a.model.display(),
        if facts.timed {
            ""
        } else {
            " (no timestamp queries: wall time only)"
        }
    );
    println!();
    println!(
        "prefill, {} tokens: {:.2} ms ({:.1} t/s)",
        a.n_prompt,
        ms(prefill_wall),
        a.n_prompt as f64 / prefill_wall.as_secs_f64()
    );
    if let Some((profile, wall)) = &prefill {
        print_table(profile, *wall, 1);
    }
    println!();
    println!(
        "decode, pipelined steps at context {}..{} (mean of {}): {:.2} ms ({:.1} t/s)",
        a.n_prompt,
        a.n_prompt + a.n_gen,
        a.n_gen,
        ms(decode_wall) / a.n_gen as f64,
        a.n_gen as f64 / decode_wall.as_secs_f64()
    );
    if let Some((profile, wall)) = &decode {
        print_table(profile, *wall, a.n_gen);
    }
    if let Some(schema) = schema {
        let structured = schema.for_tokens(a.n_gen);
        // Greedy, as the other runs choose; end tokens ignored so that both
        // runs generate alike until the schema ends (if it does).
        let free = GenerateParams {
            n_predict: a.n_gen as i64,
            sampler: SamplerParams {
                temperature: 0.0,
                ..SamplerParams::default()
            },
            ignore_eos: true,
            ..GenerateParams::default()
        };
        let json = GenerateParams {
            constraint: Some(structured.compile(&engine)?),
            ..free.clone()
        };
        let timed = facts.timed;
        let prompt = &tokens[..1];
        let free = loop_run(&engine, &mut *p.backend, prompt, &free, timed)?;
        let json = loop_run(&engine, &mut *p.backend, prompt, &json, timed)?;
        println!();
        println!(
            "decode through the loop from one token, greedy (mean per token): \
             unconstrained {} tokens, json schema {} tokens",
            free.tokens, json.tokens
        );
        let forward = |r: &LoopRun| {
            r.forward_ms.map_or_else(
                || "forward pass not timed".to_string(),
                |f| format!("forward pass {f:.3} ms"),
            )
        };
        println!(
            "unconstrained: step {:.3} ms, {}",
            free.step_ms,
            forward(&free)
        );
        println!(
            "json schema:   step {:.3} ms, {}; constraint (host, overlapped): \
             {:.3} ms/token of {:.3} ms/token step",
            json.step_ms,
            forward(&json),
            json.constraint_ms,
            json.step_ms
        );
    }
    Ok(())
}

/// One generation through the loop, per token: wall time, forward pass
/// (where timed), and the host's time in the constraint.
struct LoopRun {
    tokens: usize,
    step_ms: f64,
    forward_ms: Option<f64>,
    constraint_ms: f64,
}

fn loop_run(
    engine: &Engine,
    backend: &mut dyn Backend,
    prompt: &[u32],
    params: &GenerateParams,
    timed: bool,
) -> Result<LoopRun> {
    backend.set_profiling(timed)?;
    let g = crate::lent::Loop::new(engine, &mut *backend)?.generate(prompt.to_vec(), params)?;
    let profile = if timed {
        let p = backend.take_profile()?;
        backend.set_profiling(false)?;
        Some(p)
    } else {
        None
    };
    let s = &g.stats;
    let n = s.generated_tokens.max(1) as f64;
    Ok(LoopRun {
        tokens: s.generated_tokens,
        step_ms: (s.prompt_ms + s.generate_ms) / n,
        forward_ms: profile.map(|p| {
            let forward: Duration = p
                .entries
                .iter()
                .filter(|e| e.class != "sampling")
                .map(|e| e.time)
                .sum();
            ms(forward) / n
        }),
        constraint_ms: s.constraint_ms / n,
    })
}

/// Which CPU kernels run, for the header.
fn cpu_kernels() -> &'static str {
    if kestrel_quant::avx512_in_use() && kestrel_quant::vnni_in_use() {
        "AVX2 kernels (AVX-VNNI lane sums; AVX-512 for Q4_1/Q5_0/Q8_0 prompts and \
         batches, Q4_1/Q5_0/Q4_K/Q6_K decode, Q4_K prompts)"
    } else if kestrel_quant::avx512_in_use() {
        "AVX2 kernels (AVX-512 VNNI lane sums for Q4_0/Q5_1/Q8_0 decode; AVX-512 for \
         Q4_1/Q5_0/Q8_0 prompts and batches, Q4_1/Q5_0/Q4_K/Q6_K decode, Q4_K prompts)"
    } else if kestrel_quant::vnni_in_use() {
        "AVX2 kernels (AVX-VNNI lane sums)"
    } else if kestrel_quant::avx2_in_use() {
        "AVX2 kernels"
    } else {
        "portable kernels"
    }
}

/// The profiled sequence: a prompt, then decode steps after it.
struct Profiler {
    backend: Box<dyn Backend>,
    seq: SeqId,
    n_gen: usize,
    n_prompt: usize,
}

impl Profiler {
    fn new(mut backend: Box<dyn Backend>, n_gen: usize) -> Result<Profiler> {
        let seq = backend.create_seq()?;
        Ok(Profiler {
            backend,
            seq,
            n_gen,
            n_prompt: 0,
        })
    }

    /// The prompt from an empty cache in passes of `rows` positions, the
    /// last choosing the first token; the wall time.
    fn prompt(&mut self, tokens: &[u32], rows: usize) -> Result<Duration> {
        let greedy = SamplerParams {
            temperature: 0.0,
            ..SamplerParams::default()
        };
        self.backend.start(self.seq, tokens, 0, &greedy)?;
        self.n_prompt = tokens.len();
        let t0 = Instant::now();
        for from in (0..tokens.len()).step_by(rows.max(1)) {
            let to = (from + rows.max(1)).min(tokens.len());
            let want = if to == tokens.len() {
                Want::NEXT
            } else {
                Want::Cache
            };
            self.step(from, to, want)?;
            self.backend.read()?;
        }
        Ok(t0.elapsed())
    }

    /// `n_gen` decode steps after the prompt, pipelined as `run` decodes.
    fn decode(&mut self) -> Result<Duration> {
        let t0 = Instant::now();
        for i in 0..self.n_gen {
            let pos = self.n_prompt + i;
            self.step(pos, pos + 1, Want::NEXT)?;
            if i > 0 {
                self.backend.read()?;
            }
        }
        self.backend.read()?;
        let wall = t0.elapsed();
        // The next run starts from the prompt again.
        self.backend.truncate(self.seq, self.n_prompt + 1)?;
        Ok(wall)
    }

    fn step(&mut self, from: usize, to: usize, want: Want) -> Result<()> {
        self.backend.submit(&[Feed {
            seq: self.seq,
            from,
            to,
            want,
        }])?;
        Ok(())
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// One table: classes by time per `steps` (so decode shows one step), as
/// a share of the profiled run's wall time; the rest is "sync, other".
fn print_table(p: &Profile, wall: Duration, steps: usize) {
    let mut rows: Vec<(String, Duration, u64, u64)> = p
        .entries
        .iter()
        .map(|e| (e.class.clone(), e.time, e.bytes, e.calls))
        .collect();
    let accounted: Duration = rows.iter().map(|r| r.1).sum();
    rows.sort_by_key(|r| std::cmp::Reverse(r.1));
    rows.push(("sync, other".into(), wall.saturating_sub(accounted), 0, 0));
    let per = steps as f64;
    println!("| class | ms | % | calls | GB/s |");
    println!("|---|---:|---:|---:|---:|");
    for (class, time, bytes, calls) in rows {
        let gbs = if bytes > 0 && !time.is_zero() {
            format!("{:.2}", bytes as f64 / time.as_secs_f64() / 1e9)
        } else {
            String::new()
        };
        println!(
            "| {class} | {:.3} | {:.1} | {:.0} | {gbs} |",
            ms(time) / per,
            100.0 * time.as_secs_f64() / wall.as_secs_f64(),
            calls as f64 / per
        );
    }
}
