//! Isotonic regression and histogram binning on a fit's state.

use crate::model::Model;

use super::*;

/// Mean of the t-weighted log loss of fitted probabilities `p` at the points
/// (clipped to machine epsilon, as `logloss` / `ips_logloss`).
pub(crate) fn points_loss(points: &[(f64, f64, f64)], p: impl Fn(usize) -> f64) -> f64 {
    let eps = crate::loss::DEFAULT_EPS;
    let (mut num, mut den) = (0.0, 0.0);
    for (i, &(_, n, t)) in points.iter().enumerate() {
        let pi = p(i).clamp(eps, 1.0 - eps);
        num += -t * pi.ln() - (n - t) * (-pi).ln_1p();
        den += n;
    }
    num / den
}

/// The isotonic (non-decreasing) regression of the means t/n on points (score, n, t) sorted by
/// score, with weights n: pool adjacent violators. One fitted value per point; a point with
/// n = 0 must not be among them.
pub(crate) fn pav(pts: &[(f64, f64, f64)]) -> Vec<f64> {
    let mut blocks: Vec<(f64, f64, usize)> = Vec::with_capacity(pts.len()); // (Σn, Σt, len)
    for &(_, n, t) in pts {
        blocks.push((n, t, 1));
        while blocks.len() > 1 {
            let (n2, t2, l2) = blocks[blocks.len() - 1];
            let (n1, t1, l1) = blocks[blocks.len() - 2];
            if t1 / n1 > t2 / n2 {
                blocks.pop();
                let last = blocks.len() - 1;
                blocks[last] = (n1 + n2, t1 + t2, l1 + l2);
            } else {
                break;
            }
        }
    }
    let mut fitted = Vec::with_capacity(pts.len());
    for (n, t, len) in blocks {
        fitted.extend(std::iter::repeat_n(t / n, len));
    }
    fitted
}

pub(super) fn fit_isotonic(st: &FitState, ips: bool, m: &mut Model) {
    let pts = st.sorted_points();
    let mut fitted = pav(&pts);
    if ips {
        fitted.iter_mut().for_each(|v| *v = v.clamp(0.0, 1.0));
    }
    m.loss = Some(points_loss(&pts, |i| fitted[i]));
    // Drop interior points whose value equals both neighbours (as scikit-learn does).
    let k = fitted.len();
    let keep: Vec<bool> = (0..k)
        .map(|i| i == 0 || i + 1 == k || fitted[i] != fitted[i - 1] || fitted[i] != fitted[i + 1])
        .collect();
    m.knots_x = Some((0..k).filter(|&i| keep[i]).map(|i| pts[i].0).collect());
    m.knots_y = Some((0..k).filter(|&i| keep[i]).map(|i| fitted[i]).collect());
    m.converged = Some(true);
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
pub(super) fn fit_histogram_quantile(st: &FitState, bins: usize, m: &mut Model) {
    let pts = st.sorted_points();
    let edges = super::field::quantile_edges_of_points(&pts, bins);
    let inner = &edges[1..bins];
    let bin_of = |s: f64| inner.partition_point(|&e| e < s);
    let rates = bin_rates(&pts, bins, &bin_of);
    m.method = "histogram_quantile".to_string();
    m.loss = Some(points_loss(&pts, |i| rates[bin_of(pts[i].0)]));
    m.knots_x = Some(edges);
    m.knots_y = Some(rates);
    m.converged = Some(true);
}

pub(super) fn fit_histogram(st: &FitState, bins: usize, m: &mut Model) {
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
