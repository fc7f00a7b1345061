//! The memory under a sequence's KV cache: every layer's f16 keys and
//! values in one zeroed buffer, advised for transparent huge pages.
//!
//! A decode step's attention reads each layer's rows of every sequence
//! after that layer's weight products have streamed through the caches,
//! so its rows come from memory: in 4 KiB pages, a TLB miss and a stop for
//! the prefetchers every few rows (ten of SmolLM2's). In huge pages the
//! steps ran faster (SmolLM2, two threads, batchbench with a set of caches
//! in a heap buffer and a set in this mapping taking turns, contexts
//! 32-136: four sequences 2-5% a step in six runs, one sequence 1-5% in
//! three).

use std::ops::Range;

enum Backing {
    /// An anonymous mapping (page-aligned, so its bytes are u16-aligned).
    Mapped(memmap2::MmapMut),
    /// Where no mapping could be made.
    Heap(Vec<u16>),
}

pub(crate) struct KvStore {
    backing: Backing,
    /// Element range of layer l's keys, then of its values; every key
    /// range lies before every value range.
    k: Vec<Range<usize>>,
    v: Vec<Range<usize>>,
}

impl KvStore {
    /// Zeroed rows: layer l gets `rows[l] * k_width` keys and
    /// `rows[l] * v_width` values.
    pub(crate) fn new(rows: &[usize], k_width: usize, v_width: usize) -> KvStore {
        let mut at = 0;
        let mut ranges = |width: usize| -> Vec<Range<usize>> {
            rows.iter()
                .map(|&r| {
                    at += r * width;
                    at - r * width..at
                })
                .collect()
        };
        let k = ranges(k_width);
        let v = ranges(v_width);
        let len = at;
        // (At least one element: a mapping cannot be empty.)
        let backing = match memmap2::MmapMut::map_anon(2 * len.max(1)) {
            Ok(map) => {
                #[cfg(target_os = "linux")]
                {
                    // Best effort: in 4 KiB pages the rows are still right.
                    let _ = map.advise(memmap2::Advice::HugePage);
                }
                Backing::Mapped(map)
            }
            Err(_) => Backing::Heap(vec![0u16; len.max(1)]),
        };
        KvStore { backing, k, v }
    }

    fn all(&self) -> &[u16] {
        match &self.backing {
            Backing::Mapped(m) => bytemuck::cast_slice(&m[..]),
            Backing::Heap(v) => v,
        }
    }

    fn all_mut(&mut self) -> &mut [u16] {
        match &mut self.backing {
            Backing::Mapped(m) => bytemuck::cast_slice_mut(&mut m[..]),
            Backing::Heap(v) => v,
        }
    }

    pub(crate) fn k(&self, l: usize) -> &[u16] {
        &self.all()[self.k[l].clone()]
    }

    pub(crate) fn v(&self, l: usize) -> &[u16] {
        &self.all()[self.v[l].clone()]
    }

    /// Layer l's keys and values, both writable.
    pub(crate) fn kv_mut(&mut self, l: usize) -> (&mut [u16], &mut [u16]) {
        let (kr, vr) = (self.k[l].clone(), self.v[l].clone());
        let split = self.v.first().map_or(0, |r| r.start);
        let (ks, vs) = self.all_mut().split_at_mut(split);
        (&mut ks[kr], &mut vs[vr.start - split..vr.end - split])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layers_are_disjoint_zeroed_and_keep_what_is_written() {
        let rows = [5, 3, 7];
        let mut s = KvStore::new(&rows, 4, 6);
        for (l, &r) in rows.iter().enumerate() {
            let (k, v) = s.kv_mut(l);
            assert_eq!((k.len(), v.len()), (r * 4, r * 6));
            assert!(k.iter().chain(v.iter()).all(|&x| x == 0));
            k.iter_mut().for_each(|x| *x = 100 + l as u16);
            v.iter_mut().for_each(|x| *x = 200 + l as u16);
        }
        for l in 0..rows.len() {
            assert!(s.k(l).iter().all(|&x| x == 100 + l as u16));
            assert!(s.v(l).iter().all(|&x| x == 200 + l as u16));
        }
        // No rows at all (a context of 0) is a store of empty layers.
        let mut empty = KvStore::new(&[0, 0], 4, 6);
        assert!(empty.k(1).is_empty() && empty.kv_mut(0).1.is_empty());
    }
}
