//! BPE pre-tokenization: splitting text into words before merges run.
//!
//! `tokenizer.ggml.pre` names a pre-tokenizer; llama.cpp maps each name to an
//! ordered list of split patterns, each applied to every piece the previous
//! one produced. The common GPT-2 / Llama-3 / Qwen2 patterns are matched here
//! by hand-written scanners (as llama.cpp does, and with the same corner
//! cases); the few simple character-class patterns that accompany them
//! (`\p{N}`, `\p{N}+`, punctuation runs, three ASCII digits) are scanners too.
//!
//! Nothing is materialised: positions are byte offsets into the text, each
//! pass hands every piece it finds straight to the next pass, and the last
//! one hands it to the caller (who merges it as a BPE word at once). Splitting
//! allocates nothing, whatever the text: 0 bytes an input byte, and a stack
//! one frame deeper per pass.

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

/// Splits `text` into words by running `passes` in order; `sink(start, end)`
/// gets each word's byte range, in order.
pub(crate) fn split(text: &str, passes: &[Pass], sink: &mut dyn FnMut(usize, usize)) {
    if !text.is_empty() {
        run(text, passes, 0, text.len(), sink);
    }
}

/// Runs the first of `passes` over `text[start..end]`, each piece through
/// the rest of them.
fn run(text: &str, passes: &[Pass], start: usize, end: usize, sink: &mut dyn FnMut(usize, usize)) {
    let Some((&pass, rest)) = passes.split_first() else {
        return sink(start, end);
    };
    let mut next = |a: usize, b: usize| run(text, rest, a, b, sink);
    let mut s = Splitter {
        text,
        start,
        end,
        emitted: start,
        out: &mut next,
    };
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

/// A run of white space: how many code points, where it ends, where its
/// last code point starts, and the end of its last `\r` / `\n`, if any.
struct WhiteSpace {
    count: usize,
    end: usize,
    last: usize,
    newline_end: Option<usize>,
}

/// Scans one segment `text[start..end]` (byte offsets at character
/// boundaries), emitting pieces.
struct Splitter<'a> {
    text: &'a str,
    start: usize,
    end: usize,
    /// End of the last emitted piece.
    emitted: usize,
    out: &'a mut dyn FnMut(usize, usize),
}

impl Splitter<'_> {
    /// The code point at byte `i`, if inside the segment.
    fn cp(&self, i: usize) -> Option<char> {
        if i < self.start || i >= self.end {
            return None;
        }
        self.text.get(i..)?.chars().next()
    }

    fn flags(&self, i: usize) -> Flags {
        self.cp(i).map(Flags::of).unwrap_or(Flags::EMPTY)
    }

    /// The byte after the code point at `i` (`i + 1` past the segment).
    fn step(&self, i: usize) -> usize {
        i + self.cp(i).map_or(1, char::len_utf8)
    }

    /// Emits the piece from the last emission up to `to` (if non-empty).
    fn emit(&mut self, to: usize) {
        if to > self.emitted {
            (self.out)(self.emitted, to);
        }
        self.emitted = to;
    }

    /// The end of a contraction (`'s`, `'re`, ...) at `pos`, if one is there.
    fn contraction(&self, pos: usize, any_case: bool) -> Option<usize> {
        if self.cp(pos) != Some('\'') {
            return None;
        }
        let low = |c: char| if any_case { c.to_ascii_lowercase() } else { c };
        // The apostrophe and the letters matched are one byte each.
        let n1 = low(self.cp(pos + 1)?);
        if matches!(n1, 's' | 't' | 'm' | 'd') {
            return Some(pos + 2);
        }
        if matches!(n1, 'r' | 'v' | 'l') {
            let n2 = low(self.cp(pos + 2)?);
            if matches!((n1, n2), ('r', 'e') | ('v', 'e') | ('l', 'l')) {
                return Some(pos + 3);
            }
        }
        None
    }

    fn whitespace_run(&self, pos: usize) -> WhiteSpace {
        let mut ws = WhiteSpace {
            count: 0,
            end: pos,
            last: pos,
            newline_end: None,
        };
        while let Some(c) = self.cp(ws.end).filter(|&c| Flags::of(c).is_whitespace()) {
            ws.last = ws.end;
            ws.end += c.len_utf8();
            ws.count += 1;
            if matches!(c, '\r' | '\n') {
                ws.newline_end = Some(ws.end);
            }
        }
        ws
    }

    fn gpt2(&mut self) {
        let mut pos = self.start;
        while let Some(c) = self.cp(pos) {
            if let Some(e) = self.contraction(pos, false) {
                pos = e;
                self.emit(pos);
                continue;
            }
            let after_space = if c == ' ' { pos + 1 } else { pos };
            let f2 = self.flags(after_space);
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
                pos = after_space;
                while test(self.flags(pos)) {
                    pos = self.step(pos);
                }
                self.emit(pos);
                continue;
            }
            let ws = self.whitespace_run(pos);
            if ws.count > 1 && self.cp(ws.end).is_some() {
                // `\s+(?!\S)`: leave the last space to lead the next word
                pos = ws.last;
                self.emit(pos);
                continue;
            }
            if ws.count > 0 {
                pos = ws.end;
                self.emit(pos);
                continue;
            }
            pos = self.step(pos);
            self.emit(pos);
        }
    }

    fn llama3(&mut self, single_digits: bool) {
        let mut pos = self.start;
        while let Some(c) = self.cp(pos) {
            let f = Flags::of(c);
            if let Some(e) = self.contraction(pos, true) {
                pos = e;
                self.emit(pos);
                continue;
            }
            // `[^\r\n\p{L}\p{N}]?\p{L}+`
            if !(c == '\r' || c == '\n' || f.is_number())
                && (f.is_letter() || self.flags(self.step(pos)).is_letter())
            {
                pos = self.step(pos);
                while self.flags(pos).is_letter() {
                    pos = self.step(pos);
                }
                self.emit(pos);
                continue;
            }
            // `\p{N}{1,3}` or `\p{N}`
            if f.is_number() {
                if single_digits {
                    pos = self.step(pos);
                } else {
                    let mut in_group = 0;
                    while self.flags(pos).is_number() {
                        pos = self.step(pos);
                        in_group += 1;
                        if in_group == 3 {
                            self.emit(pos);
                            in_group = 0;
                        }
                    }
                }
                self.emit(pos);
                continue;
            }
            // ` ?[^\s\p{L}\p{N}]+[\r\n]*` -- the first test looks at the code
            // point itself being real (not at the one after the space), so a
            // lone space at the very end lands here too.
            let after_space = if c == ' ' { pos + 1 } else { pos };
            let f2 = self.flags(after_space);
            let f2_other_or_end = !f2.is_whitespace() && !f2.is_letter() && !f2.is_number();
            if f2_other_or_end && !f.is_empty() {
                pos = after_space;
                while self.flags(pos).is_other() {
                    pos = self.step(pos);
                }
                while matches!(self.cp(pos), Some('\r' | '\n')) {
                    pos += 1;
                }
                self.emit(pos);
                continue;
            }
            let ws = self.whitespace_run(pos);
            // `\s*[\r\n]+`
            if let Some(e) = ws.newline_end {
                pos = e;
                self.emit(pos);
                continue;
            }
            if ws.count > 1 && self.cp(ws.end).is_some() {
                pos = ws.last;
                self.emit(pos);
                continue;
            }
            if ws.count > 0 {
                pos = ws.end;
                self.emit(pos);
                continue;
            }
            pos = self.step(pos);
            self.emit(pos);
        }
    }

    /// Matches of a one-character class (`runs`: as long as possible), with
    /// the text between matches kept as pieces of its own.
    fn class_matches(&mut self, test: impl Fn(char) -> bool, runs: bool) {
        let mut pos = self.start;
        while let Some(c) = self.cp(pos) {
            pos += c.len_utf8();
            if test(c) {
                self.emit(pos - c.len_utf8());
                while let Some(c) = self.cp(pos).filter(|&c| runs && test(c)) {
                    pos += c.len_utf8();
                }
                self.emit(pos);
            }
        }
        self.emit(self.end);
    }

    fn ascii_digit_triples(&mut self) {
        let mut pos = self.start;
        while pos < self.end {
            // ASCII digits are one byte each, and no other character's
            // bytes are ASCII.
            let three = self.text.as_bytes().get(pos..pos + 3);
            if pos + 3 <= self.end && three.is_some_and(|t| t.iter().all(u8::is_ascii_digit)) {
                self.emit(pos);
                pos += 3;
                self.emit(pos);
            } else {
                pos = self.step(pos);
            }
        }
        self.emit(self.end);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ranges(text: &str, passes: &[Pass]) -> Vec<std::ops::Range<usize>> {
        let mut got = Vec::new();
        split(text, passes, &mut |a, b| got.push(a..b));
        got
    }

    fn words<'t>(text: &'t str, passes: &[Pass]) -> Vec<&'t str> {
        ranges(text, passes).into_iter().map(|r| &text[r]).collect()
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

    /// The code-point scanners this module had before pieces were streamed
    /// in byte offsets: the reference the streaming ones must match.
    mod reference {
        use super::super::Pass;
        use crate::unicode::Flags;

        /// Splits `text` into words by running `passes` in order. Returns byte ranges.
        pub(super) fn split(text: &str, passes: &[Pass]) -> Vec<std::ops::Range<usize>> {
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
            fn new(
                cps: &'a [char],
                start: usize,
                end: usize,
                out: &'a mut Vec<(usize, usize)>,
            ) -> Self {
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
                    if pos + 3 <= self.end
                        && self.cps[pos..pos + 3].iter().all(char::is_ascii_digit)
                    {
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
    }

    use crate::test_rng::Rng;

    #[test]
    fn streaming_matches_the_code_point_reference() {
        // Characters that steer every branch: contractions in both cases,
        // letters, ASCII and other numbers, punctuation and symbols of each
        // pass, all kinds of white space, multi-byte characters of each class.
        let alphabet: Vec<char> = "'sStTrReEvVlLmMdDaZ0123456789½٣ \n\r\t\u{3000}\u{a0}!?.,$+<=>^~|`-_@#\"中é😀\u{200d}\u{301}"
            .chars()
            .collect();
        let mut lists: Vec<&[Pass]> = vec![DEFAULT, GPT2, LLAMA3, QWEN2, SMOLLM, FALCON];
        let singles = [
            Pass::Gpt2,
            Pass::Llama3,
            Pass::Qwen2,
            Pass::EachNumber,
            Pass::NumberRuns,
            Pass::PunctRuns { backtick: false },
            Pass::PunctRuns { backtick: true },
            Pass::AsciiDigitTriples,
        ];
        lists.extend(singles.iter().map(std::slice::from_ref));
        let mut rng = Rng(0x0123_4567_89ab_cdef);
        for round in 0..3000 {
            // A small sub-alphabet makes runs and repeats likely.
            let k = 2 + round % 12;
            let start = rng.below(alphabet.len());
            let sub: Vec<char> = (0..k)
                .map(|i| alphabet[(start + i * 7) % alphabet.len()])
                .collect();
            let text: String = (0..rng.below(40)).map(|_| sub[rng.below(k)]).collect();
            for passes in &lists {
                assert_eq!(
                    ranges(&text, passes),
                    reference::split(&text, passes),
                    "{text:?} {passes:?}"
                );
            }
        }
    }
}
