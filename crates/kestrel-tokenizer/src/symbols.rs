//! The symbols of a word while adjacent pairs merge (BPE and SentencePiece
//! alike), and the queue of candidate merges.
//!
//! Positions are units: an input byte, plus SentencePiece's space prefix as
//! one more unit in front. Merged symbols stay contiguous, so one slot per
//! unit describes them all: a symbol's first slot holds its length; every
//! other slot has the top bit set, and its last slot holds its start there.
//! The next symbol starts at start + length, the previous one's start is read
//! from the slot just before. With `u32` slots that is 4 bytes a unit, for
//! words under 2 GiB; longer ones use `u64`.
//!
//! The queue is a binary max-heap of packed keys: the merge's priority in the
//! high half, the left symbol's start inverted in the low half (so equal
//! priorities pop leftmost first). Merging leaves entries stale; they are
//! skipped when popped, and dropped all at once when the heap is full
//! instead of letting it grow, so it holds about the live pairs plus a
//! quarter: about 10 bytes a unit with `u32` slots.

use std::collections::BinaryHeap;
use std::fmt::Debug;

/// The slot type: `u32` (words under 2 GiB) or `u64`.
pub(crate) trait Idx: Copy + Eq + Debug {
    /// Set on every slot but a symbol's first.
    const TAG: Self;
    /// Words must be shorter than this.
    const MAX_UNITS: usize;
    /// A queue entry: priority, then inverted position.
    type Key: Copy + Ord + Debug;
    fn of(v: usize) -> Self;
    /// The value without the tag bit.
    fn get(self) -> usize;
    fn tagged(self) -> bool;
    fn with_tag(v: usize) -> Self;
    fn key(hi: u32, pos: usize) -> Self::Key;
    fn key_hi(k: Self::Key) -> u32;
    fn key_pos(k: Self::Key) -> usize;
}

impl Idx for u32 {
    const TAG: u32 = 1 << 31;
    const MAX_UNITS: usize = 1 << 31;
    type Key = u64;
    fn of(v: usize) -> u32 {
        v as u32
    }
    fn get(self) -> usize {
        (self & !Self::TAG) as usize
    }
    fn tagged(self) -> bool {
        self & Self::TAG != 0
    }
    fn with_tag(v: usize) -> u32 {
        v as u32 | Self::TAG
    }
    fn key(hi: u32, pos: usize) -> u64 {
        (u64::from(hi) << 32) | u64::from(!(pos as u32))
    }
    fn key_hi(k: u64) -> u32 {
        (k >> 32) as u32
    }
    fn key_pos(k: u64) -> usize {
        !(k as u32) as usize
    }
}

impl Idx for u64 {
    const TAG: u64 = 1 << 63;
    const MAX_UNITS: usize = if (usize::MAX as u64) < (1 << 63) {
        usize::MAX
    } else {
        (1u64 << 63) as usize
    };
    type Key = u128;
    fn of(v: usize) -> u64 {
        v as u64
    }
    fn get(self) -> usize {
        (self & !Self::TAG) as usize
    }
    fn tagged(self) -> bool {
        self & Self::TAG != 0
    }
    fn with_tag(v: usize) -> u64 {
        v as u64 | Self::TAG
    }
    fn key(hi: u32, pos: usize) -> u128 {
        (u128::from(hi) << 64) | u128::from(!(pos as u64))
    }
    fn key_hi(k: u128) -> u32 {
        (k >> 64) as u32
    }
    fn key_pos(k: u128) -> usize {
        !(k as u64) as usize
    }
}

/// Empties `v` and makes room for exactly `n` items if it has less; the old
/// buffer is freed first, so the two are never live together.
pub(crate) fn clear_for<T>(v: &mut Vec<T>, n: usize) {
    v.clear();
    if v.capacity() < n {
        *v = Vec::new();
        v.reserve_exact(n);
    }
}

/// Frees the buffer of `v` (which must be empty) when it is large: a long
/// word's buffers are not kept around for the short ones that follow.
pub(crate) fn release_if_large<T>(v: &mut Vec<T>) {
    if v.capacity() * std::mem::size_of::<T>() > 1 << 20 {
        *v = Vec::new();
    }
}

/// Clears `v` and fills it with `n` copies of `x` (see [`clear_for`]).
pub(crate) fn refill<T: Clone>(v: &mut Vec<T>, n: usize, x: T) {
    clear_for(v, n);
    v.resize(n, x);
}

/// The symbols of one word, one slot per unit (see the module docs).
#[derive(Debug)]
pub(crate) struct Links<I> {
    slots: Vec<I>,
}

impl<I: Idx> Default for Links<I> {
    fn default() -> Self {
        Links { slots: Vec::new() }
    }
}

impl<I: Idx> Links<I> {
    /// `n` units, each its own symbol.
    pub fn reset_units(&mut self, n: usize) {
        refill(&mut self.slots, n, I::of(1));
    }

    /// `n` units, symbols as `(start, len)` in order, covering all of them.
    pub fn reset(&mut self, n: usize, symbols: impl Iterator<Item = (usize, usize)>) {
        refill(&mut self.slots, n, I::with_tag(0));
        for (s, len) in symbols {
            self.slots[s] = I::of(len);
            if len > 1 {
                self.slots[s + len - 1] = I::with_tag(s);
            }
        }
    }

    pub fn is_start(&self, s: usize) -> bool {
        self.slots.get(s).is_some_and(|x| !x.tagged())
    }

    /// Length of the symbol starting at `s` (a start).
    pub fn len_at(&self, s: usize) -> usize {
        self.slots[s].get()
    }

    /// Start of the symbol after the one at `s`.
    pub fn next(&self, s: usize) -> Option<usize> {
        let e = s + self.len_at(s);
        (e < self.slots.len()).then_some(e)
    }

    /// Start of the symbol before the one at `s`.
    pub fn prev(&self, s: usize) -> Option<usize> {
        let x = *self.slots.get(s.checked_sub(1)?)?;
        Some(if x.tagged() { x.get() } else { s - 1 })
    }

    /// Merges the symbol at `l` with the next one, which must exist.
    pub fn merge(&mut self, l: usize) {
        let r = l + self.len_at(l);
        let rlen = self.len_at(r);
        self.slots[l] = I::of(r + rlen - l);
        self.slots[r] = I::with_tag(l);
        self.slots[r + rlen - 1] = I::with_tag(l);
    }

    /// Frees a large buffer (see [`release_if_large`]).
    pub fn release_if_large(&mut self) {
        self.slots.clear();
        release_if_large(&mut self.slots);
    }

    /// The symbols as `(start, len)`, in order.
    pub fn symbols(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        let mut s = 0;
        std::iter::from_fn(move || {
            let len = self.slots.get(s)?.get();
            let at = s;
            s += len.max(1);
            Some((at, len))
        })
    }
}

/// Room for `pairs` initial entries and some stale ones.
pub(crate) fn queue_capacity(pairs: usize) -> usize {
    // Tests run with no slack so that purging happens all the time.
    if cfg!(test) {
        pairs
    } else {
        pairs + pairs / 4 + 16
    }
}

/// Candidate merges, best first (see the module docs).
pub(crate) struct Queue<I: Idx> {
    heap: BinaryHeap<I::Key>,
}

impl<I: Idx> Queue<I> {
    /// A queue of `entries` (keys from [`Idx::key`]); its capacity is kept.
    pub fn new(entries: Vec<I::Key>) -> Self {
        Queue {
            heap: BinaryHeap::from(entries),
        }
    }

    /// The emptied buffer back, for the next word; a large one is freed
    /// instead, before the word's tokens go out (which may grow the ids).
    pub fn into_vec(self) -> Vec<I::Key> {
        let mut v = self.heap.into_vec();
        v.clear();
        release_if_large(&mut v);
        v
    }

    /// The best entry as (priority, position).
    pub fn pop(&mut self) -> Option<(u32, usize)> {
        self.heap.pop().map(|k| (I::key_hi(k), I::key_pos(k)))
    }

    /// Queues (priority, position). A full heap first drops the entries for
    /// which `live(priority, position)` is false, and grows only when that
    /// frees less than a quarter of it.
    pub fn push(&mut self, hi: u32, pos: usize, mut live: impl FnMut(u32, usize) -> bool) {
        if self.heap.len() == self.heap.capacity() {
            self.heap.retain(|&k| live(I::key_hi(k), I::key_pos(k)));
            let cap = self.heap.capacity();
            if self.heap.len() >= cap - cap / 4 {
                self.heap.reserve_exact(cap / 2 + 1);
            }
        }
        self.heap.push(I::key(hi, pos));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_merge_and_walk() {
        let mut l = Links::<u32>::default();
        l.reset_units(5);
        l.merge(1); // [0] [1 2] [3] [4]
        l.merge(3); // [0] [1 2] [3 4]
        assert_eq!(l.symbols().collect::<Vec<_>>(), [(0, 1), (1, 2), (3, 2)]);
        assert_eq!((l.prev(3), l.prev(1), l.prev(0)), (Some(1), Some(0), None));
        assert_eq!((l.next(1), l.next(3)), (Some(3), None));
        assert!(!l.is_start(2) && !l.is_start(4) && !l.is_start(9));
        l.merge(1); // [0] [1 2 3 4]
        assert_eq!(l.symbols().collect::<Vec<_>>(), [(0, 1), (1, 4)]);
        l.merge(0);
        assert_eq!(l.symbols().collect::<Vec<_>>(), [(0, 5)]);

        let mut l = Links::<u64>::default();
        l.reset(6, [(0, 1), (1, 3), (4, 2)].into_iter());
        assert_eq!(l.prev(4), Some(1));
        assert_eq!(l.prev(1), Some(0));
        l.merge(0);
        assert_eq!(l.prev(4), Some(0));
        assert_eq!(l.symbols().collect::<Vec<_>>(), [(0, 4), (4, 2)]);
    }

    #[test]
    fn keys_order_by_priority_then_leftmost() {
        let mut q = Queue::<u32>::new(Vec::new());
        for (hi, pos) in [(3, 9), (5, 2), (5, 1), (3, 0), (7, 4)] {
            q.push(hi, pos, |_, _| true);
        }
        let order: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(order, [(7, 4), (5, 1), (5, 2), (3, 0), (3, 9)]);
        assert_eq!(<u64 as Idx>::key_pos(<u64 as Idx>::key(1, 77)), 77);
    }
}
