//! Histogram binning, `fit_histogram`: each bin predicts its positive rate. Its two
//! strategies are two stored methods: `histogram` (equal-width bins over the fitted range,
//! closed on the left) and `histogram_quantile` (`numpy.percentile` edges, closed on the
//! right, applied like `bbq`).

use datafusion_common::Result;
use datafusion_expr::Documentation;
use datafusion_macros::user_doc;

use crate::common::{args, CallShape};
use crate::model::{Model, ModelRef};

use super::calibrator::{Calibrator, Settings};
use super::nonparametric::{points_loss, quantile_edges_of_points};
use super::state::FitState;
use super::{Method, NONPARAMETRIC_EXACT_CAP};

#[user_doc(
    doc_section(label = "Calibrators"),
    description = "Histogram binning: n_bins bins, each predicting the positive rate of its rows; an empty bin \
predicts the overall positive rate. With strategy 'uniform' (the default) the bins have equal width over [s_min, \
s_max] and are closed on the left; with 'quantile' (equal-frequency, the baseline of Zhao et al.) the edges are \
`numpy.percentile` of the scores at `linspace(0, 100, n_bins + 1)`, exactly as the binned metrics' 'quantile', the \
bins closed on the right (equal scores share a bin) and the model's method is `histogram_quantile`. The model keeps \
the n_bins + 1 edges in `knots_x` and the rates in `knots_y`; `calibrate` clamps scores into the range.",
    syntax_example = "fit_histogram(score, y [, n_bins [, strategy]])",
    sql_example = r#"```sql
> SELECT m['knots_y'] AS rates
  FROM (SELECT fit_histogram(s, y, 2) AS m FROM (VALUES (0.0, 0), (1.0, 0), (2.0, 1), (3.0, 1), (4.0, 0)) AS t(s, y));
+---------------------------+
| rates                     |
+---------------------------+
| [0.0, 0.6666666666666666] |
+---------------------------+
```"#
)]
struct FitHistogramDoc;

/// Histogram binning, both strategies.
pub(crate) struct Histogram;

impl Calibrator for Histogram {
    fn shape(&self) -> CallShape {
        CallShape {
            name: "fit_histogram",
            required: &[args::SCORE, args::Y],
            optional: const {
                &[
                    args::N_BINS
                        .doc("Number of bins, an integer constant in [1, 10000]. Default 15."),
                    args::STRATEGY.doc(
                        "'uniform' (equal width, the default) or 'quantile' (equal frequency).",
                    ),
                ]
            },
        }
    }

    fn documentation(&self) -> Option<&'static Documentation> {
        FitHistogramDoc.doc()
    }

    fn exact_cap(&self) -> usize {
        NONPARAMETRIC_EXACT_CAP
    }

    fn fit(&self, st: &FitState, settings: &Settings, m: &mut Model) {
        if settings.quantile {
            fit_histogram_quantile(st, settings.count, m)
        } else {
            fit_histogram(st, settings.count, m)
        }
    }

    fn apply(&self, m: &ModelRef<'_>, row: usize, s: f64) -> Result<f64> {
        if m.method(row)? == Method::HistogramQuantile {
            return m.right_closed_step(row, s);
        }
        let (_, y) = m.knots(row)?;
        let (lo, hi) = m.range(row)?;
        let bins = y.len();
        let k = if hi > lo {
            (((s.clamp(lo, hi) - lo) / (hi - lo) * bins as f64).floor() as usize).min(bins - 1)
        } else {
            0
        };
        Ok(y[k])
    }
}

/// Each bin's positive rate over the points (score, rows, positives); an empty bin gets the
/// overall rate.
fn bin_rates(pts: &[(f64, f64, f64)], bins: usize, bin_of: &dyn Fn(f64) -> usize) -> Vec<f64> {
    let mut n = vec![0.0; bins];
    let mut t = vec![0.0; bins];
    for &(s, pn, pt) in pts {
        let b = bin_of(s);
        n[b] += pn;
        t[b] += pt;
    }
    let overall = t.iter().sum::<f64>() / n.iter().sum::<f64>();
    (0..bins)
        .map(|b| if n[b] > 0.0 { t[b] / n[b] } else { overall })
        .collect()
}

/// Histogram binning with `'quantile'` bins: edges `numpy.percentile` of the fitted scores
/// (the rule of the binned metrics' `'quantile'`, see `metrics::binning`), bins closed on the
/// right (`searchsorted(inner edges, s, 'left')`, so equal scores share a bin), each bin's
/// positive rate; an empty bin (equal edges) predicts the overall rate.
fn fit_histogram_quantile(st: &FitState, bins: usize, m: &mut Model) {
    let pts = st.sorted_points();
    let edges = quantile_edges_of_points(&pts, bins);
    let inner = &edges[1..bins];
    let bin_of = |s: f64| inner.partition_point(|&e| e < s);
    let rates = bin_rates(&pts, bins, &bin_of);
    m.method = Method::HistogramQuantile;
    m.loss = Some(points_loss(&pts, |i| rates[bin_of(pts[i].0)]));
    m.knots_x = Some(edges);
    m.knots_y = Some(rates);
    m.converged = Some(true);
}

fn fit_histogram(st: &FitState, bins: usize, m: &mut Model) {
    let pts = st.sorted_points();
    let (lo, hi) = (st.s_min, st.s_max);
    let width = hi - lo;
    let bin_of = |s: f64| {
        if width > 0.0 {
            (((s - lo) / width * bins as f64).floor().max(0.0) as usize).min(bins - 1)
        } else {
            0
        }
    };
    let rates = bin_rates(&pts, bins, &bin_of);
    m.loss = Some(points_loss(&pts, |i| rates[bin_of(pts[i].0)]));
    m.knots_x = Some(
        (0..=bins)
            .map(|k| {
                if k == bins {
                    hi
                } else {
                    lo + width * k as f64 / bins as f64
                }
            })
            .collect(),
    );
    m.knots_y = Some(rates);
    m.converged = Some(true);
}
