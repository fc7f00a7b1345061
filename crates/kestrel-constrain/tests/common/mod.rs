//! Shared by the integration tests: the three test models' vocabularies
//! (built once per test binary), a seeded rng, and random walks.

#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use kestrel_constrain::{Compiler, Grammar, Matcher, Next, Spec, Vocabulary};
use kestrel_gguf::GgufFile;
use kestrel_tokenizer::Tokenizer;

pub const MODELS: [&str; 3] = [
    "SmolLM2-135M-Instruct.Q4_1.gguf",
    "gemma-3-270m-q4_k_m.gguf",
    "qwen2.5-coder-0.5b-q4_k_m.gguf",
];

pub struct Model {
    pub name: &'static str,
    pub tok: Arc<Tokenizer>,
    pub vocab: Arc<Vocabulary>,
    pub compiler: Compiler,
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn load(name: &'static str) -> Model {
    let path = root().join("models").join(name);
    assert!(
        path.exists(),
        "model file {} is missing: run scripts/fetch-models.sh",
        path.display()
    );
    let f = GgufFile::open(&path).unwrap_or_else(|e| panic!("opening {}: {e}", path.display()));
    let tok = Arc::new(Tokenizer::from_gguf(&f).unwrap_or_else(|e| panic!("{name}: {e}")));
    let vocab = Vocabulary::with_tokenizer(tok.clone()).unwrap();
    let compiler = Compiler::new(vocab.clone()).unwrap();
    Model {
        name,
        tok,
        vocab,
        compiler,
    }
}

/// All three models, loaded once.
pub fn models() -> &'static [Model] {
    static MODELS_CELL: OnceLock<Vec<Model>> = OnceLock::new();
    MODELS_CELL.get_or_init(|| MODELS.iter().map(|&m| load(m)).collect())
}

pub fn qwen() -> &'static Model {
    &models()[2]
}

/// splitmix64: a seeded, dependency-free rng for random walks.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// How a walk stopped.
#[derive(Debug, PartialEq, Eq)]
pub enum WalkEnd {
    /// The matcher said only end-of-generation may follow, or the walk
    /// picked an end-of-generation token.
    Ended,
    /// Ran out of steps first.
    Cut,
}

/// Drives `m` with random allowed tokens (blank ones mostly avoided) for at
/// most `steps` tokens. Where the output may end, ends with probability
/// `p_end`. In the second half of the walk it steers for an end: it walks
/// one character at a time (where single-byte tokens are allowed) and of a
/// few random candidates takes one after which the output may end, if any
/// (trying them exercises rollback). Returns the
/// text and how it stopped; on the way, checks that every allowed token is
/// accepted and that end-of-generation ids are allowed all or none.
pub fn random_walk(
    model: &Model,
    m: &mut Matcher,
    rng: &mut Rng,
    steps: usize,
    p_end: f64,
) -> (String, WalkEnd) {
    let eog = model.vocab.eog_ids();
    let mut ids = Vec::new();
    let mut next = m.next().unwrap();
    for step in 0..steps {
        let t = match next {
            Next::End => return (model.tok.decode(&ids, false), WalkEnd::Ended),
            Next::Forced(t) => t,
            Next::Allowed(ref mask) => {
                let may_end = eog.iter().any(|&e| mask.allows(e));
                assert!(
                    !may_end || eog.iter().all(|&e| mask.allows(e)),
                    "{}: some but not all EOG ids allowed",
                    model.name
                );
                if may_end && (rng.next_u64() as f64 / u64::MAX as f64) < p_end {
                    let e = eog[rng.below(eog.len())];
                    m.accept(e).unwrap();
                    assert!(m.is_finished());
                    return (model.tok.decode(&ids, false), WalkEnd::Ended);
                }
                let allowed: Vec<u32> = mask.iter().filter(|t| !eog.contains(t)).collect();
                if allowed.is_empty() {
                    m.accept(eog[0]).unwrap();
                    return (model.tok.decode(&ids, false), WalkEnd::Ended);
                }
                let short: Vec<u32> = allowed
                    .iter()
                    .copied()
                    .filter(|&t| model.vocab.token_bytes(t).len() == 1)
                    .collect();
                let pick = |rng: &mut Rng| {
                    // Blank tokens outnumber the rest where a grammar skips
                    // whitespace; mostly re-pick them, or walks never end.
                    let mut t = allowed[rng.below(allowed.len())];
                    for _ in 0..8 {
                        let b = model.vocab.token_bytes(t);
                        if !b.iter().all(u8::is_ascii_whitespace) {
                            break;
                        }
                        t = allowed[rng.below(allowed.len())];
                    }
                    t
                };
                if step >= steps / 2 {
                    let mut found = None;
                    for _ in 0..8 {
                        let t = if short.is_empty() {
                            pick(rng)
                        } else {
                            short[rng.below(short.len())]
                        };
                        m.accept(t).unwrap();
                        let after = m.next().unwrap();
                        let ends = match &after {
                            Next::End => true,
                            Next::Allowed(mask) => mask.allows(eog[0]),
                            Next::Forced(_) => false,
                        };
                        if ends {
                            found = Some((t, after));
                            break;
                        }
                        m.rollback(1).unwrap();
                    }
                    if let Some((t, after)) = found {
                        ids.push(t);
                        next = after;
                        continue;
                    }
                    if !short.is_empty() {
                        short[rng.below(short.len())]
                    } else {
                        pick(rng)
                    }
                } else {
                    pick(rng)
                }
            }
        };
        m.accept(t)
            .unwrap_or_else(|e| panic!("{}: allowed token {t} refused: {e}", model.name));
        ids.push(t);
        next = m.next().unwrap();
    }
    (model.tok.decode(&ids, false), WalkEnd::Cut)
}

/// Whether `text`, tokenized the model's own way, is a complete output of
/// `grammar` (a second path through the grammar, other than the walk's).
pub fn accepts_text(model: &Model, grammar: &Grammar, text: &str) -> bool {
    let mut m = grammar.matcher();
    for t in model.tok.encode(text, false, false) {
        if m.accept(t).is_err() {
            return false;
        }
    }
    m.accept(model.vocab.eog_ids()[0]).is_ok()
}

pub fn compile(model: &Model, spec: &Spec) -> Grammar {
    model
        .compiler
        .compile(spec)
        .unwrap_or_else(|e| panic!("{}: {spec:?}: {e}", model.name))
}
