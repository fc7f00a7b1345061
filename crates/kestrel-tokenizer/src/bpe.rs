//! Byte-level BPE merging of one pre-tokenized word.
//!
//! Merge ranks come from `tokenizer.ggml.merges` ("left right", lower line =
//! higher priority). A word starts as one symbol per byte (each byte spelled
//! as its stand-in character) and the adjacent pair with the best rank (ties:
//! leftmost) merges until no ranked pair remains; the resulting symbols are
//! then looked up in the vocabulary.
//!
//! Every string that takes part in a merge (either side, or the result) is
//! interned once at load as a "part", and merges are keyed by part ids, so
//! merging looks up no strings. A word of n bytes takes the symbol slots
//! (4 bytes a byte, see `symbols`), each symbol's part id (4 bytes a byte)
//! and the merge queue (about 10 bytes a byte): about 18 bytes an input byte,
//! in buffers reused from word to word.

use crate::fxhash::{map_with_capacity, FxMap};
use crate::symbols::{clear_for, queue_capacity, release_if_large, Idx, Links, Queue};
use crate::unicode::byte_chars;

/// "No part" / "no token".
pub(crate) const NONE: u32 = u32::MAX;

/// A merge: its rank (line) and the part id of its result.
#[derive(Clone, Copy, Debug)]
struct Merge {
    rank: u32,
    result: u32,
}

/// What merging needs to know of one byte's stand-in character.
#[derive(Clone, Copy, Debug)]
struct ByteInfo {
    /// Its part id (or NONE).
    part: u32,
    /// Its token (or NONE).
    token: u32,
    /// Whether it is ASCII (the only ones llama.cpp's fallback looks up).
    ascii: bool,
}

/// Merge ranks keyed by interned parts, and the tokens of parts and bytes.
#[derive(Debug)]
pub(crate) struct Ranks {
    parts: FxMap<String, u32>,
    merges: FxMap<(u32, u32), Merge>,
    bytes: Box<[ByteInfo; 256]>,
    /// Token of each part (or NONE).
    part_token: Vec<u32>,
}

impl Ranks {
    /// Builds ranks from merge lines; `token(text)` is the vocabulary. A line
    /// splits at its first space after the first byte; a line without one
    /// stands for the pair ("", "") as in llama.cpp. Repeated pairs keep
    /// their first rank.
    pub fn new(merges: &[String], token: impl Fn(&str) -> Option<u32>) -> Ranks {
        let mut parts = map_with_capacity(merges.len() * 2);
        let mut ranks: FxMap<(u32, u32), Merge> = map_with_capacity(merges.len());
        let mut joined = String::new();
        for (i, line) in merges.iter().enumerate() {
            let (left, right) = match line.as_bytes().iter().skip(1).position(|&b| b == b' ') {
                Some(p) => (&line[..p + 1], &line[p + 2..]),
                None => ("", ""),
            };
            let l = intern(&mut parts, left);
            let r = intern(&mut parts, right);
            if let std::collections::hash_map::Entry::Vacant(e) = ranks.entry((l, r)) {
                joined.clear();
                joined.push_str(left);
                joined.push_str(right);
                e.insert(Merge {
                    rank: i as u32,
                    result: intern(&mut parts, &joined),
                });
            }
        }
        let mut part_token = vec![NONE; parts.len()];
        for (s, &id) in &parts {
            part_token[id as usize] = token(s).unwrap_or(NONE);
        }
        let chars = byte_chars();
        let mut buf = [0u8; 4];
        let bytes = Box::new(chars.map(|c| {
            let s = c.encode_utf8(&mut buf);
            ByteInfo {
                part: parts.get(&*s).copied().unwrap_or(NONE),
                token: token(s).unwrap_or(NONE),
                ascii: c.is_ascii(),
            }
        }));
        Ranks {
            parts,
            merges: ranks,
            bytes,
            part_token,
        }
    }

    fn merge_of(&self, left: u32, right: u32) -> Option<Merge> {
        if left == NONE || right == NONE {
            return None;
        }
        self.merges.get(&(left, right)).copied()
    }

    #[cfg(test)]
    fn rank(&self, left: &str, right: &str) -> Option<u32> {
        let l = *self.parts.get(left)?;
        let r = *self.parts.get(right)?;
        self.merge_of(l, r).map(|m| m.rank)
    }

    pub fn len(&self) -> usize {
        self.merges.len()
    }

    /// The bytes whose stand-in character is no token (alone, such a byte
    /// gives no token: llama.cpp drops it), or None when some merge that
    /// can apply gives no token (then whole symbols can vanish). With
    /// `Some`, every other byte of a word ends up in some token.
    pub fn silent_bytes(&self) -> Option<[bool; 256]> {
        let empty = self.parts.get("").copied().unwrap_or(NONE);
        let merges_give_tokens = self.merges.iter().all(|(&(l, r), m)| {
            l == empty || r == empty || self.part_token[m.result as usize] != NONE
        });
        merges_give_tokens.then(|| std::array::from_fn(|b| self.bytes[b].token == NONE))
    }
}

fn intern(parts: &mut FxMap<String, u32>, s: &str) -> u32 {
    if let Some(&i) = parts.get(s) {
        return i;
    }
    let i = parts.len() as u32;
    parts.insert(s.to_owned(), i);
    i
}

/// Buffers reused from word to word.
pub(crate) struct Scratch<I: Idx> {
    links: Links<I>,
    part: Vec<u32>,
    queue: Vec<I::Key>,
}

impl<I: Idx> Default for Scratch<I> {
    fn default() -> Self {
        Scratch {
            links: Links::default(),
            part: Vec::new(),
            queue: Vec::new(),
        }
    }
}

/// Merges `word` (raw bytes, shorter than `I::MAX_UNITS`) and calls
/// `emit(start, len, part)` for each final symbol, in order.
pub(crate) fn merge<I: Idx>(
    word: &[u8],
    ranks: &Ranks,
    sc: &mut Scratch<I>,
    mut emit: impl FnMut(usize, usize, u32),
) {
    let n = word.len();
    let Scratch { links, part, queue } = sc;
    links.reset_units(n);
    clear_for(part, n);
    part.extend(word.iter().map(|&b| ranks.bytes[b as usize].part));
    let mut entries = std::mem::take(queue);
    clear_for(&mut entries, queue_capacity(n.saturating_sub(1)));
    // Priority !rank: the max-heap pops the best (lowest) rank first.
    for i in 1..n {
        if let Some(m) = ranks.merge_of(part[i - 1], part[i]) {
            entries.push(I::key(!m.rank, i - 1));
        }
    }
    let mut q = Queue::<I>::new(entries);
    // A queued (rank, left) still stands when `left` starts a symbol whose
    // pair with the next one has that rank: ranks name one pair of strings,
    // so that is the very pair queued (symbols only grow).
    let current = |links: &Links<I>, part: &[u32], l: usize| -> Option<Merge> {
        if !links.is_start(l) {
            return None;
        }
        ranks.merge_of(part[l], part[links.next(l)?])
    };
    while let Some((hi, l)) = q.pop() {
        let Some(m) = current(links, part, l).filter(|m| !m.rank == hi) else {
            continue;
        };
        links.merge(l);
        part[l] = m.result;
        let live = |h: u32, p: usize| current(links, part, p).is_some_and(|m| !m.rank == h);
        for left in [links.prev(l), Some(l)].into_iter().flatten() {
            if let Some(m) = current(links, part, left) {
                q.push(!m.rank, left, live);
            }
        }
    }
    *queue = q.into_vec();
    for (s, len) in links.symbols() {
        emit(s, len, part[s]);
    }
    links.release_if_large();
    part.clear();
    release_if_large(part);
}

/// Appends the tokens of `word` (raw bytes, shorter than `I::MAX_UNITS`).
/// A symbol that is no token falls back, as in llama.cpp, to its bytes
/// looked up one by one, which only ASCII stand-ins can match.
pub(crate) fn encode_word<I: Idx>(
    word: &[u8],
    ranks: &Ranks,
    sc: &mut Scratch<I>,
    out: &mut Vec<u32>,
) {
    merge(word, ranks, sc, |s, len, part| {
        let id = match part {
            NONE if len == 1 => ranks.bytes[word[s] as usize].token,
            NONE => NONE,
            p => ranks.part_token[p as usize],
        };
        if id != NONE {
            out.push(id);
            return;
        }
        for &b in &word[s..s + len] {
            let info = ranks.bytes[b as usize];
            if info.ascii && info.token != NONE {
                out.push(info.token);
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_tokens(_: &str) -> Option<u32> {
        None
    }

    /// The final symbols of `word` as strings.
    fn split(word: &str, ranks: &Ranks) -> Vec<String> {
        let mut got = Vec::new();
        let mut sc = Scratch::<u32>::default();
        merge(word.as_bytes(), ranks, &mut sc, |s, len, _| {
            got.push(word[s..s + len].to_owned())
        });
        got
    }

    #[test]
    fn merges_by_rank() {
        let ranks = Ranks::new(&["b c".into(), "a b".into(), "a bc".into()], no_tokens);
        // "b c" (rank 0) first, then "a bc" (rank 2); "a b" never applies.
        assert_eq!(split("abc", &ranks), ["abc"]);
        assert_eq!(split("abab", &ranks), ["ab", "ab"]);
        assert!(split("", &ranks).is_empty());
    }

    #[test]
    fn first_rank_wins_for_repeated_pairs() {
        let ranks = Ranks::new(&["x y".into(), "p q".into(), "x y".into()], no_tokens);
        assert_eq!(ranks.rank("x", "y"), Some(0));
        assert_eq!(ranks.rank("p", "q"), Some(1));
        assert_eq!(ranks.len(), 2);
    }

    use crate::test_rng::Rng;

    /// Obviously right and slow: merge the best-ranked pair (leftmost on
    /// ties) until none is left. Works on stand-in strings.
    fn reference(word: &[u8], lines: &[String]) -> Vec<String> {
        let chars = byte_chars();
        let rank = |l: &str, r: &str| {
            lines.iter().position(|line| {
                let (a, b) = match line.as_bytes().iter().skip(1).position(|&b| b == b' ') {
                    Some(p) => (&line[..p + 1], &line[p + 2..]),
                    None => ("", ""),
                };
                a == l && b == r
            })
        };
        let mut syms: Vec<String> = word.iter().map(|&b| chars[b as usize].into()).collect();
        loop {
            let best = (1..syms.len())
                .filter_map(|i| rank(&syms[i - 1], &syms[i]).map(|r| (r, i)))
                .min();
            let Some((_, i)) = best else { return syms };
            let right = syms.remove(i);
            syms[i - 1].push_str(&right);
        }
    }

    #[test]
    fn matches_the_reference_on_random_words() {
        let chars = byte_chars();
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        for round in 0..400 {
            // Bytes over a small alphabet (a space has a non-ASCII stand-in).
            let alphabet: &[u8] = [&b"ab"[..], b"abc", b"ab ", b"a"][round % 4];
            let word: Vec<u8> = (0..1 + rng.below(60))
                .map(|_| alphabet[rng.below(alphabet.len())])
                .collect();
            // Random merges between random strings over the alphabet, some
            // repeated, some never formable.
            let piece = |rng: &mut Rng| -> String {
                (0..1 + rng.below(3))
                    .map(|_| chars[alphabet[rng.below(alphabet.len())] as usize])
                    .collect()
            };
            let lines: Vec<String> = (0..rng.below(30))
                .map(|_| format!("{} {}", piece(&mut rng), piece(&mut rng)))
                .collect();
            let ranks = Ranks::new(&lines, no_tokens);
            let mut sc = Scratch::<u32>::default();
            let mut got = Vec::new();
            merge(&word, &ranks, &mut sc, |s, len, _| {
                got.push(
                    word[s..s + len]
                        .iter()
                        .map(|&b| chars[b as usize])
                        .collect::<String>(),
                )
            });
            assert_eq!(
                got,
                reference(&word, &lines),
                "word {word:?} merges {lines:?}"
            );
            // The wide slots give the same.
            let mut wide = Vec::new();
            merge(
                &word,
                &ranks,
                &mut Scratch::<u64>::default(),
                |s, len, _| wide.push((s, len)),
            );
            let narrow: Vec<usize> = got.iter().map(|s| s.chars().count()).collect();
            assert_eq!(wide.iter().map(|w| w.1).collect::<Vec<_>>(), narrow);
        }
    }

    #[test]
    fn falls_back_to_ascii_bytes_for_symbols_without_a_token() {
        // "a b" gives "ab", which is no token; "é" (two bytes, non-ASCII
        // stand-ins) has no token either.
        let vocab = ["a", "b"];
        let ranks = Ranks::new(&["a b".into()], |s| {
            vocab.iter().position(|v| *v == s).map(|i| i as u32)
        });
        let mut out = Vec::new();
        encode_word(
            "abé".as_bytes(),
            &ranks,
            &mut Scratch::<u32>::default(),
            &mut out,
        );
        assert_eq!(out, [0, 1]);
        // A merge that gives no token: no bound on what survives.
        assert!(ranks.silent_bytes().is_none());
        // With "ab" a token, only the bytes without one are silent.
        let vocab = ["a", "b", "ab"];
        let ranks = Ranks::new(&["a b".into()], |s| {
            vocab.iter().position(|v| *v == s).map(|i| i as u32)
        });
        let silent = ranks.silent_bytes().expect("\"a b\" gives a token");
        assert!(silent["é".as_bytes()[0] as usize] && !silent[b'a' as usize]);
    }
}
