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

/// The quadrature nodes of an ordered fit, grouped by field value, in about 9 bytes a node:
/// each node's λ and a one-byte tag, its field value and knot in the run it belongs to, and
/// (a, t) stored only for nodes that are not single rows of class 0 or 1. A fit over 20M
/// distinct scores holds 20M nodes.
#[derive(Debug, Default)]
pub(crate) struct Nodes {
    lambda: Vec<f64>,
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
    /// hold twice the 9 bytes a node (tens of millions of nodes).
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
        self.lambda.push(p.lambda);
        if p.a == 1.0 && (p.t == 0.0 || p.t == 1.0) {
            self.tag.push(p.t as u8);
        } else {
            self.tag.push(TAG_STORED);
            self.weights.push((p.a, p.t));
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.lambda.len()
    }

    /// The field value of node `i` (`i` < len).
    fn z_of(&self, i: usize) -> usize {
        self.runs[self.runs.partition_point(|r| r.start <= i) - 1].z
    }

    /// Calls `f` with each run's part in nodes `range`, in order: its field value, knot, the
    /// nodes' λ and tags, and the stored weights of its nodes that have them.
    fn for_each_run(
        &self,
        range: std::ops::Range<usize>,
        mut f: impl FnMut(usize, usize, &[f64], &[u8], &[(f64, f64)]),
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
            // The run's stored weights before node `i` (counted only within a run: ILPS's
            // chunks may split one).
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
            f(
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
        self.for_each_run(range, |z, k, lambda, tag, weights| {
            let mut stored = weights.iter();
            for (&lambda, &tag) in lambda.iter().zip(tag) {
                let (a, t) = node_weights(tag, &mut stored);
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
/// does, so that no two touch the same offset (nodes come grouped by field value).
fn chunks(nodes: &Nodes, zn: usize) -> Vec<std::ops::Range<usize>> {
    let mut out = vec![];
    let mut start = 0;
    while start < nodes.len() {
        let mut end = (start + CHUNK_NODES).min(nodes.len());
        if zn > 0 && end < nodes.len() {
            // The first run of another field value at or after `end`.
            let z = nodes.z_of(end - 1);
            let next = nodes.runs.partition_point(|r| r.start < end);
            end = nodes.runs[next..]
                .iter()
                .find(|r| r.z != z)
                .map_or(nodes.len(), |r| r.start);
        }
        out.push(start..end);
        start = end;
    }
    out
}

/// One chunk's sums. One exponential and one logarithm a node: softplus(e) = max(e, 0) +
/// ln(1 + q) and σ(e) from the same q = exp(−|e|) (the values of `softplus` and `sigmoid`,
/// to an ulp or two). A run's nodes share their knot and field value, so their sums are
/// kept in locals and added to the chunk's once a run.
fn chunk_sums(
    nodes: &Nodes,
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
    nodes.for_each_run(range, |z, k, lambda, tag, weights| {
        // η = b_k + λ·(b_{k+1} − b_k) + g_z; at the last knot λ is 0.
        let (bk, bk1) = (b[k], b.get(k + 1).copied().unwrap_or(b[k]));
        let gz = if zn > 0 { g[z] } else { 0.0 };
        let mut stored = weights.iter();
        // value, ∂b_k, ∂b_{k+1}, ∂²b_k, ∂²b_{k+1}, ∂b_k∂b_{k+1}, ∂g, ∂²g, ∂g∂b_k, ∂g∂b_{k+1}
        let mut r_sum = [0.0f64; 10];
        for (&l, &tag) in lambda.iter().zip(tag) {
            let (a, t) = node_weights(tag, &mut stored);
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

/// The sums of all nodes at (b, g), the chunks spread over the machine's cores.
fn pass(nodes: &Nodes, chunks: &[std::ops::Range<usize>], b: &[f64], g: &[f64]) -> Sums {
    pass_on(crate::parallel::cores(), nodes, chunks, b, g)
}

/// [`pass`] on at most `threads` threads.
fn pass_on(
    threads: usize,
    nodes: &Nodes,
    chunks: &[std::ops::Range<usize>],
    b: &[f64],
    g: &[f64],
) -> Sums {
    let kn = b.len();
    let parts = crate::parallel::map_in_order(chunks.len(), threads, |i| {
        chunk_sums(nodes, chunks[i].clone(), b, g, kn)
    });
    let mut total = Sums::new(kn, 0, g.len());
    for c in &parts {
        total.add(c);
    }
    total
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
    let chunks = chunks(nodes, zn);
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
    let mut sums = pass(nodes, &chunks, &b, &g);
    let mut f = sums.value + penalty(&g);
    let tol = 1e-13 * rows.max(1.0);
    let (mut iterations, mut converged) = (0, false);
    while iterations < MAX_ITERATIONS {
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
            let trial = pass(nodes, &chunks, &tb, &tg);
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
    let data_loss = pass(nodes, &chunks, &b, &g).value;
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
        let chunks = chunks(&nodes, zn);
        assert!(chunks.len() > 4, "{} chunks", chunks.len());
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
        let one = pass_on(1, &nodes, &chunks, &b, &g);
        for threads in [2, 3, 8] {
            let many = pass_on(threads, &nodes, &chunks, &b, &g);
            assert_eq!(bits(&one), bits(&many), "{threads} threads");
        }
        assert!(one.value.is_finite() && one.value > 0.0);
    }

    /// A pass's sums are those of the definition, node by node: `Σ a·softplus(e) − t·e` and
    /// its derivatives in b and g, computed here with std's `exp` and `ln_1p` over the nodes
    /// as pushed (rows of both classes, merged points, nodes at the outer knots), to 1e-10
    /// relative (sums of 200,000 terms added in another order; one node more or less moves a
    /// sum by about 1e-5):
    /// three field values, and ILPS's single one in chunks that split runs.
    #[test]
    fn a_pass_gives_the_sums_of_the_definition() {
        for (zn, per_value) in [(3, 500), (0, 3 * CHUNK_NODES + 17)] {
            pass_matches_definition(zn, per_value);
        }
    }

    fn pass_matches_definition(zn: usize, per_value: usize) {
        let knots = ilps_knots(6);
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
                plain.push((z, p));
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
        let chunks = chunks(&nodes, zn);
        assert!(zn > 0 || chunks.len() == 4, "{} chunks", chunks.len());
        let got = pass_on(2, &nodes, &chunks, &b, g);
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
}
