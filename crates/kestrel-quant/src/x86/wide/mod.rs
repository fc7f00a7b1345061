//! AVX-512 builds of the legacy formats' several-token kernels (Q4_1,
//! Q5_0, Q8_0; four or eight tokens, on packed or unpacked rows, the
//! unpacked ones also two rows a call): one 512-bit register holds two
//! tokens' eight lanes, so each instruction serves two tokens where the
//! AVX2 build spends one per token; and of
//! Q5_0's four-row decode kernel, where one register holds two rows'
//! lanes; and of Q4_1's four-row kernel for four, two or one token
//! (batched and single-token decode), whose registers hold four rows'
//! lanes of one token. Each half runs exactly
//! the AVX2 kernel's f32 steps for its token or row (the same lanes, the
//! same products, the same fused adds in the same order), so the results
//! are the same bits; the table's tests hold every build to the portable
//! kernel. Then the four-row decode kernels of two K-quants: Q6_K (a
//! block's two halves in one register) and Q4_K (four rows' scales
//! unpacked in one register, their sums folded in as four f32 lanes), and
//! Q4_K's prompt kernels: on packed rows, and on rows unpacked with the
//! tokens in lanes (see the section's comment), as Q6_K's last.
//!
//! The activations get their own layout (`prepare_*`), 64-byte units so
//! that each two-token load stays within one cache line:
//! per group of four tokens and per block, `[a0 | a1]`, `[a2 | a3]` (Q5_0:
//! each byte + 128, as unsigned), `[da0 x8 | da1 x8]`, `[da2 x8 | da3 x8]`
//! (scales widened), then for Q4_1 a unit with the four sums s. Q5_0 rows
//! are multiplied as signed weights against unsigned activations: each
//! lane then starts at -128 x the sum of its four weights (computed once
//! per row, `unpack_q5_0`), which leaves the exact signed sum.
//!
//! Files: `legacy_prompt`, `legacy_decode`, `kquants_decode`,
//! `kquants_prompt`; all are reached only after
//! `cpu_features::avx512_available()`.

use super::{f16x2_at, Legacy, Q50Bw, Q41, Q50, Q80};
use crate::Chunk32;

mod kquants_decode;
mod kquants_prompt;
mod legacy_decode;
mod legacy_prompt;

pub(crate) use kquants_decode::*;
pub(crate) use kquants_prompt::*;
pub(crate) use legacy_decode::*;
pub(crate) use legacy_prompt::*;
