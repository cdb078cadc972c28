"""Expected values of the inference aggregates (tests/fits/inference.rs): spiegelhalter,
calibration_slope, hosmer_lemeshow, calibration_decomposition and field_bias, on three data sets.

    python3 tests/inference_gen/gen.py            # rewrite tests/data/inference/
    python3 tests/inference_gen/gen.py --check    # recompute into a temporary folder and compare

Data sets (the first two written as CSV, the third defined by integer arithmetic that the Rust
test repeats in SQL, so no file holds its million rows):
  * small: 600 rows, p = expit(N(-1, 1.5)) overconfident against the truth expit(0.6 logit p - 0.3),
    weights U(0.5, 2), a field of 5 values with one value shifted, numpy seed 32;
  * ties: 3000 rows, p among 8 values only (heavy ties), y ~ Bernoulli(0.9 p + 0.03), seed 33;
  * big: 1,000,000 rows, i = 1..1e6: p = ((i * 2654435761) % 1000003) / 1000003,
    u = ((i * 2246822519) % 65537) / 65537, y = u < 0.8 p + 0.05 + (0.03 if i % 13 = 3),
    w = 1 + (i % 7) / 2, f = i % 13.

References:
  * calibration_slope: statsmodels GLM(family=Binomial()) on [1, logit p] (intercept, slope) and on
    a constant with offset logit p (citl); params and bse; freq_weights = w for the weighted calls;
    rows with p in {0, 1} dropped first. Fitted with tol=1e-13.
  * spiegelhalter: a numpy port of rms::val.prob's internal `Spi` (rms 6.x, R/val.prob.s):
        z <- sum((y - p)*(1 - 2*p)) / sqrt(sum((1 - 2*p)*(1 - 2*p)*p*(1 - p)));  P <- 2*pnorm(-abs(z))
    checked line by line against that source and against Spiegelhalter (1986), Stat Med 5:421,
    eq. for Z(p); the weighted form is the issue's Σw(y−p)(1−2p)/sqrt(Σw²(1−2p)²p(1−p)).
    P from scipy.stats.norm.sf.
  * hosmer_lemeshow: a numpy port of ResourceSelection::hoslem.test (ResourceSelection 0.3-6):
        qq <- unique(quantile(yhat, probs = seq(0, 1, 1/g)))
        cutyhat <- cut(yhat, breaks = qq, include.lowest = TRUE)
        observed <- xtabs(cbind(y0 = 1 - y, y1 = y) ~ cutyhat)
        expected <- xtabs(cbind(yhat0 = 1 - yhat, yhat1 = yhat) ~ cutyhat)
        chisq <- sum((observed - expected)^2 / expected);  PVAL <- 1 - pchisq(chisq, g - 2)
    with R's quantile type 7 (index = 1 + (n - 1) * prob, (1 - h) * x[lo] + h * x[hi]) and
    seq(0, 1, 1/g) = k * (1/g); cut's right-closed intervals with the lowest break included. The
    one deliberate difference (docs/SEMANTICS.md): df = number of non-empty groups - 2 (R: g - 2),
    which is the same whenever no two quantiles tie; the ties data set shows the difference.
    p-value from scipy.stats.chi2.sf.
  * calibration_decomposition: model-diagnostics 1.5.0 `decompose(y, p, w, scoring_function=
    SquaredError() or LogLoss())`.
  * field_bias: numpy per value (n = Σw, mean_p = Σwp/n, frac_pos = Σwy/n, z = |frac_pos -
    mean_p| sqrt(n / (mean_p (1 - mean_p))) as wilson_z), p = 2 scipy.stats.norm.sf(z), Holm from
    statsmodels.stats.multitest.multipletests(method='holm'); sorted by (p_adjusted, p_value,
    field value).
"""

import io
import math
import os
import sys

import numpy as np
import scipy
import statsmodels
import statsmodels.api as sm
from scipy import stats
from scipy.special import expit
from statsmodels.stats.multitest import multipletests

import model_diagnostics
from importlib.metadata import version
from model_diagnostics.scoring import LogLoss, SquaredError, decompose

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DATA = os.path.join(ROOT, "tests", "data", "inference")

sys.path.insert(0, os.path.join(ROOT, "tests", "gen"))
from textcheck import check_tree  # noqa: E402

# --check's tolerance (rel, abs), far below the tests' (1e-6 for the GLM, 1e-9 for the rest):
# sums over a million rows differ in their last digits between processors.
CHECK = (1e-11, 1e-14)


def make_small():
    rng = np.random.default_rng(32)
    n = 600
    p = expit(rng.normal(-1.0, 1.5, n))
    f = np.array(["a", "b", "c", "d", "e"])[rng.integers(0, 5, n)]
    truth = expit(0.6 * np.log(p / (1 - p)) - 0.3 + np.where(f == "c", 0.8, 0.0))
    y = (rng.random(n) < truth).astype(float)
    w = rng.uniform(0.5, 2.0, n)
    return p, y, w, f


def make_ties():
    rng = np.random.default_rng(33)
    n = 3000
    levels = np.array([0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9])
    p = levels[rng.choice(8, n, p=[0.3, 0.2, 0.15, 0.1, 0.1, 0.07, 0.05, 0.03])]
    y = (rng.random(n) < 0.9 * p + 0.03).astype(float)
    w = rng.integers(1, 4, n).astype(float)
    f = np.array(["x", "y", "z"])[rng.integers(0, 3, n)]
    return p, y, w, f


def make_big():
    i = np.arange(1, 1_000_001, dtype=np.int64)
    p = ((i * 2654435761) % 1000003).astype(float) / 1000003.0
    u = ((i * 2246822519) % 65537).astype(float) / 65537.0
    q = 0.8 * p + 0.05 + np.where(i % 13 == 3, 0.03, 0.0)
    y = (u < q).astype(float)
    w = 1.0 + (i % 7).astype(float) / 2.0
    f = (i % 13).astype(str)
    return p, y, w, f


def write_csv(name, p, y, w, f):
    with open(os.path.join(DATA, f"{name}.csv"), "w") as fh:
        fh.write("p,y,w,f\n")
        for a, b, c, d in zip(p, y, w, f):
            fh.write(f"{float(a)!r},{int(b)},{float(c)!r},{d}\n")


def read_back(name):
    """The CSV as the test reads it (so the references see exactly the numbers SQL sees)."""
    rows = [line.rstrip("\n").split(",") for line in open(os.path.join(DATA, f"{name}.csv"))][1:]
    p = np.array([float(r[0]) for r in rows])
    y = np.array([float(r[1]) for r in rows])
    w = np.array([float(r[2]) for r in rows])
    f = np.array([r[3] for r in rows])
    return p, y, w, f


def spiegelhalter(p, y, w=None):
    w = np.ones_like(p) if w is None else w
    z = np.sum(w * (y - p) * (1 - 2 * p)) / np.sqrt(np.sum(w * w * (1 - 2 * p) * (1 - 2 * p) * p * (1 - p)))
    return [z, 2 * stats.norm.sf(abs(z))]


def calibration_slope(p, y, w=None):
    keep = (p > 0) & (p < 1)
    p, y = p[keep], y[keep]
    w = None if w is None else w[keep]
    x = np.log(p / (1 - p))
    kw = {} if w is None else {"freq_weights": w}
    full = sm.GLM(y, np.column_stack([np.ones_like(x), x]), family=sm.families.Binomial(), **kw).fit(tol=1e-13, maxiter=200)
    citl = sm.GLM(y, np.ones((len(x), 1)), family=sm.families.Binomial(), offset=x, **kw).fit(tol=1e-13, maxiter=200)
    return [full.params[0], full.params[1], citl.params[0], full.bse[0], full.bse[1], citl.bse[0]], int(keep.sum())


def r_quantile7(x, probs):
    """R's quantile(x, probs, type = 7)."""
    x = np.sort(x)
    n = len(x)
    out = []
    for prob in probs:
        index = 1 + max(n - 1, 0) * prob
        lo = math.floor(index)
        hi = math.ceil(index)
        qs = x[lo - 1]
        h = index - lo
        if index > lo and x[hi - 1] != qs:
            qs = (1 - h) * qs + h * x[hi - 1]
        out.append(qs)
    return np.array(out)


def hoslem(y, yhat, g=10):
    probs = np.minimum(np.arange(g + 1) * (1.0 / g), 1.0)
    qq = np.unique(r_quantile7(yhat, probs))  # R's unique keeps order; the quantiles are sorted
    # cut(..., include.lowest = TRUE): (q0, q1] with q0 included, (q1, q2], ...
    inner = qq[1:-1] if len(qq) > 1 else qq[:0]
    group = np.searchsorted(inner, yhat, side="left")
    stat, used = 0.0, 0
    for k in range(len(inner) + 1):
        m = group == k
        if not m.any():
            continue  # R: an empty group makes the statistic NaN; calibsql leaves it out
        used += 1
        o1, e1 = y[m].sum(), yhat[m].sum()
        o0, e0 = (1 - y[m]).sum(), (1 - yhat[m]).sum()
        stat += (o0 - e0) ** 2 / e0 + (o1 - e1) ** 2 / e1
    df = used - 2
    return [stat, df, stats.chi2.sf(stat, df) if df > 0 else float("nan")]


def corp(p, y, w=None, logloss=False):
    d = decompose(y, p, w, scoring_function=LogLoss() if logloss else SquaredError())
    return [float(d["score"][0]), float(d["miscalibration"][0]), float(d["discrimination"][0]), float(d["uncertainty"][0])]


def field_bias(p, y, f, w=None):
    w = np.ones_like(p) if w is None else w
    rows = []
    for v in sorted(set(f)):
        m = f == v
        n = w[m].sum()
        if n <= 0:
            continue
        mean_p = np.sum(w[m] * p[m]) / n
        frac = np.sum(w[m] * y[m]) / n
        z = 0.0 if frac == mean_p else abs(frac - mean_p) * math.sqrt(n / (mean_p * (1 - mean_p)))
        rows.append([v, n, mean_p, frac, frac - mean_p, z, 2 * stats.norm.sf(z)])
    adj = multipletests([r[6] for r in rows], method="holm")[1]
    for r, a in zip(rows, adj):
        r.append(float(a))
    rows.sort(key=lambda r: (r[7], r[6], r[0]))
    return rows


def fmt(x):
    x = float(x)
    if math.isnan(x):
        return "f64::NAN"
    if math.isinf(x):
        return "f64::INFINITY" if x > 0 else "f64::NEG_INFINITY"
    return repr(float(x))


def main():
    global DATA
    checked_in = DATA
    if "--check" in sys.argv:
        import tempfile

        DATA = tempfile.mkdtemp(prefix="inference_gen-")
    versions = (f"numpy {np.__version__}, scipy {scipy.__version__}, statsmodels {statsmodels.__version__}, "
                f"model-diagnostics {version('model-diagnostics')}")
    print(versions)
    write_csv("small", *make_small())
    write_csv("ties", *make_ties())
    sets = {"small": read_back("small"), "ties": read_back("ties"), "big": make_big()}

    cases = []  # (table, call, fields, values, rel)
    fb = []  # (table, call, rows)
    for table, (p, y, w, f) in sets.items():
        cases.append((table, "spiegelhalter(p, y)", ["z", "p_value"], spiegelhalter(p, y), 1e-9))
        cases.append((table, "spiegelhalter(p, y, w)", ["z", "p_value"], spiegelhalter(p, y, w), 1e-9))
        names = ["intercept", "slope", "citl", "intercept_se", "slope_se", "citl_se", "n"]
        v, n = calibration_slope(p, y)
        cases.append((table, "calibration_slope(p, y)", names, v + [n], 1e-6))
        v, n = calibration_slope(p, y, w)
        cases.append((table, "calibration_slope(p, y, w)", names, v + [n], 1e-6))
        for g in (10, 5):
            call = "hosmer_lemeshow(p, y)" if g == 10 else f"hosmer_lemeshow(p, y, {g})"
            cases.append((table, call, ["statistic", "df", "p_value"], hoslem(y, p, g), 1e-9))
        names = ["score", "miscalibration", "discrimination", "uncertainty"]
        cases.append((table, "calibration_decomposition(p, y)", names, corp(p, y), 1e-9))
        cases.append((table, "calibration_decomposition(p, y, 'logloss')", names, corp(p, y, logloss=True), 1e-9))
        cases.append((table, "calibration_decomposition(p, y, 'brier', w)", names, corp(p, y, w), 1e-9))
        cases.append((table, "calibration_decomposition(p, y, 'logloss', w)", names, corp(p, y, w, True), 1e-9))
        fb.append((table, "field_bias(p, y, f)", field_bias(p, y, f)))
        fb.append((table, "field_bias(p, y, f, w)", field_bias(p, y, f, w)))

    out = io.StringIO()
    o = out.write
    o("// @generated by tests/inference_gen/gen.py -- do not edit; rerun the script instead.\n")
    o(f"// {versions}. The script's header says how each value is computed.\n\n")
    o("const CASES: &[Case] = &[\n")
    for table, call, fields, values, rel in cases:
        o(f"    Case {{\n        table: \"{table}\",\n        call: \"{call}\",\n")
        o(f"        fields: &[{', '.join(repr(x).replace(chr(39), chr(34)) for x in fields)}],\n")
        o(f"        want: &[{', '.join(fmt(x) for x in values)}],\n        rel: {rel!r},\n    }},\n")
    o("];\n\nconst FIELD_BIAS_CASES: &[FieldBiasCase] = &[\n")
    for table, call, rows in fb:
        o(f"    FieldBiasCase {{\n        table: \"{table}\",\n        call: \"{call}\",\n        rows: &[\n")
        for r in rows:
            o(f"            (\"{r[0]}\", [{', '.join(fmt(x) for x in r[1:])}]),\n")
        o("        ],\n    },\n")
    o("];\n")
    with open(os.path.join(DATA, "expected.rs"), "w") as fh:
        fh.write(out.getvalue())
    if DATA != checked_in:
        import shutil

        bad = check_tree(DATA, checked_in, lambda name: [(None, *CHECK)])
        shutil.rmtree(DATA)
        print(f"tests/inference_gen/gen.py --check: {'OK' if not bad else f'{bad} file(s) differ'}")
        return 1 if bad else 0
    print(f"wrote {DATA}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
