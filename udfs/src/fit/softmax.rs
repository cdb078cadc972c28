//! Multiclass temperature scaling: `fit_temperature(logits, label [, w => w])` on a list of
//! logits a row fits one temperature T for `softmax(logits / T)` (Guo et al. 2017; scikit-learn's
//! `CalibratedClassifierCV(method='temperature')`), and `calibrate(logits, model)` applies it.
//!
//! The objective is the weighted mean multinomial log loss
//! `F(β) = Σ wᵢ·[logsumexp(β·zᵢ) − β·zᵢ,yᵢ] / Σ wᵢ` in β = 1/T ≥ 0. It is convex in β (its second
//! derivative is the weighted variance of the logits under the softmax), so the fit brackets
//! the zero of F′ (doubling β from 1) and closes it by Newton steps kept inside the bracket.
//! Every step reads every row, so the state keeps the rows: 8·(K + 2) bytes a row (the logits,
//! the label, the weight), accounted to the memory pool. When F′(0) ≥ 0 the logits are not
//! positively associated with the labels and the optimum is β = 0: T = +inf (every class
//! 1/K), as the binary fit does.

use std::ops::Range;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Float64Array, Int64Array};
use arrow::buffer::OffsetBuffer;
use arrow::datatypes::{DataType, Field, FieldRef, Float64Type, Int64Type};
use datafusion_common::{exec_err, Result};
use datafusion_expr::utils::format_state_name;

use crate::common::{f64_list_type, f64s, list_array, list_type, weight_at};
use crate::kernel::{Filter, Kernel};
use crate::model::{Method, Model};
use crate::multiclass::{for_each_row_of, Values};

/// The function's name in errors.
const FUNC: &str = "fit_temperature";

/// The argument's name in errors.
const LOGITS: Values = Values::Scores("logits");

/// Most Newton (or bisection) steps after the bracket; each halves the bracket at least.
const MAX_STEPS: usize = 200;

/// The partial state of the list form, one row per group: K, then every row's logits (K a
/// row), label and weight.
pub(crate) fn softmax_state_fields(name: &str) -> Vec<FieldRef> {
    let f = |n: &str, t: DataType| Arc::new(Field::new(format_state_name(name, n), t, true));
    vec![
        f("classes", DataType::Int64),
        f("logits", f64_list_type()),
        f("labels", list_type(DataType::Int64)),
        f("weights", f64_list_type()),
    ]
}

/// One group's rows.
#[derive(Debug, Default, Clone)]
struct Rows {
    /// Row-major, K a row.
    logits: Vec<f64>,
    labels: Vec<i64>,
    weights: Vec<f64>,
}

impl Rows {
    fn bytes(&self) -> usize {
        (self.logits.capacity() + self.labels.capacity() + self.weights.capacity()) * 8
    }
}

/// The kernel of `fit_temperature` on a list of logits.
#[derive(Debug)]
pub(crate) struct SoftmaxKernel {
    /// The weight's column.
    w_col: Option<usize>,
    /// K, once a row or a state has said it.
    classes: Option<usize>,
    groups: Vec<Rows>,
    bytes: usize,
}

impl SoftmaxKernel {
    pub(crate) fn new(w_col: Option<usize>) -> Self {
        Self {
            w_col,
            classes: None,
            groups: vec![],
            bytes: 0,
        }
    }

    /// Takes K = `k`, or checks it against the K already taken.
    fn classes_are(&mut self, k: usize, what: &str) -> Result<usize> {
        match self.classes {
            Some(known) if known != k => exec_err!(
                "{FUNC}: argument logits must hold the same number of classes on every row, got {what} of {k} after {known}"
            ),
            _ => {
                self.classes = Some(k);
                Ok(k)
            }
        }
    }

    fn recount(&mut self) {
        self.bytes = self.groups.iter().map(Rows::bytes).sum::<usize>()
            + self.groups.capacity() * std::mem::size_of::<Rows>();
    }
}

impl Kernel for SoftmaxKernel {
    fn empty(&self) -> Result<Self> {
        Ok(Self::new(self.w_col))
    }

    fn resize(&mut self, n: usize) {
        if self.groups.len() < n {
            self.groups.resize_with(n, Rows::default);
        }
    }

    fn num_groups(&self) -> usize {
        self.groups.len()
    }

    fn update(&mut self, values: &[ArrayRef], groups: &[usize], filter: Filter) -> Result<()> {
        let w = self.w_col.map(|c| f64s(&values[c]));
        let classes = &mut self.classes;
        let states = &mut self.groups;
        for_each_row_of(FUNC, LOGITS, &values[0], &values[1], filter, |i, row| {
            let Some((z, y)) = row else {
                return Ok(());
            };
            if w.is_some_and(|w| w.is_null(i)) {
                return Ok(());
            }
            match *classes {
                Some(known) if known != z.len() => {
                    return exec_err!(
                        "{FUNC}: argument logits must hold the same number of classes on every row, got a list of {} after {known}",
                        z.len()
                    )
                }
                _ => *classes = Some(z.len()),
            }
            let wi = weight_at(FUNC, w.map(|w| &w.values()[..]), i)?;
            let rows = &mut states[groups[i]];
            rows.logits.extend_from_slice(z);
            rows.labels.push(y as i64);
            rows.weights.push(wi);
            Ok(())
        })?;
        self.recount();
        Ok(())
    }

    fn merge(&mut self, states: &[ArrayRef], groups: &[usize]) -> Result<()> {
        let classes = states[0].as_primitive::<Int64Type>();
        let logits = states[1].as_list::<i32>();
        let labels = states[2].as_list::<i32>();
        let weights = states[3].as_list::<i32>();
        for (r, &g) in groups.iter().enumerate() {
            if classes.is_null(r) || labels.value_length(r) == 0 {
                continue;
            }
            let k = self.classes_are(classes.value(r) as usize, "a partial state")?;
            let z = logits.value(r);
            let y = labels.value(r);
            let w = weights.value(r);
            let (z, y, w) = (
                z.as_primitive::<Float64Type>(),
                y.as_primitive::<Int64Type>(),
                w.as_primitive::<Float64Type>(),
            );
            if z.len() != y.len() * k || w.len() != y.len() {
                return exec_err!("{FUNC}: a partial state's lists disagree in length");
            }
            if let Some(&bad) = y.values().iter().find(|&&c| c < 0 || c as usize >= k) {
                return exec_err!("{FUNC}: a partial state holds label {bad}, not a class of {k}");
            }
            let rows = &mut self.groups[g];
            rows.logits.extend_from_slice(z.values());
            rows.labels.extend_from_slice(y.values());
            rows.weights.extend_from_slice(w.values());
        }
        self.recount();
        Ok(())
    }

    fn state(&self, range: Range<usize>) -> Result<Vec<ArrayRef>> {
        let groups = &self.groups[range];
        let k = self.classes.map(|k| k as i64);
        let classes: Int64Array = groups
            .iter()
            .map(|r| (!r.labels.is_empty()).then_some(k).flatten())
            .collect();
        let logits = Float64Array::from_iter_values(groups.iter().flat_map(|r| r.logits.clone()));
        let labels = Int64Array::from_iter_values(groups.iter().flat_map(|r| r.labels.clone()));
        let weights = Float64Array::from_iter_values(groups.iter().flat_map(|r| r.weights.clone()));
        let lengths = |f: fn(&Rows) -> usize| OffsetBuffer::from_lengths(groups.iter().map(f));
        Ok(vec![
            Arc::new(classes),
            list_array(lengths(|r| r.logits.len()), Arc::new(logits)),
            list_array(lengths(|r| r.labels.len()), Arc::new(labels)),
            list_array(lengths(|r| r.weights.len()), Arc::new(weights)),
        ])
    }

    fn evaluate(&mut self, range: Range<usize>) -> Result<ArrayRef> {
        let k = self.classes.unwrap_or(0);
        let models: Vec<Option<Model>> =
            self.groups[range].iter().map(|rows| fit(rows, k)).collect();
        crate::model::models_to_array(&models)
    }

    fn drain(&mut self, n: usize) {
        self.groups.drain(..n.min(self.groups.len()));
        self.recount();
    }

    fn size(&self) -> usize {
        self.bytes
    }
}

/// F(β), F′(β) and F″(β) of a group's rows (sums; not yet divided by the total weight).
fn objective(rows: &Rows, k: usize, beta: f64) -> (f64, f64, f64) {
    let (mut f, mut d1, mut d2) = (0.0, 0.0, 0.0);
    for ((z, &y), &w) in rows
        .logits
        .chunks_exact(k)
        .zip(&rows.labels)
        .zip(&rows.weights)
    {
        if w == 0.0 {
            continue;
        }
        let m = z.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(beta * v));
        let (mut s, mut e1, mut e2) = (0.0, 0.0, 0.0);
        for &v in z {
            let p = (beta * v - m).exp();
            s += p;
            e1 += p * v;
            e2 += p * v * v;
        }
        let (e1, e2) = (e1 / s, e2 / s);
        f += w * (m + s.ln() - beta * z[y as usize]);
        d1 += w * (e1 - z[y as usize]);
        d2 += w * (e2 - e1 * e1).max(0.0);
    }
    (f, d1, d2)
}

/// A group's model: T in `a`, the mean log loss at T in `loss`; None without a row of weight.
fn fit(rows: &Rows, k: usize) -> Option<Model> {
    let total: f64 = rows.weights.iter().sum();
    if rows.labels.is_empty() || total <= 0.0 || k == 0 {
        return None;
    }
    let (lo_s, hi_s) = rows
        .logits
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &v| {
            (a.min(v), b.max(v))
        });
    let mut m = Model::new(Method::Temperature, rows.labels.len() as i64, lo_s, hi_s);
    m.weight = Some(total);
    let (beta, steps, converged) = solve(|b| objective(rows, k, b), total);
    m.a = Some(if beta > 0.0 {
        1.0 / beta
    } else {
        f64::INFINITY
    });
    m.iterations = Some(steps as i32);
    m.converged = Some(converged);
    m.loss = Some(objective(rows, k, beta).0 / total);
    Some(m)
}

/// The minimiser β ≥ 0 of a convex F given as `f(β) = (F, F′, F″)` (sums of total weight
/// `total`), the steps taken, and whether it converged.
fn solve(f: impl Fn(f64) -> (f64, f64, f64), total: f64) -> (f64, usize, bool) {
    // F′ is a mean difference of logits: it is zero to rounding when |F′| is this small.
    let tol = |beta: f64, d2: f64| 1e-13 * total.max(1.0) * (1.0 + beta * d2.abs() / total);
    let (_, g0, _) = f(0.0);
    if g0 >= 0.0 {
        return (0.0, 0, true);
    }
    // Bracket: F′(lo) < 0 ≤ F′(hi).
    let (mut lo, mut hi) = (0.0, 1.0);
    let mut steps = 0;
    loop {
        let (_, g, _) = f(hi);
        steps += 1;
        if g >= 0.0 {
            break;
        }
        lo = hi;
        hi *= 2.0;
        if hi > 1e300 {
            // F falls for every β: the logits separate the classes; T → 0.
            return (lo, steps, false);
        }
    }
    let mut beta = if lo > 0.0 { lo } else { hi / 2.0 };
    for _ in 0..MAX_STEPS {
        let (_, g, h) = f(beta);
        steps += 1;
        if g.abs() <= tol(beta, h) {
            return (beta, steps, true);
        }
        if g < 0.0 {
            lo = beta;
        } else {
            hi = beta;
        }
        let newton = if h > 0.0 { beta - g / h } else { f64::NAN };
        let next = if newton > lo && newton < hi {
            newton
        } else {
            0.5 * (lo + hi)
        };
        if next == beta || hi - lo <= 4.0 * f64::EPSILON * hi {
            return (next, steps, true);
        }
        beta = next;
    }
    (beta, steps, false)
}

/// `softmax(z / t)` into `out`: every class 1/K when t = +inf.
pub(crate) fn softmax_at(z: &[f64], t: f64, out: &mut Vec<f64>) {
    if t == f64::INFINITY {
        out.extend(std::iter::repeat_n(1.0 / z.len() as f64, z.len()));
        return;
    }
    let m = z.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v / t));
    let start = out.len();
    let mut s = 0.0;
    for &v in z {
        let e = (v / t - m).exp();
        s += e;
        out.push(e);
    }
    for e in &mut out[start..] {
        *e /= s;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rows z = [0, 1] of labels 1 and 0 and z = [0, −1] of labels 1 and 0: by hand, F′(β) =
    /// (σ(β) − 1) + σ(β) + (1 − σ(−β)) − σ(−β) = 2·(2σ(β) − 1) ≥ 0 for β ≥ 0, so β = 0.
    #[test]
    fn uninformative_logits_give_an_infinite_temperature() {
        let rows = Rows {
            logits: vec![0.0, 1.0, 0.0, 1.0, 0.0, -1.0, 0.0, -1.0],
            labels: vec![1, 0, 1, 0],
            weights: vec![1.0; 4],
        };
        let m = fit(&rows, 2).unwrap();
        assert_eq!(m.a, Some(f64::INFINITY));
    }

    /// One row z = [0, 1] of label 1 and one z = [0, 1] of label 0, weights 3 and 1: F′(β) =
    /// 4σ(β) − 3 = 0 at σ(β) = 3/4, β = ln 3, T = 1 / ln 3.
    #[test]
    fn the_optimum_solves_the_score_equation() {
        let rows = Rows {
            logits: vec![0.0, 1.0, 0.0, 1.0],
            labels: vec![1, 0],
            weights: vec![3.0, 1.0],
        };
        let m = fit(&rows, 2).unwrap();
        let want = 1.0 / 3f64.ln();
        let got = m.a.unwrap();
        assert!((got - want).abs() <= 1e-12 * want, "{got} vs {want}");
        assert_eq!(m.converged, Some(true));
    }
}
