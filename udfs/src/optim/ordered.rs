//! The projected Newton method of the ordered fits (`fit_ilps`, `fit_field_calib`): a
//! piecewise-linear η through K knots `a_k = logit(k/(K+1))` with ordered values `b_1 ≤ … ≤
//! b_K`, plus one free offset per field value, fitted on the summed log loss and an L2
//! penalty on the offsets.
//!
//! Written in x = (b_1, d_1, …, d_{K−1}) with `b_{k+1} = b_k + d_k`, the order becomes the
//! bounds `d ≥ 0`; Bertsekas' projected Newton method (1982) takes a Newton step on the
//! variables not held at their bound, a scaled gradient step on those that are, and an Armijo
//! search along the projection arc. The offsets are eliminated by their Schur complement (the
//! Hessian's offset block is diagonal), so each step solves a dense K×K system (the 2-D
//! suffix sums of the tridiagonal Hessian in b) by Cholesky: O(rows + K²·values) a step.
//! Knots without data are filled by interpolation ([`fill_unsupported`]).
//!
//! The nodes of one (field value, knot) share their η's line, so a step sums a long run of
//! them by Taylor series over moments of their λ computed once ([`Taylor`]) instead of node
//! by node: O(runs + K²·values) a step once the moments are known.

// Dense matrices read best with index loops.
#![allow(clippy::needless_range_loop)]

use crate::fastmath::ln_normal;

const MAX_ITERATIONS: i32 = 500;

/// The knots `a_k = ln(p / (1 − p))`, `p = k / (K + 1)`, k = 1..K.
pub(crate) fn ilps_knots(k: usize) -> Vec<f64> {
    (1..=k)
        .map(|i| {
            let p = i as f64 / (k + 1) as f64;
            (p / (1.0 - p)).ln()
        })
        .collect()
}

/// One quadrature node located among the knots: η = (1 − λ)·b[k] + λ·b[k+1], with weight `a`
/// on softplus(η) and `t` on −η.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Located {
    pub k: usize,
    pub lambda: f64,
    pub a: f64,
    pub t: f64,
}

/// A node's weights in [`Nodes::tag`]: a row of class 0 or 1 (a = 1, t = the class), or the
/// weights stored in [`Nodes::weights`].
const TAG_STORED: u8 = 2;

/// A node's weights (a, t) from its tag, taking the next stored weights for
/// [`TAG_STORED`].
#[inline(always)]
fn node_weights<'a>(tag: u8, stored: &mut impl Iterator<Item = &'a (f64, f64)>) -> (f64, f64) {
    if tag == TAG_STORED {
        stored.next().copied().unwrap_or((0.0, 0.0))
    } else {
        (1.0, tag as f64)
    }
}

/// A node's λ in [0, 1] as a fixed-point fraction of `u32::MAX` ([`Nodes::lambda`]): 4
/// bytes where an f64 takes 8 (tens of millions of nodes), within 1.2e-10 of the λ located,
/// which moves η by that times the knots' step, far below what the fit resolves.
const LAMBDA_SCALE: f64 = u32::MAX as f64;

#[inline]
fn lambda_code(lambda: f64) -> u32 {
    // A saturating cast: λ is in [0, 1].
    (lambda * LAMBDA_SCALE).round() as u32
}

#[inline]
fn lambda_of(code: u32) -> f64 {
    f64::from(code) * (1.0 / LAMBDA_SCALE)
}

/// The quadrature nodes of an ordered fit, grouped by field value, in about 5 bytes a node:
/// each node's λ (fixed-point: [`lambda_code`]) and a one-byte tag, its field value and knot in the run it belongs to, and
/// (a, t) stored only for nodes that are not single rows of class 0 or 1. A fit over 20M
/// distinct scores holds 20M nodes.
#[derive(Debug, Default)]
pub(crate) struct Nodes {
    lambda: Vec<u32>,
    /// 0 or 1: a row of that class; [`TAG_STORED`]: the node's (a, t) are the next of
    /// `weights`.
    tag: Vec<u8>,
    weights: Vec<(f64, f64)>,
    /// Consecutive nodes of one (field value, knot), in node order.
    runs: Vec<Run>,
}

/// Nodes `start..` (up to the next run's start) of field value `z` at knot `k`; their stored
/// weights start at `weights`.
#[derive(Debug, Clone, Copy)]
struct Run {
    z: usize,
    k: usize,
    start: usize,
    weights: usize,
}

impl Nodes {
    /// Room for `nodes` nodes, all single rows: the lists grow exactly, where doubling could
    /// hold twice the 5 bytes a node (tens of millions of nodes).
    pub(crate) fn with_capacity(nodes: usize) -> Self {
        Nodes {
            lambda: Vec::with_capacity(nodes),
            tag: Vec::with_capacity(nodes),
            ..Default::default()
        }
    }

    /// Adds a node of field value `z` (field values come in ascending order).
    pub(crate) fn push(&mut self, z: usize, p: Located) {
        let start = self.lambda.len();
        match self.runs.last() {
            Some(r) if r.z == z && r.k == p.k => {}
            last => {
                debug_assert!(
                    last.is_none_or(|r| r.z <= z),
                    "nodes grouped by field value"
                );
                self.runs.push(Run {
                    z,
                    k: p.k,
                    start,
                    weights: self.weights.len(),
                });
            }
        }
        self.lambda.push(lambda_code(p.lambda));
        if p.a == 1.0 && (p.t == 0.0 || p.t == 1.0) {
            self.tag.push(p.t as u8);
        } else {
            self.tag.push(TAG_STORED);
            self.weights.push((p.a, p.t));
        }
    }

    /// Adds `other`'s nodes after these (its field values come after these ones).
    pub(crate) fn append(&mut self, other: Nodes) {
        let (start, weights) = (self.lambda.len(), self.weights.len());
        debug_assert!(
            self.runs
                .last()
                .zip(other.runs.first())
                .is_none_or(|(a, b)| a.z < b.z),
            "nodes grouped by field value"
        );
        self.runs.extend(other.runs.iter().map(|r| Run {
            start: r.start + start,
            weights: r.weights + weights,
            ..*r
        }));
        self.lambda.extend_from_slice(&other.lambda);
        self.tag.extend_from_slice(&other.tag);
        self.weights.extend_from_slice(&other.weights);
    }

    pub(crate) fn len(&self) -> usize {
        self.lambda.len()
    }

    /// The field value of node `i` (`i` < len).
    fn z_of(&self, i: usize) -> usize {
        self.runs[self.runs.partition_point(|r| r.start <= i) - 1].z
    }

    /// Calls `f` with each run's part in nodes `range`, in order: the run's index when the
    /// part is the whole run, its field value, knot, the nodes' λ and tags, and the stored
    /// weights of its nodes that have them.
    fn for_each_run(
        &self,
        range: std::ops::Range<usize>,
        mut f: impl FnMut(Option<usize>, usize, usize, &[u32], &[u8], &[(f64, f64)]),
    ) {
        if range.is_empty() {
            return;
        }
        let first = self.runs.partition_point(|r| r.start <= range.start) - 1;
        for (ri, run) in self.runs.iter().enumerate().skip(first) {
            if run.start >= range.end {
                break;
            }
            let next = self.runs.get(ri + 1);
            let end = next.map_or(self.len(), |n| n.start).min(range.end);
            let start = run.start.max(range.start);
            // The run's stored weights before node `i` (counted only within a run: a range
            // may split one).
            let stored_before = |i: usize| match i {
                _ if i == run.start => run.weights,
                _ if next.is_some_and(|n| n.start == i) => next.map_or(0, |n| n.weights),
                _ if i == self.len() => self.weights.len(),
                _ => {
                    run.weights
                        + self.tag[run.start..i]
                            .iter()
                            .filter(|&&t| t == TAG_STORED)
                            .count()
                }
            };
            let weights = &self.weights[stored_before(start)..stored_before(end)];
            let run_end = next.map_or(self.len(), |n| n.start);
            let whole = (start == run.start && end == run_end).then_some(ri);
            f(
                whole,
                run.z,
                run.k,
                &self.lambda[start..end],
                &self.tag[start..end],
                weights,
            );
        }
    }

    /// Calls `f` with the field value and the node of each of nodes `range`, in order.
    fn for_each(&self, range: std::ops::Range<usize>, mut f: impl FnMut(usize, &Located)) {
        self.for_each_run(range, |_, z, k, lambda, tag, weights| {
            let mut stored = weights.iter();
            for (&code, &tag) in lambda.iter().zip(tag) {
                let (a, t) = node_weights(tag, &mut stored);
                let lambda = lambda_of(code);
                f(z, &Located { k, lambda, a, t });
            }
        });
    }
}

/// Locates score `s` among the knots.
pub(crate) fn locate(knots: &[f64], s: f64) -> (usize, f64) {
    let n = knots.len();
    if s <= knots[0] || n == 1 {
        return (0, 0.0);
    }
    if s >= knots[n - 1] {
        return (n - 1, 0.0);
    }
    let k = knots.partition_point(|&a| a <= s) - 1; // knots[k] <= s < knots[k+1]
    (k, (s - knots[k]) / (knots[k + 1] - knots[k]))
}

/// [`locate`] for scores taken in ascending order: the knot found by walking up from `from`,
/// the knot of the score before (the same result; a score below knot `from` is located
/// afresh).
pub(crate) fn locate_from(knots: &[f64], from: usize, s: f64) -> (usize, f64) {
    let n = knots.len();
    if s <= knots[0] || n == 1 || s >= knots[n - 1] {
        return locate(knots, s);
    }
    // knots[0] < s < knots[n − 1], so the walk stops below n − 1.
    let mut k = from.min(n - 2);
    if knots[k] > s {
        return locate(knots, s);
    }
    while knots[k + 1] <= s {
        k += 1;
    }
    (k, (s - knots[k]) / (knots[k + 1] - knots[k]))
}

/// The Hessian in x from the tridiagonal Hessian in b (`diag`, `off` = superdiagonal).
pub(crate) fn suffix_hessian(diag: &[f64], off: &[f64]) -> Vec<Vec<f64>> {
    let kn = diag.len();
    // Row sums of H_b restricted to columns ≥ j, for each row k: S[k][j]. Then
    // H_x[i][j] = Σ_{k≥i} S[k][j]. Both are cumulative sums of a tridiagonal matrix.
    let hb = |k: usize, l: usize| -> f64 {
        if k == l {
            diag[k]
        } else if l == k + 1 {
            off[k]
        } else if k == l + 1 {
            off[l]
        } else {
            0.0
        }
    };
    let mut hx = vec![vec![0.0; kn]; kn];
    // Column suffix sums per row, then row suffix sums.
    let mut col = vec![vec![0.0; kn]; kn];
    for k in 0..kn {
        let mut acc = 0.0;
        for j in (0..kn).rev() {
            if j + 1 >= k && j <= k + 1 {
                acc += hb(k, j);
            }
            col[k][j] = acc;
        }
    }
    for j in 0..kn {
        let mut acc = 0.0;
        for i in (0..kn).rev() {
            acc += col[i][j];
            hx[i][j] = acc;
        }
    }
    hx
}

/// Solves H_FF p = −g_F by Cholesky, with a small ridge for directions without curvature
/// (knots without data).
pub(crate) fn newton_step(h: &[Vec<f64>], g: &[f64], free: &[usize]) -> Vec<f64> {
    let m = free.len();
    let scale = free
        .iter()
        .map(|&j| h[j][j])
        .fold(0.0, f64::max)
        .max(1e-300);
    let ridge = 1e-12 * scale;
    let mut l = vec![vec![0.0; m]; m];
    for r in 0..m {
        for c in 0..=r {
            let mut s = h[free[r]][free[c]];
            if r == c {
                s += ridge;
            }
            for k in 0..c {
                s -= l[r][k] * l[c][k];
            }
            if r == c {
                l[r][c] = s.max(ridge).sqrt();
            } else {
                l[r][c] = s / l[c][c];
            }
        }
    }
    let mut y = vec![0.0; m];
    for r in 0..m {
        let mut s = -g[free[r]];
        for k in 0..r {
            s -= l[r][k] * y[k];
        }
        y[r] = s / l[r][r];
    }
    let mut p = vec![0.0; m];
    for r in (0..m).rev() {
        let mut s = y[r];
        for k in r + 1..m {
            s -= l[k][r] * p[k];
        }
        p[r] = s / l[r][r];
    }
    p
}

/// Which knots some node depends on.
pub(crate) fn supported(nodes: &Nodes, kn: usize) -> Vec<bool> {
    let mut out = vec![false; kn];
    nodes.for_each(0..nodes.len(), |_, p| {
        if p.a == 0.0 && p.t == 0.0 {
            return;
        }
        if p.lambda < 1.0 {
            out[p.k] = true;
        }
        if p.lambda > 0.0 {
            out[p.k + 1] = true;
        }
    });
    out
}

/// Knots without data: interpolated in `a` between the nearest supported knots, constant
/// beyond the outermost ones (see the module documentation).
pub(crate) fn fill_unsupported(knots: &[f64], b: &mut [f64], supported: &[bool]) {
    let idx: Vec<usize> = (0..b.len()).filter(|&k| supported[k]).collect();
    let (Some(&first), Some(&last)) = (idx.first(), idx.last()) else {
        return;
    };
    for k in 0..first {
        b[k] = b[first];
    }
    for k in last + 1..b.len() {
        b[k] = b[last];
    }
    for w in idx.windows(2) {
        let (lo, hi) = (w[0], w[1]);
        for k in lo + 1..hi {
            let t = (knots[k] - knots[lo]) / (knots[hi] - knots[lo]);
            b[k] = b[lo] + t * (b[hi] - b[lo]);
        }
    }
}

/// The result of [`solve_with_offsets`].
pub(crate) struct OrderedFit {
    /// Knot values (knots without data filled in).
    pub b: Vec<f64>,
    /// One offset per field value.
    pub g: Vec<f64>,
    /// The summed data term (without the penalty).
    pub data_loss: f64,
    pub iterations: i32,
    pub converged: bool,
}

/// Nodes a chunk of a pass over the nodes holds at least (it ends where a field value does).
const CHUNK_NODES: usize = 1 << 16;

/// The sums of a pass over the nodes at (b, g): the data term and its derivatives.
struct Sums {
    /// `Σ a·softplus(e) − t·e`, e = η + g_z.
    value: f64,
    /// Gradient, Hessian diagonal and superdiagonal in b.
    gb: Vec<f64>,
    diag: Vec<f64>,
    off: Vec<f64>,
    /// Gradient and Hessian diagonal in g, of the data term: for the field values from
    /// `z0` on (a chunk's) or all of them.
    z0: usize,
    gg: Vec<f64>,
    dz: Vec<f64>,
    /// ∂²/∂b_k∂g_z, at `[(z − z0)·kn + k]`.
    cb: Vec<f64>,
}

impl Sums {
    fn new(kn: usize, z0: usize, zs: usize) -> Self {
        Sums {
            value: 0.0,
            gb: vec![0.0; kn],
            diag: vec![0.0; kn],
            off: vec![0.0; kn.saturating_sub(1)],
            z0,
            gg: vec![0.0; zs],
            dz: vec![0.0; zs],
            cb: vec![0.0; zs * kn],
        }
    }

    /// Adds a chunk's sums (chunks are added in node order, so the sums do not depend on
    /// the threads).
    fn add(&mut self, c: &Sums) {
        self.value += c.value;
        for (v, w) in [
            (&mut self.gb, &c.gb),
            (&mut self.diag, &c.diag),
            (&mut self.off, &c.off),
        ] {
            v.iter_mut().zip(w).for_each(|(a, b)| *a += b);
        }
        let kn = self.gb.len();
        let z = c.z0 - self.z0;
        self.gg[z..z + c.gg.len()].copy_from_slice(&c.gg);
        self.dz[z..z + c.dz.len()].copy_from_slice(&c.dz);
        self.cb[z * kn..z * kn + c.cb.len()].copy_from_slice(&c.cb);
    }
}

/// The chunks of a pass: ranges of at least [`CHUNK_NODES`] nodes, ending where a field value
/// does, so that no two touch the same offset (nodes come grouped by field value), and
/// always where a run does, so that a run's sums can come from its [`Taylor`] moments.
fn chunks(nodes: &Nodes, zn: usize) -> Vec<std::ops::Range<usize>> {
    let mut out = vec![];
    let mut start = 0;
    while start < nodes.len() {
        let mut end = (start + CHUNK_NODES).min(nodes.len());
        if end < nodes.len() {
            // The first run at or after `end`: of another field value when there are
            // field values.
            let z = nodes.z_of(end - 1);
            let next = nodes.runs.partition_point(|r| r.start < end);
            end = nodes.runs[next..]
                .iter()
                .find(|r| zn == 0 || r.z != z)
                .map_or(nodes.len(), |r| r.start);
        }
        out.push(start..end);
        start = end;
    }
    out
}

/// Runs of fewer nodes are summed node by node: their records (`RECORD` numbers a run) would
/// hold more memory than they save in time (docs/performance.md).
const TAYLOR_MIN_NODES: usize = 32;
/// The highest order of the series.
const TAYLOR_MAX_ORDER: usize = 16;
/// A run's record in [`Taylor::records`]: its centre λ̄, half-width (the largest |λ − λ̄|),
/// `Σ t`, `Σ t·(λ − λ̄)` and the moments `A_j = Σ a·(λ − λ̄)^j`, j = 0..=order + 2.
const RECORD: usize = 4 + TAYLOR_MAX_ORDER + 3;

/// The sums of a run's nodes as series in their λ: a run's nodes share knot and field
/// value, so their η = e₀ + (λ − λ̄)·d lie on one line (e₀ = η at the run's centre λ̄,
/// d = b_{k+1} − b_k), and each sum a pass needs, `Σ a·f(η)·λ^i` for f = softplus, σ, σ',
/// is the Taylor series of f around e₀ over the moments of the nodes' (λ − λ̄) computed
/// once: one exponential, one logarithm and a few hundred multiplications a run, where
/// the nodes cost one exponential and one logarithm each. A run takes its series when
/// its bound on the truncation error (see [`taylor_order`]) is met at an order up to
/// [`TAYLOR_MAX_ORDER`]; otherwise (a steep η across a wide knot interval) its nodes are
/// summed one by one, as are runs of fewer than [`TAYLOR_MIN_NODES`] nodes.
struct Taylor {
    /// Per run, the start of its record in `records`, or `usize::MAX`: summed node by node.
    at: Vec<usize>,
    records: Vec<f64>,
}

impl Taylor {
    /// The records of the runs of [`TAYLOR_MIN_NODES`] nodes or more, written in place
    /// with the chunks (which end where runs do) spread over the cores.
    fn new(nodes: &Nodes, chunks: &[std::ops::Range<usize>]) -> Self {
        let run_len = |ri: usize| {
            let end = nodes.runs.get(ri + 1).map_or(nodes.len(), |n| n.start);
            end - nodes.runs[ri].start
        };
        let mut at = vec![usize::MAX; nodes.runs.len()];
        let mut total = 0;
        for (ri, at) in at.iter_mut().enumerate() {
            if run_len(ri) >= TAYLOR_MIN_NODES {
                *at = total;
                total += RECORD;
            }
        }
        let mut records = vec![0.0; total];
        // Each chunk's records: the slice from its first run's record on.
        let mut parts: Vec<(std::ops::Range<usize>, &mut [f64])> = vec![];
        let mut rest = records.as_mut_slice();
        for chunk in chunks {
            let first = nodes.runs.partition_point(|r| r.start < chunk.start);
            let end = nodes.runs.partition_point(|r| r.start < chunk.end);
            let len = (first..end).filter(|&ri| at[ri] != usize::MAX).count() * RECORD;
            let (part, tail) = std::mem::take(&mut rest).split_at_mut(len);
            rest = tail;
            parts.push((chunk.clone(), part));
        }
        crate::parallel::for_each_mut(&mut parts, crate::parallel::cores(), |(range, part)| {
            let mut next = part.chunks_exact_mut(RECORD);
            nodes.for_each_run(range.clone(), |whole, _, _, lambda, tag, weights| {
                if lambda.len() >= TAYLOR_MIN_NODES && whole.is_some() {
                    if let Some(record) = next.next() {
                        run_record(record, lambda, tag, weights);
                    }
                }
            });
        });
        Taylor { at, records }
    }

    /// Run `ri`'s record, if it has one.
    fn record(&self, ri: usize) -> Option<&[f64]> {
        let at = *self.at.get(ri)?;
        self.records.get(at..at.checked_add(RECORD)?)
    }
}

/// Writes a run's [`Taylor`] record (`RECORD` zeros) from its nodes' λ, tags and stored
/// weights.
fn run_record(record: &mut [f64], lambda: &[u32], tag: &[u8], weights: &[(f64, f64)]) {
    let (lo, hi) = lambda
        .iter()
        .fold((u32::MAX, 0), |(lo, hi), &l| (lo.min(l), hi.max(l)));
    let (lo, hi) = (lambda_of(lo), lambda_of(hi));
    let centre = 0.5 * (lo + hi);
    record[0] = centre;
    record[1] = 0.5 * (hi - lo);
    let mut stored = weights.iter();
    let (head, moments) = record.split_at_mut(4);
    // Eight nodes at a time, so that their powers are multiplied side by side rather than
    // one chain of RECORD multiplications a node.
    const LANES: usize = 8;
    let (mut a, mut mu) = ([0.0; LANES], [0.0; LANES]);
    for (block_l, block_t) in lambda.chunks(LANES).zip(tag.chunks(LANES)) {
        for i in 0..LANES {
            // Lanes past the run's end weigh nothing.
            let (w, t, l) = match (block_l.get(i), block_t.get(i)) {
                (Some(&l), Some(&tag)) => {
                    let (w, t) = node_weights(tag, &mut stored);
                    (w, t, lambda_of(l))
                }
                _ => (0.0, 0.0, centre),
            };
            a[i] = w;
            mu[i] = l - centre;
            head[2] += t;
            head[3] += t * mu[i];
        }
        for m in moments.iter_mut() {
            let mut sum = 0.0;
            for i in 0..LANES {
                sum += a[i];
                a[i] *= mu[i];
            }
            *m += sum;
        }
    }
}

/// The order n at which the series of a run of half-width `half` around η = `e0` with slope
/// `d` stops, if one up to [`TAYLOR_MAX_ORDER`] keeps its error below 1e-17 of the run's
/// weight `A_0`. softplus's singularities nearest the real line are at ±iπ, so its series
/// around e₀ converge within R = |e₀ ± iπ|; on the circle of radius 0.8·R, |σ| ≤ 4 (the
/// poles are at least 0.2·R ≥ 0.2·π away) and |σ'| ≤ 4/(0.2·R)², so Cauchy's estimates
/// bound the coefficients of order m by 4·(0.8·R)^−m·(m + 1)·… and the terms left out past
/// order n, with |(λ − λ̄)·d| ≤ ρ·0.8·R, by `8·(n + 2)·ρ^(n + 1) / (1 − ρ)` of `A_0`,
/// generously. A unit test holds the sums to the node-by-node ones.
fn taylor_order(e0: f64, d: f64, half: f64) -> Option<usize> {
    const PI_2: f64 = std::f64::consts::PI * std::f64::consts::PI;
    let rho = (d * half).abs() / (0.8 * (e0 * e0 + PI_2).sqrt());
    if rho.is_nan() || rho >= 0.5 {
        return None;
    }
    let mut power = rho;
    for n in 0..=TAYLOR_MAX_ORDER {
        if 8.0 * (n as f64 + 2.0) * power / (1.0 - rho) <= 1e-17 {
            return Some(n);
        }
        power *= rho;
    }
    None
}

/// 1/m for m = 1..=[`TAYLOR_MAX_ORDER`] + 1 (index 0 unused).
const RECIPROCALS: [f64; TAYLOR_MAX_ORDER + 2] = {
    let mut r = [0.0; TAYLOR_MAX_ORDER + 2];
    let mut m = 1;
    while m < r.len() {
        r[m] = 1.0 / m as f64;
        m += 1;
    }
    r
};

/// A run's ten sums (those of [`chunk_sums`]' `r_sum`) from its [`Taylor`] record, at knot
/// values `bk`, `bk1` and offset `gz`; `None` when the series would need too high an order.
fn taylor_sums(record: &[f64], bk: f64, bk1: f64, gz: f64) -> Option<[f64; 10]> {
    let (centre, half, t_sum, t_mu) = (record[0], record[1], record[2], record[3]);
    let a = &record[4..];
    let d = bk1 - bk;
    let e0 = bk + centre * d + gz;
    let n = taylor_order(e0, d, half)?;
    // σ's Taylor coefficients around e₀, c_0..=c_{n+1}, from σ' = σ·(1 − σ):
    // (m + 1)·c_{m+1} = c_m·(1 − 2·c_0) − Σ_{j=1}^{m−1} c_j·c_{m−j}, with c_1 = σ·(1 − σ)
    // and 1 − 2σ taken from the complement computed apart, so that no coefficient loses
    // its digits to 1 − σ near σ = 1.
    let q = (-e0.abs()).exp();
    let u = 1.0 + q;
    let inv = 1.0 / u;
    let (sigma, complement) = if e0 >= 0.0 {
        (inv, q * inv)
    } else {
        (q * inv, inv)
    };
    let softplus0 = e0.max(0.0) + ln_normal(u) + (q - (u - 1.0)) * inv;
    let mut c = [0.0f64; TAYLOR_MAX_ORDER + 2];
    c[0] = sigma;
    c[1] = sigma * complement;
    let one_minus_2c0 = complement - sigma;
    for m in 1..=n {
        // Σ_{j=1}^{m−1} c_j·c_{m−j}: each product twice but the middle one.
        let mut pairs = 0.0;
        for j in 1..m.div_ceil(2) {
            pairs += c[j] * c[m - j];
        }
        pairs *= 2.0;
        if m % 2 == 0 {
            pairs += c[m / 2] * c[m / 2];
        }
        c[m + 1] = (c[m] * one_minus_2c0 - pairs) * RECIPROCALS[m + 1];
    }
    // Σ a·softplus, Σ a·σ·μ^i (i = 0, 1), Σ a·σ'·μ^i (i = 0, 1, 2), μ = λ − λ̄.
    let mut softplus = softplus0 * a[0];
    let (mut s0, mut s1) = (0.0, 0.0);
    let (mut h0, mut h1, mut h2) = (0.0, 0.0, 0.0);
    let mut dm = 1.0; // d^m
    for m in 0..=n {
        let cs = c[m] * dm;
        let ch = (m + 1) as f64 * c[m + 1] * dm;
        s0 += cs * a[m];
        s1 += cs * a[m + 1];
        h0 += ch * a[m];
        h1 += ch * a[m + 1];
        h2 += ch * a[m + 2];
        softplus += cs * d * a[m + 1] * RECIPROCALS[m + 1];
        dm *= d;
    }
    // In λ = λ̄ + μ: w0 = 1 − λ = (1 − λ̄) − μ, w1 = λ = λ̄ + μ.
    let (v0, v1) = (1.0 - centre, centre);
    let t_w0 = v0 * t_sum - t_mu;
    let t_w1 = v1 * t_sum + t_mu;
    Some([
        softplus - (e0 * t_sum + d * t_mu),
        v0 * s0 - s1 - t_w0,
        v1 * s0 + s1 - t_w1,
        v0 * v0 * h0 - 2.0 * v0 * h1 + h2,
        v1 * v1 * h0 + 2.0 * v1 * h1 + h2,
        v0 * v1 * h0 + (v0 - v1) * h1 - h2,
        s0 - t_sum,
        h0,
        v0 * h0 - h1,
        v1 * h0 + h1,
    ])
}

/// One chunk's sums: each run's from its [`Taylor`] series where it has one, else
/// [`node_sums`]; a run's nodes share their knot and field value, so its sums are added to
/// the chunk's once a run.
fn chunk_sums(
    nodes: &Nodes,
    taylor: &Taylor,
    range: std::ops::Range<usize>,
    b: &[f64],
    g: &[f64],
    kn: usize,
) -> Sums {
    let zn = g.len();
    let z0 = if zn > 0 { nodes.z_of(range.start) } else { 0 };
    let zs = if zn > 0 {
        nodes.z_of(range.end - 1) + 1 - z0
    } else {
        0
    };
    let mut c = Sums::new(kn, z0, zs);
    nodes.for_each_run(range, |whole, z, k, lambda, tag, weights| {
        // η = b_k + λ·(b_{k+1} − b_k) + g_z; at the last knot λ is 0.
        let (bk, bk1) = (b[k], b.get(k + 1).copied().unwrap_or(b[k]));
        let gz = if zn > 0 { g[z] } else { 0.0 };
        let r_sum = whole
            .and_then(|ri| taylor.record(ri))
            .and_then(|record| taylor_sums(record, bk, bk1, gz))
            .unwrap_or_else(|| node_sums(lambda, tag, weights, bk, bk1, gz));
        c.value += r_sum[0];
        c.gb[k] += r_sum[1];
        c.diag[k] += r_sum[3];
        if k + 1 < kn {
            c.gb[k + 1] += r_sum[2];
            c.diag[k + 1] += r_sum[4];
            c.off[k] += r_sum[5];
        }
        if zn > 0 {
            let zi = z - z0;
            c.gg[zi] += r_sum[6];
            c.dz[zi] += r_sum[7];
            c.cb[zi * kn + k] += r_sum[8];
            if k + 1 < kn {
                c.cb[zi * kn + k + 1] += r_sum[9];
            }
        }
    });
    c
}

/// A run's ten sums node by node: the value `Σ a·softplus(e) − t·e` and its derivatives ∂b_k,
/// ∂b_{k+1}, ∂²b_k, ∂²b_{k+1}, ∂b_k∂b_{k+1}, ∂g, ∂²g, ∂g∂b_k, ∂g∂b_{k+1}, with one exponential
/// and one logarithm a node: softplus(e) = max(e, 0) + ln(1 + q) and σ(e) from the same
/// q = exp(−|e|) (the values of `softplus` and `sigmoid`, to an ulp or two).
fn node_sums(
    lambda: &[u32],
    tag: &[u8],
    weights: &[(f64, f64)],
    bk: f64,
    bk1: f64,
    gz: f64,
) -> [f64; 10] {
    let mut r_sum = [0.0f64; 10];
    let mut stored = weights.iter();
    for (&l, &tag) in lambda.iter().zip(tag) {
        let (a, t) = node_weights(tag, &mut stored);
        let l = lambda_of(l);
        let (w0, w1) = (1.0 - l, l);
        let e = w0 * bk + w1 * bk1 + gz;
        let q = (-e.abs()).exp();
        let u = 1.0 + q;
        // ln(1 + q): the logarithm of the rounded u, corrected by its rounding (u is in
        // [1, 2], a normal number, so the branch-free logarithm applies).
        let inv = 1.0 / u;
        let softplus = e.max(0.0) + ln_normal(u) + (q - (u - 1.0)) * inv;
        let s = if e >= 0.0 { inv } else { q * inv };
        let r = a * s - t;
        let h = a * s * (1.0 - s);
        r_sum[0] += a * softplus - t * e;
        r_sum[1] += r * w0;
        r_sum[2] += r * w1;
        r_sum[3] += h * w0 * w0;
        r_sum[4] += h * w1 * w1;
        r_sum[5] += h * w0 * w1;
        r_sum[6] += r;
        r_sum[7] += h;
        r_sum[8] += h * w0;
        r_sum[9] += h * w1;
    }
    r_sum
}

/// The nodes as a pass reads them: in chunks, with the runs' [`Taylor`] records.
struct Passes<'a> {
    nodes: &'a Nodes,
    chunks: Vec<std::ops::Range<usize>>,
    taylor: Taylor,
}

impl<'a> Passes<'a> {
    /// The chunks of `nodes` for `zn` field values, and their runs' records.
    fn new(nodes: &'a Nodes, zn: usize) -> Self {
        let chunks = chunks(nodes, zn);
        let taylor = Taylor::new(nodes, &chunks);
        Passes {
            nodes,
            chunks,
            taylor,
        }
    }

    /// The sums of all nodes at (b, g), the chunks spread over the machine's cores.
    fn pass(&self, b: &[f64], g: &[f64]) -> Sums {
        self.pass_on(crate::parallel::cores(), b, g)
    }

    /// [`Self::pass`] on at most `threads` threads.
    fn pass_on(&self, threads: usize, b: &[f64], g: &[f64]) -> Sums {
        let kn = b.len();
        let parts = crate::parallel::map_in_order(self.chunks.len(), threads, |i| {
            chunk_sums(self.nodes, &self.taylor, self.chunks[i].clone(), b, g, kn)
        });
        let mut total = Sums::new(kn, 0, g.len());
        for c in &parts {
            total.add(c);
        }
        total
    }
}

/// Minimises `Σ a·softplus(η + g_z) − t·(η + g_z) + l2/2·Σ g_z²` over ordered knot values and
/// `zn` offsets (`zn` = 0: plain ILPS, every node's field index ignored), starting from the
/// identity η(l) = l and g = 0. The nodes come grouped by field value. Each step makes one
/// pass over them, in chunks spread over the cores: the value at a trial point comes with
/// its derivatives, which the next step uses once the point is accepted.
pub(crate) fn solve_with_offsets(
    nodes: &Nodes,
    zn: usize,
    l2: f64,
    knots: &[f64],
    rows: f64,
) -> OrderedFit {
    let kn = knots.len();
    let passes = Passes::new(nodes, zn);
    let penalty = |g: &[f64]| 0.5 * l2 * g.iter().map(|v| v * v).sum::<f64>();
    let to_b = |x: &[f64]| -> Vec<f64> {
        let mut acc = 0.0;
        x.iter()
            .enumerate()
            .map(|(j, v)| {
                acc = if j == 0 { *v } else { acc + v };
                acc
            })
            .collect()
    };
    let mut x: Vec<f64> = std::iter::once(knots[0])
        .chain(knots.windows(2).map(|w| w[1] - w[0]))
        .collect();
    let mut g = vec![0.0; zn];
    let mut b = to_b(&x);
    let mut sums = passes.pass(&b, &g);
    let mut f = sums.value + penalty(&g);
    let tol = 1e-13 * rows.max(1.0);
    let (mut iterations, mut converged) = (0, false);
    while iterations < MAX_ITERATIONS {
        if crate::cancel::requested() {
            break;
        }
        iterations += 1;
        let gg: Vec<f64> = (0..zn).map(|z| sums.gg[z] + l2 * g[z]).collect();
        let mut gx = vec![0.0; kn];
        let mut acc = 0.0;
        for k in (0..kn).rev() {
            acc += sums.gb[k];
            gx[k] = acc;
        }
        // Cross terms in x: suffix sums over the knots, per field value.
        let mut cx = std::mem::take(&mut sums.cb);
        for row in cx.chunks_mut(kn.max(1)).take(zn) {
            for k in (0..kn.saturating_sub(1)).rev() {
                row[k] += row[k + 1];
            }
        }
        let at_bound = |j: usize| j > 0 && x[j] <= 0.0 && gx[j] > 0.0;
        let pg = (0..kn)
            .map(|j| if at_bound(j) { 0.0 } else { gx[j].abs() })
            .chain(gg.iter().map(|v| v.abs()))
            .fold(0.0, f64::max);
        if pg <= tol {
            converged = true;
            break;
        }
        let eps = pg.min(1e-8);
        let active: Vec<bool> = (0..kn)
            .map(|j| j > 0 && x[j] <= eps && gx[j] > 0.0)
            .collect();
        let free: Vec<usize> = (0..kn).filter(|&j| !active[j]).collect();
        let hx = suffix_hessian(&sums.diag, &sums.off);
        let dz: Vec<f64> = sums.dz.iter().map(|&v| v + l2).collect();
        let dmax = dz.iter().fold(0.0f64, |a, &v| a.max(v));
        let dz: Vec<f64> = dz
            .iter()
            .map(|&v| v.max(1e-12 * dmax.max(1e-300)))
            .collect();
        // Schur complement on the free x: S = H_FF − C_F D⁻¹ C_Fᵀ, rhs = −(g_F − C_F D⁻¹ gg),
        // summed a field value at a time.
        let m_free = free.len();
        let mut schur = vec![vec![0.0; m_free]; m_free];
        let mut rhs_grad: Vec<f64> = free.iter().map(|&i| gx[i]).collect();
        for (a, &i) in free.iter().enumerate() {
            for (c, &j) in free.iter().enumerate().take(a + 1) {
                schur[a][c] = hx[i][j];
            }
        }
        let mut scaled = vec![0.0; m_free];
        for z in 0..zn {
            let row = &cx[z * kn..(z + 1) * kn];
            let inv = 1.0 / dz[z];
            for (a, &i) in free.iter().enumerate() {
                scaled[a] = row[i] * inv;
                rhs_grad[a] -= scaled[a] * gg[z];
            }
            for (a, sa) in scaled.iter().enumerate() {
                let s_row = &mut schur[a];
                for (c, &j) in free.iter().enumerate().take(a + 1) {
                    s_row[c] -= sa * row[j];
                }
            }
        }
        for a in 0..m_free {
            for c in 0..a {
                schur[c][a] = schur[a][c];
            }
        }
        let all: Vec<usize> = (0..m_free).collect();
        let px_free = newton_step(&schur, &rhs_grad, &all);
        let mut px = vec![0.0; kn];
        for (a, &i) in free.iter().enumerate() {
            px[i] = px_free[a];
        }
        for j in 0..kn {
            if active[j] {
                px[j] = -gx[j] / hx[j][j].max(1e-12);
            }
        }
        let pgz: Vec<f64> = (0..zn)
            .map(|z| {
                let cross: f64 = free.iter().map(|&i| cx[z * kn + i] * px[i]).sum();
                -(gg[z] + cross) / dz[z]
            })
            .collect();
        let mut alpha = 1.0;
        let mut accepted = false;
        for _ in 0..60 {
            let tx: Vec<f64> = (0..kn)
                .map(|j| {
                    let v = x[j] + alpha * px[j];
                    if j > 0 {
                        v.max(0.0)
                    } else {
                        v
                    }
                })
                .collect();
            let tg: Vec<f64> = (0..zn).map(|z| g[z] + alpha * pgz[z]).collect();
            let tb = to_b(&tx);
            let trial = passes.pass(&tb, &tg);
            let tf = trial.value + penalty(&tg);
            let decrease: f64 = (0..kn).map(|j| gx[j] * (tx[j] - x[j])).sum::<f64>()
                + (0..zn).map(|z| gg[z] * (tg[z] - g[z])).sum::<f64>();
            if tf.is_finite() && tf <= f + 1e-4 * decrease {
                let done = (f - tf).abs() <= 1e-16 * f.abs().max(1e-300);
                x = tx;
                g = tg;
                b = tb;
                f = tf;
                sums = trial;
                accepted = true;
                converged = done;
                break;
            }
            alpha *= 0.5;
        }
        if !accepted || converged {
            converged = converged || pg <= 1e-9 * rows.max(1.0);
            break;
        }
        if b.iter().chain(&g).any(|v| v.abs() > 1e6) {
            // Diverging: separable past a knot, or an IPS objective unbounded below.
            break;
        }
    }
    fill_unsupported(knots, &mut b, &supported(nodes, kn));
    let data_loss = passes.pass(&b, &g).value;
    OrderedFit {
        b,
        g,
        data_loss,
        iterations,
        converged,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pass gives the same sums, to the last bit, on one thread or several: its chunks end
    /// on field values and are summed in node order, whatever thread computed them.
    #[test]
    fn a_pass_does_not_depend_on_the_threads() {
        let knots = ilps_knots(20);
        let zn = 40;
        // Field values of very different sizes, so chunks hold one or many of them.
        let mut nodes = Nodes::default();
        for z in 0..zn {
            let len = if z % 7 == 0 { 90_000 } else { 300 + 37 * z };
            let mut scores: Vec<f64> = (0..len)
                .map(|i| ((i * 7919 + z * 104_729) % 100_003) as f64 / 100_003.0 * 8.0 - 4.0)
                .collect();
            scores.sort_by(f64::total_cmp);
            for (i, s) in scores.into_iter().enumerate() {
                let (k, lambda) = locate(&knots, s);
                // Rows of both classes, and every 11th node a merged point.
                let (a, t) = match i % 11 {
                    0 => (3.0, 1.0),
                    _ => (1.0, ((i * 31 + z) % 5 < 2) as u8 as f64),
                };
                nodes.push(z, Located { k, lambda, a, t });
            }
        }
        let passes = Passes::new(&nodes, zn);
        assert!(passes.chunks.len() > 4, "{} chunks", passes.chunks.len());
        let b: Vec<f64> = knots.iter().map(|k| 0.9 * k).collect();
        let g: Vec<f64> = (0..zn).map(|z| 0.01 * z as f64 - 0.2).collect();
        let bits = |s: &Sums| -> Vec<u64> {
            std::iter::once(s.value)
                .chain(s.gb.iter().copied())
                .chain(s.diag.iter().copied())
                .chain(s.off.iter().copied())
                .chain(s.gg.iter().copied())
                .chain(s.dz.iter().copied())
                .chain(s.cb.iter().copied())
                .map(f64::to_bits)
                .collect()
        };
        let one = passes.pass_on(1, &b, &g);
        for threads in [2, 3, 8] {
            let many = passes.pass_on(threads, &b, &g);
            assert_eq!(bits(&one), bits(&many), "{threads} threads");
        }
        assert!(one.value.is_finite() && one.value > 0.0);
    }

    /// A node's λ is held within half a step of its fixed-point code (1.2e-10), 0 and 1
    /// exactly or within an ulp.
    #[test]
    fn lambda_codes_hold_lambda_to_a_step() {
        for i in 0..=100_000u32 {
            let lambda = f64::from(i) / 100_000.0 + f64::from(i % 7) * 1e-12;
            let lambda = lambda.min(1.0);
            let held = lambda_of(lambda_code(lambda));
            assert!(
                (held - lambda).abs() <= 0.5 / LAMBDA_SCALE + 1e-16,
                "{lambda}: {held}"
            );
        }
        assert_eq!(lambda_of(lambda_code(0.0)), 0.0);
        assert!((lambda_of(lambda_code(1.0)) - 1.0).abs() <= f64::EPSILON);
    }

    /// A pass's sums are those of the definition, node by node: `Σ a·softplus(e) − t·e` and
    /// its derivatives in b and g, computed here with std's `exp` and `ln_1p` over the nodes
    /// as pushed (rows of both classes, merged points, nodes at the outer knots), to 1e-10
    /// relative (sums of 200,000 terms added in another order; one node more or less moves a
    /// sum by about 1e-5): three field values over 6 knots (runs too wide for the series)
    /// and over 100 knots (most runs summed by their series), and ILPS's single one in
    /// several chunks.
    #[test]
    fn a_pass_gives_the_sums_of_the_definition() {
        for (zn, kn, per_value, series) in [
            (3, 6, 500, false),
            (3, 100, 20_000, true),
            (0, 6, 3 * CHUNK_NODES + 17, false),
            (0, 100, 3 * CHUNK_NODES + 17, true),
        ] {
            pass_matches_definition(zn, kn, per_value, series);
        }
    }

    fn pass_matches_definition(zn: usize, kn: usize, per_value: usize, series: bool) {
        let knots = ilps_knots(kn);
        let kn = knots.len();
        let mut nodes = Nodes::default();
        let mut plain: Vec<(usize, Located)> = vec![];
        for z in 0..zn.max(1) {
            for i in 0..per_value {
                let s = -6.0 + 12.0 * i as f64 / (per_value - 1) as f64;
                let (k, lambda) = locate(&knots, s);
                let (a, t) = match (i + z) % 7 {
                    0 => (2.5, 0.75),
                    1 | 4 => (1.0, 1.0),
                    _ => (1.0, 0.0),
                };
                let p = Located { k, lambda, a, t };
                nodes.push(z, p);
                // The definition at the λ the nodes hold (a fixed-point code of it).
                let held = lambda_of(lambda_code(lambda));
                plain.push((z, Located { lambda: held, ..p }));
            }
        }
        let b: Vec<f64> = knots.iter().map(|k| 0.8 * k + 0.1).collect();
        let g = &[0.3, -0.2, 0.05][..zn];
        let mut want = Sums::new(kn, 0, zn);
        for (z, p) in &plain {
            let bk1 = if p.k + 1 < kn { b[p.k + 1] } else { 0.0 };
            let e = (1.0 - p.lambda) * b[p.k] + p.lambda * bk1 + g.get(*z).unwrap_or(&0.0);
            let softplus = e.max(0.0) + (-e.abs()).exp().ln_1p();
            let sigma = 1.0 / (1.0 + (-e).exp());
            let (r, h) = (p.a * sigma - p.t, p.a * sigma * (1.0 - sigma));
            let (w0, w1) = (1.0 - p.lambda, p.lambda);
            want.value += p.a * softplus - p.t * e;
            want.gb[p.k] += r * w0;
            want.diag[p.k] += h * w0 * w0;
            if w1 != 0.0 {
                want.gb[p.k + 1] += r * w1;
                want.diag[p.k + 1] += h * w1 * w1;
                want.off[p.k] += h * w0 * w1;
            }
            if zn > 0 {
                want.cb[z * kn + p.k] += h * w0;
                if w1 != 0.0 {
                    want.cb[z * kn + p.k + 1] += h * w1;
                }
                want.gg[*z] += r;
                want.dz[*z] += h;
            }
        }
        let passes = Passes::new(&nodes, zn);
        let (chunks, taylor) = (&passes.chunks, &passes.taylor);
        assert!(zn > 0 || chunks.len() >= 2, "{} chunks", chunks.len());
        for c in chunks {
            assert!(
                nodes.runs.iter().any(|r| r.start == c.start),
                "chunks end on runs"
            );
        }
        let by_series = (0..nodes.runs.len())
            .filter(|&ri| {
                let run = &nodes.runs[ri];
                let (bk, bk1) = (b[run.k], b.get(run.k + 1).copied().unwrap_or(b[run.k]));
                let gz = g.get(run.z).copied().unwrap_or(0.0);
                taylor
                    .record(ri)
                    .and_then(|record| taylor_sums(record, bk, bk1, gz))
                    .is_some()
            })
            .count();
        assert_eq!(
            by_series * 2 > nodes.runs.len(),
            series,
            "{by_series} of {} runs by series",
            nodes.runs.len()
        );
        let got = passes.pass_on(2, &b, g);
        let pairs = [
            (vec![got.value], vec![want.value]),
            (got.gb, want.gb),
            (got.diag, want.diag),
            (got.off, want.off),
            (got.gg, want.gg),
            (got.dz, want.dz),
            (got.cb, want.cb),
        ];
        for (got, want) in &pairs {
            assert_eq!(got.len(), want.len());
            for (x, y) in got.iter().zip(want) {
                let diff = (x - y).abs();
                assert!(
                    diff <= 1e-10 * y.abs().max(1.0),
                    "{zn} values: {x} against {y}"
                );
            }
        }
    }

    /// A run's series gives its node-by-node sums ([`node_sums`], whose values the test above
    /// holds to the definition) to 1e-13 of the run's weight, wherever [`taylor_order`]
    /// accepts it: runs of every width, slope, centre and side of 0, some at the edge of
    /// what is accepted, with rows of both classes and merged points; and it refuses a
    /// run too steep for its order.
    #[test]
    fn a_runs_series_gives_its_node_sums() {
        let mut accepted = 0;
        for (i, &(lo, width)) in [
            (0.0, 1.0),
            (0.2, 0.3),
            (0.9, 0.099),
            (0.0, 0.0),
            (0.5, 0.01),
        ]
        .iter()
        .enumerate()
        {
            let len = 40 + 17 * i;
            let lambda: Vec<u32> = (0..len)
                .map(|j| lambda_code(lo + width * ((j * 7919) % len) as f64 / len as f64))
                .collect();
            let (mut tag, mut weights) = (vec![], vec![]);
            for j in 0..len {
                match j % 9 {
                    0 => {
                        tag.push(TAG_STORED);
                        weights.push((2.5, 0.75));
                    }
                    _ => tag.push(((j * 31) % 3 == 0) as u8),
                }
            }
            let mut record = [0.0; RECORD];
            run_record(&mut record, &lambda, &tag, &weights);
            for e in [-25.0, -6.0, -1.5, -0.2, 0.0, 0.3, 2.0, 9.0, 30.0] {
                for d in [0.0, 0.01, -0.05, 0.3, 1.0, 2.5, 6.0] {
                    let bk = e - (lo + 0.5 * width) * d;
                    let (gz, bk1) = (0.0, bk + d);
                    let want = node_sums(&lambda, &tag, &weights, bk, bk1, gz);
                    let Some(got) = taylor_sums(&record, bk, bk1, gz) else {
                        assert!(taylor_order(e, d, 0.5 * width).is_none());
                        continue;
                    };
                    accepted += 1;
                    for (x, y) in got.iter().zip(&want) {
                        let diff = (x - y).abs();
                        assert!(
                            diff <= 1e-13 * record[4] * (1.0 + e.abs() + d.abs()),
                            "λ in [{lo}, {}], e₀ {e}, d {d}: {x} against {y}",
                            lo + width
                        );
                    }
                }
            }
        }
        assert!(accepted > 150, "{accepted} runs by series");
        assert_eq!(taylor_order(0.0, 6.0, 0.5), None);
    }

    /// Walking up the knots finds what the search does, for ascending scores below, on,
    /// between and above the knots, and for a score below the knot it starts from.
    #[test]
    fn locating_ascending_scores_walks_to_the_same_knot() {
        for kn in [1, 2, 7, 100] {
            let knots = ilps_knots(kn);
            let mut scores: Vec<f64> = (0..2_000)
                .map(|i| -8.0 + 16.0 * i as f64 / 1_999.0)
                .collect();
            scores.extend_from_slice(&knots);
            scores.sort_by(f64::total_cmp);
            let mut from = 0;
            for &s in &scores {
                let got = locate_from(&knots, from, s);
                assert_eq!(got, locate(&knots, s), "{kn} knots, score {s}");
                from = got.0;
            }
            assert_eq!(locate_from(&knots, kn - 1, -0.01), locate(&knots, -0.01));
        }
    }
}
