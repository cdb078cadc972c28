//! ConfCalib for one field, `fit_confcalib(p, y, field [, n_bins [, lambda]])` (Zhao et al.
//! §3.2): `n_bins` equal-frequency bins inside each field value ('quantile' rule), each bin's
//! multiplier `confcalib_multiplier(mean p, mean y, count, lambda)`; `calibrate(p, model,
//! field)` scales p by its bin's multiplier.

use datafusion_common::Result;
use datafusion_expr::Documentation;
use datafusion_macros::user_doc;

use crate::common::{args, CallShape};
use crate::model::{check_probability, ConfCalibRow, FieldKey, Model, ModelRef};
use crate::scalars::confcalib_multiplier;

use super::calibrator::{Calibrator, Settings};
use super::nonparametric::{points_loss, quantile_edges_of_points, LossSum};
use super::state::{ClassParts, FitState};
use super::{Method, NONPARAMETRIC_EXACT_CAP};
use crate::metrics::binning::{
    kth_of_two, quantile_edges_of_parts, quantile_levels, unweighted_quantile_edges, SELECT_FROM,
};
use crate::values::{run_order, sort_f64};

#[user_doc(
    doc_section(label = "Calibrators"),
    description = "Fits ConfCalib for one field (Zhao et al. 2024, §3.2): inside each value of `field`, the rows are cut \
into `n_bins` equal-frequency bins by p (edges `numpy.percentile` of that value's p, the 'quantile' rule of the binned \
metrics; bins closed on the right), and each bin gets the multiplier `confcalib_multiplier(mean p, mean y, count, \
lambda)`: the observed rate shrunk toward the prediction by a Wilson interval whose confidence grows with the \
evidence. `calibrate(p, model, field)` returns `p · m(value, bin of p)` clipped to [0, 1]; a value the fit never saw \
keeps p. An empty bin, or one whose mean p is 0, has multiplier 1. The model keeps the values in `field_keys`, \
`n_bins + 1` edges per value in `field_edges` and `n_bins` multipliers per value in `field_values`.",
    syntax_example = "fit_confcalib(p, y, field [, n_bins [, lambda]])",
    sql_example = r#"```sql
> SELECT f, round(calibrate(0.2, m, f), 4) AS p
  FROM (SELECT fit_confcalib(p, y, f, 1, 0.0) AS m
        FROM (VALUES (0.2, 1, 'a'), (0.2, 0, 'a'), (0.2, 0, 'b'), (0.2, 0, 'b')) AS t(p, y, f))
  CROSS JOIN (VALUES ('a'), ('b'), ('c')) AS v(f) ORDER BY f;
+---+-----+
| f | p   |
+---+-----+
| a | 0.5 |
| b | 0.0 |
| c | 0.2 |
+---+-----+
```"#
)]
struct FitConfCalibDoc;

/// ConfCalib.
pub(crate) struct ConfCalib;

impl Calibrator for ConfCalib {
    fn shape(&self) -> CallShape {
        CallShape {
            name: "fit_confcalib",
            required: const {
                &[
                    args::P,
                    args::Y,
                    args::FIELD.doc("The field whose values are calibrated separately (any type; compared as text)."),
                ]
            },
            optional: const {
                &[
                    args::N_BINS.or("10").doc("Bins per field value, an integer constant in [1, 10000]. Default 10."),
                    args::LAMBDA.doc("Bound of the shrunk deviation, a constant >= 0. Default 1.96; 0 trusts each bin's observed rate entirely."),
                ]
            },
        }
    }

    fn documentation(&self) -> Option<&'static Documentation> {
        FitConfCalibDoc.doc()
    }

    fn exact_cap(&self) -> usize {
        NONPARAMETRIC_EXACT_CAP
    }

    fn takes_probability(&self) -> bool {
        true
    }

    fn field_aware(&self) -> bool {
        true
    }

    fn reads_rows_in_any_order(&self) -> bool {
        true
    }

    fn fit_fields(&self, states: &[(&str, &FitState)], settings: &Settings) -> Option<Model> {
        Some(confcalib(states, settings.count, settings.lambda))
    }

    fn apply_field(&self, m: &ModelRef<'_>, row: usize, s: f64, key: FieldKey<'_>) -> Result<f64> {
        let position = m.field_position(row, key)?;
        check_probability(s)?;
        Ok(match position {
            Some(i) => ConfCalibRow::new(m, row)?.scale(s, i),
            None => s,
        })
    }
}

/// ConfCalib over the field values' states (see the module documentation).
fn confcalib(states: &[(&str, &FitState)], bins: usize, lambda: f64) -> Model {
    let rows: i64 = states.iter().map(|(_, st)| st.rows).sum();
    let (s_min, s_max) = states
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |acc, (_, st)| {
            (acc.0.min(st.s_min), acc.1.max(st.s_max))
        });
    let mut m = Model::new(Method::ConfCalib, rows, s_min, s_max);
    // Each field value's bins, multipliers and loss, the values spread over the cores; the
    // results are read in the values' order, so the model does not depend on the threads.
    let fitted = crate::parallel::map_in_order(states.len(), crate::parallel::cores(), |k| {
        let st = states[k].1;
        match st.rows_only() {
            Some(classes) => fit_rows(classes, bins, lambda),
            None => fit_points(&st.sorted_points(), bins, lambda),
        }
    });
    let (mut keys, mut edges_all, mut multipliers) = (vec![], vec![], vec![]);
    let mut loss_sum = 0.0;
    for ((key, st), (edges, mult, loss)) in states.iter().zip(fitted) {
        loss_sum += loss * st.rows as f64;
        keys.push(key.to_string());
        edges_all.extend(edges);
        multipliers.extend(mult);
    }
    m.loss = Some(loss_sum / rows as f64);
    m.field_keys = Some(keys);
    m.field_edges = Some(edges_all);
    m.field_values = Some(multipliers);
    m.converged = Some(true);
    m
}

/// A field value's edges, multipliers and loss.
type Fitted = (Vec<f64>, Vec<f64>, f64);

/// Each bin's multiplier from its rows, Σp and Σt.
fn multipliers(n: &[f64], sp: &[f64], t: &[f64], lambda: f64) -> Vec<f64> {
    (0..n.len())
        .map(|b| {
            if n[b] == 0.0 {
                return 1.0;
            }
            let (mean_p, rate) = (sp[b] / n[b], t[b] / n[b]);
            confcalib_multiplier(mean_p.clamp(0.0, 1.0), rate, n[b], lambda).unwrap_or(1.0)
        })
        .collect()
}

/// A field value fitted from its ascending points (score, rows, positives): a state whose
/// scores repeat (collapsed into points) or that went to the grid.
fn fit_points(pts: &[(f64, f64, f64)], bins: usize, lambda: f64) -> Fitted {
    let edges = quantile_edges_of_points(pts, bins);
    // A point is in bin b when inner edge b − 1 < p ≤ inner edge b. The points ascend,
    // so bin b holds the run pts[cut[b]..cut[b + 1]] (the cuts kept non-decreasing
    // should rounding make two edges cross).
    let mut cut = vec![0];
    for &e in &edges[1..bins] {
        let below = pts.partition_point(|q| q.0 <= e);
        cut.push(below.max(cut[cut.len() - 1]));
    }
    cut.push(pts.len());
    let (mut n, mut sp, mut t) = (vec![0.0; bins], vec![0.0; bins], vec![0.0; bins]);
    for b in 0..bins {
        for &(p, pn, pt) in &pts[cut[b]..cut[b + 1]] {
            n[b] += pn;
            sp[b] += pn * p;
            t[b] += pt;
        }
    }
    let mult = multipliers(&n, &sp, &t, lambda);
    let mut b = 0;
    let loss = points_loss(pts, |i| {
        while i >= cut[b + 1] {
            b += 1;
        }
        (pts[i].0 * mult[b]).clamp(0.0, 1.0)
    });
    (edges, mult, loss)
}

/// A field value fitted from its kept rows where they lie, unsorted (each class's own rows
/// and merged runs): the edges from the rows' order statistics (selected, or read from a
/// sorted copy when the rows are few), then each row binned against them, once for the
/// bins' sums and once for the loss. The parts are read in an order of their own (a
/// small own list sorted, the runs by their contents), not the order the partial states
/// arrived in, so the sums do not change from one run to the next.
fn fit_rows(classes: [ClassParts<'_>; 2], bins: usize, lambda: f64) -> Fitted {
    let n: usize = classes
        .iter()
        .map(|(own, runs)| own.len() + runs.iter().map(|r| r.len()).sum::<usize>())
        .sum();
    let small = n < SELECT_FROM;
    let sorted_own: [Option<Vec<f64>>; 2] = classes.each_ref().map(|(own, runs)| {
        (small || (own.len() < SELECT_FROM && !runs.is_empty())).then(|| {
            // Few rows: the whole class in one sorted copy; else the small own list only.
            let mut v: Vec<f64> = own.to_vec();
            if small {
                runs.iter().for_each(|r| v.extend_from_slice(r));
            }
            sort_f64(&mut v);
            v
        })
    });
    // Each class's parts, in their reading order.
    let parts: [Vec<&[f64]>; 2] = [0, 1].map(|c| {
        let (own, runs) = &classes[c];
        let own: &[f64] = sorted_own[c].as_deref().unwrap_or(own);
        if small {
            return vec![own];
        }
        let mut runs: Vec<&[f64]> = runs.clone();
        runs.sort_by(|a, b| run_order((a, &[]), (b, &[])));
        std::iter::once(own).chain(runs).collect()
    });
    let selected = match small {
        true => None,
        false => {
            let all: Vec<&[f64]> = parts.iter().flatten().copied().collect();
            quantile_edges_of_parts(&all, bins)
        }
    };
    let edges = selected.unwrap_or_else(|| {
        // Few rows (each class one sorted part), or too many bins to select.
        let merged;
        let (neg, pos) = match &sorted_own {
            [Some(neg), Some(pos)] if small => (&neg[..], &pos[..]),
            _ => {
                let mut all: Vec<f64> = parts
                    .iter()
                    .flatten()
                    .flat_map(|p| p.iter())
                    .copied()
                    .collect();
                sort_f64(&mut all);
                merged = all;
                (&merged[..], &[][..])
            }
        };
        unweighted_quantile_edges(n, &quantile_levels(bins), |r| kth_of_two(neg, pos, r))
    });
    // Bin b holds inner edge b − 1 < p ≤ inner edge b; running maxima of the inner edges,
    // should rounding make two cross (the later bin is then empty).
    let mut inner: Vec<f64> = edges[1..bins].to_vec();
    for k in 1..inner.len() {
        inner[k] = inner[k].max(inner[k - 1]);
    }
    // A short list is counted without branches (the default 10 bins: 9 comparisons); the
    // choice is made once, each way its own loop.
    let (mult, loss) = match inner.len() <= 16 {
        true => binned(&parts, bins, lambda, |p| {
            inner.iter().map(|&e| (e < p) as usize).sum()
        }),
        false => binned(&parts, bins, lambda, |p| inner.partition_point(|&e| e < p)),
    };
    (edges, mult, loss)
}

/// The multipliers and the loss of rows `parts` (per class) binned by `bin_of`: a pass for
/// the bins' sums, then, the multipliers known, a pass for each row's loss (its bin found
/// again: nine comparisons cost less than keeping a bin a row).
fn binned(
    parts: &[Vec<&[f64]>; 2],
    bins: usize,
    lambda: f64,
    bin_of: impl Fn(f64) -> usize,
) -> (Vec<f64>, f64) {
    let (mut rows_in, mut sp, mut t) = (vec![0.0; bins], vec![0.0; bins], vec![0.0; bins]);
    for (c, class) in parts.iter().enumerate() {
        for &p in class.iter().flat_map(|part| part.iter()) {
            let b = bin_of(p);
            rows_in[b] += 1.0;
            sp[b] += p;
            t[b] += c as f64;
        }
    }
    let mult = multipliers(&rows_in, &sp, &t, lambda);
    let rows = rows_in.iter().sum::<f64>() as usize;
    let mut loss = LossSum::new(rows);
    for (c, class) in parts.iter().enumerate() {
        for &p in class.iter().flat_map(|part| part.iter()) {
            loss.add((p * mult[bin_of(p)]).clamp(0.0, 1.0), 1.0, c as f64);
        }
    }
    (mult, loss.mean())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inference::bootstrap::splitmix64;

    /// Rows of both classes: distinct scores, a share of them rounded to 3 decimals (ties
    /// within and across the classes), labels drawn from the score.
    fn classes(n: usize, seed: u64) -> [Vec<f64>; 2] {
        let mut out = [vec![], vec![]];
        for i in 0..n as u64 {
            let u = splitmix64(seed ^ i) as f64 / 2f64.powi(64);
            let p = if i % 5 == 0 {
                (u * 1000.0).round() / 1000.0
            } else {
                u
            };
            let y = (splitmix64(seed ^ i ^ 0xABCD) as f64 / 2f64.powi(64) < p) as usize;
            out[y].push(p);
        }
        out
    }

    /// Each class's rows as ascending points (score, rows, positives), both merged.
    fn points(classes: &[Vec<f64>; 2]) -> Vec<(f64, f64, f64)> {
        let mut all: Vec<(f64, usize)> = classes
            .iter()
            .enumerate()
            .flat_map(|(c, v)| v.iter().map(move |&p| (p, c)))
            .collect();
        all.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut pts: Vec<(f64, f64, f64)> = vec![];
        for (p, c) in all {
            match pts.last_mut() {
                Some(last) if last.0 == p => {
                    last.1 += 1.0;
                    last.2 += c as f64;
                }
                _ => pts.push((p, 1.0, c as f64)),
            }
        }
        pts
    }

    /// A class cut into an own list and runs, in the given order of the runs.
    fn cut(v: &[f64], own: usize, runs: &[(usize, usize)]) -> (Vec<f64>, Vec<Vec<f64>>) {
        (
            v[..own].to_vec(),
            runs.iter().map(|&(a, b)| v[a..b].to_vec()).collect(),
        )
    }

    /// The rows read where they lie, unsorted, give the model of the sorted points (the
    /// path of a state whose scores repeat): the same edges, multipliers and loss to
    /// 1e-12, whether the rows are few (a sorted copy), many (selected order statistics) or
    /// cut into more bins than selection takes; and the same bits whatever order the runs
    /// come in. Both paths are calibsql's: this checks only that they agree (the
    /// references are in `tests/fits`).
    #[test]
    fn rows_where_they_lie_give_the_points_model() {
        for (n, bins) in [(3_000, 10), (40_000, 10), (40_000, 37), (40_000, 200)] {
            let cls = classes(n, n as u64 + bins as u64);
            let want = fit_points(&points(&cls), bins, 1.96);
            let mut got_bits = None;
            for order in [[0, 1, 2], [2, 0, 1]] {
                let parts = cls.each_ref().map(|v| {
                    let l = v.len();
                    let spans = [(l / 10, l / 2), (l / 2, l * 3 / 4), (l * 3 / 4, l)];
                    cut(v, l / 10, &order.map(|k| spans[k]))
                });
                let classes = parts
                    .each_ref()
                    .map(|(own, runs)| (&own[..], runs.iter().map(|r| &r[..]).collect()));
                let got = fit_rows(classes, bins, 1.96);
                assert_eq!(got.0, want.0, "{n} rows, {bins} bins: edges");
                for (g, w) in got.1.iter().zip(&want.1) {
                    assert!(
                        (g - w).abs() <= 1e-12 * w.abs(),
                        "{n} rows, {bins} bins: {g} vs {w}"
                    );
                }
                assert!(
                    (got.2 - want.2).abs() <= 1e-12 * want.2,
                    "loss {} vs {}",
                    got.2,
                    want.2
                );
                let bits: Vec<u64> = got.1.iter().chain([&got.2]).map(|x| x.to_bits()).collect();
                match &got_bits {
                    None => got_bits = Some(bits),
                    Some(first) => {
                        assert_eq!(&bits, first, "{n} rows: the runs' order changed bits")
                    }
                }
            }
        }
    }
}
