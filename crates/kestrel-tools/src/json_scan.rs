//! A JSON syntax scanner over text that may still be growing: finds where a value ends, tells
//! a valid but unfinished prefix from invalid text, and walks objects and arrays member by
//! member with the byte spans of their values, so that callers can slice a value's exact text.

use std::ops::Range;

/// What scanning a value from some offset found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scan {
    /// A complete value ends at this byte offset.
    Done(usize),
    /// The text ran out inside a value that more text could still complete.
    Partial,
    /// The text cannot be (the start of) a JSON value.
    Invalid,
}

pub(crate) fn skip_ws(s: &str, mut i: usize) -> usize {
    let b = s.as_bytes();
    while i < b.len() && matches!(b[i], b' ' | b'\t' | b'\n' | b'\r') {
        i += 1;
    }
    i
}

/// Scans one JSON value starting exactly at `i` (no leading whitespace skipped).
pub(crate) fn value(s: &str, i: usize) -> Scan {
    value_at(s.as_bytes(), i, 0)
}

/// Deep enough for any real arguments object, shallow enough to keep recursion safe.
const MAX_DEPTH: usize = 128;

fn value_at(b: &[u8], i: usize, depth: usize) -> Scan {
    if depth > MAX_DEPTH {
        return Scan::Invalid;
    }
    let Some(&c) = b.get(i) else {
        return Scan::Partial;
    };
    match c {
        b'"' => string_at(b, i),
        b'{' => container(b, i, depth, b'}', true),
        b'[' => container(b, i, depth, b']', false),
        b't' => literal(b, i, b"true"),
        b'f' => literal(b, i, b"false"),
        b'n' => literal(b, i, b"null"),
        b'-' | b'0'..=b'9' => number(b, i),
        _ => Scan::Invalid,
    }
}

fn literal(b: &[u8], i: usize, word: &[u8]) -> Scan {
    let have = &b[i..b.len().min(i + word.len())];
    if !word.starts_with(have) {
        Scan::Invalid
    } else if have.len() < word.len() {
        Scan::Partial
    } else {
        Scan::Done(i + word.len())
    }
}

/// Numbers end only at a non-number byte, so one that reaches the end of the text is
/// unfinished (`12` may become `123`).
fn number(b: &[u8], start: usize) -> Scan {
    let mut i = start;
    if b[i] == b'-' {
        i += 1;
    }
    let digits = |i: &mut usize| {
        let from = *i;
        while *i < b.len() && b[*i].is_ascii_digit() {
            *i += 1;
        }
        *i - from
    };
    match b.get(i) {
        None => return Scan::Partial,
        Some(b'0') => i += 1,
        Some(b'1'..=b'9') => {
            digits(&mut i);
        }
        Some(_) => return Scan::Invalid,
    }
    if b.get(i) == Some(&b'.') {
        i += 1;
        if digits(&mut i) == 0 {
            return if i == b.len() {
                Scan::Partial
            } else {
                Scan::Invalid
            };
        }
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        if digits(&mut i) == 0 {
            return if i == b.len() {
                Scan::Partial
            } else {
                Scan::Invalid
            };
        }
    }
    if i == b.len() {
        Scan::Partial
    } else {
        Scan::Done(i)
    }
}

fn string_at(b: &[u8], start: usize) -> Scan {
    let mut i = start + 1;
    while i < b.len() {
        match b[i] {
            b'"' => return Scan::Done(i + 1),
            b'\\' => {
                let Some(&e) = b.get(i + 1) else {
                    return Scan::Partial;
                };
                match e {
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => i += 2,
                    b'u' => {
                        for k in 0..4 {
                            match b.get(i + 2 + k) {
                                None => return Scan::Partial,
                                Some(h) if h.is_ascii_hexdigit() => {}
                                Some(_) => return Scan::Invalid,
                            }
                        }
                        i += 6;
                    }
                    _ => return Scan::Invalid,
                }
            }
            0x00..=0x1f => return Scan::Invalid,
            _ => i += 1,
        }
    }
    Scan::Partial
}

fn container(b: &[u8], start: usize, depth: usize, close: u8, keyed: bool) -> Scan {
    // Safe to view as str: the scanner only ever stops on ASCII bytes.
    let mut i = skip_ws_b(b, start + 1);
    if i == b.len() {
        return Scan::Partial;
    }
    if b[i] == close {
        return Scan::Done(i + 1);
    }
    loop {
        if keyed {
            match b.get(i) {
                None => return Scan::Partial,
                Some(b'"') => {}
                Some(_) => return Scan::Invalid,
            }
            i = match string_at(b, i) {
                Scan::Done(end) => end,
                other => return other,
            };
            i = skip_ws_b(b, i);
            match b.get(i) {
                None => return Scan::Partial,
                Some(b':') => i = skip_ws_b(b, i + 1),
                Some(_) => return Scan::Invalid,
            }
        }
        i = match value_at(b, i, depth + 1) {
            Scan::Done(end) => skip_ws_b(b, end),
            other => return other,
        };
        match b.get(i) {
            None => return Scan::Partial,
            Some(&c) if c == close => return Scan::Done(i + 1),
            Some(b',') => i = skip_ws_b(b, i + 1),
            Some(_) => return Scan::Invalid,
        }
    }
}

fn skip_ws_b(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && matches!(b[i], b' ' | b'\t' | b'\n' | b'\r') {
        i += 1;
    }
    i
}

/// One member of an object, or one element of an array (`key` empty), whose value is complete.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Member {
    pub key: String,
    pub value: Range<usize>,
}

/// An object or array walked as far as the text allows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Walk {
    /// The members whose values are complete, in order.
    pub members: Vec<Member>,
    /// Where the closing bracket ends, once it has come.
    pub end: Option<usize>,
    /// The member being written when the text ran out, once its key is known: its key and
    /// where its value starts (the value may not have started yet: then `start == s.len()`).
    pub open: Option<(String, usize)>,
    /// The text breaks JSON syntax somewhere.
    pub invalid: bool,
}

impl Walk {
    fn invalid(members: Vec<Member>) -> Walk {
        Walk {
            members,
            end: None,
            open: None,
            invalid: true,
        }
    }

    /// The complete value of `key`, if it is there.
    pub fn get(&self, key: &str) -> Option<Range<usize>> {
        self.members
            .iter()
            .find(|m| m.key == key)
            .map(|m| m.value.clone())
    }
}

/// Walks the object (`keyed`) or array starting at `start` (which holds `{` or `[`).
pub(crate) fn walk(s: &str, start: usize, keyed: bool) -> Walk {
    let b = s.as_bytes();
    let close = if keyed { b'}' } else { b']' };
    let mut members = Vec::new();
    let mut i = skip_ws(s, start + 1);
    let partial = |members, open| Walk {
        members,
        end: None,
        open,
        invalid: false,
    };
    if i == b.len() {
        return partial(members, None);
    }
    if b[i] == close {
        return Walk {
            members,
            end: Some(i + 1),
            open: None,
            invalid: false,
        };
    }
    loop {
        let mut key = String::new();
        if keyed {
            if b.get(i).is_some_and(|&c| c != b'"') {
                return Walk::invalid(members);
            }
            let key_end = match string_at(b, i) {
                Scan::Done(end) => end,
                Scan::Partial => return partial(members, None),
                Scan::Invalid => return Walk::invalid(members),
            };
            key = match serde_json::from_str::<String>(&s[i..key_end]) {
                Ok(k) => k,
                Err(_) => return Walk::invalid(members),
            };
            i = skip_ws(s, key_end);
            match b.get(i) {
                None => return partial(members, None),
                Some(b':') => i = skip_ws(s, i + 1),
                Some(_) => return Walk::invalid(members),
            }
        }
        match value_at(b, i, 1) {
            Scan::Done(end) => members.push(Member { key, value: i..end }),
            Scan::Partial => return partial(members, Some((key, i))),
            Scan::Invalid => return Walk::invalid(members),
        }
        i = skip_ws(s, members.last().map_or(i, |m| m.value.end));
        match b.get(i) {
            None => return partial(members, None),
            Some(&c) if c == close => {
                return Walk {
                    members,
                    end: Some(i + 1),
                    open: None,
                    invalid: false,
                }
            }
            Some(b',') => i = skip_ws(s, i + 1),
            Some(_) => return Walk::invalid(members),
        }
        if i == b.len() {
            return partial(members, None);
        }
    }
}

/// Decodes the JSON string starting at `start` (which holds `"`) as far as the text goes:
/// the decoded text and whether the closing quote came. A trailing escape cut off by the end
/// of the text is left out; `None` if the string is invalid.
pub(crate) fn decode_string_prefix(s: &str, start: usize) -> Option<(String, bool)> {
    match string_at(s.as_bytes(), start) {
        Scan::Done(end) => serde_json::from_str::<String>(&s[start..end])
            .ok()
            .map(|t| (t, true)),
        Scan::Invalid => None,
        Scan::Partial => {
            // Cut before a trailing incomplete escape (and a lone high surrogate, whose pair
            // may follow), then close the string to decode what is there.
            let body = &s[start + 1..];
            let mut cut = body.len();
            if let Some(pos) = body.rfind('\\') {
                let escaped_backslash =
                    body[..pos].chars().rev().take_while(|&c| c == '\\').count() % 2 == 1;
                if !escaped_backslash {
                    let tail = &body[pos..];
                    let complete = match tail.as_bytes().get(1) {
                        Some(b'u') => tail.len() >= 6 && !is_high_surrogate(&tail[2..6]),
                        Some(_) => true,
                        None => false,
                    };
                    if !complete {
                        cut = pos;
                    }
                }
            }
            // A complete high surrogate right before the cut waits for its pair too.
            let kept = &body[..cut];
            if kept.len() >= 6 && is_high_surrogate_escape(kept, kept.len() - 6) {
                cut -= 6;
            }
            let mut closed = String::with_capacity(cut + 2);
            closed.push('"');
            closed.push_str(&body[..cut]);
            closed.push('"');
            serde_json::from_str::<String>(&closed)
                .ok()
                .map(|t| (t, false))
        }
    }
}

/// Whether `text[at..]` is a `\uXXXX` escape of a high surrogate (its backslash unescaped).
fn is_high_surrogate_escape(text: &str, at: usize) -> bool {
    let Some(escape) = text.get(at..at + 6) else {
        return false;
    };
    let backslashes_before = text[..at].chars().rev().take_while(|&c| c == '\\').count();
    escape.starts_with("\\u") && backslashes_before % 2 == 0 && is_high_surrogate(&escape[2..])
}

fn is_high_surrogate(hex: &str) -> bool {
    u16::from_str_radix(hex, 16).is_ok_and(|u| (0xD800..0xDC00).contains(&u))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_end_where_json_says() {
        assert_eq!(
            value(r#"{"a": [1, 2.5e3, "x\"y"], "b": null} tail"#, 0),
            Scan::Done(36)
        );
        assert_eq!(value("true,", 0), Scan::Done(4));
        assert_eq!(value("-0.5 ", 0), Scan::Done(4));
        assert_eq!(value(r#""\u00e9""#, 0), Scan::Done(8));
    }

    #[test]
    fn prefixes_are_partial_and_breaks_invalid() {
        for prefix in [
            r#"{"a": [1, 2"#,
            r#"{"a"#,
            "{",
            r#"{"a": "x\"#,
            r#""\u00"#,
            "tr",
            "12",
            "1.",
            "1e",
        ] {
            assert_eq!(value(prefix, 0), Scan::Partial, "{prefix}");
        }
        for bad in [
            r#"{"a" 1}"#,
            "[1,,2]",
            "{a: 1}",
            "tru e",
            "[01]",
            r#""\x""#,
            "1.e5",
            "[1 2]",
        ] {
            assert_eq!(value(bad, 0), Scan::Invalid, "{bad}");
        }
    }

    #[test]
    fn walk_reports_members_and_the_open_one() {
        let s = r#"{"name": "f", "arguments": {"x": [1, "#;
        let w = walk(s, 0, true);
        assert_eq!(w.members.len(), 1);
        assert_eq!(&s[w.get("name").unwrap()], r#""f""#);
        let (key, at) = w.open.clone().unwrap();
        assert_eq!((key.as_str(), &s[at..]), ("arguments", r#"{"x": [1, "#));
        assert!(!w.invalid && w.end.is_none());
        let s = r#"[{"a": 1}, 2 ]x"#;
        let w = walk(s, 0, false);
        assert_eq!((w.members.len(), w.end), (2, Some(14)));
        assert!(walk(r#"{"a": 1 "b"#, 0, true).invalid);
    }

    #[test]
    fn string_prefixes_decode() {
        assert_eq!(
            decode_string_prefix(r#""ab\ncd""#, 0),
            Some(("ab\ncd".into(), true))
        );
        assert_eq!(
            decode_string_prefix(r#""ab\"#, 0),
            Some(("ab".into(), false))
        );
        assert_eq!(
            decode_string_prefix(r#""ab\u00"#, 0),
            Some(("ab".into(), false))
        );
        assert_eq!(
            decode_string_prefix(r#""a\\"#, 0),
            Some(("a\\".into(), false))
        );
        assert_eq!(
            decode_string_prefix(r#""\ud83d"#, 0),
            Some(("".into(), false))
        );
        assert_eq!(
            decode_string_prefix(r#""\ud83d\ude00"#, 0),
            Some(("😀".into(), false))
        );
        assert_eq!(
            decode_string_prefix(r#""x\ud83d\u"#, 0),
            Some(("x".into(), false))
        );
        assert_eq!(decode_string_prefix(r#""\q"#, 0), None);
    }
}
