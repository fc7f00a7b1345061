//! Debugging aid: prints the most likely next tokens after a raw prompt, and
//! then greedily generates, printing each step's top-2 logits and their gap.
//! Usage: cargo run --release -p kestrel-engine --example top_logits -- MODEL PROMPT [STEPS]

use std::path::Path;

use kestrel_cpu::Logits;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        eprintln!("usage: top_logits MODEL PROMPT [STEPS]");
        std::process::exit(2);
    }
    let steps: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(1);
    let engine = kestrel_engine::Engine::load(Path::new(&args[1]), 2).unwrap_or_else(|e| {
        eprintln!("error: {e}");
        std::process::exit(1)
    });
    let mut tokens = engine.tokenize_prompt(&args[2]);
    println!("prompt ids: {tokens:?}");
    // SWA_FULL=1: sliding-window layers as llama.cpp's `--swa-full`.
    let mut cache = engine.model.new_cache(4096);
    if std::env::var_os("SWA_FULL").is_some() {
        cache.full_swa();
    }
    let mut logits = engine.model.forward(&tokens, 0, &mut cache, Logits::Last);
    for step in 0..steps {
        let mut idx: Vec<usize> = (0..logits.len()).collect();
        idx.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
        let max = logits[idx[0]];
        let z: f32 = logits.iter().map(|l| (l - max).exp()).sum();
        let show: Vec<String> = idx[..5]
            .iter()
            .map(|&i| {
                let piece =
                    String::from_utf8_lossy(&engine.tokenizer.token_to_piece(i as u32, true))
                        .into_owned();
                format!(
                    "{i}:{piece:?} {:.6} p={:.5}",
                    logits[i],
                    (logits[i] - max).exp() / z
                )
            })
            .collect();
        println!(
            "step {step}: gap {:.5} | {}",
            logits[idx[0]] - logits[idx[1]],
            show.join(" | ")
        );
        let next = idx[0] as u32;
        let pos = tokens.len();
        tokens.push(next);
        if step + 1 < steps {
            logits = engine.model.forward(&[next], pos, &mut cache, Logits::Last);
        }
    }
}
