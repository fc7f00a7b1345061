//! `kestrel tokenize`: the token ids (and pieces) of a text.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;

#[derive(Args)]
pub struct TokenizeArgs {
    #[arg(short = 'm', long = "model")]
    model: PathBuf,
    #[arg(short = 'p', long = "prompt")]
    prompt: String,
    /// Print each token's text next to its id.
    #[arg(long = "pieces")]
    pieces: bool,
    /// Do not add BOS/EOS even if the vocabulary asks for them.
    #[arg(long = "no-bos")]
    no_bos: bool,
    /// Treat special-token text like <|im_start|> as plain text.
    #[arg(long = "no-parse-special")]
    no_parse_special: bool,
}

pub fn tokenize(a: TokenizeArgs) -> Result<()> {
    let file = kestrel_gguf::GgufFile::open(&a.model)
        .with_context(|| format!("opening {}", a.model.display()))?;
    let tok = kestrel_tokenizer::Tokenizer::from_gguf(&file)?;
    let ids = tok.encode(&a.prompt, !a.no_bos, !a.no_parse_special);
    if a.pieces {
        for id in ids {
            let piece = String::from_utf8_lossy(&tok.token_to_piece(id, true)).into_owned();
            println!("{id:6} -> {piece:?}");
        }
    } else {
        let list: Vec<String> = ids.iter().map(|i| i.to_string()).collect();
        println!("[{}]", list.join(", "));
    }
    Ok(())
}
