//! Which cache rows a query visits, in order: its causal keys (all before
//! it, or the window's), and in a window's ring the cells lap by lap.

use std::ops::Range;

use super::AttnShape;

/// The keys one attention task visits, in order: at most two runs of cache
/// rows (in a ring, the newest lap, then the one before it).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Runs(pub(super) [Range<usize>; 2]);

impl Runs {
    pub(super) fn one(r: Range<usize>) -> Runs {
        Runs([r, 0..0])
    }

    pub(super) fn len(&self) -> usize {
        self.0[0].len() + self.0[1].len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The rows in visiting order.
    pub(super) fn iter(&self) -> impl Iterator<Item = usize> {
        self.0[0].clone().chain(self.0[1].clone())
    }

    /// Each nonempty run with the number of keys before it.
    pub(super) fn runs(&self) -> impl Iterator<Item = (usize, Range<usize>)> + '_ {
        let first = self.0[0].len();
        [(0, self.0[0].clone()), (first, self.0[1].clone())]
            .into_iter()
            .filter(|(_, r)| !r.is_empty())
    }
}

/// The keys among `keys` (a query's causal range, ending just past its
/// position) that sit in view cells `cells`, in cell order: with no ring the
/// cells are the positions; in a ring of `ring` cells, position q sits in
/// cell q mod `ring` (llama.cpp fills the cells in order from 0 and, once
/// full, reuses the cell of the position a window and a batch back), so
/// the query's own lap (cells 0 to its own) comes before the older lap's
/// cells after it. A window never spans more than the ring's cells.
pub(super) fn cell_runs(keys: &Range<usize>, cells: Range<usize>, ring: usize) -> Runs {
    // An empty run is 0..0, whatever cut it.
    let clip = |a: usize, b: usize, r: &Range<usize>| {
        let (a, b) = (a.max(r.start), b.min(r.end));
        if a < b {
            a..b
        } else {
            0..0
        }
    };
    if ring == 0 || keys.is_empty() {
        return Runs::one(clip(cells.start, cells.end, keys));
    }
    let (a, b) = (cells.start.min(ring), cells.end.min(ring));
    // The first position of the newest key's lap.
    let lap = (keys.end - 1) / ring * ring;
    let newest = clip(lap + a, lap + b, &(keys.start.max(lap)..keys.end));
    let older = match lap.checked_sub(ring) {
        Some(prev) => clip(prev + a, prev + b, &(keys.start..lap.max(keys.start))),
        None => 0..0,
    };
    Runs([newest, older])
}

/// `keys` (positions) as cache rows: in a ring, row = position mod its
/// size (each run lies within one lap).
pub(super) fn rows_of(keys: Runs, ring: usize) -> Runs {
    if ring == 0 {
        return keys;
    }
    Runs(keys.0.map(|r| {
        let start = r.start % ring;
        start..start + r.len()
    }))
}

/// The keys a query at position `p` reads: all before it, or the window's.
pub(super) fn causal_keys(s: &AttnShape, p: usize) -> Range<usize> {
    let lo = if s.window > 0 {
        (p + 1).saturating_sub(s.window)
    } else {
        0
    };
    lo..p + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`cell_runs`] against the cells walked one by one: cell c of a ring
    /// holds the latest position at or before the query's that is c modulo
    /// the ring's size, and is visited if that position is among the keys.
    #[test]
    fn cell_runs_visit_a_rings_cells_in_order() {
        for (ring, window) in [(512usize, 300usize), (768, 512), (1024, 512), (256, 256)] {
            for p in (0..3 * ring + 40).step_by(7) {
                let keys = (p + 1).saturating_sub(window)..p + 1;
                let n_kv = ring.min((p + 1).next_multiple_of(256));
                for threads in 1..=3 {
                    let chunk = n_kv.div_ceil(threads);
                    let mut all = Vec::new();
                    for c in 0..threads {
                        let cells = (c * chunk).min(n_kv)..((c + 1) * chunk).min(n_kv);
                        let lap = p / ring * ring;
                        let want: Vec<usize> = cells
                            .clone()
                            .filter_map(|c| {
                                let q = if lap + c <= p {
                                    lap + c
                                } else {
                                    (lap + c).checked_sub(ring)?
                                };
                                keys.contains(&q).then_some(q)
                            })
                            .collect();
                        let got: Vec<usize> =
                            cell_runs(&keys, cells.clone(), ring).iter().collect();
                        assert_eq!(got, want, "ring {ring} p {p} cells {cells:?}");
                        all.extend(got);
                    }
                    // Every key once.
                    all.sort_unstable();
                    assert_eq!(all, keys.clone().collect::<Vec<_>>(), "ring {ring} p {p}");
                }
            }
        }
        // No ring: the cells are the positions.
        assert_eq!(cell_runs(&(10..50), 0..30, 0), Runs::one(10..30));
        // A ring of 512 at position 600 (window 300): cells 0..=88 hold
        // 512..=600, then cells 301.. the older lap's 301..511.
        assert_eq!(
            cell_runs(&(301..601), 0..512, 512),
            Runs([512..601, 301..512])
        );
        assert_eq!(cell_runs(&(301..601), 0..256, 512), Runs([512..601, 0..0]));
        assert_eq!(
            cell_runs(&(301..601), 256..512, 512),
            Runs([0..0, 301..512])
        );
    }
}
