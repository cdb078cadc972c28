#!/usr/bin/env python3
"""Data sets and expected values for the calibrator aggregates fit_temperature, fit_beta_calib,
fit_histogram(..., 'quantile'), fit_ilps, fit_field_calib, fit_confcalib and fit_bbq, computed
independently of calibsql (numpy / scipy / scikit-learn / netcal / betacal only).

Run from the repository root (the venv needs numpy, scipy, scikit-learn 1.9.1, netcal 1.4.0 with
its torch, betacal 1.1.0: tests/gen/requirements.txt; bash tests/gen/check.sh makes that venv and
runs every generator's --check):

    python tests/fits_gen/calibrators.py            # rewrite the files
    python tests/fits_gen/calibrators.py --check    # write them to a temporary folder and compare

--check compares number by number (tests/gen/textcheck.py, tolerances at CHECK_* below): the
last digits of the fits differ between processors.

It writes the CSV files under tests/data/calibrators/ (fixed seeds, floats written with the
shortest repr that round-trips, so DataFusion parses exactly the numbers used here) and
tests/data/calibrators/expected.rs. Every expected value is computed from the CSV files as read
back. Versions used to generate the committed files: numpy 2.4.6, scipy 1.17.1,
scikit-learn 1.9.1, netcal 1.4.0 (torch 2.15.0 CPU), betacal 1.1.0 (printed at run time and
checked).

expected.rs holds one const

    CASES: &[(table, call, rows, loss, &[(score, field, prob)], note)]

table = CSV stem, call = the SQL aggregate call, rows = rows of the table, loss = expected mean
loss of the fit on its rows (f64::NAN where not defined), points = (score, field value or 0 for
models without a field, expected calibrated probability), note = free text.

Common definitions
------------------
* target t = y (naive) or t = y / max(q, clip) with a propensity q in (0, 1] (IPS; clip default
  0.1).
* loss of a model with logit f = mean over rows of softplus(f) - t*f, softplus = np.logaddexp(0, x)
  (families 1, 2, 4, 5); family 3 uses the log loss of its probabilities (below); families 6 and 7
  have no loss (NaN).
* sigma(x) = 1/(1+exp(-x)); logit(p) = ln(p/(1-p)).
* 'quantile' bins (the rule of udfs/src/metrics/binning.rs, = sklearn calibration_curve):
  edges = np.percentile(p, np.linspace(0, 1, M+1)*100) over the fitted rows' p (method 'linear'),
  bin(p) = np.searchsorted(edges[1:-1], p, side='left'), i.e. bins are right-closed
  (edge_{k} < p <= edge_{k+1}); p below the first / above the last edge falls in the first / last
  bin; equal p always share a bin; with ties two edges can coincide and the bin between them is
  empty.

1. fit_temperature(l, y [, q [, clip]]): f = l / T, T > 0 (no intercept). The optimum is found on
   beta = 1/T by a projected Newton method (exact to ~1e-15 in the gradient), cross-checked with
   scipy.optimize.minimize_scalar(method='bounded') on beta and on T; the losses must agree to
   1e-10 relative (1/T to 1e-7 relative). Expected point = sigma(l/T).
   scikit-learn 1.9.1: CalibratedClassifierCV(method='temperature') does apply to binary
   problems: a 1-D decision_function x is turned into the two-class logits (-x, x) and
   softmax(beta*(-x, x)) gives P(y=1) = sigma(2*beta*x), so sklearn's beta_ = 1/(2T) in our units
   (for predict_proba input [1-p, p] the logits are log(p + 1e-12), i.e. beta_ ~ 1/T in logit(p)
   up to that 1e-12). sklearn minimises the mean multinomial loss by minimize_scalar on
   log(beta) in [-10, 10] (xatol = 64 eps); the script fits CalibratedClassifierCV(
   FrozenEstimator(<decision_function = l>), method='temperature') on temp_over.csv and asserts
   that 1/(2 beta_) equals our T to 1e-6 relative and that its predict_proba equals sigma(l/T)
   to 1e-8 (the numbers are printed).

2. fit_beta_calib(p, y [, q [, clip]]): f = a*ln(p) - b*ln(1-p) + c with a >= 0, b >= 0 (Kull et
   al., 3-parameter 'abm' form; p strictly inside (0, 1) in the data; points are in (0, 1)).
   Optimum: scipy SLSQP with bounds on standardised features (x - mean)/sd (a positive rescaling
   and a shift of the intercept, so the sign constraints are unchanged), several starts, best
   kept; cross-checked with trust-constr (Bounds) and an exact active-set Newton solve over all
   four active sets; agreement 1e-9 relative in the loss. betacal 1.1.0
   BetaCalibration(parameters='abm') is fitted on the same rows (naive cases only: the IPS target
   can exceed 1, which is not a label betacal accepts); the note gives max |ours - betacal| over
   the points and the two losses; the script asserts ours <= betacal + 1e-9. betacal fits
   sklearn LogisticRegression(C=99999999999) (lbfgs, tol 1e-4, a tiny L2) and, when a
   coefficient comes out negative, refits without that feature -- a heuristic that equals the
   constrained optimum when exactly one constraint binds.

3. fit_histogram(p, y, M, 'quantile'): 'quantile' bins over the fitted rows' p (above), value of a
   bin = positive rate of its rows (mean y), an empty bin takes the overall rate mean(y);
   calibrate(p) = value of bin(p) (p outside [min, max] of the data falls in the first / last
   bin). Loss = mean over rows of -(y ln v + (1-y) ln(1-v)) with v = the row's calibrated value
   clipped to [1e-15, 1-1e-15]. (In-sample a bin's value is 0 or 1 only when all its rows agree,
   so the clip adds at most 1e-15 to the loss; f64::EPSILON instead of 1e-15 changes the loss by
   less than 1e-15.)

4. fit_ilps(l, y [, K [, q [, clip]]]): Isotonic Line-Plot Scaling (Pan et al.): knots
   a_k = logit(k/(K+1)) = ln(p_k/(1-p_k)) with p_k = k/(K+1) in float64, k = 1..K (K default 100);
   values b_1 <= ... <= b_K; eta(l) = b_k + (l - a_k)/(a_{k+1} - a_k)*(b_{k+1} - b_k) on
   [a_k, a_{k+1}], b_1 below a_1, b_K above a_K; f = eta(l), probability sigma(eta(l)). Optimum of
   the mean loss under the order constraints, parametrised as b = b_1 + cumsum(d), d_k >= 0:
   projected Newton (Bertsekas) to a projected gradient < 1e-13, cross-checked by L-BFGS-B on
   (b_1, d) and by SLSQP on b with the K-1 linear constraints b_{k+1} - b_k >= 0 (several starts,
   best kept), and by trust-constr on (b_1, d) with Bounds when it converges (informative only;
   its loss is printed); SLSQP and L-BFGS-B must agree with Newton to 1e-9 in the loss. The loss
   and eta at data scores are unique (the loss is strictly convex in the vector of eta(l_i)); b at
   knots is unique only when the design matrix (rows: interpolation weights of each l_i times the
   cumsum map) has full column rank -- the script checks the rank, and only then adds points
   between or outside the data (the note says which).

5. fit_field_calib(l, y, site [, K [, l2]]): f = eta(l) + g_site, eta as in 4 (K default 100), one
   offset g per site value seen in the fit; objective = SUM over rows of softplus(f) - y*f
   + l2/2 * sum_site g_site^2 (l2 default 1.0), b ordered as in 4. Same solvers (on the sum / n).
   loss = the optimum's MEAN unpenalised loss mean(softplus(f) - y f); points (score, site,
   sigma(eta(score) + g_site)). With l2 = 0 the split between eta and g is not unique (eta + c,
   g - c), but every prediction is.

6. fit_confcalib(p, y, site [, M [, lambda]]): per site value, that value's rows are cut into M
   'quantile' bins (edges from that value's p only). Per bin, with p_hat = mean p, r = mean y,
   n = count: m = confcalib_multiplier(p_hat, r, n, lambda) (lambda default 1.96), reimplemented
   from udfs/src/scalars.rs:
       m = 1 if n == 0 or p_hat == r (so an empty bin has m = 1);
       z = |r - p_hat| * sqrt(n / (p_hat (1 - p_hat)))   (inf if p_hat is 0 or 1);
       z' = lambda * (2 / (1 + exp(-z/2)) - 1);
       Wilson interval around r at z': center = (r + z'^2/(2n)) / (1 + z'^2/n),
       half = z'/(1 + z'^2/n) * sqrt(r(1-r)/n + z'^2/(4n^2)), lo = max(center - half, 0),
       hi = min(center + half, 1);
       m = (hi if p_hat > r else lo) / p_hat.
   lambda = 0 gives z' = 0, lo = hi = r, m = r / p_hat (asserted). calibrate(p, site) =
   clip(p * m(site, bin of p in that site's edges), 0, 1); a site value not seen in the fit gives
   p unchanged. Loss = NaN.

7. fit_bbq(p, y): netcal 1.4.0 BBQ() with its default configuration (score_function='BIC',
   equal_intervals=True). Expected points are netcal's own predictions. The script also contains
   a numpy port (bbq_fit / bbq_predict) and prints max |port - netcal| per case, once with the
   log-likelihood in float64 and once with it computed by torch exactly as netcal does. The
   algorithm, as netcal implements it for 1-D (binary) input:

   BBQ SPEC (netcal 1.4.0, binary input, defaults)
   * Input: p in [0, 1] (fit raises outside), y in {0, 1}. N = number of rows. Deterministic:
     no randomness anywhere (tqdm only draws a progress bar).
   * No BDeu. netcal's docstring says the paper's BDeu score "is currently not supported"; the
     default score is BIC, computed from a maximum-likelihood histogram fit; there is no Dirichlet
     prior of any kind.
   * Binnings averaged: every equal-WIDTH histogram over [0, 1] (not quantile bins, despite the
     name; equal_intervals=False fits but raises in transform) with B bins, for
     B = min_bins ..= max_bins where (float64 operations, pow = libm pow, NOT cbrt):
         s = pow(N, 1.0/3.0)   # 1.0/3.0 = 0.333..., so pow(1000, 1/3) = 9.999999999999998
         min_bins = max(1, floor(s / 10))
         max_bins = min(ceil(N / 5), ceil(s * 10))
     e.g. N = 200: 1..40; N = 1000: 1..100; N = 2000: 1..126; N = 3000: 1..145; N = 8000:
     1..200 (with cbrt, min_bins would be 2).
   * Edges of a B-bin histogram: e_k = k * (1.0/B) in float64 for k = 0..B-1, and e_B = 1.0
     (np.linspace(0, 1, B+1)).
   * Fit of one histogram (HistogramBinning.fit, scipy binned_statistic_dd): x = clip(p, eps,
     1-eps) with eps = 2^-52; bin_fit(x) = (number of edges <= x) - 1, i.e. LEFT-closed bins
     [e_k, e_{k+1}). Value v_k = (number of y = 1 in bin k) / (count of bin k); an empty bin gets
     its centre v_k = 0.5 * (e_k + e_{k+1}).
   * Prediction of one histogram (HistogramBinning.transform): on the UNclipped p,
     bin_pred(p) = (number of edges < p) - 1, mapped -1 -> 0 (p = 0) and B -> B-1, i.e.
     RIGHT-closed bins (e_k, e_{k+1}]; h_B(p) = clip(v_{bin_pred(p)}, 0, 1). So a row lying
     exactly on an inner edge e_k (e.g. p = 0.5 with even B, p = 0.25 with B = 4, 8, ...) is
     counted in bin k when fitting but predicted with bin k-1 (a netcal quirk; ties matter only
     through this). Edges are computed, so 0.3 is not an edge of B = 10 (3 * 0.1 =
     0.30000000000000004) but 0.5, 0.25, 0.2 (= 1 * fl(1/5)) and 0.75 are.
   * Score of each histogram (AbstractCalibration._calc_model_scores): est_i = h_B(p_i) on the
     fitted rows;
         LL_B = -torch.nn.functional.binary_cross_entropy(float32(est), float32(y), 'sum')
     i.e. per row, in float32, (y - 1) * max(log1p(-est), -100) - y * max(log(est), -100),
     summed in float32 by torch (cascade summation), negated; then in float64
         BIC_B = -2 LL_B + B * ln(N)
         w_B = exp((min_B' BIC_B' - BIC_B) / 2)      (the best model gets exactly 1).
     The -100 clamp matters only when a row's prediction is 0 or 1 and its label disagrees, which
     the fit/predict bin mismatch above can cause. The float32 arithmetic makes LL_B differ from
     the exact (float64) sum by ~1e-5..1e-4, hence the weights by ~1e-5 relative: a float64
     implementation matches netcal only to ~1e-5 (2e-8..5.7e-6 on these cases, see each note),
     not to 1e-12; the port below with torch's log-likelihood matches it exactly (0 difference).
   * Model selection ("elbow", AbstractCalibration._elbow, alpha = 0.001): var = population
     variance (ddof 0) of ALL the w_B; sort the w_B in descending order (np.argsort(w)[::-1];
     the order among exactly equal w does not change predictions); k = 0; while k < n-1 and
     w_(k) == w_(k+1): k += 1; then while k < n-1 and (w_(k) - w_(k+1)) / var > alpha: k += 1;
     keep the first k+1 models of the sorted order (the best and every following one until the
     first gap <= 0.001 * var; models with w underflowed to 0 get weight 0). Their weights are
     normalised: W_j = w_(j) / sum of kept w.
   * Prediction: BBQ(p) = clip(sum_j W_j * h_(j)(p), 0, 1), summed in the kept (descending w)
     order. Prediction does not check the range: p <= 0 (incl. p < 0) uses the first bin,
     p >= 1 (incl. p > 1) the last; no other clipping or epsilon is applied at prediction.
   * Ties in p only matter through the edge rule above (equal p always share a bin). A class
     missing from y only prints a warning.

Floats in expected.rs are written with the shortest repr that round-trips (f64::NAN for NaN).
"""

import csv
import io
import json
import os
import sys
import warnings

os.environ.setdefault("TQDM_DISABLE", "1")

import numpy as np
import scipy
import sklearn
from scipy.optimize import Bounds, LinearConstraint, minimize, minimize_scalar

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DATA = os.path.join(ROOT, "tests", "data", "calibrators")

sys.path.insert(0, os.path.join(ROOT, "tests", "gen"))
from textcheck import check_tree  # noqa: E402

# --check's tolerances, (rel, abs): the data (fixed seeds; numpy's exp kernels differ by an ulp
# between processors), and expected.rs, well below tests/fits/calibrators.rs's LOSS_REL 1e-9,
# PROB_ABS 1e-6 and BBQ_ABS 1e-5 (observed between an AVX2 and an AVX-512 machine: 5e-14).
CHECK_CSV = (1e-14, 0.0)
CHECK_EXPECTED = (1e-13, 1e-12)


def check_tolerance(name):
    return [(None, *(CHECK_CSV if name.endswith(".csv") else CHECK_EXPECTED))]

VERSIONS = {"numpy": "2.4.6", "scipy": "1.17.1", "sklearn": "1.9.1", "netcal": "1.4.0", "betacal": "1.1.0"}


def sigmoid(x):
    x = np.asarray(x, dtype=np.float64)
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def softplus(x):
    return np.logaddexp(0.0, x)


def logit(p):
    p = np.asarray(p, dtype=np.float64)
    return np.log(p / (1.0 - p))


def mean_loss(f, t):
    return float(np.mean(softplus(f) - t * f))


def fmt(x):
    r = repr(float(x))
    if r in ("inf", "-inf", "nan"):
        raise ValueError(r)
    return r


def rust_f64(x):
    if np.isnan(x):
        return "f64::NAN"
    r = fmt(x)
    if "e" in r:
        mant, exp = r.split("e")
        if "." not in mant:
            mant += ".0"
        return f"{mant}e{exp}"
    return r


def rust_str(s):
    out = json.dumps(s, ensure_ascii=False)
    assert "\\u" not in out, s
    return out


# ----------------------------------------------------------------------------------------------
# CSV
# ----------------------------------------------------------------------------------------------

INT_COLS = ("y", "site")


def write_csv(name, cols):
    names = list(cols)
    n = len(cols[names[0]])
    buf = io.StringIO()
    buf.write(",".join(names) + "\n")
    for i in range(n):
        buf.write(",".join(str(int(cols[k][i])) if k in INT_COLS else fmt(cols[k][i]) for k in names) + "\n")
    with open(os.path.join(DATA, name + ".csv"), "w") as f:
        f.write(buf.getvalue())


def read_csv(name):
    with open(os.path.join(DATA, name + ".csv")) as f:
        rows = list(csv.reader(f))
    head, body = rows[0], rows[1:]
    out = {}
    for j, k in enumerate(head):
        if k in INT_COLS:
            out[k] = np.array([int(r[j]) for r in body], dtype=np.int64)
        else:
            out[k] = np.array([float(r[j]) for r in body], dtype=np.float64)
    return out


def make_data():
    os.makedirs(DATA, exist_ok=True)

    # temp_over: overconfident logits, y ~ Bernoulli(sigmoid(0.6 l)) (logistic miscalibration).
    rng = np.random.default_rng(20250101)
    n = 1500
    l = rng.normal(0.0, 3.0, n)
    y = (rng.random(n) < sigmoid(0.6 * l)).astype(int)
    write_csv("temp_over", {"l": l, "y": y})

    # temp_under: very underconfident logits, y ~ Bernoulli(sigmoid(20 l)): 1/T near 20.
    rng = np.random.default_rng(20250102)
    n = 1200
    l = rng.normal(0.0, 0.15, n)
    y = (rng.random(n) < sigmoid(20.0 * l)).astype(int)
    write_csv("temp_under", {"l": l, "y": y})

    # ips: logit l, probability p = sigmoid(l) (its own column), exposure q in [0.02, 1]
    # (about a third below 0.1), click y ~ Bernoulli(q * sigmoid(0.8 l - 0.3)).
    rng = np.random.default_rng(20250103)
    n = 2000
    l = rng.normal(0.0, 2.0, n)
    p = sigmoid(l)
    q = 0.02 + 0.98 * rng.beta(1.0, 2.0, n)
    y = (rng.random(n) < q * sigmoid(0.8 * l - 0.3)).astype(int)
    write_csv("ips", {"l": l, "p": p, "y": y, "q": q})

    # beta_bent: non-logistic, true logit 1.8 ln p - 0.6 ln(1-p) + 0.7 (both slopes positive).
    rng = np.random.default_rng(20250104)
    n = 1500
    p = np.clip(rng.beta(1.5, 2.0, n), 1e-6, 1 - 1e-6)
    y = (rng.random(n) < sigmoid(1.8 * np.log(p) - 0.6 * np.log1p(-p) + 0.7)).astype(int)
    write_csv("beta_bent", {"p": p, "y": y})

    # beta_a_neg: true logit -0.4 ln p - 1.5 ln(1-p) - 0.8: the unconstrained a is negative.
    rng = np.random.default_rng(20250105)
    n = 1500
    p = np.clip(rng.beta(0.7, 1.2, n), 1e-6, 1 - 1e-6)
    y = (rng.random(n) < sigmoid(-0.4 * np.log(p) - 1.5 * np.log1p(-p) - 0.8)).astype(int)
    write_csv("beta_a_neg", {"p": p, "y": y})

    # beta_b_neg: true logit 1.3 ln p + 0.6 ln(1-p) + 1.0: the unconstrained b is negative.
    rng = np.random.default_rng(20250106)
    n = 1500
    p = np.clip(rng.beta(1.5, 1.0, n), 1e-6, 1 - 1e-6)
    y = (rng.random(n) < sigmoid(1.3 * np.log(p) + 0.6 * np.log1p(-p) + 1.0)).astype(int)
    write_csv("beta_b_neg", {"p": p, "y": y})

    # hist_ties: p rounded to 2 decimals (heavy ties, rows on edges), y ~ Bernoulli(sigmoid(1.5 logit(p) + 0.4)).
    rng = np.random.default_rng(20250107)
    n = 1200
    p = np.clip(np.round(rng.beta(2.0, 5.0, n), 2), 0.01, 0.99)
    y = (rng.random(n) < sigmoid(1.5 * logit(p) + 0.4)).astype(int)
    write_csv("hist_ties", {"p": p, "y": y})

    # hist_spike: 40% of rows at p = 0.3 exactly (coinciding quantile edges, empty bins), the
    # rest rounded to 3 decimals.
    rng = np.random.default_rng(20250108)
    n = 1000
    p = np.where(rng.random(n) < 0.4, 0.3, np.clip(np.round(rng.beta(2.0, 3.0, n), 3), 0.001, 0.999))
    y = (rng.random(n) < sigmoid(2.0 * logit(p) + 0.5)).astype(int)
    write_csv("hist_spike", {"p": p, "y": y})

    # ilps_bent: logits with a non-monotone true map 0.3 l + 0.9 sin(l) - 0.3 (order constraints bind).
    rng = np.random.default_rng(20250109)
    n = 1500
    l = rng.normal(0.0, 2.5, n)
    y = (rng.random(n) < sigmoid(0.3 * l + 0.9 * np.sin(l) - 0.3)).astype(int)
    write_csv("ilps_bent", {"l": l, "y": y})

    # field: site 1..4 with opposite biases +0.8, -0.8, +0.3, -0.2 on a bent map.
    rng = np.random.default_rng(20250110)
    n = 2400
    l = rng.normal(0.0, 2.0, n)
    site = rng.choice(np.array([1, 2, 3, 4]), size=n, p=[0.35, 0.3, 0.25, 0.1])
    bias = np.array([0.0, 0.8, -0.8, 0.3, -0.2])[site]
    y = (rng.random(n) < sigmoid(0.5 * l + 0.8 * np.tanh(l) - 0.5 + bias)).astype(int)
    write_csv("field", {"l": l, "y": y, "site": site})

    # confcalib: p rounded to 3 decimals (ties), site 10 (under-predicted), 20 (over-predicted),
    # 30 (calibrated), 40 (12 rows only, with ties: small and empty bins).
    rng = np.random.default_rng(20250111)
    n = 1988
    site = rng.choice(np.array([10, 20, 30]), size=n, p=[0.4, 0.35, 0.25])
    p = np.clip(np.round(sigmoid(rng.normal(-1.0, 1.5, n)), 3), 0.001, 0.999)
    bias = np.where(site == 10, 0.5, np.where(site == 20, -0.6, 0.0))
    y = (rng.random(n) < sigmoid(logit(p) + bias)).astype(int)
    p40 = np.array([0.2, 0.2, 0.2, 0.2, 0.35, 0.35, 0.5, 0.5, 0.5, 0.61, 0.7, 0.9])
    y40 = (rng.random(12) < p40).astype(int)
    write_csv(
        "confcalib",
        {"p": np.concatenate([p, p40]), "y": np.concatenate([y, y40]), "site": np.concatenate([site, np.full(12, 40)])},
    )

    # bbq_beta: p ~ Beta(2, 3), y ~ Bernoulli(p^1.5) (non-logistic).
    rng = np.random.default_rng(20250112)
    n = 2000
    p = rng.beta(2.0, 3.0, n)
    y = (rng.random(n) < p**1.5).astype(int)
    write_csv("bbq_beta", {"p": p, "y": y})

    # bbq_grid: p on the 0.05 grid (ties; many rows exactly on bin edges 0.25, 0.5, 0.75, ...).
    rng = np.random.default_rng(20250113)
    n = 1000
    p = np.round(rng.integers(0, 21, n) * 0.05, 2)
    y = (rng.random(n) < sigmoid(2.5 * (p - 0.45))).astype(int)
    write_csv("bbq_grid", {"p": p, "y": y})

    # bbq_small: 200 rows (max_bins = ceil(N/5) binds), overconfident p.
    rng = np.random.default_rng(20250114)
    n = 200
    p = sigmoid(rng.normal(0.0, 2.5, n))
    y = (rng.random(n) < sigmoid(0.5 * logit(p))).astype(int)
    write_csv("bbq_small", {"p": p, "y": y})

    # bbq_big: 3000 rows, logistic miscalibration.
    rng = np.random.default_rng(20250115)
    n = 3000
    p = sigmoid(rng.normal(-0.5, 1.5, n))
    y = (rng.random(n) < sigmoid(1.6 * logit(p) + 0.3)).astype(int)
    write_csv("bbq_big", {"p": p, "y": y})


# ----------------------------------------------------------------------------------------------
# A convex logistic problem with sign bounds:
#   F(x) = (1/norm) * sum_i [softplus(z_i x) - t_i z_i x] + (l2/2) * sum_{j in pen} x_j^2,
#   x_j >= 0 for j in nonneg.
# ----------------------------------------------------------------------------------------------


class Problem:
    def __init__(self, Z, t, nonneg, norm=None, pen=(), l2=0.0):
        self.Z = np.asarray(Z, dtype=np.float64)
        self.t = np.asarray(t, dtype=np.float64)
        self.n, self.k = self.Z.shape
        self.norm = float(self.n if norm is None else norm)
        self.nonneg = np.zeros(self.k, dtype=bool)
        self.nonneg[list(nonneg)] = True
        self.pen = np.zeros(self.k, dtype=bool)
        self.pen[list(pen)] = True
        self.l2 = float(l2)
        self.lb = np.where(self.nonneg, 0.0, -np.inf)

    def fun(self, x):
        f = self.Z @ x
        v = np.sum(softplus(f) - self.t * f) / self.norm
        return float(v + 0.5 * self.l2 * np.sum(x[self.pen] ** 2))

    def grad(self, x):
        f = self.Z @ x
        return self.Z.T @ (sigmoid(f) - self.t) / self.norm + self.l2 * np.where(self.pen, x, 0.0)

    def hess(self, x):
        f = self.Z @ x
        s = sigmoid(f)
        w = s * (1.0 - s)
        return (self.Z * w[:, None]).T @ self.Z / self.norm + self.l2 * np.diag(self.pen.astype(float))

    def proj(self, x):
        return np.where(self.nonneg, np.maximum(x, 0.0), x)

    def pg(self, x):
        """Projected-gradient residual ||x - P(x - g)||_inf (0 exactly at a KKT point)."""
        return float(np.max(np.abs(x - self.proj(x - self.grad(x)))))

    def newton(self, x0, tol=1e-13, maxit=500):
        """Projected Newton (Bertsekas 1982) with an eps-active set and Armijo search along the
        projection arc; min-norm steps (lstsq) where the Hessian is singular."""
        x = self.proj(np.array(x0, dtype=np.float64))
        for it in range(maxit):
            g = self.grad(x)
            r = self.pg(x)
            if r < tol:
                return x, it, r
            eps = min(1e-6, r)
            act = self.nonneg & (x <= eps) & (g > 0)
            free = ~act
            H = self.hess(x)
            Hf = H[np.ix_(free, free)]
            d = np.zeros(self.k)
            d[free] = -np.linalg.lstsq(Hf, g[free], rcond=1e-14)[0]
            d[act] = -g[act]
            f0 = self.fun(x)
            lam = 1.0
            ok = False
            while lam > 1e-20:
                xn = self.proj(x + lam * d)
                dec = g[free] @ (x[free] - xn[free]) + g[act] @ (x[act] - xn[act])
                fn = self.fun(xn)
                if fn <= f0 - 1e-4 * dec + 4e-16 * abs(f0):
                    ok = True
                    break
                lam *= 0.5
            if not ok:
                return x, it, r
            x = xn
        return x, maxit, self.pg(x)

    def lbfgsb(self, x0):
        r = minimize(
            self.fun,
            x0,
            jac=self.grad,
            method="L-BFGS-B",
            bounds=list(zip(self.lb, [np.inf] * self.k)),
            options={"ftol": 1e-15, "gtol": 1e-12, "maxiter": 50000, "maxfun": 100000, "maxcor": 30},
        )
        return r.x

    def slsqp(self, x0):
        r = minimize(
            self.fun,
            x0,
            jac=self.grad,
            method="SLSQP",
            bounds=list(zip(self.lb, [None] * self.k)),
            options={"ftol": 1e-15, "maxiter": 5000},
        )
        return r.x

    def trust_constr(self, x0):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = minimize(
                self.fun,
                x0,
                jac=self.grad,
                hess=self.hess,
                method="trust-constr",
                bounds=Bounds(self.lb, np.inf, keep_feasible=False),
                options={"gtol": 1e-13, "xtol": 1e-16, "barrier_tol": 1e-14, "initial_barrier_parameter": 1e-4, "maxiter": 5000},
            )
        return self.proj(r.x)


def solve(P, starts, label, extra=None, tc=True):
    """Newton-polished optimum; cross-checks with L-BFGS-B and SLSQP (must agree to 1e-9 in F),
    trust-constr informative. Returns (x, report dict)."""
    best_lb = min((P.lbfgsb(s) for s in starts), key=P.fun)
    x, it, res = P.newton(best_lb)
    # polish again from the other solvers' points too; keep the best
    best_sq = min((P.slsqp(s) for s in starts), key=P.fun)
    x2, _, res2 = P.newton(best_sq)
    if P.fun(x2) < P.fun(x):
        x, res = x2, res2
    F = P.fun(x)
    rep = {"newton": F, "pg": res, "lbfgsb": P.fun(best_lb), "slsqp": P.fun(best_sq)}
    ex = extra(P) if extra is not None else {}
    rep.update(ex)
    if tc:
        rep["trust-constr"] = P.fun(min((P.trust_constr(s) for s in starts[:2]), key=P.fun))
    for k in ("lbfgsb", "slsqp") + tuple(ex.keys()):
        assert abs(rep[k] - F) <= 1e-9 * max(1.0, abs(F)), (label, k, rep[k], F)
        assert F <= rep[k] + 1e-12 * max(1.0, abs(F)), (label, k, rep[k], F)
    assert res < 1e-10, (label, res)
    print(f"  {label}: " + " ".join(f"{k}={v:.17g}" for k, v in rep.items()))
    return x, rep


# ----------------------------------------------------------------------------------------------
# Point helpers
# ----------------------------------------------------------------------------------------------


def data_values(s, k):
    u = np.unique(s)
    idx = np.unique(np.linspace(0, len(u) - 1, k).round().astype(int))
    return [float(u[i]) for i in idx]


def between_values(s, k):
    u = np.unique(s)
    idx = np.unique(np.linspace(1, len(u) - 3, k).round().astype(int))
    return [float(u[i] + 0.5 * (u[i + 1] - u[i])) for i in idx]


CASES = []


def add_case(table, call, rows, loss, points, note):
    pts = [(float(s), int(f), float(v)) for s, f, v in points]
    assert 8 <= len(pts) <= 40, (call, len(pts))
    assert all(np.isfinite(v) and 0.0 <= v <= 1.0 for _, _, v in pts), call
    CASES.append((table, call, int(rows), float(loss), pts, note))


def target(y, q=None, clip=None):
    if q is None:
        return y.astype(np.float64)
    c = 0.1 if clip is None else clip
    return y / np.maximum(q, c)


# ----------------------------------------------------------------------------------------------
# 1. Temperature
# ----------------------------------------------------------------------------------------------


def temperature_fit(l, t, label):
    P = Problem(l[:, None], t, nonneg=[0])

    def extra(P):
        def lb(b):
            return mean_loss(b * l, t)

        r1 = minimize_scalar(lb, bounds=(1e-6, 1e3), method="bounded", options={"xatol": 1e-13, "maxiter": 5000})
        r2 = minimize_scalar(lambda T: mean_loss(l / T, t), bounds=(1e-3, 1e6), method="bounded", options={"xatol": 1e-13, "maxiter": 5000})
        return {"bounded-beta": lb(r1.x), "bounded-T": mean_loss(l / r2.x, t), "_b1": r1.x, "_T2": r2.x}

    x, it, res = P.newton(np.array([1.0]))
    F = P.fun(x)
    ex = extra(P)
    beta = float(x[0])
    for k in ("bounded-beta", "bounded-T"):
        assert abs(ex[k] - F) <= 1e-10 * abs(F) and F <= ex[k] + 1e-15, (label, k, ex[k], F)
    assert abs(ex["_b1"] - beta) <= 1e-7 * beta and abs(1 / ex["_T2"] - beta) <= 1e-7 * beta, (label, ex, beta)
    assert res < 1e-13 and beta > 0
    print(f"  {label}: newton={F:.17g} 1/T={beta:.17g} bounded-beta={ex['bounded-beta']:.17g} (1/T {ex['_b1']:.12g}) bounded-T={ex['bounded-T']:.17g} (1/T {1/ex['_T2']:.12g})")
    return 1.0 / beta, F


def sklearn_temperature(l, y, T):
    from sklearn.base import BaseEstimator, ClassifierMixin
    from sklearn.calibration import CalibratedClassifierCV
    from sklearn.frozen import FrozenEstimator

    class Logit(ClassifierMixin, BaseEstimator):
        def fit(self, X, y):
            self.classes_ = np.array([0, 1])
            return self

        def decision_function(self, X):
            return np.asarray(X)[:, 0]

        def predict(self, X):
            return (self.decision_function(X) > 0).astype(int)

    clf = Logit().fit(l[:, None], y)
    cal = CalibratedClassifierCV(FrozenEstimator(clf), method="temperature").fit(l[:, None], y)
    beta = float(cal.calibrated_classifiers_[0].calibrators[0].beta_)
    T_sk = 1.0 / (2.0 * beta)
    pr = cal.predict_proba(l[:, None])[:, 1]
    d = float(np.max(np.abs(pr - sigmoid(l / T))))
    print(f"  sklearn temperature: beta_={beta!r} -> T = 1/(2 beta_) = {T_sk!r}; ours T = {T!r}; rel diff {abs(T_sk - T) / T:.3g}; max |predict_proba - sigma(l/T)| = {d:.3g}")
    assert abs(T_sk - T) <= 1e-6 * T and d <= 1e-8
    return beta, T_sk, d


def family_temperature():
    print("1. fit_temperature")
    info = {}
    for table, call, q, clip, extra_note in (
        ("temp_over", "fit_temperature(l, y)", False, None, "overconfident logits (T > 1)"),
        ("temp_under", "fit_temperature(l, y)", False, None, "underconfident logits: the optimum 1/T is large"),
        ("ips", "fit_temperature(l, y, q)", True, None, "IPS, t = y / max(q, 0.1)"),
        ("ips", "fit_temperature(l, y, q, 0.05)", True, 0.05, "IPS, t = y / max(q, 0.05)"),
    ):
        d = read_csv(table)
        l, y = d["l"], d["y"]
        t = target(y, d["q"] if q else None, clip)
        T, F = temperature_fit(l, t, f"{table}: {call}")
        pts = data_values(l, 9) + between_values(l, 3) + [float(l.min() - 5.0), float(l.max() + 5.0), 0.0, -40.0, 40.0]
        pts = sorted(set(pts))
        note = f"{extra_note}; T = {T!r} (1/T = {1 / T!r}); points: 9 data scores, 3 midpoints, 0, and 4 outside the data"
        if table == "temp_over" and not q:
            beta, T_sk, dd = sklearn_temperature(l, y, T)
            info["sklearn"] = (beta, T_sk, T, dd)
            note += (
                f"; scikit-learn 1.9.1 CalibratedClassifierCV(method='temperature') on l as a decision_function: "
                f"beta_ = {beta!r}, P = sigma(2 beta_ l), so T = 1/(2 beta_) = {T_sk!r} (agrees to {abs(T_sk - T) / T:.1e} relative)"
            )
        add_case(table, call, len(l), F, [(s, 0, sigmoid(s / T)) for s in pts], note)
    return info


# ----------------------------------------------------------------------------------------------
# 2. Beta calibration
# ----------------------------------------------------------------------------------------------


def beta_fit(p, t, label):
    x1, x2 = np.log(p), -np.log1p(-p)
    m1, s1, m2, s2 = x1.mean(), x1.std(), x2.mean(), x2.std()
    Z = np.column_stack([(x1 - m1) / s1, (x2 - m2) / s2, np.ones_like(p)])
    P = Problem(Z, t, nonneg=[0, 1])

    def raw(th):
        a, b = th[0] / s1, th[1] / s2
        return a, b, th[2] - a * m1 - b * m2

    def f_raw(params, x):
        a, b, c = params
        return a * np.log(x) - b * np.log1p(-x) + c

    rng = np.random.default_rng(7)
    starts = [np.zeros(3), np.array([1.0, 1.0, 0.0])] + [np.abs(rng.normal(0, 1, 3)) * [1, 1, 0] + rng.normal(0, 1, 3) * [0, 0, 1] for _ in range(4)]

    def active_set(P):
        best = None
        import itertools

        for r in range(3):
            for act in itertools.combinations([0, 1], r):
                free = [j for j in range(3) if j not in act]
                Q = Problem(Z[:, free], t, nonneg=[])
                xf, _, res = Q.newton(np.zeros(len(free)))
                x = np.zeros(3)
                x[free] = xf
                if np.any(x[:2] < -1e-12):
                    continue
                v = P.fun(np.maximum(x, [0, 0, -np.inf]))
                if best is None or v < best:
                    best = v
        return {"active-set": best}

    x, rep = solve(P, starts, label, extra=active_set)
    params = raw(x)
    # unconstrained optimum, to report which constraint binds
    Q = Problem(Z, t, nonneg=[])
    xu, _, _ = Q.newton(np.zeros(3))
    unc = raw(xu)
    loss = mean_loss(f_raw(params, p), t)
    assert abs(loss - rep["newton"]) < 1e-12
    return params, unc, loss, f_raw


def family_beta():
    print("2. fit_beta_calib")
    from betacal import BetaCalibration

    out = {}
    for table, call, q, clip, what in (
        ("beta_bent", "fit_beta_calib(p, y)", False, None, "non-logistic map, no constraint active"),
        ("beta_a_neg", "fit_beta_calib(p, y)", False, None, "the unconstrained a is negative: a >= 0 active"),
        ("beta_b_neg", "fit_beta_calib(p, y)", False, None, "the unconstrained b is negative: b >= 0 active"),
        ("ips", "fit_beta_calib(p, y, q)", True, None, "IPS, t = y / max(q, 0.1)"),
    ):
        d = read_csv(table)
        p, y = d["p"], d["y"]
        assert np.all((p > 0) & (p < 1))
        t = target(y, d["q"] if q else None, clip)
        params, unc, loss, f_raw = beta_fit(p, t, f"{table}: {call}")
        a, b, c = params
        lo, hi = float(p.min()), float(p.max())
        pts = sorted(set(data_values(p, 10) + between_values(p, 3) + [lo / 10.0, 1e-6, 0.5, 1.0 - (1.0 - hi) / 10.0, 0.999999]))
        exp = [float(sigmoid(f_raw(params, x))) for x in pts]
        act = [nm for nm, v in (("a >= 0", a), ("b >= 0", b)) if v == 0.0]
        note = f"{what}; a = {float(a)!r}, b = {float(b)!r}, c = {float(c)!r}; unconstrained (a, b, c) = ({unc[0]:.6g}, {unc[1]:.6g}, {unc[2]:.6g})"
        note += "; active: " + (", ".join(act) if act else "none")
        if what.endswith(">= 0 active"):
            assert act, (table, params, unc)
        else:
            assert not act, (table, params)
        if not q:
            bc = BetaCalibration(parameters="abm").fit(p, y)
            pb = bc.predict(np.array(pts))
            prow = np.clip(bc.predict(p), 1e-300, 1 - 1e-16)
            loss_bc = float(np.mean(-(y * np.log(prow) + (1 - y) * np.log1p(-prow))))
            dmax = float(np.max(np.abs(pb - np.array(exp))))
            drows = float(np.max(np.abs(bc.predict(p) - sigmoid(f_raw(params, p)))))
            assert loss <= loss_bc + 1e-9, (table, loss, loss_bc)
            print(f"    betacal map_ = {bc.calibrator_.map_}, max |ours - betacal| on the rows = {drows:.3g}, at the points = {dmax:.3g}, loss ours {loss!r} betacal {loss_bc!r}")
            note += (
                f"; betacal 1.1.0 BetaCalibration('abm') (a = {float(bc.calibrator_.map_[0])!r}, b = {float(bc.calibrator_.map_[1])!r}): "
                f"max |ours - betacal| = {drows:.2e} on the fitted rows, {dmax:.2e} over the points; its loss {loss_bc!r} (ours lower by {loss_bc - loss:.2e})"
            )
            # betacal's own code with its LogisticRegression run to tol 1e-12: the differences
            # above are its solver's default tolerance (lbfgs, tol 1e-4), not the model.
            import betacal.beta_calibration as bcm
            from sklearn.linear_model import LogisticRegression as LR

            orig = bcm.LogisticRegression
            bcm.LogisticRegression = lambda C: LR(C=C, tol=1e-12, max_iter=100000)
            try:
                bt = BetaCalibration(parameters="abm").fit(p, y)
            finally:
                bcm.LogisticRegression = orig
            dtight = float(np.max(np.abs(bt.predict(p) - sigmoid(f_raw(params, p)))))
            assert dtight < 1e-8, (table, dtight)
            print(f"    betacal with LogisticRegression(tol=1e-12): max |ours - betacal| on the rows = {dtight:.3g}")
            note += f"; the same betacal code with LogisticRegression(tol=1e-12) agrees to {dtight:.1e} on the rows"
            out[table] = (drows, dmax, loss_bc, loss, dtight)
        note += "; points: 10 data values, 3 midpoints, 5 outside the data range or at 0.5"
        add_case(table, call, len(p), loss, [(x, 0, v) for x, v in zip(pts, exp)], note)
    return out


# ----------------------------------------------------------------------------------------------
# 3. Histogram with 'quantile' bins
# ----------------------------------------------------------------------------------------------


def quantile_edges(p, M):
    return np.percentile(p, np.linspace(0, 1, M + 1) * 100)


def quantile_bin(edges, x):
    return np.searchsorted(edges[1:-1], x, side="left")


def family_histogram():
    print("3. fit_histogram(..., 'quantile')")
    for table, M in (("hist_ties", 5), ("hist_ties", 10), ("hist_ties", 15), ("hist_spike", 10)):
        d = read_csv(table)
        p, y = d["p"], d["y"]
        e = quantile_edges(p, M)
        b = quantile_bin(e, p)
        cnt = np.bincount(b, minlength=M)
        pos = np.bincount(b, weights=y.astype(float), minlength=M)
        overall = float(y.mean())
        vals = np.where(cnt > 0, pos / np.maximum(cnt, 1), overall)
        v = np.clip(vals[b], 1e-15, 1 - 1e-15)
        loss = float(np.mean(-(y * np.log(v) + (1 - y) * np.log1p(-v))))
        empty = [int(k) for k in np.nonzero(cnt == 0)[0]]
        on_edge = int(np.sum(np.isin(p, e)))
        u = np.unique(p)
        pts = set(data_values(p, 8))
        pts |= {float(x) for x in e}  # every edge (many are data values)
        pts |= {0.0, float(u[0] / 2), 1.0, float((u[-1] + 1) / 2)}
        pts |= set(between_values(p, 3))
        pts = sorted(pts)
        exp = [float(vals[quantile_bin(e, np.array([x]))[0]]) for x in pts]
        call = f"fit_histogram(p, y, {M}, 'quantile')"
        note = (
            f"edges = np.percentile(p, linspace(0,1,{M + 1})*100) = {[float(x) for x in e]}; "
            f"{on_edge} rows lie exactly on an edge (right-closed bins); empty bins {empty} take the overall rate {overall!r}; "
            "points: data values, every edge, midpoints, 0, 1 and points outside the data range"
        )
        if table == "hist_spike":
            assert empty, "hist_spike must have an empty bin"
        print(f"  {table}: {call}: loss {loss!r}, empty bins {empty}, rows on edges {on_edge}")
        add_case(table, call, len(p), loss, [(x, 0, vv) for x, vv in zip(pts, exp)], note)


# ----------------------------------------------------------------------------------------------
# 4. ILPS and 5. field calibration
# ----------------------------------------------------------------------------------------------


def ilps_knots(K):
    pk = np.arange(1, K + 1, dtype=np.float64) / (K + 1)
    return np.log(pk / (1.0 - pk))


def interp_matrix(l, a):
    """Rows: weights w such that eta(l) = w @ b (linear interpolation, constant outside)."""
    K = len(a)
    W = np.zeros((len(l), K))
    for i, x in enumerate(l):
        if x <= a[0]:
            W[i, 0] = 1.0
        elif x >= a[-1]:
            W[i, -1] = 1.0
        else:
            k = int(np.searchsorted(a, x, side="right")) - 1
            w = (x - a[k]) / (a[k + 1] - a[k])
            W[i, k] = 1.0 - w
            W[i, k + 1] = w
    return W


def eta(l, a, b):
    return interp_matrix(np.atleast_1d(np.asarray(l, dtype=np.float64)), a) @ b


def ilps_design(l, K):
    a = ilps_knots(K)
    W = interp_matrix(l, a)
    L = np.tril(np.ones((K, K)))  # b = L @ (b1, d2..dK)
    return a, W, L


def slsqp_b_space(W, t, K, starts_b, norm, G=None, l2=0.0):
    """SLSQP on b (and g) directly with the K-1 linear constraints b_{k+1} - b_k >= 0."""
    n = W.shape[0]
    Zb = W if G is None else np.column_stack([W, G])
    kk = Zb.shape[1]
    pen = np.zeros(kk, dtype=bool)
    if G is not None:
        pen[K:] = True
    D = np.zeros((K - 1, kk))
    for k in range(K - 1):
        D[k, k], D[k, k + 1] = -1.0, 1.0

    def fun(x):
        f = Zb @ x
        return float(np.sum(softplus(f) - t * f) / norm + 0.5 * l2 * np.sum(x[pen] ** 2))

    def grad(x):
        f = Zb @ x
        return Zb.T @ (sigmoid(f) - t) / norm + l2 * np.where(pen, x, 0.0)

    best = None
    for x0 in starts_b:
        r = minimize(fun, x0, jac=grad, method="SLSQP", constraints=[{"type": "ineq", "fun": lambda x: D @ x, "jac": lambda x: D}], options={"ftol": 1e-15, "maxiter": 5000})
        if np.all(D @ r.x >= -1e-10) and (best is None or r.fun < best):
            best = r.fun
    return best


def ilps_starts(K, extra=0, seed=11):
    rng = np.random.default_rng(seed)
    s = [np.zeros(K + extra), np.concatenate([[-2.0], np.full(K - 1, 4.0 / K), np.zeros(extra)])]
    for _ in range(2):
        s.append(np.concatenate([[rng.normal(-1, 1)], np.abs(rng.normal(0, 0.1, K - 1)), rng.normal(0, 0.3, extra)]))
    return s


def family_ilps():
    print("4. fit_ilps")
    for table, call, K, q, clip in (
        ("ilps_bent", "fit_ilps(l, y, 10)", 10, False, None),
        ("ilps_bent", "fit_ilps(l, y, 20)", 20, False, None),
        ("ilps_bent", "fit_ilps(l, y)", 100, False, None),
        ("ips", "fit_ilps(l, y, 20, q)", 20, True, None),
    ):
        d = read_csv(table)
        l, y = d["l"], d["y"]
        t = target(y, d["q"] if q else None, clip)
        a, W, L = ilps_design(l, K)
        Z = W @ L
        P = Problem(Z, t, nonneg=range(1, K))
        starts = ilps_starts(K)

        def extra(P):
            sb = [L @ s for s in starts]
            return {"slsqp-b": slsqp_b_space(W, t, K, sb, len(l))}

        x, rep = solve(P, starts, f"{table}: {call}", extra=extra, tc=(K <= 20))
        b = L @ x
        f = W @ b
        loss = mean_loss(f, t)
        rank = int(np.linalg.matrix_rank(Z))
        full = rank == K
        n_act = int(np.sum(x[1:] == 0.0))
        pts = [(s, float(sigmoid(eta(s, a, b))[0])) for s in data_values(l, 12)]
        note = (
            f"K = {K}, knots logit(k/{K + 1}); {n_act} of {K - 1} order constraints active (b_k = b_(k+1)); "
            f"design rank {rank}/{K}; "
        )
        if full:
            extra_pts = between_values(l, 3) + [float(a[0] - 30.0), float(a[-1] + 30.0), float(a[K // 2])]
            pts += [(s, float(sigmoid(eta(s, a, b))[0])) for s in extra_pts]
            note += "b is unique (full column rank): points = 12 data scores (unique in any case), 3 midpoints, a knot and 2 scores beyond the outer knots (unique because of full rank)"
        else:
            note += "b is NOT unique (rank deficient): points are data scores only (eta there is unique)"
        if q:
            note += "; IPS, t = y / max(q, 0.1)"
        print(f"    loss {loss!r}, rank {rank}/{K}, active {n_act}, b range [{b.min():.4g}, {b.max():.4g}]")
        pts = sorted(pts)
        add_case(table, call, len(l), loss, [(s, 0, v) for s, v in pts], note)


def family_field():
    print("5. fit_field_calib")
    d = read_csv("field")
    l, y, site = d["l"], d["y"], d["site"]
    t = y.astype(float)
    sites = np.unique(site)
    G = (site[:, None] == sites[None, :]).astype(float)
    n = len(l)
    for call, K, l2 in (
        ("fit_field_calib(l, y, site, 10, 1.0)", 10, 1.0),
        ("fit_field_calib(l, y, site, 20, 0.0)", 20, 0.0),
        ("fit_field_calib(l, y, site, 100, 10.0)", 100, 10.0),
        ("fit_field_calib(l, y, site)", 100, 1.0),
    ):
        a, W, L = ilps_design(l, K)
        Zl = W @ L
        Z = np.column_stack([Zl, G])
        ng = len(sites)
        # objective / n: sum + l2/2 |g|^2  ->  mean + (l2/n)/2 |g|^2
        P = Problem(Z, t, nonneg=range(1, K), norm=n, pen=range(K, K + ng), l2=l2 / n)
        starts = ilps_starts(K, extra=ng)
        Lb = np.zeros((K + ng, K + ng))
        Lb[:K, :K] = L
        Lb[K:, K:] = np.eye(ng)

        def extra(P):
            sb = [Lb @ s for s in starts]
            return {"slsqp-b": slsqp_b_space(W, t, K, sb, n, G=G, l2=l2 / n)}

        x, rep = solve(P, starts, call, extra=extra, tc=(K <= 20))
        b = L @ x[:K]
        g = x[K:]
        f = W @ b + G @ g
        loss = mean_loss(f, t)
        rank = int(np.linalg.matrix_rank(Z))
        pts = []
        ls = data_values(l, 5)
        for j, sv in enumerate(sites):
            m = site == sv
            for s in data_values(l[m], 3) + [ls[(j + 1) % 5]]:
                pts.append((s, int(sv), float(sigmoid(eta(s, a, b)[0] + g[j]))))
        pts.append((float(a[0] - 20.0), int(sites[0]), float(sigmoid(b[0] + g[0]))))
        pts.append((float(a[-1] + 20.0), int(sites[-1]), float(sigmoid(b[-1] + g[-1]))))
        if l2 == 0.0:
            uniq = "l2 = 0: eta and g are unique only up to eta + c, g - c; every prediction is unique"
        else:
            uniq = "the design is rank-deficient only along the shift (eta + c, g - c), which the ridge on g removes: eta and g are unique"
            assert rank == K + ng - 1, rank
        note = (
            f"K = {K}, l2 = {l2} on the SUM objective; sites {list(map(int, sites))} with simulated biases +0.8, -0.8, +0.3, -0.2; "
            f"g = {[round(float(v), 6) for v in g]}; {int(np.sum(x[1:K] == 0.0))} of {K - 1} order constraints active; design rank {rank}/{K + ng}; {uniq}; "
            "loss = mean unpenalised loss; points: per site 3 of its data scores and one score from the data, plus 2 beyond the outer knots"
        )
        print(f"    loss {loss!r}, g {g}, rank {rank}/{K + ng}")
        add_case("field", call, n, loss, pts, note)


# ----------------------------------------------------------------------------------------------
# 6. ConfCalib
# ----------------------------------------------------------------------------------------------


def wilson(r, n, z):
    z2 = z * z
    denom = 1.0 + z2 / n
    center = (r + z2 / (2.0 * n)) / denom
    half = z / denom * np.sqrt(r * (1.0 - r) / n + z2 / (4.0 * n * n))
    return max(center - half, 0.0), min(center + half, 1.0)


def wilson_z(p, r, n):
    if p == r or n == 0.0:
        return 0.0
    if p == 0.0 or p == 1.0:
        return np.inf
    return abs(r - p) * np.sqrt(n / (p * (1.0 - p)))


def confcalib_multiplier(p, r, n, lam=1.96):
    if n == 0.0 or p == r:
        return 1.0
    assert p > 0.0
    z = wilson_z(p, r, n)
    zs = lam * (2.0 / (1.0 + np.exp(-z / 2.0)) - 1.0)
    lo, hi = wilson(r, n, zs)
    return (hi if p > r else lo) / p


def family_confcalib():
    print("6. fit_confcalib")
    d = read_csv("confcalib")
    p, y, site = d["p"], d["y"], d["site"]
    sites = np.unique(site)
    for M, lam, call in (
        (1, 1.96, "fit_confcalib(p, y, site, 1)"),
        (5, 1.96, "fit_confcalib(p, y, site, 5)"),
        (10, 1.96, "fit_confcalib(p, y, site, 10)"),
        (10, 0.0, "fit_confcalib(p, y, site, 10, 0.0)"),
        (5, 0.0, "fit_confcalib(p, y, site, 5, 0.0)"),
    ):
        model = {}
        empties = {}
        for sv in sites:
            m = site == sv
            ps, ys = p[m], y[m]
            e = quantile_edges(ps, M)
            b = quantile_bin(e, ps)
            mult = []
            for k in range(M):
                mk = b == k
                nk = float(mk.sum())
                if nk == 0:
                    mult.append(1.0)
                    empties.setdefault(int(sv), []).append(k)
                    continue
                ph, r = float(ps[mk].mean()), float(ys[mk].mean())
                mv = confcalib_multiplier(ph, r, nk, lam)
                if lam == 0.0:
                    assert abs(mv - r / ph) <= 1e-15 * max(1.0, r / ph), (mv, r / ph)
                mult.append(mv)
            model[int(sv)] = (e, np.array(mult))

        def cal(x, sv):
            if sv not in model:
                return x
            e, mult = model[sv]
            return float(np.clip(x * mult[quantile_bin(e, np.array([x]))[0]], 0.0, 1.0))

        pts = []
        for sv in sites:
            m = site == sv
            e, _ = model[int(sv)]
            cand = set(data_values(p[m], 4)) | {float(x) for x in e[1:-1][:3]} | {float(p[m].min()) / 2, 0.9995}
            for x in sorted(cand):
                pts.append((x, int(sv), cal(x, int(sv))))
        pts.append((0.25, 99, 0.25))
        pts.append((0.07, 7, 0.07))
        note = (
            f"M = {M}, lambda = {lam}; quantile edges per site value over its own p; "
            f"sites 10 (under-predicted), 20 (over-predicted), 30 (calibrated), 40 (12 rows, ties); empty bins (m = 1): {empties or 'none'}; "
            "points per site: data values, inner edges, below its range, 0.9995 (above); sites 99 and 7 are unseen (p unchanged)"
        )
        print(f"  {call}: multipliers " + "; ".join(f"{k}: {np.round(v[1], 4).tolist()}" for k, v in model.items()))
        add_case("confcalib", call, len(p), float("nan"), pts, note)


# ----------------------------------------------------------------------------------------------
# 7. BBQ (netcal 1.4.0) and its numpy port
# ----------------------------------------------------------------------------------------------


def bbq_edges(B):
    e = np.array([k * (1.0 / B) for k in range(B)] + [1.0])
    assert np.array_equal(e, np.linspace(0.0, 1.0, B + 1))
    return e


def hist_fit(p, y, B):
    e = bbq_edges(B)
    x = np.clip(p, np.finfo(np.float64).eps, 1.0 - np.finfo(np.float64).eps)
    k = np.searchsorted(e, x, side="right") - 1  # number of edges <= x, minus 1: [e_k, e_k+1)
    cnt = np.bincount(k, minlength=B)
    pos = np.bincount(k, weights=(y == 1).astype(float), minlength=B)
    v = np.where(cnt > 0, pos / np.maximum(cnt, 1), 0.5 * (e[:-1] + e[1:]))
    return e, v


def hist_predict(e, v, p):
    B = len(v)
    k = np.searchsorted(e, p, side="left") - 1  # number of edges < p, minus 1: (e_k, e_k+1]
    k = np.where(k == -1, 0, np.where(k == B, B - 1, k))
    return np.clip(v[k], 0.0, 1.0)


def bbq_fit(p, y, ll="f64"):
    N = y.size
    s = np.power(N, 1.0 / 3.0)
    min_bins = int(max(1, np.floor(s / 10.0)))
    max_bins = int(min(np.ceil(N / 5), np.ceil(s * 10.0)))
    models, LL = [], []
    for B in range(min_bins, max_bins + 1):
        e, v = hist_fit(p, y, B)
        est = hist_predict(e, v, p)
        if ll == "f64":
            with np.errstate(divide="ignore"):
                l_i = y * np.maximum(np.log(est), -100.0) + (1 - y) * np.maximum(np.log1p(-est), -100.0)
            LL.append(float(np.sum(l_i)))
        else:
            import torch

            LL.append(
                -torch.nn.functional.binary_cross_entropy(
                    torch.from_numpy(est).type(torch.FloatTensor), torch.from_numpy(y).type(torch.FloatTensor), reduction="sum"
                ).item()
            )
        models.append((B, e, v))
    LL = np.array(LL)
    dof = np.array([B for B, _, _ in models])
    bic = -2.0 * LL + dof * np.log(N)
    w = np.exp((np.min(bic) - bic) / 2.0)
    var = np.var(w)
    order = np.argsort(w)[::-1]
    ws = w[order]
    n = len(w)
    k = 0
    while k < n - 1 and ws[k] == ws[k + 1]:
        k += 1
    margins = []
    while k < n - 1 and ((ws[k] - ws[k + 1]) / var) > 0.001:
        margins.append((ws[k] - ws[k + 1]) / var)
        k += 1
    stop = (ws[k] - ws[k + 1]) / var if k < n - 1 else np.inf
    k += 1
    kept = [models[i] for i in order[:k]]
    W = ws[:k] / np.sum(ws[:k])
    info = {"range": (min_bins, max_bins), "kept_bins": [m[0] for m in kept], "weights": W, "min_pass": min(margins) if margins else np.inf, "stop": stop}
    return kept, W, info


def bbq_predict(kept, W, x):
    x = np.asarray(x, dtype=np.float64)
    acc = np.zeros_like(x)
    for (B, e, v), wj in zip(kept, W):
        acc = acc + wj * hist_predict(e, v, x)
    return np.clip(acc, 0.0, 1.0)


def family_bbq():
    print("7. fit_bbq")
    from netcal.binning import BBQ

    out = {}
    for table in ("bbq_beta", "bbq_grid", "bbq_small", "bbq_big"):
        d = read_csv(table)
        p, y = d["p"], d["y"]
        m = BBQ()
        m.fit(p, y)
        u = np.unique(p)
        pts = set(data_values(p, 8)) | {0.0, 1.0, 0.5, 0.25, 0.75, 0.2, 0.3, 0.1, 1e-12, 1 - 1e-12}
        if len(u) > 30:
            pts |= set(between_values(p, 3))
        else:
            pts |= {0.025, 0.475, 0.525, 0.975}
        pts = np.array(sorted(pts))
        ref = m.transform(pts)
        ref_rows = m.transform(p)
        res = {}
        for mode in ("f64", "torch"):
            kept, W, info = bbq_fit(p, y, ll=mode)
            dp = float(max(np.max(np.abs(bbq_predict(kept, W, pts) - ref)), np.max(np.abs(bbq_predict(kept, W, p) - ref_rows))))
            res[mode] = (dp, info)
        assert res["torch"][0] <= 1e-12, (table, res["torch"][0])
        assert [h.bins for h in m._binning_models] == res["torch"][1]["kept_bins"]
        same = res["f64"][1]["kept_bins"] == res["torch"][1]["kept_bins"]
        info = res["torch"][1]
        out[table] = (res["f64"][0], res["torch"][0], info, same)
        on_edge = sum(int(np.any(np.isin(p, bbq_edges(B)[1:-1]))) for B in range(info["range"][0], info["range"][1] + 1))
        kept_edge = [B for B in info["kept_bins"] if np.any(np.isin(p, bbq_edges(B)[1:-1]))]
        print(
            f"  {table}: N={len(p)} bins {info['range'][0]}..{info['range'][1]}, kept {len(info['kept_bins'])} {info['kept_bins'][:8]}..., "
            f"top weight {info['weights'][0]:.4g}; max|port(f64 LL) - netcal| = {res['f64'][0]:.3g}, max|port(torch LL) - netcal| = {res['torch'][0]:.3g}; "
            f"same kept models with f64 LL: {same}; elbow: smallest passing gap/var {info['min_pass']:.4g}, stopping gap/var {info['stop']:.4g} (alpha 0.001); "
            f"binnings with a row on an inner edge: {on_edge}"
        )
        note = (
            f"netcal 1.4.0 BBQ() predictions; N = {len(p)}, equal-width binnings B = {info['range'][0]}..{info['range'][1]}, "
            f"{len(info['kept_bins'])} kept by the elbow (B = {info['kept_bins']}), top weight {info['weights'][0]:.6g}; "
            f"numpy port with netcal's float32 torch log-likelihood matches to {res['torch'][0]:.1e}, "
            f"with a float64 log-likelihood to {res['f64'][0]:.1e} (same kept models: {same}); "
            f"elbow margins: smallest accepted gap/var {info['min_pass']:.3g}, stopping gap/var {info['stop']:.3g} (alpha 0.001); "
            f"{on_edge} binnings have rows exactly on an inner edge (fit bin != predict bin), kept ones: B = {kept_edge}; "
            "points: data values, 0, 1, 0.1, 0.2, 0.25, 0.3, 0.5, 0.75, 1e-12, 1-1e-12, midpoints"
        )
        add_case(table, "fit_bbq(p, y)", len(p), float("nan"), [(x, 0, float(v)) for x, v in zip(pts, ref)], note)
    return out


# ----------------------------------------------------------------------------------------------


def write_expected():
    out = io.StringIO()
    w = out.write
    w("// Generated by tests/fits_gen/calibrators.py — do not edit.\n")
    w(
        "/// (table = CSV stem, SQL aggregate call, rows, expected mean loss of the fit on its rows (f64::NAN if not defined), "
        "points: (score, field value or 0 when the model has no field, expected calibrated probability), note)\n"
    )
    w("pub const CASES: &[(&str, &str, i64, f64, &[(f64, i64, f64)], &str)] = &[\n")
    for table, call, rows, loss, pts, note in CASES:
        w("    (\n")
        w(f"        {rust_str(table)},\n")
        w(f"        {rust_str(call)},\n")
        w(f"        {rows},\n")
        w(f"        {rust_f64(loss)},\n")
        w("        &[\n")
        for s, f, v in pts:
            w(f"            ({rust_f64(s)}, {f}, {rust_f64(v)}),\n")
        w("        ],\n")
        w(f"        {rust_str(note)},\n")
        w("    ),\n")
    w("];\n")
    with open(os.path.join(DATA, "expected.rs"), "w") as f:
        f.write(out.getvalue())


def main():
    global DATA
    import importlib.metadata as md
    import shutil
    import tempfile

    checked_in = DATA
    if "--check" in sys.argv:
        DATA = tempfile.mkdtemp(prefix="calibrators_gen-")

    import netcal

    got = {"numpy": np.__version__, "scipy": scipy.__version__, "sklearn": sklearn.__version__, "netcal": netcal.__version__, "betacal": md.version("betacal")}
    print("versions:", got)
    if got != VERSIONS:
        print("WARNING: versions differ from the ones that generated the committed files:", VERSIONS)
    make_data()
    sk = family_temperature()
    bc = family_beta()
    family_histogram()
    family_ilps()
    family_field()
    family_confcalib()
    bb = family_bbq()
    write_expected()
    print(f"{len(CASES)} cases written to {os.path.join(DATA, 'expected.rs')}")
    print("summary: sklearn", sk, "betacal", bc)
    print("bbq", {k: (v[0], v[1], v[3]) for k, v in bb.items()})
    if DATA != checked_in:
        bad = check_tree(DATA, checked_in, check_tolerance)
        shutil.rmtree(DATA)
        print(f"tests/fits_gen/calibrators.py --check: {'OK' if not bad else f'{bad} file(s) differ'}")
        return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
