//! `docs/cli.md` and the binary agree on the flags: every flag a subcommand
//! accepts is documented in that subcommand's section, and every flag
//! documented there is accepted.
//!
//! Both sides are read from signatures only, never from prose: on the
//! binary's side the flag column of `kestrel <sub> --help`, on the docs'
//! side the first cell of each table row, so a flag merely named in a
//! description neither documents nor whitelists itself. llama.cpp's
//! multi-letter spellings (`-np`, `-ngl`) are rewritten in `main.rs` before
//! clap sees them and so never appear in the help; they are found as string
//! literals anywhere under `src/` (so moving the rewrite does not blind the
//! test) and counted as accepted by a subcommand only where the binary
//! really takes them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::{Command, Output};

/// Every subcommand gets these from clap; documenting them eight times
/// would say nothing (docs/cli.md says it once, in its introduction).
const UNIVERSAL: [&str; 2] = ["-h", "--help"];

fn kestrel(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kestrel"))
        .args(args)
        .output()
        .expect("kestrel runs")
}

fn repo_file(rel: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("reading {}: {e}", p.display()))
}

/// Every `.rs` file under the crate's `src/`, walked recursively.
fn cli_sources() -> String {
    fn walk(dir: &std::path::Path, out: &mut String) {
        let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for entry in entries {
            let path = entry.expect("directory entry").path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push_str(&std::fs::read_to_string(&path).expect("source is UTF-8"));
            }
        }
    }
    let mut out = String::new();
    walk(
        &PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut out,
    );
    out
}

fn help(args: &[&str]) -> String {
    let out = kestrel(args);
    assert!(
        out.status.success(),
        "`kestrel {}` failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("help is UTF-8")
}

/// A flag token at the start of `s`: `-x`, `--long-name` or a multi-letter
/// single-dash spelling, ending at anything that is not a letter, digit or
/// inner dash (so `--foo=1`, `--foo <V>` and `--foo,` all give `--foo`).
fn flag_at(s: &str) -> Option<&str> {
    let dashes = s.len() - s.trim_start_matches('-').len();
    if !(1..=2).contains(&dashes) || !s[dashes..].starts_with(|c: char| c.is_ascii_alphabetic()) {
        return None;
    }
    let end = s[dashes..]
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .map_or(s.len(), |i| dashes + i);
    Some(s[..end].trim_end_matches('-'))
}

/// The subcommands in the name column of `kestrel --help`'s `Commands:`
/// block (not the descriptions beside them, which may wrap), less `help`.
fn subcommands(top_help: &str) -> Vec<String> {
    top_help
        .lines()
        .skip_while(|l| l.trim_end() != "Commands:")
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        // Names sit at an indent of two; wrapped descriptions further in.
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect()
}

/// The flags of one help text, from its flag column: lines whose first
/// non-blank character is a dash at clap's flag indent (descriptions and
/// "Possible values" lists are indented further), up to the first run of
/// two spaces, where a short help's description begins.
fn help_flags(text: &str) -> BTreeSet<String> {
    let mut flags = BTreeSet::new();
    for line in text.lines() {
        let body = line.trim_start();
        if line.len() - body.len() > 6 || !body.starts_with('-') {
            continue;
        }
        let column = body.split("  ").next().unwrap_or("");
        for word in column.split([',', ' ']) {
            if let Some(f) = flag_at(word) {
                flags.insert(f.to_owned());
            }
        }
    }
    flags
}

/// docs/cli.md's flags per section: a section is a `## ` heading that reads
/// `` `kestrel` `` (the top level, keyed "") or `` `kestrel SUB` ``; its
/// flags are the backticked flags in the first cell of each table row.
fn documented_flags(md: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut sections: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in md.lines() {
        if let Some(h) = line.strip_prefix("## ") {
            current = h
                .trim()
                .strip_prefix("`kestrel")
                .and_then(|r| r.strip_suffix('`'))
                .map(|sub| sub.trim().to_owned());
            if let Some(sub) = &current {
                sections.entry(sub.clone()).or_default();
            }
            continue;
        }
        let (Some(sub), Some(row)) = (&current, line.trim().strip_prefix('|')) else {
            continue;
        };
        let first_cell = row.split('|').next().unwrap_or("");
        let set = sections.get_mut(sub).expect("section was entered");
        for (i, span) in first_cell.split('`').enumerate() {
            // Odd pieces are inside backticks.
            if i % 2 == 1 {
                if let Some(f) = flag_at(span.trim()) {
                    set.insert(f.to_owned());
                }
            }
        }
    }
    sections
}

/// llama.cpp's multi-letter single-dash spellings that the CLI rewrites:
/// its string literals of that shape (`"-np"`).
fn rewritten_spellings(src: &str) -> BTreeSet<String> {
    src.match_indices("\"-")
        .filter_map(|(i, _)| {
            let rest = &src[i + 2..];
            let word = &rest[..rest
                .find(|c: char| !c.is_ascii_lowercase())
                .unwrap_or(rest.len())];
            (word.len() >= 2 && rest[word.len()..].starts_with('"')).then(|| format!("-{word}"))
        })
        .collect()
}

/// Whether `kestrel SUB FLAG [1] --help` parses: clap stops at the first
/// argument it does not know, before it gets to `--help`.
fn accepts(sub: &[&str], flag: &str) -> bool {
    [vec![flag, "1", "--help"], vec![flag, "--help"]]
        .iter()
        .any(|tail| {
            let args: Vec<&str> = sub.iter().chain(tail).copied().collect();
            let out = kestrel(&args);
            out.status.success() && String::from_utf8_lossy(&out.stdout).contains("Usage:")
        })
}

fn section_name(sub: &str) -> String {
    if sub.is_empty() {
        "`kestrel`".to_owned()
    } else {
        format!("`kestrel {sub}`")
    }
}

#[test]
fn every_flag_is_documented_and_every_documented_flag_is_accepted() {
    let top = help(&["--help"]);
    let subs = subcommands(&top);
    assert!(
        ["run", "serve"].iter().all(|s| subs.iter().any(|f| f == s)),
        "`kestrel --help`'s Commands block misread: {subs:?}"
    );
    let docs = documented_flags(&repo_file("docs/cli.md"));
    let rewritten = rewritten_spellings(&cli_sources());
    assert!(
        rewritten.contains("-np") && rewritten.contains("-ngl"),
        "the CLI's llama.cpp spellings (-np, -ngl) not found in src/: {rewritten:?}"
    );

    let mut problems = Vec::new();
    for sub in std::iter::once(String::new()).chain(subs.iter().cloned()) {
        let prefix: Vec<&str> = if sub.is_empty() { vec![] } else { vec![&sub] };
        let mut accepted = help_flags(&help(&[prefix.as_slice(), &["--help"]].concat()));
        accepted.extend(rewritten.iter().filter(|f| accepts(&prefix, f)).cloned());
        let name = section_name(&sub);
        let Some(documented) = docs.get(&sub) else {
            problems.push(format!("docs/cli.md has no `## {name}` section"));
            continue;
        };
        let mut documented = documented.clone();
        for u in UNIVERSAL {
            accepted.remove(u);
            documented.remove(u);
        }
        for f in accepted.difference(&documented) {
            problems.push(format!(
                "{name} accepts {f}, but its section of docs/cli.md has no table row for it"
            ));
        }
        for f in documented.difference(&accepted) {
            problems.push(format!(
                "docs/cli.md documents {f} under {name}, but the binary does not accept it"
            ));
        }
    }
    for sub in docs.keys() {
        if !sub.is_empty() && !subs.contains(sub) {
            problems.push(format!(
                "docs/cli.md has a section for `kestrel {sub}`, which is not a subcommand"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The probe behind the hidden spellings must be able to say no.
#[test]
fn the_acceptance_probe_refuses_unknown_flags() {
    assert!(accepts(&["serve"], "-np"));
    assert!(accepts(&["run"], "--raw"));
    assert!(!accepts(&["serve"], "--no-such-flag"));
    assert!(!accepts(&["tokenize"], "-ngl"));
    assert!(!accepts(&["devices"], "-np"));
}

#[test]
fn help_parser_reads_the_flag_column_only() {
    let text = "\
Usage: kestrel run [OPTIONS] --model <MODEL>

Options:
  -m, --model <MODEL>
          Path to a GGUF model; see --not-a-flag

      --device <DEVICE>
          Possible values:
          - cpu
          --wrapped-description
      --pieces            Print each token's text, unlike --other
  -l, --logit-bias <TOKEN_ID(+/-)BIAS>
  -h, --help
";
    let got: Vec<String> = help_flags(text).into_iter().collect();
    assert_eq!(
        got,
        [
            "--device",
            "--help",
            "--logit-bias",
            "--model",
            "--pieces",
            "-h",
            "-l",
            "-m"
        ]
    );
}

#[test]
fn subcommand_parser_reads_the_name_column_only() {
    let text = "\
Usage: kestrel <COMMAND>

Commands:
  run         Generate text
                wrapped description line
  serve       Serve
  help        Print this message

Options:
  -h, --help  Print help
";
    assert_eq!(subcommands(text), ["run", "serve"]);
}

#[test]
fn docs_parser_reads_first_cells_of_kestrel_sections() {
    let md = "\
# Command line
| `--outside` | no section yet |

## `kestrel`
| `-V`, `--version` | prints the version; not `--prose` |

## `kestrel run`
Prose naming `--ignored` is not a signature.

| flag | default | meaning |
|---|---|---|
| `-m`, `--model FILE` | required | see `--also-ignored` |
| `-np N` | 4 | |
| `--top-k=K` | 40 | |

## Notes
| `--not-a-section` | |
";
    let got = documented_flags(md);
    let list = |s: &str| got[s].iter().cloned().collect::<Vec<_>>();
    assert_eq!(got.len(), 2);
    assert_eq!(list(""), ["--version", "-V"]);
    assert_eq!(list("run"), ["--model", "--top-k", "-m", "-np"]);
}

#[test]
fn flag_tokens() {
    assert_eq!(flag_at("--model"), Some("--model"));
    assert_eq!(flag_at("--top-k=5"), Some("--top-k"));
    assert_eq!(flag_at("-np"), Some("-np"));
    assert_eq!(flag_at("--embedding-"), Some("--embedding"));
    assert_eq!(flag_at("- cpu"), None);
    assert_eq!(flag_at("--"), None);
    assert_eq!(flag_at("---x"), None);
    assert_eq!(flag_at("-1"), None);
    assert_eq!(flag_at("<MODEL>"), None);
}

#[test]
fn rewritten_spellings_are_single_dash_words() {
    let src =
        r#"if a == "-np" { *a = "--parallel".into(); } else if a == "-ngl" {} ["-p", "--prompt"]"#;
    let got: Vec<String> = rewritten_spellings(src).into_iter().collect();
    assert_eq!(got, ["-ngl", "-np"]);
}
