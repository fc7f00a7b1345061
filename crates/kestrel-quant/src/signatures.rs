//! The kernels' signatures: the function-pointer types every kernel build
//! is handed out as, and the bundles that carry one type's or one path's
//! kernels together ([`Kernels`], [`Dot4`], [`Unpacked8`]). The choice of
//! which build fills them is the `table` module's.

use crate::GgmlType;

/// Dequantize a whole number of blocks into f32 (`dst.len()` elements).
pub type DequantizeFn = fn(src: &[u8], dst: &mut [f32]);
/// Quantize a whole number of blocks from f32.
pub type QuantizeFn = fn(src: &[f32], dst: &mut [u8]);
/// Dot product of `n` weights with `n` activations in the paired format.
/// Slice lengths are already validated by the caller.
pub type VecDotFn = fn(n: usize, w: &[u8], a: &[u8]) -> f32;

/// The kernels for one element type.
#[derive(Clone, Copy, Debug)]
pub struct Kernels {
    pub ty: GgmlType,
    pub dequantize: DequantizeFn,
    pub quantize: QuantizeFn,
    /// The format activations must be in for [`Kernels::vec_dot`].
    pub vec_dot_type: GgmlType,
    pub vec_dot: VecDotFn,
}

/// Four activation rows against one weight row: `(weight row, [rows],
/// the rows as the kernel's [`Prepare4Fn`] rearranged them)`.
pub type VecDot4Fn = fn(w: &[u8], a: [&[u8]; 4], pre: &[Chunk32]) -> [f32; 4];

/// Fills `out` with four activation rows in the layout a [`VecDot4Fn`]
/// reads fastest (scales widened, quants aligned), once for all weight rows.
pub type Prepare4Fn = fn(a: [&[u8]; 4], out: &mut Vec<Chunk32>);

/// 32 bytes on a 32-byte boundary: one SIMD register's worth.
#[derive(Clone, Copy, Debug)]
#[repr(C, align(32))]
pub struct Chunk32(pub [u8; 32]);

/// One weight row against two prepared groups of four activation rows
/// (eight rows: the first group's four results, then the second's).
pub type VecDot8Fn = fn(w: &[u8], pre0: &[Chunk32], pre1: &[Chunk32]) -> [f32; 8];

/// Unpacks one weight row into `out` in the layout an
/// [`VecDot8UnpackedFn`] reads (quants as bytes, scales widened), so that a
/// prompt's many token groups do not each unpack it again.
pub type UnpackRowFn = fn(w: &[u8], out: &mut Vec<Chunk32>);

/// As [`VecDot8Fn`] on a row unpacked by the paired [`UnpackRowFn`].
pub type VecDot8UnpackedFn = fn(uw: &[Chunk32], pre0: &[Chunk32], pre1: &[Chunk32]) -> [f32; 8];
/// [`VecDot8UnpackedFn`] on two unpacked rows.
pub type VecDot16UnpackedFn =
    fn(uw: [&[Chunk32]; 2], pre0: &[Chunk32], pre1: &[Chunk32]) -> [[f32; 8]; 2];

/// A four-row kernel and the preparation of its activation rows; `dot8`,
/// where present, takes two prepared groups at once (each weight block
/// unpacked once for eight rows), with the same results as `dot` twice;
/// `unpacked`, where present, is `dot8` on rows unpacked beforehand.
#[derive(Clone, Copy)]
pub struct Dot4 {
    pub dot: VecDot4Fn,
    pub prepare: Prepare4Fn,
    pub dot8: Option<VecDot8Fn>,
    pub unpacked: Option<Unpacked8>,
    /// Four weight rows against the prepared group at once, where there is
    /// such a kernel (for batches too small to unpack rows for).
    pub rows4: Option<VecDot4x4Fn>,
    /// The activation layout that `rows4`, `rows4_two` and their band
    /// builds read: `prepare` itself for most formats, its own where the
    /// four-row kernel loads better from another.
    pub rows4_prepare: Prepare4Fn,
    /// `rows4` for the group's first two tokens only (the other two
    /// results are 0): a group of two real rows and two copies.
    pub rows4_two: Option<VecDot4x4Fn>,
    /// `rows4` and `rows4_two` over a whole band in one call, where there
    /// are such builds (batched decode with one group).
    pub rows4_band: Option<VecDot4x4BandFn>,
    pub rows4_two_band: Option<VecDot4x4BandFn>,
    /// `rows4` over a whole band for two groups at once (six to eight
    /// sequences decoding), where there is such a build.
    pub rows4_band2: Option<VecDot4x4Band2Fn>,
}

/// Four weight rows against four activation rows prepared by the
/// [`Dot4`]'s `prepare`: `[row][token]`, each with the bits of `dot`. Take
/// the rows from four streams, as [`VecDotRows4Fn`].
pub type VecDot4x4Fn = fn(rows: [&[u8]; 4], pre: &[Chunk32]) -> [[f32; 4]; 4];

/// A [`VecDot4x4Fn`] over a band of `4q` weight rows (`w`, one after
/// another) in one call: `out[t][i]` = token t's result for row i, the
/// bits of the four-row kernel's, with rows i, q + i, 2q + i and 3q + i
/// going together as [`VecDotBandFn`] takes them; `out[0]` holds the 4q
/// results, each other token's slice as many or none (a token not wanted).
/// One call per four rows spent a tenth of a four-sequence step outside
/// the arithmetic: the call, the kernel's setup, the wait on its
/// reductions, the stores.
pub type VecDot4x4BandFn = fn(w: &[u8], pre: &[Chunk32], out: [&mut [f32]; 4]);

/// A [`VecDot4x4BandFn`] for two prepared groups: `out[4g + j]` = group
/// g's token j, each the bits of the four-row kernel's; group 0's four
/// slices hold the band's 4q results, group 1's as many or none. Each four
/// weight rows serve both groups while they are in L1.
pub type VecDot4x4Band2Fn = fn(w: &[u8], pre: [&[Chunk32]; 2], out: [&mut [f32]; 8]);

/// An eight-row kernel on unpacked weight rows, with the row unpacking and
/// the activation layout it reads (its own: the AVX-512 build lays groups
/// out for two-token loads).
#[derive(Clone, Copy)]
pub struct Unpacked8 {
    pub prepare: Prepare4Fn,
    pub unpack: UnpackRowFn,
    pub dot8: VecDot8UnpackedFn,
    /// `dot8` on two rows at once, where a build has it: `[row][token]`,
    /// each row's results the bits `dot8` gives it.
    pub dot16: Option<VecDot16UnpackedFn>,
}

impl Dot4 {
    /// Prepares `a` and runs the kernel once (tests and one-off products;
    /// a matmul prepares once per group of rows).
    pub fn once(&self, w: &[u8], a: [&[u8]; 4]) -> [f32; 4] {
        let mut pre = Vec::new();
        (self.prepare)(a, &mut pre);
        (self.dot)(w, a, &pre)
    }
}

/// Two weight rows against one activation row: each result has the bits of
/// the plain dot of its row. The rows should be far apart (say, from the
/// two halves of a band): two adjacent rows read together break the
/// hardware prefetchers' streams at every row, which halved the speed from
/// DRAM.
pub type VecDot2Fn = fn(w0: &[u8], w1: &[u8], a: &[u8]) -> [f32; 2];

/// Four weight rows against one activation row, as [`VecDot2Fn`] (each
/// result has the bits of its row's plain dot; take the rows from four
/// streams, e.g. the four quarters of a band).
pub type VecDotRows4Fn = fn(rows: [&[u8]; 4], a: &[u8]) -> [f32; 4];

/// A band of `4q` weight rows (`w`, one after another, `out.len()` of them)
/// against one activation row: `out[i]` = the plain dot of row i, with the
/// bits of [`dot_rows4_kernel`](crate::dot_rows4_kernel)'s. Rows i, q + i,
/// 2q + i and 3q + i go together (four streams, as decode reads a band),
/// all in one call.
pub type VecDotBandFn = fn(w: &[u8], a: &[u8], out: &mut [f32]);
