//! Parity with a real x86-64 (AVX2) ggml-cpu build, recorded by
//! scripts/quant/gen_ggml_x86_fixtures.py: the activation quantizers must be
//! byte-identical, and dots may differ only by f32 summation order.

use kestrel_quant::{dequantize_row, quantize_row, vec_dot, vec_dot_type, GgmlType};

/// One fixture record: its header words and its tagged data lines.
struct Record {
    kind: String,
    ty: GgmlType,
    n: usize,
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
fn dots_match_ggml_x86_up_to_summation_order() {
    let mut count = 0;
    for r in load().into_iter().filter(|r| r.kind == "dot") {
        let (w, a) = (&r.bytes[0], &r.bytes[1]);
        let want = f64::from(r.f32s[0][0]);
        let got = f64::from(vec_dot(r.ty, r.n, w, a));
        // Scale of the rounding: the sum of |products| of the dequantized rows.
        let mut wd = vec![0.0; r.n];
        let mut ad = vec![0.0; r.n];
        dequantize_row(r.ty, w, &mut wd);
        dequantize_row(vec_dot_type(r.ty), a, &mut ad);
        let mag: f64 = wd
            .iter()
            .zip(&ad)
            .map(|(&p, &q)| f64::from(p * q).abs())
            .sum();
        let tol = 2e-6 * mag;
        assert!(
            (got - want).abs() <= tol,
            "{}: ours {got} vs ggml {want} (tol {tol})",
            r.ty
        );
        count += 1;
    }
    assert_eq!(count, 10, "one dot per quantized weight type");
}
