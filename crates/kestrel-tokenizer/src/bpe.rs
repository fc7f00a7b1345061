//! Byte-level BPE merging of one pre-tokenized word.
//!
//! Merge ranks come from `tokenizer.ggml.merges` ("left right", lower line =
//! higher priority). A word starts as one symbol per character and the
//! adjacent pair with the best rank (ties: leftmost) merges until no ranked
//! pair remains; the resulting symbols are then looked up in the vocabulary.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::fxhash::{map_with_capacity, FxMap};

/// Merge ranks keyed by interned left/right parts.
#[derive(Debug, Default)]
pub(crate) struct Ranks {
    parts: FxMap<String, u32>,
    ranks: FxMap<(u32, u32), u32>,
}

impl Ranks {
    /// Builds ranks from merge lines. A line splits at its first space
    /// after the first byte; a line without one stands for the pair
    /// ("", "") as in llama.cpp. Repeated pairs keep their first rank.
    pub fn new(merges: &[String]) -> Ranks {
        let mut r = Ranks {
            parts: map_with_capacity(merges.len()),
            ranks: map_with_capacity(merges.len()),
        };
        for (i, line) in merges.iter().enumerate() {
            let (left, right) = match line.as_bytes().iter().skip(1).position(|&b| b == b' ') {
                Some(p) => (&line[..p + 1], &line[p + 2..]),
                None => ("", ""),
            };
            let l = r.intern(left);
            let rr = r.intern(right);
            r.ranks.entry((l, rr)).or_insert(i as u32);
        }
        r
    }

    fn intern(&mut self, s: &str) -> u32 {
        if let Some(&i) = self.parts.get(s) {
            return i;
        }
        let i = self.parts.len() as u32;
        self.parts.insert(s.to_owned(), i);
        i
    }

    pub fn rank(&self, left: &str, right: &str) -> Option<u32> {
        let l = *self.parts.get(left)?;
        let r = *self.parts.get(right)?;
        self.ranks.get(&(l, r)).copied()
    }

    pub fn len(&self) -> usize {
        self.ranks.len()
    }
}

#[derive(Clone, Copy)]
struct Sym {
    start: usize,
    len: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

/// A queued merge: (rank, left, right, left len, right len); the heap pops
/// the smallest, i.e. best rank then leftmost.
type Pair = (u32, usize, usize, usize, usize);

/// Merges `word` and returns the byte ranges of the final symbols, in order.
pub(crate) fn merge(word: &str, ranks: &Ranks) -> Vec<std::ops::Range<usize>> {
    let mut syms: Vec<Sym> = Vec::with_capacity(word.len());
    for (i, (start, c)) in word.char_indices().enumerate() {
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
    let mut heap: BinaryHeap<Reverse<Pair>> = BinaryHeap::new();
    let text = |s: &Sym| &word[s.start..s.start + s.len];
    let push = |heap: &mut BinaryHeap<_>, syms: &[Sym], l: Option<usize>, r: Option<usize>| {
        if let (Some(l), Some(r)) = (l, r) {
            if let Some(rank) = ranks.rank(text(&syms[l]), text(&syms[r])) {
                heap.push(Reverse((rank, l, r, syms[l].len, syms[r].len)));
            }
        }
    };
    for i in 1..syms.len() {
        push(&mut heap, &syms, Some(i - 1), Some(i));
    }
    while let Some(Reverse((_, l, r, llen, rlen))) = heap.pop() {
        // Stale: either side merged since this pair was queued.
        if syms[l].len == 0 || syms[r].len == 0 || syms[l].len != llen || syms[r].len != rlen {
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
    syms.iter()
        .filter(|s| s.len > 0)
        .map(|s| s.start..s.start + s.len)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_by_rank() {
        let ranks = Ranks::new(&["b c".into(), "a b".into(), "a bc".into()]);
        let w = "abc";
        let got: Vec<&str> = merge(w, &ranks).into_iter().map(|r| &w[r]).collect();
        // "b c" (rank 0) first, then "a bc" (rank 2); "a b" never applies.
        assert_eq!(got, ["abc"]);
        let w = "abab";
        let got: Vec<&str> = merge(w, &ranks).into_iter().map(|r| &w[r]).collect();
        assert_eq!(got, ["ab", "ab"]);
    }

    #[test]
    fn first_rank_wins_for_repeated_pairs() {
        let ranks = Ranks::new(&["x y".into(), "p q".into(), "x y".into()]);
        assert_eq!(ranks.rank("x", "y"), Some(0));
        assert_eq!(ranks.rank("p", "q"), Some(1));
        assert_eq!(ranks.len(), 2);
    }
}
