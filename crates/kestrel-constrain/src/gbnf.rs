//! llama.cpp GBNF to llguidance Lark. Parses GBNF as llama.cpp's grammar
//! parser does (where newlines end a rule, which escapes exist) and writes
//! the same language in Lark: `start: root`, one line per rule, strings as
//! Lark (JSON-syntax) strings, character classes and `.` as one-character
//! regex terminals. Repetition stays in the rules, never inside a terminal,
//! so that llguidance's lexer only ever sees one character class or one
//! literal per terminal.

use std::collections::HashMap;
use std::fmt::Write;

use crate::ConstraintError;

/// A parsed right-hand side: alternatives of sequences.
type Alternates = Vec<Vec<Item>>;

#[derive(Debug)]
enum Item {
    Literal(String),
    /// Inclusive code point ranges; `true` = negated (`[^...]`).
    Class(Vec<(u32, u32)>, bool),
    /// `.`: any one character.
    Any,
    /// A rule, by index into the rule table.
    Rule(usize),
    Group(Alternates),
    /// `min`, `max` (None = unbounded).
    Repeat(Box<Item>, u32, Option<u32>),
}

struct Rule {
    name: String,
    /// Where it is first mentioned (for "undefined rule").
    first_use: usize,
    body: Option<Alternates>,
}

/// The deepest parentheses may nest (llguidance's Lark parser refuses
/// deeper nesting anyway; this one recurses too).
const MAX_NESTING: usize = 24;

struct Parser {
    src: Vec<char>,
    pos: usize,
    depth: usize,
    rules: Vec<Rule>,
    by_name: HashMap<String, usize>,
}

/// Translates a GBNF grammar (start rule `root`) to Lark. Errors give the
/// 1-based line and column.
pub fn to_lark(gbnf: &str) -> Result<String, ConstraintError> {
    let mut p = Parser {
        src: gbnf.chars().collect(),
        pos: 0,
        depth: 0,
        rules: Vec::new(),
        by_name: HashMap::new(),
    };
    p.parse_grammar()?;
    p.check_rules()?;
    Ok(p.emit())
}

fn is_word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-'
}

impl Parser {
    fn error(&self, at: usize, message: impl Into<String>) -> ConstraintError {
        let before = &self.src[..at.min(self.src.len())];
        let line = before.iter().filter(|&&c| c == '\n').count() + 1;
        let column = before.iter().rev().take_while(|&&c| c != '\n').count() + 1;
        ConstraintError::Gbnf {
            line,
            column,
            message: message.into(),
        }
    }

    fn peek(&self) -> Option<char> {
        self.src.get(self.pos).copied()
    }

    fn peek_at(&self, k: usize) -> Option<char> {
        self.src.get(self.pos + k).copied()
    }

    /// Skips blanks and `#` comments; newlines too when `newlines` (inside
    /// parentheses, after `::=` and `|`, between rules).
    fn skip_space(&mut self, newlines: bool) {
        while let Some(c) = self.peek() {
            match c {
                ' ' | '\t' => self.pos += 1,
                '\r' | '\n' if newlines => self.pos += 1,
                '#' => {
                    while self.peek().is_some_and(|c| c != '\r' && c != '\n') {
                        self.pos += 1;
                    }
                }
                _ => break,
            }
        }
    }

    fn parse_grammar(&mut self) -> Result<(), ConstraintError> {
        self.skip_space(true);
        if self.peek().is_none() {
            return Err(self.error(self.pos, "empty grammar"));
        }
        while self.peek().is_some() {
            self.parse_rule()?;
        }
        Ok(())
    }

    fn parse_name(&mut self) -> Result<String, ConstraintError> {
        let start = self.pos;
        while self.peek().is_some_and(is_word_char) {
            self.pos += 1;
        }
        if start == self.pos {
            return Err(self.error(start, "expecting a rule name"));
        }
        Ok(self.src[start..self.pos].iter().collect())
    }

    fn rule_index(&mut self, name: String, at: usize) -> usize {
        if let Some(&i) = self.by_name.get(&name) {
            return i;
        }
        self.rules.push(Rule {
            name: name.clone(),
            first_use: at,
            body: None,
        });
        self.by_name.insert(name, self.rules.len() - 1);
        self.rules.len() - 1
    }

    fn parse_rule(&mut self) -> Result<(), ConstraintError> {
        let at = self.pos;
        let name = self.parse_name()?;
        let idx = self.rule_index(name, at);
        self.skip_space(false);
        if !(self.peek() == Some(':')
            && self.peek_at(1) == Some(':')
            && self.peek_at(2) == Some('='))
        {
            return Err(self.error(self.pos, "expecting ::="));
        }
        self.pos += 3;
        self.skip_space(true);
        let body = self.parse_alternates(false)?;
        // A later definition replaces an earlier one, as in llama.cpp.
        self.rules[idx].body = Some(body);
        self.skip_space(false);
        match self.peek() {
            None | Some('\r' | '\n') => {}
            Some('<') => return Err(self.error(self.pos, "token references are not supported")),
            Some(c) => {
                return Err(self.error(
                    self.pos,
                    format!("unexpected {c:?}: expecting a newline or the end"),
                ))
            }
        }
        self.skip_space(true);
        Ok(())
    }

    fn parse_alternates(&mut self, nested: bool) -> Result<Alternates, ConstraintError> {
        let mut alts = vec![self.parse_sequence(nested)?];
        while self.peek() == Some('|') {
            self.pos += 1;
            self.skip_space(true);
            alts.push(self.parse_sequence(nested)?);
        }
        Ok(alts)
    }

    fn parse_sequence(&mut self, nested: bool) -> Result<Vec<Item>, ConstraintError> {
        let mut seq: Vec<Item> = Vec::new();
        while let Some(c) = self.peek() {
            let at = self.pos;
            match c {
                '"' => {
                    self.pos += 1;
                    let mut s = String::new();
                    loop {
                        match self.peek() {
                            None => return Err(self.error(self.pos, "unterminated string")),
                            Some('"') => break,
                            Some(_) => s.push(self.parse_char()?),
                        }
                    }
                    self.pos += 1;
                    seq.push(Item::Literal(s));
                }
                '[' => {
                    self.pos += 1;
                    let negated = self.peek() == Some('^');
                    if negated {
                        self.pos += 1;
                    }
                    let mut ranges = Vec::new();
                    loop {
                        match self.peek() {
                            None => {
                                return Err(self.error(self.pos, "unterminated character class"))
                            }
                            Some(']') => break,
                            Some(_) => {}
                        }
                        let lo = self.parse_code()?;
                        let hi = if self.peek() == Some('-')
                            && self.peek_at(1).is_some_and(|c| c != ']')
                        {
                            self.pos += 1;
                            self.parse_code()?
                        } else {
                            lo
                        };
                        ranges.push((lo, hi));
                    }
                    self.pos += 1;
                    seq.push(Item::Class(ranges, negated));
                }
                '.' => {
                    self.pos += 1;
                    seq.push(Item::Any);
                }
                '(' => {
                    if self.depth == MAX_NESTING {
                        return Err(
                            self.error(at, format!("parentheses nest deeper than {MAX_NESTING}"))
                        );
                    }
                    self.pos += 1;
                    self.skip_space(true);
                    self.depth += 1;
                    let alts = self.parse_alternates(true)?;
                    self.depth -= 1;
                    if self.peek() != Some(')') {
                        return Err(self.error(self.pos, "expecting ')'"));
                    }
                    self.pos += 1;
                    seq.push(Item::Group(alts));
                }
                '*' | '+' | '?' | '{' => {
                    let Some(last) = seq.pop() else {
                        return Err(self.error(at, format!("{c:?} has no item before it")));
                    };
                    let (min, max) = self.parse_repetition()?;
                    seq.push(Item::Repeat(Box::new(last), min, max));
                }
                c if is_word_char(c) => {
                    let name = self.parse_name()?;
                    let idx = self.rule_index(name, at);
                    seq.push(Item::Rule(idx));
                }
                _ => break,
            }
            self.skip_space(nested);
        }
        Ok(seq)
    }

    /// `*`, `+`, `?` or `{m}`, `{m,}`, `{m,n}`.
    fn parse_repetition(&mut self) -> Result<(u32, Option<u32>), ConstraintError> {
        let c = self.peek();
        self.pos += 1;
        match c {
            Some('*') => return Ok((0, None)),
            Some('+') => return Ok((1, None)),
            Some('?') => return Ok((0, Some(1))),
            _ => {}
        }
        self.skip_space(false);
        let min = self.parse_int()?;
        self.skip_space(false);
        let max = if self.peek() == Some(',') {
            self.pos += 1;
            self.skip_space(false);
            if self.peek().is_some_and(|c| c.is_ascii_digit()) {
                Some(self.parse_int()?)
            } else {
                None
            }
        } else {
            Some(min)
        };
        self.skip_space(false);
        if self.peek() != Some('}') {
            return Err(self.error(self.pos, "expecting '}'"));
        }
        self.pos += 1;
        if max.is_some_and(|max| max < min) {
            return Err(self.error(self.pos - 1, "repetition's maximum is below its minimum"));
        }
        Ok((min, max))
    }

    fn parse_int(&mut self) -> Result<u32, ConstraintError> {
        let start = self.pos;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.pos += 1;
        }
        if start == self.pos {
            return Err(self.error(start, "expecting an integer"));
        }
        let digits: String = self.src[start..self.pos].iter().collect();
        digits
            .parse()
            .map_err(|_| self.error(start, "repetition count too large"))
    }

    /// One character of a string or class: itself or an escape.
    fn parse_code(&mut self) -> Result<u32, ConstraintError> {
        let at = self.pos;
        let Some(c) = self.peek() else {
            return Err(self.error(at, "unexpected end of input"));
        };
        self.pos += 1;
        if c != '\\' {
            return Ok(c as u32);
        }
        let Some(e) = self.peek() else {
            return Err(self.error(at, "unexpected end of input"));
        };
        self.pos += 1;
        let digits = match e {
            'x' => 2,
            'u' => 4,
            'U' => 8,
            't' => return Ok('\t' as u32),
            'r' => return Ok('\r' as u32),
            'n' => return Ok('\n' as u32),
            '\\' | '"' | '[' | ']' => return Ok(e as u32),
            _ => return Err(self.error(at, format!("unknown escape \\{e}"))),
        };
        let mut v: u32 = 0;
        for _ in 0..digits {
            let Some(d) = self.peek().and_then(|c| c.to_digit(16)) else {
                return Err(self.error(self.pos, format!("expecting {digits} hex digits")));
            };
            v = v.checked_mul(16).map_or(u32::MAX, |v| v + d);
            self.pos += 1;
        }
        Ok(v)
    }

    fn parse_char(&mut self) -> Result<char, ConstraintError> {
        let at = self.pos;
        let code = self.parse_code()?;
        char::from_u32(code)
            .ok_or_else(|| self.error(at, format!("U+{code:X} is not a Unicode scalar value")))
    }

    fn check_rules(&self) -> Result<(), ConstraintError> {
        if !self.by_name.contains_key("root") {
            return Err(self.error(0, "no rule named root"));
        }
        for r in &self.rules {
            if r.body.is_none() {
                return Err(self.error(r.first_use, format!("undefined rule {}", r.name)));
            }
        }
        Ok(())
    }

    /// Lark names: lowercase, `-` as `_`, starting with a letter, unique,
    /// never `start`.
    fn lark_names(&self) -> Vec<String> {
        let mut taken: Vec<String> = vec!["start".into()];
        let mut out = Vec::with_capacity(self.rules.len());
        for r in &self.rules {
            let mut base = r.name.to_ascii_lowercase().replace('-', "_");
            if !base.starts_with(|c: char| c.is_ascii_lowercase()) {
                base.insert_str(0, "r_");
            }
            let mut name = base.clone();
            let mut k = 2;
            while taken.contains(&name) {
                name = format!("{base}_{k}");
                k += 1;
            }
            taken.push(name.clone());
            out.push(name);
        }
        out
    }

    fn emit(&self) -> String {
        let names = self.lark_names();
        let mut out = String::new();
        let _ = writeln!(out, "start: {}", names[self.by_name["root"]]);
        for (r, name) in self.rules.iter().zip(&names) {
            let _ = write!(out, "{name}: ");
            emit_alternates(r.body.as_deref().unwrap_or_default(), &names, &mut out);
            out.push('\n');
        }
        out
    }
}

fn emit_alternates(alts: &[Vec<Item>], names: &[String], out: &mut String) {
    for (i, seq) in alts.iter().enumerate() {
        if i > 0 {
            out.push_str(" | ");
        }
        if seq.is_empty() {
            out.push_str("\"\"");
        }
        for (j, item) in seq.iter().enumerate() {
            if j > 0 {
                out.push(' ');
            }
            emit_item(item, names, out);
        }
    }
}

fn emit_item(item: &Item, names: &[String], out: &mut String) {
    match item {
        Item::Literal(s) => emit_string(s, out),
        Item::Class(ranges, negated) => emit_class(ranges, *negated, out),
        Item::Any => emit_class(&[], true, out),
        Item::Rule(i) => out.push_str(&names[*i]),
        Item::Group(alts) => {
            out.push('(');
            emit_alternates(alts, names, out);
            out.push(')');
        }
        Item::Repeat(inner, min, max) => {
            if *max == Some(0) {
                out.push_str("\"\"");
                return;
            }
            // Lark takes one operator per atom: anything but a plain atom
            // goes in parentheses.
            let wrap = matches!(**inner, Item::Repeat(..));
            if wrap {
                out.push('(');
            }
            emit_item(inner, names, out);
            if wrap {
                out.push(')');
            }
            let _ = match (min, max) {
                (0, None) => write!(out, "*"),
                (1, None) => write!(out, "+"),
                (0, Some(1)) => write!(out, "?"),
                (m, None) => write!(out, "{{{m},}}"),
                (m, Some(n)) if m == n => write!(out, "{{{m}}}"),
                (m, Some(n)) => write!(out, "{{{m},{n}}}"),
            };
        }
    }
}

/// A Lark string: JSON syntax, without raw control characters or DEL.
fn emit_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 || c == '\u{7F}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A one-character regex terminal, written as a positive class of Unicode
/// scalar values: llguidance's negated classes also admit the UTF-8 lead
/// bytes of surrogates, which are no text, so `[^...]` is complemented here.
/// Every character is written as `\x{..}`, so nothing in it is regex or
/// Lark syntax.
fn emit_class(ranges: &[(u32, u32)], negated: bool, out: &mut String) {
    const SCALARS: [(u32, u32); 2] = [(0, 0xD7FF), (0xE000, 0x10FFFF)];
    let mut set: Vec<(u32, u32)> = ranges
        .iter()
        .flat_map(|&(lo, hi)| SCALARS.map(|(a, b)| (lo.max(a), hi.min(b))))
        .filter(|&(lo, hi)| lo <= hi)
        .collect();
    set.sort_unstable();
    let mut merged: Vec<(u32, u32)> = Vec::with_capacity(set.len());
    for (lo, hi) in set {
        match merged.last_mut() {
            Some(last) if lo <= last.1.saturating_add(1) => last.1 = last.1.max(hi),
            _ => merged.push((lo, hi)),
        }
    }
    if negated {
        let mut complement = Vec::new();
        for (a, b) in SCALARS {
            let mut next = a;
            for &(lo, hi) in merged.iter().filter(|&&(lo, hi)| hi >= a && lo <= b) {
                if lo > next {
                    complement.push((next, lo - 1));
                }
                next = next.max(hi.saturating_add(1));
            }
            if next <= b {
                complement.push((next, b));
            }
        }
        merged = complement;
    }
    if merged.is_empty() {
        // Nothing: a class regex-syntax accepts and that no text matches.
        out.push_str("/[^\\x{0}-\\x{10FFFF}]/");
        return;
    }
    out.push_str("/[");
    for (a, b) in merged {
        let _ = write!(out, "\\x{{{a:X}}}");
        if b != a {
            let _ = write!(out, "-\\x{{{b:X}}}");
        }
    }
    out.push_str("]/");
}
