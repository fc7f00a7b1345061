//! BPE pre-tokenization: splitting text into words before merges run.
//!
//! `tokenizer.ggml.pre` names a pre-tokenizer; llama.cpp maps each name to an
//! ordered list of split patterns, each applied to every piece the previous
//! one produced. The common GPT-2 / Llama-3 / Qwen2 patterns are matched here
//! by hand-written scanners (as llama.cpp does, and with the same corner
//! cases); the few simple character-class patterns that accompany them
//! (`\p{N}`, `\p{N}+`, punctuation runs, three ASCII digits) are scanners too.
//! Positions are code point indices into the text.

use crate::unicode::Flags;

/// One split pattern.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pass {
    /// `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
    Gpt2,
    /// Llama-3: contractions (any case), `[^\r\n\p{L}\p{N}]?\p{L}+`, `\p{N}{1,3}`,
    /// ` ?[^\s\p{L}\p{N}]+[\r\n]*`, `\s*[\r\n]+`, `\s+(?!\S)`, `\s+`.
    Llama3,
    /// As Llama-3 but numbers split one digit at a time (`\p{N}`).
    Qwen2,
    /// `\p{N}`: every number code point alone.
    EachNumber,
    /// `\p{N}+`: runs of numbers.
    NumberRuns,
    /// `[\p{P}\$\+<=>\^~\|]+` (with the backtick too when `true`): punctuation runs.
    PunctRuns { backtick: bool },
    /// `[0-9][0-9][0-9]`: groups of three ASCII digits, left to right.
    AsciiDigitTriples,
}

/// The pre-tokenizer names llama.cpp accepts that Kestrel implements, and the
/// passes (plus whether merges are skipped for whole-vocabulary words, and
/// whether a BOS is added by default) each stands for.
pub(crate) struct PreSpec {
    pub passes: &'static [Pass],
    pub ignore_merges: bool,
    pub add_bos: bool,
}

const DEFAULT: &[Pass] = &[
    Pass::PunctRuns { backtick: false },
    Pass::Gpt2,
    Pass::NumberRuns,
    Pass::AsciiDigitTriples,
];
const GPT2: &[Pass] = &[Pass::Gpt2];
const LLAMA3: &[Pass] = &[Pass::Llama3];
const QWEN2: &[Pass] = &[Pass::Qwen2];
const SMOLLM: &[Pass] = &[Pass::EachNumber, Pass::Gpt2];
const FALCON: &[Pass] = &[
    Pass::PunctRuns { backtick: true },
    Pass::Gpt2,
    Pass::AsciiDigitTriples,
];

/// Names accepted in `tokenizer.ggml.pre` (for error messages).
pub(crate) const SUPPORTED_PRE: &[&str] = &[
    "default",
    "gpt-2",
    "gpt2",
    "phi-2",
    "mpt",
    "olmo",
    "jais",
    "exaone4",
    "jina-es",
    "jina-de",
    "llama-bpe",
    "llama3",
    "llama-v3",
    "falcon3",
    "dbrx",
    "smaug-bpe",
    "qwen2",
    "deepseek-r1-qwen",
    "stablelm2",
    "megrez",
    "smollm",
    "starcoder",
    "refact",
    "command-r",
    "codeshell",
    "exaone",
    "minerva-7b",
    "falcon",
];

/// The pre-tokenizer for a `tokenizer.ggml.pre` value (None: unsupported).
/// A missing value means "default", as in llama.cpp.
pub(crate) fn spec_for(pre: &str) -> Option<PreSpec> {
    let plain = |passes| PreSpec {
        passes,
        ignore_merges: false,
        add_bos: false,
    };
    Some(match pre {
        "" | "default" => plain(DEFAULT),
        // "gpt2" is not a name llama.cpp knows ("gpt-2" is); accepted as an alias.
        "gpt-2" | "gpt2" | "phi-2" | "mpt" | "olmo" | "jais" | "exaone4" | "jina-es"
        | "jina-de" => plain(GPT2),
        "llama-bpe" | "llama3" | "llama-v3" | "falcon3" => PreSpec {
            passes: LLAMA3,
            ignore_merges: true,
            add_bos: true,
        },
        "dbrx" | "smaug-bpe" => plain(LLAMA3),
        "qwen2" | "deepseek-r1-qwen" | "stablelm2" | "megrez" => plain(QWEN2),
        "smollm" | "starcoder" | "refact" | "command-r" | "codeshell" | "exaone" | "minerva-7b" => {
            plain(SMOLLM)
        }
        "falcon" => plain(FALCON),
        _ => return None,
    })
}

/// Splits `text` into words by running `passes` in order. Returns byte ranges.
pub(crate) fn split(text: &str, passes: &[Pass]) -> Vec<std::ops::Range<usize>> {
    let cps: Vec<char> = text.chars().collect();
    if cps.is_empty() {
        return Vec::new();
    }
    let mut segs: Vec<(usize, usize)> = vec![(0, cps.len())];
    for &pass in passes {
        let mut out = Vec::with_capacity(segs.len() * 2);
        for &(a, b) in &segs {
            let mut s = Splitter::new(&cps, a, b, &mut out);
            match pass {
                Pass::Gpt2 => s.gpt2(),
                Pass::Llama3 => s.llama3(false),
                Pass::Qwen2 => s.llama3(true),
                Pass::EachNumber => s.class_matches(|c| Flags::of(c).is_number(), false),
                Pass::NumberRuns => s.class_matches(|c| Flags::of(c).is_number(), true),
                Pass::PunctRuns { backtick } => s.class_matches(
                    |c| {
                        Flags::of(c).is_punctuation()
                            || matches!(c, '$' | '+' | '<' | '=' | '>' | '^' | '~' | '|')
                            || (backtick && c == '`')
                    },
                    true,
                ),
                Pass::AsciiDigitTriples => s.ascii_digit_triples(),
            }
        }
        segs = out;
    }
    // code point index -> byte offset
    let mut offs = Vec::with_capacity(cps.len() + 1);
    let mut o = 0;
    for c in &cps {
        offs.push(o);
        o += c.len_utf8();
    }
    offs.push(o);
    segs.into_iter().map(|(a, b)| offs[a]..offs[b]).collect()
}

/// Scans one segment `[start, end)` of the code points, emitting pieces.
struct Splitter<'a> {
    cps: &'a [char],
    start: usize,
    end: usize,
    /// End of the last emitted piece.
    emitted: usize,
    out: &'a mut Vec<(usize, usize)>,
}

impl<'a> Splitter<'a> {
    fn new(cps: &'a [char], start: usize, end: usize, out: &'a mut Vec<(usize, usize)>) -> Self {
        Splitter {
            cps,
            start,
            end,
            emitted: start,
            out,
        }
    }

    fn cp(&self, i: usize) -> Option<char> {
        (i >= self.start && i < self.end).then(|| self.cps[i])
    }

    fn flags(&self, i: usize) -> Flags {
        self.cp(i).map(Flags::of).unwrap_or(Flags::EMPTY)
    }

    /// Emits the piece from the last emission up to `to` (if non-empty).
    fn emit(&mut self, to: usize) {
        if to > self.emitted {
            self.out.push((self.emitted, to));
        }
        self.emitted = to;
    }

    /// Length of a contraction (`'s`, `'re`, ...) at `pos`, or 0.
    fn contraction(&self, pos: usize, any_case: bool) -> usize {
        if self.cps[pos] != '\'' || pos + 1 >= self.end {
            return 0;
        }
        let low = |c: char| if any_case { c.to_ascii_lowercase() } else { c };
        let n1 = low(self.cps[pos + 1]);
        if matches!(n1, 's' | 't' | 'm' | 'd') {
            return 2;
        }
        if pos + 2 < self.end {
            let n2 = low(self.cps[pos + 2]);
            if matches!((n1, n2), ('r', 'e') | ('v', 'e') | ('l', 'l')) {
                return 3;
            }
        }
        0
    }

    /// Counts white space from `pos`; also returns the position just past
    /// the last `\r` / `\n` inside that run, if any.
    fn whitespace_run(&self, pos: usize) -> (usize, Option<usize>) {
        let mut n = 0;
        let mut last_newline_end = None;
        while self.flags(pos + n).is_whitespace() {
            if matches!(self.cp(pos + n), Some('\r' | '\n')) {
                last_newline_end = Some(pos + n + 1);
            }
            n += 1;
        }
        (n, last_newline_end)
    }

    fn gpt2(&mut self) {
        let mut pos = self.start;
        while pos < self.end {
            let c = self.cps[pos];
            let k = self.contraction(pos, false);
            if k > 0 {
                pos += k;
                self.emit(pos);
                continue;
            }
            let lead_space = usize::from(c == ' ');
            let f2 = self.flags(pos + lead_space);
            // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`
            let class: Option<fn(Flags) -> bool> = if f2.is_letter() {
                Some(Flags::is_letter)
            } else if f2.is_number() {
                Some(Flags::is_number)
            } else if f2.is_other() {
                Some(Flags::is_other)
            } else {
                None
            };
            if let Some(test) = class {
                pos += lead_space;
                while test(self.flags(pos)) {
                    pos += 1;
                }
                self.emit(pos);
                continue;
            }
            let (n_ws, _) = self.whitespace_run(pos);
            if n_ws > 1 && self.cp(pos + n_ws).is_some() {
                // `\s+(?!\S)`: leave the last space to lead the next word
                pos += n_ws - 1;
                self.emit(pos);
                continue;
            }
            if n_ws > 0 {
                pos += n_ws;
                self.emit(pos);
                continue;
            }
            pos += 1;
            self.emit(pos);
        }
    }

    fn llama3(&mut self, single_digits: bool) {
        let mut pos = self.start;
        while pos < self.end {
            let c = self.cps[pos];
            let f = self.flags(pos);
            let k = self.contraction(pos, true);
            if k > 0 {
                pos += k;
                self.emit(pos);
                continue;
            }
            // `[^\r\n\p{L}\p{N}]?\p{L}+`
            if !(c == '\r' || c == '\n' || f.is_number())
                && (f.is_letter() || self.flags(pos + 1).is_letter())
            {
                pos += 1;
                while self.flags(pos).is_letter() {
                    pos += 1;
                }
                self.emit(pos);
                continue;
            }
            // `\p{N}{1,3}` or `\p{N}`
            if f.is_number() {
                if single_digits {
                    pos += 1;
                } else {
                    let mut group = pos;
                    while self.flags(pos).is_number() {
                        pos += 1;
                        if pos - group >= 3 {
                            self.emit(pos);
                            group = pos;
                        }
                    }
                }
                self.emit(pos);
                continue;
            }
            // ` ?[^\s\p{L}\p{N}]+[\r\n]*` -- the first test looks at the code
            // point itself being real (not at the one after the space), so a
            // lone space at the very end lands here too.
            let lead_space = usize::from(c == ' ');
            let f2 = self.flags(pos + lead_space);
            let f2_other_or_end = !f2.is_whitespace() && !f2.is_letter() && !f2.is_number();
            if f2_other_or_end && !f.is_empty() {
                pos += lead_space;
                while self.flags(pos).is_other() {
                    pos += 1;
                }
                while matches!(self.cp(pos), Some('\r' | '\n')) {
                    pos += 1;
                }
                self.emit(pos);
                continue;
            }
            let (n_ws, last_newline_end) = self.whitespace_run(pos);
            // `\s*[\r\n]+`
            if let Some(e) = last_newline_end {
                pos = e;
                self.emit(pos);
                continue;
            }
            if n_ws > 1 && self.cp(pos + n_ws).is_some() {
                pos += n_ws - 1;
                self.emit(pos);
                continue;
            }
            if n_ws > 0 {
                pos += n_ws;
                self.emit(pos);
                continue;
            }
            pos += 1;
            self.emit(pos);
        }
    }

    /// Matches of a one-character class (`runs`: as long as possible), with
    /// the text between matches kept as pieces of its own.
    fn class_matches(&mut self, test: impl Fn(char) -> bool, runs: bool) {
        let mut pos = self.start;
        while pos < self.end {
            if test(self.cps[pos]) {
                self.emit(pos);
                pos += 1;
                while runs && pos < self.end && test(self.cps[pos]) {
                    pos += 1;
                }
                self.emit(pos);
            } else {
                pos += 1;
            }
        }
        self.emit(self.end);
    }

    fn ascii_digit_triples(&mut self) {
        let mut pos = self.start;
        while pos < self.end {
            if pos + 3 <= self.end && self.cps[pos..pos + 3].iter().all(char::is_ascii_digit) {
                self.emit(pos);
                pos += 3;
                self.emit(pos);
            } else {
                pos += 1;
            }
        }
        self.emit(self.end);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words<'t>(text: &'t str, passes: &[Pass]) -> Vec<&'t str> {
        split(text, passes).into_iter().map(|r| &text[r]).collect()
    }

    #[test]
    fn gpt2_words() {
        assert_eq!(
            words("Hello world's  end 123!!", GPT2),
            ["Hello", " world", "'s", " ", " end", " 123", "!!"]
        );
        assert_eq!(words("a   ", GPT2), ["a", "   "]);
        assert_eq!(words("'S", GPT2), ["'", "S"]);
    }

    #[test]
    fn llama3_words() {
        assert_eq!(
            words("I'M here\n\n 12345 ok", LLAMA3),
            ["I", "'M", " here", "\n\n", " ", "123", "45", " ok"]
        );
        assert_eq!(words("x ", LLAMA3), ["x", " "]);
    }

    #[test]
    fn qwen2_single_digits() {
        assert_eq!(words("ab 2024", QWEN2), ["ab", " ", "2", "0", "2", "4"]);
    }

    #[test]
    fn smollm_isolates_digits_first() {
        assert_eq!(words("x 12", SMOLLM), ["x", " ", "1", "2"]);
    }

    #[test]
    fn default_splits_punctuation_and_digit_triples() {
        assert_eq!(
            words("a+=b 12345", DEFAULT),
            ["a", "+=", "b", " ", "123", "45"]
        );
    }

    #[test]
    fn unknown_pre_is_none() {
        assert!(spec_for("no-such-pre").is_none());
        assert!(spec_for("qwen2").is_some());
    }
}
