//! SentencePiece (llama.cpp's "SPM") merging of one escaped text fragment.
//!
//! The fragment starts as one symbol per UTF-8 character; repeatedly the
//! adjacent pair whose concatenation is a vocabulary token with the highest
//! score (ties: leftmost) merges. Symbols left without a token fall back to
//! their bytes (`<0xXX>` tokens).

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use crate::fxhash::FxMap;

#[derive(Clone, Copy)]
struct Sym {
    start: usize,
    len: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

struct Bigram {
    score: f32,
    left: usize,
    right: usize,
    size: usize,
}

impl PartialEq for Bigram {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Bigram {}
impl PartialOrd for Bigram {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Bigram {
    /// Higher score first; on equal scores the leftmost pair first.
    fn cmp(&self, o: &Self) -> Ordering {
        self.score
            .partial_cmp(&o.score)
            .unwrap_or(Ordering::Equal)
            .then_with(|| o.left.cmp(&self.left))
    }
}

/// Tokenizes `text` (spaces already escaped as ▁) into `out`.
/// `byte_token(b)` gives the fallback token of a byte, if any.
pub(crate) fn tokenize(
    text: &str,
    token_to_id: &FxMap<String, u32>,
    scores: &[f32],
    byte_token: impl Fn(u8) -> Option<u32>,
    out: &mut Vec<u32>,
) {
    let mut syms: Vec<Sym> = Vec::with_capacity(text.len());
    for (i, (start, c)) in text.char_indices().enumerate() {
        syms.push(Sym {
            start,
            len: c.len_utf8(),
            prev: i.checked_sub(1),
            next: None,
        });
        if i > 0 {
            syms[i - 1].next = Some(i);
        }
    }
    let mut heap = BinaryHeap::new();
    let push = |heap: &mut BinaryHeap<Bigram>, syms: &[Sym], l: Option<usize>, r: Option<usize>| {
        let (Some(l), Some(r)) = (l, r) else { return };
        let (a, b) = (&syms[l], &syms[r]);
        let piece = &text[a.start..b.start + b.len];
        if let Some(&id) = token_to_id.get(piece) {
            heap.push(Bigram {
                score: scores.get(id as usize).copied().unwrap_or(0.0),
                left: l,
                right: r,
                size: piece.len(),
            });
        }
    };
    for i in 1..syms.len() {
        push(&mut heap, &syms, Some(i - 1), Some(i));
    }
    while let Some(bg) = heap.pop() {
        let (l, r) = (bg.left, bg.right);
        if syms[l].len == 0 || syms[r].len == 0 || syms[l].len + syms[r].len != bg.size {
            continue;
        }
        syms[l].len += syms[r].len;
        syms[r].len = 0;
        let after = syms[r].next;
        syms[l].next = after;
        if let Some(a) = after {
            syms[a].prev = Some(l);
        }
        push(&mut heap, &syms, syms[l].prev, Some(l));
        push(&mut heap, &syms, Some(l), after);
    }
    let mut i = if syms.is_empty() { None } else { Some(0) };
    while let Some(k) = i {
        let s = syms[k];
        let piece = &text[s.start..s.start + s.len];
        match token_to_id.get(piece) {
            Some(&id) => out.push(id),
            None => out.extend(piece.bytes().filter_map(&byte_token)),
        }
        i = s.next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_by_score_and_falls_back_to_bytes() {
        let toks = ["▁a", "ab", "▁ab", "b", "<0xC3>", "<0xA9>"];
        let scores = [-1.0, -2.0, -0.5, -3.0, 0.0, 0.0];
        let map: FxMap<String, u32> = toks
            .iter()
            .enumerate()
            .map(|(i, t)| (t.to_string(), i as u32))
            .collect();
        let byte = |b: u8| map.get(&format!("<0x{b:02X}>")).copied();
        let mut out = Vec::new();
        tokenize("▁abé", &map, &scores, byte, &mut out);
        // ▁a (-1.0) beats ab (-2.0); then ▁ab (-0.5); é has no token -> 2 bytes.
        assert_eq!(out, vec![2, 4, 5]);
    }
}
