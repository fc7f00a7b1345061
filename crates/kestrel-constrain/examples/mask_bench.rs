//! Mask time per token: `cargo run --release -p kestrel-constrain --example
//! mask_bench -- MODEL.gguf [SPEC_KIND SPEC_FILE]`, where SPEC_KIND is
//! `json`, `gbnf` or `lark` (default: a small JSON schema). Walks 200
//! random tokens and reports the mean and worst `next()` time.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kestrel_constrain::{Compiler, Next, Spec, Vocabulary};
use kestrel_gguf::GgufFile;
use kestrel_tokenizer::Tokenizer;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let f = GgufFile::open(&args[0]).expect("model");
    let tok = Arc::new(Tokenizer::from_gguf(&f).expect("tokenizer"));
    let t0 = Instant::now();
    let vocab = Vocabulary::with_tokenizer(tok.clone()).unwrap();
    let compiler = Compiler::new(vocab.clone()).unwrap();
    println!(
        "vocabulary + compiler: {:?} ({} tokens)",
        t0.elapsed(),
        vocab.n_vocab()
    );
    let spec = match (args.get(1).map(String::as_str), args.get(2)) {
        (Some("json"), Some(p)) => {
            Spec::JsonSchema(serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap())
        }
        (Some("gbnf"), Some(p)) => Spec::Gbnf(std::fs::read_to_string(p).unwrap()),
        (Some("lark"), Some(p)) => Spec::Lark(std::fs::read_to_string(p).unwrap()),
        _ => Spec::JsonSchema(serde_json::json!({
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "age": {"type": "integer"},
                "email": {"type": "string", "format": "email"},
                "tags": {"type": "array", "items": {"type": "string"}},
                "address": {"type": "object", "properties": {
                    "street": {"type": "string"}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}
                }, "required": ["street", "zip"]}
            },
            "required": ["name", "age", "email", "tags", "address"]
        })),
    };
    let t0 = Instant::now();
    let g = compiler.compile(&spec).unwrap();
    println!("compile: {:?}", t0.elapsed());
    let eog = vocab.eog_ids();
    let mut rng = 0x1234_5678_9abc_def0u64;
    let (mut total, mut worst, mut n) = (Duration::ZERO, Duration::ZERO, 0u32);
    let (mut open_total, mut open_n) = (Duration::ZERO, 0u32);
    for round in 0..5 {
        let mut m = g.matcher();
        for _ in 0..200 {
            let t0 = Instant::now();
            let next = m.next().unwrap();
            let dt = t0.elapsed();
            total += dt;
            worst = worst.max(dt);
            n += 1;
            let t = match next {
                Next::End => break,
                Next::Forced(t) => t,
                Next::Allowed(mask) => {
                    open_total += dt;
                    open_n += 1;
                    let ok: Vec<u32> = mask
                        .iter()
                        .filter(|t| {
                            !eog.contains(t)
                                && !vocab.token_bytes(*t).iter().all(u8::is_ascii_whitespace)
                        })
                        .collect();
                    if ok.is_empty() {
                        break;
                    }
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    ok[(rng % ok.len() as u64) as usize]
                }
            };
            m.accept(t).unwrap();
        }
        if round == 0 {
            println!("first walk done after {n} masks");
        }
    }
    println!("masks: {n}, mean {:?}, worst {:?}", total / n, worst);
    println!(
        "of which {open_n} with more than one token allowed: mean {:?}",
        open_total / open_n.max(1)
    );
}
