//! Structured-output flags: `run`'s llama.cpp ones (`--grammar`,
//! `--grammar-file`, `-j/--json-schema`, `--json-schema-file`), the
//! schema flags of `bench` and `profile`, and their compilation, against
//! the model's vocabulary, into the decode loop's constraint.
//!
//! The text is read and parsed before the model loads, so a missing file
//! or malformed JSON fails at once; the compile (which needs the
//! vocabulary) then fails before any generation.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::Args;
use kestrel_engine::{Constraint, Engine, GrammarConstraint, Spec};

/// `run`'s flags: at most one of them.
#[derive(Args, Clone, Debug, Default)]
#[group(multiple = false)]
pub(crate) struct GrammarArgs {
    /// Constrain the output to a GBNF grammar (llama.cpp's; start rule `root`).
    #[arg(long = "grammar", value_name = "GRAMMAR")]
    grammar: Option<String>,
    /// Read the GBNF grammar from a file.
    #[arg(long = "grammar-file", value_name = "FILE")]
    grammar_file: Option<PathBuf>,
    /// Constrain the output to a JSON schema (JSON text).
    #[arg(short = 'j', long = "json-schema", value_name = "SCHEMA")]
    json_schema: Option<String>,
    /// Read the JSON schema from a file.
    #[arg(long = "json-schema-file", value_name = "FILE")]
    json_schema_file: Option<PathBuf>,
}

/// A constraint read from the flags, not compiled yet.
pub(crate) struct Structured {
    spec: Spec,
    /// The flag it came from, for errors and logs.
    flag: &'static str,
}

impl GrammarArgs {
    /// The constraint the flags ask for, if any.
    pub(crate) fn read(&self) -> Result<Option<Structured>> {
        let (spec, flag) = if let Some(g) = &self.grammar {
            (Spec::Gbnf(g.clone()), "--grammar")
        } else if let Some(f) = &self.grammar_file {
            (
                Spec::Gbnf(read_text(f, "--grammar-file")?),
                "--grammar-file",
            )
        } else if let Some(s) = &self.json_schema {
            (json_schema(s, "--json-schema")?, "--json-schema")
        } else if let Some(f) = &self.json_schema_file {
            let text = read_text(f, "--json-schema-file")?;
            (
                json_schema(&text, "--json-schema-file")?,
                "--json-schema-file",
            )
        } else {
            return Ok(None);
        };
        Ok(Some(Structured { spec, flag }))
    }
}

/// `bench`'s and `profile`'s flags: a JSON schema, given or built in.
#[derive(Args, Clone, Debug, Default)]
#[group(multiple = false)]
pub(crate) struct SchemaArgs {
    /// Also measure generation under a JSON schema (JSON text; without a
    /// value, a built-in schema that cannot end before the test's tokens).
    #[arg(short = 'j', long = "json-schema", value_name = "SCHEMA", num_args = 0..=1)]
    json_schema: Option<Option<String>>,
    /// As --json-schema, the schema read from a file.
    #[arg(long = "json-schema-file", value_name = "FILE")]
    json_schema_file: Option<PathBuf>,
}

/// Which schema `bench` and `profile` generate under.
pub(crate) enum SchemaChoice {
    /// The built-in one, sized to the test ([`long_array_schema`]).
    BuiltIn,
    Given(Structured),
}

impl SchemaArgs {
    /// The schema the flags ask for, if any.
    pub(crate) fn read(&self) -> Result<Option<SchemaChoice>> {
        Ok(match (&self.json_schema, &self.json_schema_file) {
            (Some(None), _) => Some(SchemaChoice::BuiltIn),
            (Some(Some(s)), _) => Some(SchemaChoice::Given(Structured {
                spec: json_schema(s, "--json-schema")?,
                flag: "--json-schema",
            })),
            (None, Some(f)) => {
                let text = read_text(f, "--json-schema-file")?;
                Some(SchemaChoice::Given(Structured {
                    spec: json_schema(&text, "--json-schema-file")?,
                    flag: "--json-schema-file",
                }))
            }
            (None, None) => None,
        })
    }
}

impl SchemaChoice {
    /// The schema for a generation of `n_tokens`.
    pub(crate) fn for_tokens(&self, n_tokens: usize) -> Structured {
        match self {
            SchemaChoice::BuiltIn => Structured {
                spec: Spec::JsonSchema(long_array_schema(n_tokens)),
                flag: "the built-in schema",
            },
            SchemaChoice::Given(s) => Structured {
                spec: s.spec.clone(),
                flag: s.flag,
            },
        }
    }
}

impl Structured {
    /// Compiled against the model's vocabulary: a constraint that holds
    /// from the first generated token.
    pub(crate) fn compile(&self, engine: &Engine) -> Result<Constraint> {
        let grammar = engine
            .compile(&self.spec)
            .with_context(|| format!("{}: does not compile", self.flag))?;
        Ok(Constraint(Arc::new(GrammarConstraint::eager(
            grammar,
            self.what(),
        ))))
    }

    /// What the constraint is, for logs.
    fn what(&self) -> &'static str {
        match self.spec {
            Spec::Gbnf(_) => "grammar",
            _ => "json schema",
        }
    }
}

/// A JSON array of at least `max(100, n_tokens)` objects with two string
/// fields: every item takes several tokens, so no output of `n_tokens`
/// tokens can complete it, and a greedy generation runs its full length.
pub(crate) fn long_array_schema(n_tokens: usize) -> serde_json::Value {
    serde_json::json!({
        "type": "array",
        "minItems": n_tokens.max(100),
        "items": {
            "type": "object",
            "properties": {
                "name": { "type": "string" },
                "city": { "type": "string" }
            },
            "required": ["name", "city"],
            "additionalProperties": false
        }
    })
}

fn read_text(path: &Path, flag: &str) -> Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("{flag}: reading {}", path.display()))
}

fn json_schema(text: &str, flag: &str) -> Result<Spec> {
    let value = serde_json::from_str(text).with_context(|| format!("{flag}: not JSON"))?;
    Ok(Spec::JsonSchema(value))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Run {
        #[command(flatten)]
        g: GrammarArgs,
    }

    #[derive(Parser)]
    struct Bench {
        #[command(flatten)]
        s: SchemaArgs,
    }

    #[test]
    fn run_flags_are_exclusive() {
        assert!(Run::try_parse_from(["x", "--grammar", "a", "-j", "{}"]).is_err());
        assert!(
            Run::try_parse_from(["x", "--grammar-file", "a", "--json-schema-file", "b"]).is_err()
        );
        let r = Run::try_parse_from(["x", "-j", "{\"type\":\"integer\"}"]).unwrap();
        let s = r.g.read().unwrap().unwrap();
        assert_eq!(s.flag, "--json-schema");
        assert!(Run::try_parse_from(["x"])
            .unwrap()
            .g
            .read()
            .unwrap()
            .is_none());
    }

    #[test]
    fn bad_text_names_the_flag() {
        let r = Run::try_parse_from(["x", "-j", "{nope"]).unwrap();
        let err = format!("{:#}", r.g.read().err().unwrap());
        assert!(err.starts_with("--json-schema: not JSON"), "{err}");
        let r = Run::try_parse_from(["x", "--grammar-file", "/no/such/file"]).unwrap();
        let err = format!("{:#}", r.g.read().err().unwrap());
        assert!(
            err.contains("--grammar-file: reading /no/such/file"),
            "{err}"
        );
    }

    #[test]
    fn bench_schema_is_given_or_built_in() {
        let b = Bench::try_parse_from(["x", "-j"]).unwrap();
        assert!(matches!(b.s.read().unwrap(), Some(SchemaChoice::BuiltIn)));
        let b = Bench::try_parse_from(["x", "-j", "{}"]).unwrap();
        assert!(matches!(b.s.read().unwrap(), Some(SchemaChoice::Given(_))));
        assert!(Bench::try_parse_from(["x"])
            .unwrap()
            .s
            .read()
            .unwrap()
            .is_none());
        assert!(Bench::try_parse_from(["x", "-j", "--json-schema-file", "f"]).is_err());
        assert_eq!(long_array_schema(10)["minItems"], 100);
        assert_eq!(long_array_schema(512)["minItems"], 512);
    }
}
