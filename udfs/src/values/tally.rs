//! Rows counted per distinct score: the compact form of an unweighted class whose scores
//! repeat (rounded model outputs, bucketed scores), 16 bytes a distinct score instead of
//! 8 bytes a row. `auc` switches a group to it when that saves at least half (see
//! `crate::metrics::auc`).

/// The distinct scores of one class, ascending, with how many rows have each.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Tally {
    pub p: Vec<f64>,
    pub n: Vec<u64>,
}

impl Tally {
    pub(crate) fn len(&self) -> usize {
        self.p.len()
    }

    /// The rows counted.
    pub(crate) fn rows(&self) -> u128 {
        self.n.iter().map(|&n| n as u128).sum()
    }

    pub(crate) fn bytes(&self) -> usize {
        self.p.capacity() * size_of::<f64>() + self.n.capacity() * size_of::<u64>()
    }

    /// (score, rows) pairs, ascending.
    pub(crate) fn runs(&self) -> impl Iterator<Item = (f64, u64)> + '_ {
        self.p.iter().copied().zip(self.n.iter().copied())
    }

    /// This tally with the ascending (score, rows) pairs of `more` added: one merge pass,
    /// equal scores counted together (−0 and +0 are one score, as they tie in `auc`).
    pub(crate) fn merged(&self, more: impl Iterator<Item = (f64, u64)>) -> Tally {
        let mut out = Tally::default();
        let mut push = |v: f64, k: u64| match out.p.last() {
            Some(&last) if last == v => *out.n.last_mut().expect("parallel to p") += k,
            _ => {
                out.p.push(v);
                out.n.push(k);
            }
        };
        let mut mine = self.runs().peekable();
        for (v, k) in more {
            while let Some(&(x, m)) = mine.peek() {
                if x < v {
                    push(x, m);
                    mine.next();
                } else {
                    break;
                }
            }
            push(v, k);
        }
        for (x, m) in mine {
            push(x, m);
        }
        out.p.shrink_to_fit();
        out.n.shrink_to_fit();
        out
    }
}

/// The runs of equal scores of an ascending slice, as (score, rows) pairs.
pub(crate) fn runs_of(sorted: &[f64]) -> impl Iterator<Item = (f64, u64)> + '_ {
    let mut i = 0;
    std::iter::from_fn(move || {
        let v = *sorted.get(i)?;
        let start = i;
        while i < sorted.len() && sorted[i] == v {
            i += 1;
        }
        Some((v, (i - start) as u64))
    })
}

/// How many distinct scores an ascending slice holds.
pub(crate) fn distinct_in(sorted: &[f64]) -> usize {
    runs_of(sorted).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merging_counts_equal_scores_together() {
        let t = Tally {
            p: vec![0.1, 0.5, 0.9],
            n: vec![2, 1, 4],
        };
        let sorted = [0.0, 0.1, 0.1, 0.7, 0.9, 1.0, 1.0];
        let m = t.merged(runs_of(&sorted));
        assert_eq!(m.p, vec![0.0, 0.1, 0.5, 0.7, 0.9, 1.0]);
        assert_eq!(m.n, vec![1, 4, 1, 1, 5, 2]);
        assert_eq!(m.rows(), 14);
        assert_eq!(Tally::default().merged(runs_of(&[])), Tally::default());
        assert_eq!(distinct_in(&[-0.0, 0.0, 0.25]), 2);
    }
}
