//! Parity with a real x86-64 (AVX2) ggml-cpu build, recorded by
//! scripts/quant/gen_ggml_x86_fixtures.py: the activation quantizers must be
//! byte-identical, and dots and whole matrix products (computed along the
//! kernel path ggml takes for their batch shape) bit-identical.

use kestrel_quant::{dot_path, quantize_activations, quantize_row, vec_dot, vec_dot_on, GgmlType};

/// One fixture record: its header words and its tagged data lines.
struct Record {
    kind: String,
    ty: GgmlType,
    n: usize,
    /// Every number of the header, `n` first.
    dims: Vec<usize>,
    bytes: Vec<Vec<u8>>,
    f32s: Vec<Vec<f32>>,
}

fn load() -> Vec<Record> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/fixtures/quant/ggml_x86.txt"
    );
    let text = std::fs::read_to_string(path).expect("fixture file");
    let mut out: Vec<Record> = Vec::new();
    for line in text
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let (tag, rest) = line.split_once(' ').unwrap();
        match tag {
            "case" => {
                let p: Vec<&str> = rest.split(' ').collect();
                out.push(Record {
                    kind: p[0].to_string(),
                    ty: GgmlType::ALL
                        .into_iter()
                        .find(|t| t.name() == p[1])
                        .unwrap(),
                    n: p[2].parse().unwrap(),
                    dims: p[2..].iter().map(|v| v.parse().unwrap()).collect(),
                    bytes: Vec::new(),
                    f32s: Vec::new(),
                });
            }
            "bytes" => out.last_mut().unwrap().bytes.push(
                (0..rest.len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(&rest[i..i + 2], 16).unwrap())
                    .collect(),
            ),
            "f32" => out.last_mut().unwrap().f32s.push(
                rest.split(' ')
                    .map(|h| f32::from_bits(u32::from_str_radix(h, 16).unwrap()))
                    .collect(),
            ),
            _ => panic!("unknown fixture line {line}"),
        }
    }
    out
}

#[test]
fn activation_quantizers_match_ggml_x86_bytes() {
    let mut seen = Vec::new();
    for r in load().into_iter().filter(|r| r.kind == "quant") {
        let x = &r.f32s[0];
        assert_eq!(x.len(), r.n);
        let mut ours = vec![0u8; r.bytes[0].len()];
        quantize_row(r.ty, x, &mut ours);
        let bs = r.ty.type_size();
        for (b, (o, g)) in ours.chunks(bs).zip(r.bytes[0].chunks(bs)).enumerate() {
            assert_eq!(o, g, "{} block {b} differs from ggml", r.ty);
        }
        seen.push(r.ty);
    }
    assert_eq!(seen, [GgmlType::Q8_0, GgmlType::Q8_1, GgmlType::Q8_K]);
}

#[test]
fn dots_match_ggml_x86_bit_for_bit() {
    let mut count = 0;
    for r in load().into_iter().filter(|r| r.kind == "dot") {
        let (w, a) = (&r.bytes[0], &r.bytes[1]);
        let want = r.f32s[0][0];
        let got = vec_dot(r.ty, r.n, w, a);
        assert_eq!(
            got.to_bits(),
            want.to_bits(),
            "{}: ours {got} vs ggml {want}",
            r.ty
        );
        count += 1;
    }
    assert_eq!(count, 10, "one dot per quantized weight type");
}

#[test]
fn matmuls_match_ggml_x86_bit_for_bit() {
    let mut report = Vec::new();
    let mut count = 0;
    for r in load().into_iter().filter(|r| r.kind == "matmul") {
        let [k, rows, n_tok, _repack] = r.dims[..] else {
            panic!("matmul header")
        };
        let (w, x, want) = (&r.bytes[0], &r.f32s[0], &r.f32s[1]);
        let rb = w.len() / rows;
        let acts: Vec<Vec<u8>> = x
            .chunks_exact(k)
            .map(|t| quantize_activations(r.ty, t))
            .collect();
        let mut differ = 0;
        for (t, a) in acts.iter().enumerate() {
            let path = dot_path(r.ty, rows, t, n_tok);
            for row in 0..rows {
                let got = vec_dot_on(path, r.ty, k, &w[row * rb..(row + 1) * rb], a);
                if got.to_bits() != want[t * rows + row].to_bits() {
                    differ += 1;
                }
            }
        }
        if differ > 0 {
            report.push(format!(
                "{} {k}x{rows} x {n_tok} tokens: {differ} of {} differ",
                r.ty,
                rows * n_tok
            ));
        }
        count += 1;
    }
    assert_eq!(count, 13, "matmul records");
    assert!(report.is_empty(), "{}", report.join("\n"));
}
