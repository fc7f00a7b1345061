//! SentencePiece (llama.cpp's "SPM") merging of one text fragment.
//!
//! The fragment, spaces escaped as ▁ and optionally led by one more ▁,
//! starts as one symbol per character; repeatedly the adjacent pair whose
//! concatenation is a vocabulary token with the highest score (ties:
//! leftmost) merges. Symbols left without a token fall back to their bytes
//! (`<0xXX>` tokens).
//!
//! The escaped text is never built: symbols are kept over the fragment's
//! bytes (the prefix is one more unit in front, see `symbols`) and a piece is
//! escaped into a small buffer only when it holds a space or the prefix. Per
//! unit: the symbol slot (4 bytes), the score key of the pair it starts
//! (4 bytes), and about 10 bytes a character for the merge queue: at most
//! about 18 bytes an input byte.

use crate::fxhash::FxMap;
use crate::symbols::{clear_for, queue_capacity, refill, release_if_large, Idx, Links, Queue};

/// Score key of "no pair".
const NO_PAIR: u32 = 0;

/// A score as a key that orders like the score: higher score, higher key.
/// -0.0 counts as 0.0 (they compare equal); NaN (no real vocabulary has one)
/// ranks below every score. Never `NO_PAIR`.
fn score_key(s: f32) -> u32 {
    if s.is_nan() {
        return 1;
    }
    let b = if s == 0.0 { 0 } else { s.to_bits() };
    if b >> 31 == 1 {
        !b // negative: larger magnitude, smaller key; -inf is 0x007F_FFFF
    } else {
        b | 0x8000_0000
    }
}

/// Buffers reused from fragment to fragment.
pub(crate) struct Scratch<I: Idx> {
    links: Links<I>,
    /// Score key of the pair each live symbol starts (or `NO_PAIR`).
    pair: Vec<u32>,
    queue: Vec<I::Key>,
    piece: String,
}

impl<I: Idx> Default for Scratch<I> {
    fn default() -> Self {
        Scratch {
            links: Links::default(),
            pair: Vec::new(),
            queue: Vec::new(),
            piece: String::new(),
        }
    }
}

/// The escaped text of units `a..b`: `p` (0 or 1) prefix units, then the
/// bytes of `text`. Borrowed from `text` when nothing needs escaping.
fn piece<'a>(text: &'a str, p: usize, a: usize, b: usize, buf: &'a mut String) -> &'a str {
    let raw = &text[a.max(p) - p..b - p];
    if a >= p && !raw.contains(' ') {
        return raw;
    }
    buf.clear();
    if a < p {
        buf.push('▁');
    }
    for c in raw.chars() {
        buf.push(if c == ' ' { '▁' } else { c });
    }
    buf
}

/// Tokenizes `text` (spaces not yet escaped; `prefix`: lead with one ▁) into
/// `out`. `byte_token(b)` gives the fallback token of a byte, if any.
/// `text.len() + 1` must be under `I::MAX_UNITS`.
pub(crate) fn tokenize<I: Idx>(
    text: &str,
    prefix: bool,
    token_to_id: &FxMap<String, u32>,
    scores: &[f32],
    byte_token: impl Fn(u8) -> Option<u32>,
    sc: &mut Scratch<I>,
    out: &mut Vec<u32>,
) {
    let p = usize::from(prefix);
    let n = p + text.len();
    let Scratch {
        links,
        pair,
        queue,
        piece: buf,
    } = sc;
    let chars = (0..p)
        .map(|_| (0, 1))
        .chain(text.char_indices().map(|(i, c)| (p + i, c.len_utf8())));
    links.reset(n, chars.clone());
    // The score key of the pair of symbols `a..m` and `m..b`.
    let pair_key = |buf: &mut String, a: usize, b: usize| -> u32 {
        match token_to_id.get(piece(text, p, a, b, buf)) {
            Some(&id) => score_key(scores.get(id as usize).copied().unwrap_or(0.0)),
            None => NO_PAIR,
        }
    };
    refill(pair, n, NO_PAIR);
    let mut entries = std::mem::take(queue);
    clear_for(
        &mut entries,
        queue_capacity(chars.clone().count().saturating_sub(1)),
    );
    let mut prev: Option<usize> = None;
    for (s, len) in chars {
        if let Some(l) = prev {
            let k = pair_key(buf, l, s + len);
            pair[l] = k;
            if k != NO_PAIR {
                entries.push(I::key(k, l));
            }
        }
        prev = Some(s);
    }
    let mut q = Queue::<I>::new(entries);
    // A queued (score, left) still stands when `left` starts a symbol whose
    // pair with the next one has that score. If that pair is not the one
    // queued, then the current pair was queued under the same key too and
    // has not popped yet: merging now is what popping it would do.
    while let Some((k, l)) = q.pop() {
        if !links.is_start(l) || pair[l] != k {
            continue;
        }
        let r = l + links.len_at(l);
        links.merge(l);
        pair[r] = NO_PAIR;
        for left in [links.prev(l), Some(l)].into_iter().flatten() {
            let k = match links.next(left) {
                Some(m) => pair_key(buf, left, m + links.len_at(m)),
                None => NO_PAIR,
            };
            pair[left] = k;
            if k != NO_PAIR {
                let live = |k: u32, s: usize| links.is_start(s) && pair[s] == k;
                q.push(k, left, live);
            }
        }
    }
    *queue = q.into_vec();
    pair.clear();
    release_if_large(pair);
    for (s, len) in links.symbols() {
        let piece = piece(text, p, s, s + len, buf);
        match token_to_id.get(piece) {
            Some(&id) => out.push(id),
            None => out.extend(piece.bytes().filter_map(&byte_token)),
        }
    }
    links.release_if_large();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vocab(toks: &[&str]) -> FxMap<String, u32> {
        toks.iter()
            .enumerate()
            .map(|(i, t)| (t.to_string(), i as u32))
            .collect()
    }

    #[test]
    fn merges_by_score_and_falls_back_to_bytes() {
        let toks = ["▁a", "ab", "▁ab", "b", "<0xC3>", "<0xA9>"];
        let scores = [-1.0, -2.0, -0.5, -3.0, 0.0, 0.0];
        let map = vocab(&toks);
        let byte = |b: u8| map.get(&format!("<0x{b:02X}>")).copied();
        let mut out = Vec::new();
        let mut sc = Scratch::<u32>::default();
        tokenize("abé", true, &map, &scores, byte, &mut sc, &mut out);
        // ▁a (-1.0) beats ab (-2.0); then ▁ab (-0.5); é has no token -> 2 bytes.
        assert_eq!(out, vec![2, 4, 5]);
    }

    #[test]
    fn score_keys_order_like_scores() {
        let s = [
            f32::NEG_INFINITY,
            -1e30,
            -2.5,
            -1.0,
            -f32::MIN_POSITIVE,
            0.0,
            f32::MIN_POSITIVE,
            1.0,
            3e38,
            f32::INFINITY,
        ];
        for w in s.windows(2) {
            assert!(score_key(w[0]) < score_key(w[1]), "{w:?}");
        }
        assert_eq!(score_key(-0.0), score_key(0.0));
        assert!(score_key(f32::NAN) < score_key(f32::NEG_INFINITY));
        assert!(s.iter().all(|&x| score_key(x) != NO_PAIR));
    }

    use crate::test_rng::Rng;

    /// Obviously right and slow: merge the highest-scoring pair that is a
    /// token (leftmost on ties) until none is left.
    fn reference(
        text: &str,
        prefix: bool,
        map: &FxMap<String, u32>,
        scores: &[f32],
        byte: impl Fn(u8) -> Option<u32>,
    ) -> Vec<u32> {
        let escaped = format!(
            "{}{}",
            if prefix { "▁" } else { "" },
            text.replace(' ', "▁")
        );
        let mut syms: Vec<String> = escaped.chars().map(String::from).collect();
        loop {
            let mut best: Option<(f32, usize)> = None;
            for i in 1..syms.len() {
                let joined = format!("{}{}", syms[i - 1], syms[i]);
                if let Some(&id) = map.get(&joined) {
                    let s = scores[id as usize];
                    if best.is_none_or(|(b, _)| s > b) {
                        best = Some((s, i));
                    }
                }
            }
            let Some((_, i)) = best else { break };
            let right = syms.remove(i);
            syms[i - 1].push_str(&right);
        }
        let mut out = Vec::new();
        for s in &syms {
            match map.get(s) {
                Some(&id) => out.push(id),
                None => out.extend(s.bytes().filter_map(&byte)),
            }
        }
        out
    }

    #[test]
    fn matches_the_reference_on_random_texts() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let alphabet = ['a', 'b', ' ', 'é', '▁'];
        // Few distinct scores, so that ties (-0.0 and 0.0 among them) abound.
        let score_set = [-3.0, -1.0, -0.0, 0.0, -2.0, 1.5];
        for round in 0..400 {
            let k = 2 + round % 4;
            let mut toks: Vec<String> = (0..rng.below(40))
                .map(|_| {
                    (0..1 + rng.below(4))
                        .map(|_| match alphabet[rng.below(k)] {
                            ' ' => '▁',
                            c => c,
                        })
                        .collect()
                })
                .collect();
            toks.extend(["<0x61>", "<0xC3>", "<0xE2>", "<0x96>", "<0x81>"].map(String::from));
            let map: FxMap<String, u32> = toks
                .iter()
                .enumerate()
                .map(|(i, t)| (t.clone(), i as u32))
                .collect();
            let scores: Vec<f32> = (0..toks.len())
                .map(|_| score_set[rng.below(score_set.len())])
                .collect();
            let byte = |b: u8| map.get(&format!("<0x{b:02X}>")).copied();
            let text: String = (0..rng.below(50)).map(|_| alphabet[rng.below(k)]).collect();
            let prefix = round % 3 != 0;
            let want = reference(&text, prefix, &map, &scores, byte);
            let mut got = Vec::new();
            let mut sc = Scratch::<u32>::default();
            tokenize(&text, prefix, &map, &scores, byte, &mut sc, &mut got);
            assert_eq!(
                got, want,
                "text {text:?} prefix {prefix} vocab {toks:?} {scores:?}"
            );
            let mut wide = Vec::new();
            let mut sc = Scratch::<u64>::default();
            tokenize(&text, prefix, &map, &scores, byte, &mut sc, &mut wide);
            assert_eq!(wide, want);
        }
    }
}
