//! GBNF to Lark: the translation itself, its errors (line and column), and
//! every grammar llama.cpp ships compiling and constraining on each model.

mod common;

use std::path::PathBuf;

use common::{accepts_text, compile, models, random_walk, Rng, WalkEnd};
use kestrel_constrain::{gbnf_to_lark, ConstraintError, Spec};

/// llama.cpp's grammars directory, where the lead's setup keeps a checkout;
/// None (the caller skips) where it is absent. They are never committed.
fn grammars_dir() -> Option<PathBuf> {
    let home = std::env::var_os("HOME")?;
    let dir = PathBuf::from(home).join(".cache/kestrel/llama.cpp/src/grammars");
    if dir.is_dir() {
        Some(dir)
    } else {
        eprintln!("SKIP: {} is absent", dir.display());
        None
    }
}

fn shipped(dir: &std::path::Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name)).unwrap()
}

#[test]
fn translates_every_construct() {
    let lark = gbnf_to_lark(
        "# a comment\n\
         root ::= Item-list? \"\\x41\\u00e9\\t\\\"q\\\\\" # trailing\n\
         Item-list ::= item (\",\" item){0,3} | [^\\n\\]a-c] .{2,} \"\"\n\
         item ::=\n  (\"x\" |\n   \"y\")+ [\\U0001F600]{2}\n",
    )
    .unwrap();
    assert_eq!(
        lark,
        "start: root\n\
         root: item_list? \"A\u{e9}\\u0009\\\"q\\\\\"\n\
         item_list: item (\",\" item){0,3} | /[\\x{0}-\\x{9}\\x{B}-\\x{5C}\\x{5E}-\\x{60}\\x{64}-\\x{D7FF}\\x{E000}-\\x{10FFFF}]/ \
         /[\\x{0}-\\x{D7FF}\\x{E000}-\\x{10FFFF}]/{2,} \"\"\n\
         item: (\"x\" | \"y\")+ /[\\x{1F600}]/{2}\n"
    );
}

#[test]
fn names_are_lowercased_and_kept_apart() {
    let lark = gbnf_to_lark(
        "root ::= a-b A_b start 9x\na-b ::= \"1\"\nA_b ::= \"2\"\nstart ::= \"3\"\n9x ::= \"4\"\n",
    );
    let lark = lark.unwrap_err();
    // `A_b` is no GBNF name (no `_`): the error is where it stands.
    assert!(
        matches!(
            lark,
            ConstraintError::Gbnf {
                line: 1,
                column: 15,
                ..
            }
        ),
        "{lark}"
    );
    let lark = gbnf_to_lark(
        "root ::= a-b A-b start 9x\na-b ::= \"1\"\nA-b ::= \"2\"\nstart ::= \"3\"\n9x ::= \"4\"\n",
    )
    .unwrap();
    assert_eq!(
        lark,
        "start: root\nroot: a_b a_b_2 start_2 r_9x\na_b: \"1\"\na_b_2: \"2\"\nstart_2: \"3\"\nr_9x: \"4\"\n"
    );
}

#[test]
fn errors_give_line_and_column() {
    let cases: &[(&str, usize, usize)] = &[
        ("root ::= \"a\"\nfoo ::= \"b\" )\n", 2, 13),
        ("root ::= \"a\"\n  bar := \"b\"\n", 2, 7),
        ("root ::= \"abc\n", 2, 1),
        ("root ::= [a-\n", 2, 1),
        ("root ::= \"\\q\"\n", 1, 11),
        ("root ::= \"\\x4\"\n", 1, 14),
        ("root ::= * \"a\"\n", 1, 10),
        ("root ::= \"a\"{3,1}\n", 1, 17),
        ("root ::= x\n", 1, 10),
        ("other ::= \"a\"\n", 1, 1),
        ("root ::= (\"a\"\n", 2, 1),
        ("root ::= <|im_end|>\n", 1, 10),
        ("root ::= \"\\uD800\"\n", 1, 11),
        ("", 1, 1),
    ];
    for &(src, line, column) in cases {
        match gbnf_to_lark(src) {
            Err(ConstraintError::Gbnf {
                line: l,
                column: c,
                message,
            }) => {
                assert_eq!((l, c), (line, column), "{src:?}: {message}")
            }
            other => panic!("{src:?}: {other:?}"),
        }
    }
}

#[test]
fn every_shipped_grammar_compiles_on_every_vocabulary() {
    let Some(dir) = grammars_dir() else { return };
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "gbnf"))
        .collect();
    files.sort();
    assert!(files.len() >= 8, "{files:?}");
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        for model in models() {
            let t0 = std::time::Instant::now();
            let g = compile(model, &Spec::Gbnf(text.clone()));
            let mut m = g.matcher();
            let mut rng = Rng(1);
            random_walk(model, &mut m, &mut rng, 20, 0.5);
            eprintln!("{} on {}: {:?}", path.display(), model.name, t0.elapsed());
        }
    }
}

/// Random walks through `name`; each that ends must be accepted again as
/// the model tokenizes its text, and pass `check`.
fn walk_shipped(name: &str, check: impl Fn(&str) -> bool) {
    let Some(dir) = grammars_dir() else { return };
    let text = shipped(&dir, name);
    for model in models() {
        let g = compile(model, &Spec::Gbnf(text.clone()));
        let mut ended = 0;
        for seed in 0..4 {
            let mut rng = Rng(seed);
            let (out, end) = random_walk(model, &mut g.matcher(), &mut rng, 160, 0.7);
            if end == WalkEnd::Cut {
                continue;
            }
            ended += 1;
            assert!(check(&out), "{name} on {}: {out:?}", model.name);
            assert!(
                accepts_text(model, &g, &out),
                "{name} on {}: re-tokenized {out:?} refused",
                model.name
            );
        }
        assert!(ended > 0, "{name} on {}: no walk ended", model.name);
    }
}

#[test]
fn json_gbnf_walks_give_json() {
    walk_shipped("json.gbnf", |s| {
        serde_json::from_str::<serde_json::Value>(s).is_ok()
    });
}

#[test]
fn arithmetic_gbnf_walks_end() {
    walk_shipped("arithmetic.gbnf", |s| {
        s.ends_with('\n')
            && s.contains('=')
            && s.chars()
                .all(|c| "0123456789_+-*/()= \n\t".contains(c) || c.is_ascii_lowercase())
    });
}

#[test]
fn list_gbnf_walks_give_a_list() {
    walk_shipped("list.gbnf", |s| s.lines().all(|l| l.starts_with("- ")));
}

#[test]
fn c_gbnf_walks_end() {
    walk_shipped("c.gbnf", |_| true);
}
