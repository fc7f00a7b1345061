//! The human-readable summary printed by `kestrel inspect MODEL`.
//!
//! Arrays are summarized by element type and length, never dumped, so the
//! report stays short even for 150k-token vocabularies.

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::reader::GgufFile;
use crate::value::Value;
use crate::GgmlType;

/// Longest string value shown in full; longer ones are cut with a note.
const MAX_SHOWN_STR: usize = 96;

/// Special-token id keys reported in the tokenizer section, with labels.
const SPECIAL_TOKENS: [(&str, &str); 5] = [
    ("bos", "tokenizer.ggml.bos_token_id"),
    ("eos", "tokenizer.ggml.eos_token_id"),
    ("eot", "tokenizer.ggml.eot_token_id"),
    ("pad", "tokenizer.ggml.padding_token_id"),
    ("unk", "tokenizer.ggml.unknown_token_id"),
];

/// Tokenizer keys whose facts are reported explicitly (not re-listed).
const TOKENIZER_KEYS: [&str; 7] = [
    "tokenizer.ggml.model",
    "tokenizer.ggml.pre",
    "tokenizer.ggml.tokens",
    "tokenizer.ggml.merges",
    "tokenizer.ggml.add_bos_token",
    "tokenizer.ggml.add_eos_token",
    "tokenizer.chat_template",
];

/// Renders the inspect report for `f`.
pub fn inspect_report(f: &GgufFile) -> String {
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = write_report(&mut out, f);
    out
}

fn write_report(out: &mut String, f: &GgufFile) -> std::fmt::Result {
    let arch = f.architecture();
    writeln!(out, "GGUF version {}", f.version())?;
    writeln!(out, "architecture: {}", arch.unwrap_or("(missing)"))?;
    writeln!(
        out,
        "name: {}",
        f.get_str("general.name")
            .map_or("(missing)".into(), shorten)
    )?;
    writeln!(out, "file size: {}", size(f.file_size()))?;
    writeln!(out, "alignment: {}", f.alignment())?;

    let mut reported: Vec<&str> = vec!["general.architecture", "general.name", "general.alignment"];

    // Hyperparameters: every key under "{arch}.", sorted.
    writeln!(out, "\nhyperparameters:")?;
    let mut hyper: Vec<&(String, Value)> = match arch {
        Some(a) => f
            .metadata()
            .iter()
            .filter(|(k, _)| k.strip_prefix(a).is_some_and(|rest| rest.starts_with('.')))
            .collect(),
        None => Vec::new(),
    };
    hyper.sort_by(|a, b| a.0.cmp(&b.0));
    if hyper.is_empty() {
        writeln!(out, "  (none)")?;
    }
    for (k, v) in hyper {
        writeln!(out, "  {k} = {}", show(v))?;
        reported.push(k);
    }

    writeln!(out, "\ntokenizer:")?;
    write_tokenizer(out, f)?;
    reported.extend(TOKENIZER_KEYS);
    reported.extend(SPECIAL_TOKENS.map(|(_, k)| k));

    // general.* keys not shown above, then anything else, both sorted.
    let mut rest: Vec<&(String, Value)> = f
        .metadata()
        .iter()
        .filter(|(k, _)| !reported.contains(&k.as_str()))
        .collect();
    rest.sort_by(|a, b| a.0.cmp(&b.0));
    let (general, other): (Vec<_>, Vec<_>) = rest
        .into_iter()
        .partition(|(k, _)| k.starts_with("general."));
    writeln!(out, "\ngeneral:")?;
    if general.is_empty() {
        writeln!(out, "  (none)")?;
    }
    for (k, v) in general {
        writeln!(out, "  {k} = {}", show(v))?;
    }
    if !other.is_empty() {
        writeln!(out, "\nother metadata:")?;
        for (k, v) in other {
            writeln!(out, "  {k} = {}", show(v))?;
        }
    }

    // Tensors grouped by type, in ggml id order.
    let mut by_type: BTreeMap<u32, (GgmlType, u64, u64)> = BTreeMap::new();
    let mut total_bytes = 0u64;
    for t in f.tensors() {
        let e = by_type.entry(t.ty.id()).or_insert((t.ty, 0, 0));
        e.1 += 1;
        e.2 += t.n_bytes;
        total_bytes += t.n_bytes;
    }
    writeln!(out, "\ntensors by type:")?;
    for (ty, count, bytes) in by_type.values() {
        writeln!(
            out,
            "  {:<5} {count:>5} tensors  {}",
            ty.name(),
            size(*bytes)
        )?;
    }
    writeln!(
        out,
        "  total {:>5} tensors  {}",
        f.tensors().len(),
        size(total_bytes)
    )?;
    Ok(())
}

fn write_tokenizer(out: &mut String, f: &GgufFile) -> std::fmt::Result {
    let opt = |k: &str| f.get(k).map_or("(missing)".to_string(), show);
    writeln!(out, "  model: {}", opt("tokenizer.ggml.model"))?;
    writeln!(out, "  pre: {}", opt("tokenizer.ggml.pre"))?;
    let tokens = f.get_str_array("tokenizer.ggml.tokens");
    match (tokens, f.get("tokenizer.ggml.tokens")) {
        (Some(t), _) => writeln!(out, "  vocab size: {}", t.len())?,
        (None, Some(v)) => writeln!(out, "  vocab: unexpected {}", show(v))?,
        (None, None) => writeln!(out, "  vocab size: (missing)")?,
    }
    match f.get_array("tokenizer.ggml.merges") {
        Some(m) => writeln!(out, "  merges: {}", m.len())?,
        None => writeln!(out, "  merges: (none)")?,
    }
    for (label, key) in SPECIAL_TOKENS {
        let Some(v) = f.get(key) else { continue };
        let text = v
            .as_u64()
            .and_then(|id| usize::try_from(id).ok())
            .and_then(|id| tokens?.get(id));
        match text {
            Some(t) => writeln!(out, "  {label} id: {} {}", show(v), shorten(t))?,
            None => writeln!(out, "  {label} id: {} (no such token)", show(v))?,
        }
    }
    for key in [
        "tokenizer.ggml.add_bos_token",
        "tokenizer.ggml.add_eos_token",
    ] {
        if let Some(v) = f.get(key) {
            writeln!(
                out,
                "  {}: {}",
                key.trim_start_matches("tokenizer.ggml."),
                show(v)
            )?;
        }
    }
    match f.get("tokenizer.chat_template") {
        Some(Value::String(s)) => writeln!(out, "  chat template: present ({} bytes)", s.len())?,
        Some(v) => writeln!(out, "  chat template: unexpected {}", show(v))?,
        None => writeln!(out, "  chat template: none")?,
    }
    Ok(())
}

/// A value for display: long strings cut, arrays summarized.
fn show(v: &Value) -> String {
    match v {
        Value::String(s) => shorten(s),
        other => other.to_string(),
    }
}

/// Quotes and escapes `s`, cutting it at [`MAX_SHOWN_STR`] characters.
fn shorten(s: &str) -> String {
    let n = s.chars().count();
    if n <= MAX_SHOWN_STR {
        return format!("{s:?}");
    }
    let head: String = s.chars().take(MAX_SHOWN_STR).collect();
    format!("{head:?}... ({} bytes)", s.len())
}

/// "1.50 MiB (1572864 bytes)".
fn size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.2} {} ({bytes} bytes)", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_human_readable_and_exact() {
        assert_eq!(size(0), "0 B");
        assert_eq!(size(1023), "1023 B");
        assert_eq!(size(1536), "1.50 KiB (1536 bytes)");
        assert_eq!(size(3 << 30), "3.00 GiB (3221225472 bytes)");
    }

    #[test]
    fn long_strings_are_cut() {
        let long = "x".repeat(500);
        let s = shorten(&long);
        assert!(s.len() < 200, "{s}");
        assert!(s.ends_with("(500 bytes)"), "{s}");
        assert_eq!(shorten("a\"b"), "\"a\\\"b\"");
    }
}
