//! Quantized matrix products: weights stay in their GGUF block format, the
//! activations are quantized once per product to the type the weights pair
//! with, and each weight row is read once for all tokens of a batch.

use kestrel_gguf::GgmlType;
use kestrel_quant::{dot_path, quantize_activations, vec_dot_on};

/// A weight matrix in its stored block format: `rows` rows of `cols` elements.
#[derive(Clone, Copy, Debug)]
pub struct MatRef<'a> {
    pub ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
    pub data: &'a [u8],
}

impl MatRef<'_> {
    fn row_bytes(&self) -> usize {
        self.data.len() / self.rows
    }
}

/// Below this many weight bytes a product runs on the calling thread: a
/// thread hand-off costs more than the work.
const PARALLEL_MIN_BYTES: usize = 1 << 16;

/// out[t * w.rows + r] = dot(w row r, x row t) for `n_tok` rows of `x` (each `w.cols` long).
pub fn matmul(w: MatRef<'_>, x: &[f32], n_tok: usize, out: &mut [f32], threads: usize) {
    debug_assert_eq!(x.len(), n_tok * w.cols);
    matmul_quantized(w, &quantize_rows(w.ty, x, w.cols), out, threads);
}

/// Each row of `x` (rows of `cols`) quantized to the activation type that
/// weights of type `ty` pair with; products sharing an input and a pairing
/// (q/k/v, gate/up) quantize it once.
pub fn quantize_rows(ty: GgmlType, x: &[f32], cols: usize) -> Vec<Vec<u8>> {
    x.chunks_exact(cols)
        .map(|row| quantize_activations(ty, row))
        .collect()
}

/// As [`matmul`], with activations already quantized by [`quantize_rows`].
pub fn matmul_quantized(w: MatRef<'_>, acts: &[Vec<u8>], out: &mut [f32], threads: usize) {
    debug_assert_eq!(out.len(), acts.len() * w.rows);
    let n_tok = acts.len();
    let threads = threads.max(1).min(w.rows);
    if threads == 1 || w.data.len() < PARALLEL_MIN_BYTES {
        rows_into(w, acts, 0, w.rows, out, w.rows);
        return;
    }
    // Each thread owns a contiguous band of rows and writes a [band][tok] block,
    // copied into the [tok][row] output afterwards.
    let band = w.rows.div_ceil(threads);
    let mut parts: Vec<Vec<f32>> = Vec::with_capacity(threads);
    std::thread::scope(|s| {
        let handles: Vec<_> = (1..threads)
            .map(|i| {
                let r0 = (i * band).min(w.rows);
                let r1 = ((i + 1) * band).min(w.rows);
                s.spawn(move || {
                    let mut part = vec![0f32; (r1 - r0) * acts.len()];
                    rows_into(w, acts, r0, r1, &mut part, r1 - r0);
                    part
                })
            })
            .collect();
        let r1 = band.min(w.rows);
        let mut first = vec![0f32; r1 * acts.len()];
        rows_into(w, acts, 0, r1, &mut first, r1);
        parts.push(first);
        for h in handles {
            parts.push(h.join().expect("matmul worker panicked"));
        }
    });
    for (i, part) in parts.iter().enumerate() {
        let r0 = (i * band).min(w.rows);
        let r1 = ((i + 1) * band).min(w.rows);
        let width = r1 - r0;
        for t in 0..n_tok {
            out[t * w.rows + r0..t * w.rows + r1]
                .copy_from_slice(&part[t * width..(t + 1) * width]);
        }
    }
}

/// Rows r0..r1 of `w` against every activation row; writes out[t * stride + (r - r0)].
fn rows_into(
    w: MatRef<'_>,
    acts: &[Vec<u8>],
    r0: usize,
    r1: usize,
    out: &mut [f32],
    stride: usize,
) {
    let rb = w.row_bytes();
    let n_tok = acts.len();
    for r in r0..r1 {
        let row = &w.data[r * rb..(r + 1) * rb];
        for (t, a) in acts.iter().enumerate() {
            let path = dot_path(w.ty, w.rows, t, n_tok);
            out[t * stride + (r - r0)] = vec_dot_on(path, w.ty, w.cols, row, a);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kestrel_quant::{dequantize_row, quantize_row};

    #[test]
    fn threaded_matmul_equals_single_thread_and_dequantized_reference() {
        let (rows, cols, n_tok) = (96usize, 512usize, 3usize);
        let mut s = 7u32;
        let mut rnd = || {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s as f32 / u32::MAX as f32) - 0.5
        };
        let wf: Vec<f32> = (0..rows * cols).map(|_| rnd()).collect();
        let x: Vec<f32> = (0..n_tok * cols).map(|_| rnd()).collect();
        for ty in [
            GgmlType::Q4_0,
            GgmlType::Q8_0,
            GgmlType::Q4_K,
            GgmlType::F16,
        ] {
            let rb = ty.row_bytes(cols as u64).unwrap() as usize;
            let mut data = vec![0u8; rb * rows];
            for r in 0..rows {
                quantize_row(
                    ty,
                    &wf[r * cols..(r + 1) * cols],
                    &mut data[r * rb..(r + 1) * rb],
                );
            }
            let w = MatRef {
                ty,
                rows,
                cols,
                data: &data,
            };
            let mut a = vec![0f32; n_tok * rows];
            let mut b = vec![0f32; n_tok * rows];
            rows_into(
                w,
                &x.chunks_exact(cols)
                    .map(|r| quantize_activations(ty, r))
                    .collect::<Vec<_>>(),
                0,
                rows,
                &mut a,
                rows,
            );
            matmul(w, &x, n_tok, &mut b, 3);
            assert_eq!(a, b, "{ty}");
            let mut deq = vec![0f32; cols];
            for r in 0..rows {
                dequantize_row(ty, &data[r * rb..(r + 1) * rb], &mut deq);
                for t in 0..n_tok {
                    let want: f32 = deq.iter().zip(&x[t * cols..]).map(|(p, q)| p * q).sum();
                    let got = b[t * rows + r];
                    assert!(
                        (got - want).abs() < 0.05 + 0.02 * want.abs(),
                        "{ty} r{r} t{t}: {got} vs {want}"
                    );
                }
            }
        }
    }
}
