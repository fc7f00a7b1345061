//! StopMatcher: stops split across pieces, held partial matches, multibyte text, overlapping
//! stop strings, and — for every way of cutting a text into up to three pieces and into single
//! characters — that the emitted text is exactly the text before the first stop and that
//! nothing emitted is ever taken back.

use kestrel_sampling::{StopMatcher, StopStep};

fn step(text: &str, stopped: bool) -> StopStep {
    StopStep {
        text: text.to_string(),
        stopped,
    }
}

#[test]
fn stop_split_across_two_pieces() {
    let mut m = StopMatcher::new(["</s>"]);
    assert_eq!(m.push("Hello </"), step("Hello ", false));
    assert_eq!(m.push("s> world"), step("", true));
    assert!(m.is_stopped());
    assert_eq!(m.matched(), Some("</s>"));
    assert_eq!(m.finish(), "");
}

#[test]
fn stop_split_across_three_pieces() {
    let mut m = StopMatcher::new(["<|end|>"]);
    assert_eq!(m.push("ok<"), step("ok", false));
    assert_eq!(m.push("|en"), step("", false));
    assert_eq!(m.held(), "<|en");
    assert_eq!(m.push("d|>tail"), step("", true));
    assert_eq!(m.finish(), "");
    // Text before the stop inside the last piece is still emitted.
    let mut m = StopMatcher::new(["STOP"]);
    assert_eq!(m.push("a S"), step("a ", false));
    assert_eq!(m.push("T"), step("", false));
    assert_eq!(m.push("OP!"), step("", true));
    let mut m = StopMatcher::new(["STOP"]);
    assert_eq!(m.push("x"), step("x", false));
    assert_eq!(m.push("yST"), step("y", false));
    assert_eq!(m.push("zSTO"), step("STz", false));
    assert_eq!(m.push("P"), step("", true));
}

#[test]
fn partial_match_held_then_flushed() {
    let mut m = StopMatcher::new(["STOP"]);
    assert_eq!(m.push("Hello ST"), step("Hello ", false));
    assert_eq!(m.held(), "ST");
    // The match fails: the held text comes out, in order, with the new piece.
    assert_eq!(m.push("ory"), step("STory", false));
    assert_eq!(m.held(), "");
    // At the end of generation held text is flushed, not lost.
    assert_eq!(m.push(" STO"), step(" ", false));
    assert_eq!(m.finish(), "STO");
    assert!(!m.is_stopped());
    assert_eq!(m.matched(), None);
}

#[test]
fn multibyte_characters() {
    let mut m = StopMatcher::new(["世界"]);
    assert_eq!(m.push("你好世"), step("你好", false));
    assert_eq!(m.push("界!"), step("", true));
    // A held multibyte prefix is released whole when the match fails.
    let mut m = StopMatcher::new(["😀x"]);
    assert_eq!(m.push("a😀"), step("a", false));
    assert_eq!(m.push("y"), step("😀y", false));
    // "è" (C3 A8) shares its first byte with "é" (C3 A9) but is not a prefix of it.
    let mut m = StopMatcher::new(["é!"]);
    assert_eq!(m.push("cè"), step("cè", false));
    assert_eq!(m.push("café"), step("caf", false));
    assert_eq!(m.push("!"), step("", true));
}

#[test]
fn overlapping_stop_strings() {
    // "ab" and "b" end together: the longer wins, so "a" is not emitted.
    let mut m = StopMatcher::new(["b", "ab"]);
    assert_eq!(m.push("xa"), step("x", false));
    assert_eq!(m.push("b"), step("", true));
    assert_eq!(m.matched(), Some("ab"));
    let mut m = StopMatcher::new(["ab", "b"]);
    assert_eq!(m.push("xb"), step("x", true));
    assert_eq!(m.matched(), Some("b"));
    // "aab" in "aaab": the first "a" can no longer start a match once a third "a" arrives.
    let mut m = StopMatcher::new(["aab"]);
    assert_eq!(m.push("a"), step("", false));
    assert_eq!(m.push("a"), step("", false));
    assert_eq!(m.push("a"), step("a", false));
    assert_eq!(m.push("b"), step("", true));
    let mut m = StopMatcher::new(["aab"]);
    assert_eq!(m.push("aaab"), step("a", true));
    // The earliest end wins even within one piece: streamed token by token, generation would
    // have stopped at "c" before "abcd" could complete.
    let mut m = StopMatcher::new(["abcd", "c"]);
    assert_eq!(m.push("abcd"), step("ab", true));
    assert_eq!(m.matched(), Some("c"));
}

#[test]
fn empty_stop_strings_are_ignored() {
    let mut m = StopMatcher::new(["", "x"]);
    assert_eq!(m.stop_strings(), ["x"]);
    assert_eq!(m.push("abc"), step("abc", false));
    assert_eq!(m.push("x"), step("", true));
    let mut m = StopMatcher::new(Vec::<String>::new());
    assert_eq!(m.push("anything"), step("anything", false));
    let mut m = StopMatcher::new([String::new()]);
    assert_eq!(m.push("anything"), step("anything", false));
    assert_eq!(m.finish(), "");
}

#[test]
fn nothing_is_emitted_after_a_stop() {
    let mut m = StopMatcher::new(["\n\n"]);
    assert_eq!(m.push("one\n\ntwo"), step("one", true));
    assert_eq!(m.push("three"), step("", true));
    assert_eq!(m.held(), "");
    assert_eq!(m.finish(), "");
}

/// The expected output by a different route from the matcher's: walk the text's char ends
/// and stop at the first end where some stop string ends (the longest of those).
fn reference(text: &str, stops: &[&str]) -> (String, bool) {
    for (at, c) in text.char_indices() {
        let end = at + c.len_utf8();
        let longest = stops
            .iter()
            .filter(|s| !s.is_empty() && text[..end].ends_with(**s))
            .map(|s| s.len())
            .max();
        if let Some(len) = longest {
            return (text[..end - len].to_string(), true);
        }
    }
    (text.to_string(), false)
}

/// Feeds `pieces`, checking after every step that the output so far is a prefix of `expected`
/// (nothing is retracted); returns the whole output and whether it stopped.
fn run(stops: &[&str], pieces: &[&str], expected: &str) -> (String, bool) {
    let mut m = StopMatcher::new(stops.iter().copied());
    let mut out = String::new();
    for piece in pieces {
        let s = m.push(piece);
        out.push_str(&s.text);
        assert!(
            expected.starts_with(&out),
            "{stops:?} {pieces:?}: emitted {out:?}, which is not a prefix of {expected:?}"
        );
        if s.stopped {
            return (out, true);
        }
    }
    out.push_str(&m.finish());
    (out, false)
}

fn boundaries(text: &str) -> Vec<usize> {
    text.char_indices()
        .map(|(i, _)| i)
        .chain([text.len()])
        .collect()
}

#[test]
fn emitted_text_is_the_text_before_the_first_stop_for_every_split() {
    let cases: &[(&str, &[&str])] = &[
        ("Hello </s> world", &["</s>"]),
        ("xab", &["ab", "b"]),
        ("xb", &["ab", "b"]),
        ("aaab", &["aab"]),
        ("abcd", &["abcd", "c"]),
        ("abababc", &["ababc"]),
        ("aXbXbYc", &["XbY", "c"]),
        ("你好世界!", &["世界"]),
        ("café!", &["é!"]),
        ("cè", &["é"]),
        ("a😀x", &["😀x"]),
        ("a😀y😀", &["😀x"]),
        ("no stop here", &["zz", "herd"]),
        ("ends with a partial ST", &["STOP"]),
        ("<|im_end|>", &["<|im_end|>"]),
        ("text", &[""]),
        ("ab", &["", "b"]),
        ("", &["a"]),
    ];
    let mut checked = 0;
    for &(text, stops) in cases {
        let (expected, stops_expected) = reference(text, stops);
        let b = boundaries(text);
        // One, two and three pieces, empty pieces included.
        for (i, &x) in b.iter().enumerate() {
            for &y in &b[i..] {
                let pieces = [&text[..x], &text[x..y], &text[y..]];
                let got = run(stops, &pieces, &expected);
                assert_eq!(
                    got,
                    (expected.clone(), stops_expected),
                    "{stops:?} {pieces:?}"
                );
                checked += 1;
            }
        }
        // Character by character, as single-character tokens would arrive.
        let chars: Vec<String> = text.chars().map(String::from).collect();
        let pieces: Vec<&str> = chars.iter().map(String::as_str).collect();
        let got = run(stops, &pieces, &expected);
        assert_eq!(
            got,
            (expected.clone(), stops_expected),
            "{stops:?} per char"
        );
    }
    assert!(checked > 500, "{checked}");
    // The reference itself, on cases worked by hand.
    assert_eq!(reference("aaab", &["aab"]), ("a".to_string(), true));
    assert_eq!(reference("abcd", &["abcd", "c"]), ("ab".to_string(), true));
    assert_eq!(reference("xab", &["b", "ab"]), ("x".to_string(), true));
    assert_eq!(reference("abc", &["zz"]), ("abc".to_string(), false));
}
