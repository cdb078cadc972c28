//! A group's rows read in ascending score order, both classes in step: the sweep that
//! `auc_interval` and `calibration_decomposition` make over `auc`'s state (the group's own
//! rows, the sorted partial states it merged, read where they lie, and its tallies).

use super::spill::ReadBehind;
use super::{Rows, Tally};

/// One ascending source of a class's scores and where it has been read to.
struct Cursor<'a> {
    /// The scores, one a row or (a tally) one a distinct score.
    p: &'a [f64],
    /// A tally's rows per score; empty: one row each.
    n: &'a [u64],
    at: usize,
    /// A spilled run's pages go behind the reader.
    behind: ReadBehind,
}

impl Cursor<'_> {
    #[inline]
    fn peek(&self) -> Option<f64> {
        self.p.get(self.at).copied()
    }

    /// Reads past the rows whose score is `v`, returning how many there were.
    #[inline]
    fn take(&mut self, v: f64) -> u64 {
        let start = self.at;
        if self.n.is_empty() {
            while self.at < self.p.len() && self.p[self.at] == v {
                self.at += 1;
            }
            self.behind.advance(self.p, self.at);
            (self.at - start) as u64
        } else if self.at < self.p.len() && self.p[self.at] == v {
            // A tally's scores are distinct.
            self.at += 1;
            self.n[start]
        } else {
            0
        }
    }
}

/// (score, rows) pairs of several ascending sources merged into one ascending sequence, equal
/// scores (−0 and +0 too) counted together.
pub(crate) struct MergedRuns<'a> {
    sources: Vec<Cursor<'a>>,
}

impl Iterator for MergedRuns<'_> {
    type Item = (f64, u64);

    #[inline]
    fn next(&mut self) -> Option<(f64, u64)> {
        match &mut self.sources[..] {
            [only] => {
                let v = only.peek()?;
                return Some((v, only.take(v)));
            }
            // Two partitions' runs, the common case: no loop over the sources.
            [a, b] => {
                let v = lower(a.peek(), b.peek())?;
                return Some((v, a.take(v) + b.take(v)));
            }
            _ => {}
        }
        let v = self
            .sources
            .iter()
            .filter_map(Cursor::peek)
            .reduce(f64::min)?;
        Some((v, self.sources.iter_mut().map(|s| s.take(v)).sum()))
    }
}

/// The smaller of two sources' next scores (None once both are read).
#[inline]
pub(crate) fn lower(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

/// One class's scores as ascending (score, rows): its sorted parts and its tally.
pub(crate) fn class_runs<'a>(parts: &[&'a [f64]], tally: &'a Tally) -> MergedRuns<'a> {
    let rows = parts.iter().map(|&p| Cursor {
        p,
        n: &[],
        at: 0,
        behind: ReadBehind::new(p),
    });
    let counted = Cursor {
        p: &tally.p,
        n: &tally.n,
        at: 0,
        behind: ReadBehind::new(&[]),
    };
    MergedRuns {
        sources: rows
            .chain(std::iter::once(counted))
            .filter(|c| !c.p.is_empty())
            .collect(),
    }
}

/// Sweeps the distinct scores of both classes in step, calling `f(score, neg_below,
/// neg_equal, pos_below, pos_equal)` at each (the counts of rows below and equal to it).
pub(crate) fn sweep(
    neg: impl Iterator<Item = (f64, u64)>,
    pos: impl Iterator<Item = (f64, u64)>,
    mut f: impl FnMut(f64, u64, u64, u64, u64),
) {
    let (mut neg, mut pos) = (neg.peekable(), pos.peekable());
    let (mut neg_below, mut pos_below) = (0u64, 0u64);
    loop {
        let Some(v) = lower(neg.peek().map(|x| x.0), pos.peek().map(|x| x.0)) else {
            return;
        };
        let n_eq = neg.next_if(|x| x.0 == v).map_or(0, |x| x.1);
        let p_eq = pos.next_if(|x| x.0 == v).map_or(0, |x| x.1);
        f(v, neg_below, n_eq, pos_below, p_eq);
        neg_below += n_eq;
        pos_below += p_eq;
    }
}

/// Calls `f(score, negatives' weight, positives' weight)` at each distinct score of a
/// group's rows and tallies, ascending (−0 and +0 are one score). Unweighted rows weigh 1
/// each; weighted rows are read in their sorted parts (`Rows::sorted_weighted_parts`;
/// weighted groups have no tallies).
pub(crate) fn for_each_score(
    rows: &mut Rows,
    tally: &[Tally; 2],
    mut f: impl FnMut(f64, f64, f64),
) {
    if !rows.weighted() {
        let [negs, poss] = rows.sorted_parts();
        sweep(
            class_runs(&negs, &tally[0]),
            class_runs(&poss, &tally[1]),
            |v, _, n_eq, _, p_eq| f(v, n_eq as f64, p_eq as f64),
        );
        return;
    }
    let [negs, poss] = rows.sorted_weighted_parts();
    for_each_weighted_score(&negs, &poss, f);
}

/// Calls `f(score, negatives' weight, positives' weight)` at each distinct score of the
/// two classes' ascending (scores, weights) parts, ascending (−0 and +0 are one score).
pub(crate) fn for_each_weighted_score(
    negs: &[(&[f64], &[f64])],
    poss: &[(&[f64], &[f64])],
    mut f: impl FnMut(f64, f64, f64),
) {
    let (mut neg, mut pos) = (WeightedRuns::new(negs), WeightedRuns::new(poss));
    loop {
        let Some(v) = lower(neg.peek(), pos.peek()) else {
            return;
        };
        f(v, neg.take(v), pos.take(v));
    }
}

/// One class's weighted parts read as one ascending sequence of distinct scores (each
/// part's scores ascending, a value beside each: its weight, or in `auc_test` a second
/// score or a count). A reader finds the rows of the smallest score ([`Self::peek`],
/// [`Self::equal`]) and then reads past them ([`Self::take_each`]).
pub(crate) struct WeightedRuns<'a> {
    parts: Vec<WeightedPart<'a>>,
    /// The smallest score not yet read.
    head: Option<f64>,
}

/// A part's scores, the values beside them, the next row, the end of the rows that
/// [`WeightedRuns::equal`] found, and the reader's spilled pages let go behind it (scores
/// and values).
struct WeightedPart<'a> {
    p: &'a [f64],
    w: &'a [f64],
    at: usize,
    end: usize,
    behind: [ReadBehind; 2],
}

impl<'a> WeightedRuns<'a> {
    pub(crate) fn new(parts: &[(&'a [f64], &'a [f64])]) -> Self {
        let mut runs = WeightedRuns {
            parts: parts
                .iter()
                .filter(|(p, _)| !p.is_empty())
                .map(|&(p, w)| WeightedPart {
                    p,
                    w,
                    at: 0,
                    end: 0,
                    behind: [ReadBehind::new(p), ReadBehind::new(w)],
                })
                .collect(),
            head: None,
        };
        runs.find_head();
        runs
    }

    fn find_head(&mut self) {
        self.head = self
            .parts
            .iter()
            .filter_map(|part| part.p.get(part.at).copied())
            .reduce(f64::min);
    }

    /// The smallest score not yet read.
    #[inline]
    pub(crate) fn peek(&self) -> Option<f64> {
        self.head
    }

    /// How many rows not yet read have the score `v` (none unless it is the smallest:
    /// [`Self::peek`]), found for [`Self::take_each`] to read past.
    #[inline]
    pub(crate) fn equal(&mut self, v: f64) -> u64 {
        if self.head != Some(v) {
            return 0;
        }
        let mut rows = 0;
        for part in &mut self.parts {
            let mut end = part.at;
            while end < part.p.len() && part.p[end] == v {
                end += 1;
            }
            part.end = end;
            rows += (end - part.at) as u64;
        }
        rows
    }

    /// Reads past the rows [`Self::equal`] found, calling `f` with the value beside each.
    #[inline]
    pub(crate) fn take_each(&mut self, mut f: impl FnMut(f64)) {
        for part in &mut self.parts {
            if part.end > part.at {
                part.w[part.at..part.end].iter().for_each(|&x| f(x));
                part.at = part.end;
                part.behind[0].advance(part.p, part.at);
                part.behind[1].advance(part.w, part.at);
            }
        }
        self.find_head();
    }

    /// Reads past the rows whose score is `v` (in every part), returning their weight: one
    /// pass, where [`Self::equal`] and [`Self::take_each`] would read the rows twice.
    /// Inlined into the sweep: a call a row and class cost 9% of a weighted `auc`.
    #[inline(always)]
    fn take(&mut self, v: f64) -> f64 {
        if self.head != Some(v) {
            return 0.0;
        }
        let mut weight = 0.0;
        for part in &mut self.parts {
            let start = part.at;
            while part.at < part.p.len() && part.p[part.at] == v {
                weight += part.w[part.at];
                part.at += 1;
            }
            if part.at > start {
                part.behind[0].advance(part.p, part.at);
                part.behind[1].advance(part.w, part.at);
            }
        }
        self.find_head();
        weight
    }
}
