"""Expected values of tests/slt/strategies.slt: the bin-assignment strategies of ece / mce /
reliability / ace / rmsce, and normalized_entropy, computed BY THE TOOLS THEMSELVES.

Rules, file:line of each tool and the float details: docs/binning-rules.md.

Tool versions the values were computed with (python 3.11.7, venv /work/scratch/venv-a):
  numpy 2.4.6, scipy 1.17.1, scikit-learn 1.9.1, netcal 1.4.0, torch 2.15.0 (CPU capability AVX2),
  torchmetrics 1.9.0, relplot 1.0.3, uncertainty-calibration 0.1.4 (module `calibration`),
  statsmodels 0.15.0 (Wilson cross-check only).
  pip install numpy scipy scikit-learn netcal==1.4.0 torch "torchmetrics>=1.9,<1.10" relplot==1.0.3 \
      uncertainty-calibration==0.1.4 statsmodels

strategy       tool call whose numbers are reproduced (unweighted)
  'uniform'      none: calibsql's own rule, bin = min(floor(p*M), M-1) (gen/binned.py)
  'sklearn'      sklearn.calibration.calibration_curve(y, p, n_bins=M, strategy='uniform')
  'quantile'     sklearn.calibration.calibration_curve(y, p, n_bins=M, strategy='quantile')
                 (weighted edges: numpy.percentile(p, linspace(0,1,M+1)*100, weights=w, method='inverted_cdf'))
  'netcal'       netcal.metrics.ECE(bins=M).measure(p, y), MCE(bins=M), ACE(bins=M)
  'torchmetrics' torchmetrics.functional.classification.binary_calibration_error(p, y, n_bins=M,
                 norm='l1' | 'max' | 'l2') on float64 tensors; M+1 bins, the last holds p == 1.0
  'relplot'      relplot.metrics.binnedECE(p, y, nbins=M); M+1 bins, the last holds p == 1.0
  'kumar'        calibration.get_ece(p, y, num_bins=M) (equal-WIDTH bins, right-closed)
ace(p, y, M, 'netcal') = netcal ACE(bins=M), which is equal-WIDTH; the default ace(p, y) (15, 'quantile')
is the mean over non-empty sklearn-quantile bins: netcal's own equal-mass ACE (equal_intervals=False)
uses other edges, left-closed bins, and raises on ties (docs/binning-rules.md).
sklearn and kumar have no ECE/MCE per se: ECE = sum_b n_b/N |frac_pos_b - mean_p_b| and MCE = max over
non-empty bins, from the tool's own per-bin numbers (calibration_curve / calibration.utils.fast_bin).
No tool takes weights: weighted expected values come from the reference below (our definition):
  bins as the strategy (weights only move the 'quantile' edges), W_b = sum w, mean_p = sum w p' / W_b
  (p' = p clipped to [eps, 1-eps] for 'netcal', else p), frac_pos = sum w y / W_b,
  ece = sum_b |sum_b w (y - p')| / W, mce = max_{W_b > 0} |frac_pos - mean_p|,
  ace = mean over bins with W_b > 0 of |frac_pos - mean_p|, rmsce = sqrt(sum_b W_b/W (frac_pos - mean_p)^2),
  reliability frac_pos_lower/upper = Wilson interval (z = norm.ppf(1 - (1-level)/2)) around frac_pos with
  n = count (no w) or Kish n_eff = W_b^2 / sum_b w^2 (with w), clamped to [0, 1].
Every unweighted tool value is asserted equal (< 1e-14) to this reference, so the reference IS the
tools' rule; the emitted value is the tool's.
normalized_entropy(p, y [, w]) = 1 - sklearn.metrics.d2_log_loss_score(y, p, sample_weight=w)
  (= logloss(p, y, w) / H(base rate), checked against numpy).

    python3 tests/slt/gen/strategies.py            # print the blocks
    python3 tests/slt/gen/strategies.py --check    # assert every block appears verbatim in strategies.slt
The 1M-row tables take about a minute.
"""

import math
import warnings
from fractions import Fraction

import numpy as np

from common import EPS, ROWS, close, exact, fmt, main, sql_round

SLT = "strategies.slt"
STRATS = ["uniform", "quantile", "sklearn", "netcal", "torchmetrics", "relplot", "kumar"]
warnings.filterwarnings("ignore")

# --------------------------------------------------------------------------------------------
# The tools (imported lazily: torch is slow to import)


def _tools():
    import torch
    from netcal.metrics import ACE, ECE, MCE
    from sklearn.calibration import calibration_curve
    from sklearn.metrics import d2_log_loss_score
    from torchmetrics.functional.classification import binary_calibration_error
    import relplot.metrics as relplot_metrics
    from calibration import utils as kumar

    torch.set_num_threads(1)
    return dict(torch=torch, ACE=ACE, ECE=ECE, MCE=MCE, calibration_curve=calibration_curve, d2=d2_log_loss_score,
                bce=binary_calibration_error, relplot=relplot_metrics, kumar=kumar)


T = None


def tools():
    global T
    if T is None:
        T = _tools()
    return T


# --------------------------------------------------------------------------------------------
# Reference rules (docs/binning-rules.md), re-derived in numpy; checked against the tools.


def fma(a, b, c):
    """a*b + c with one rounding (Python 3.11 has no math.fma)."""
    return float(Fraction(a) * Fraction(b) + Fraction(c))


def np_linspace(M):
    """numpy.linspace(0, 1, M+1): k * (1/M), last = 1.0"""
    s = 1.0 / M
    e = [k * s for k in range(M + 1)]
    e[M] = 1.0
    return np.array(e)


def torch_linspace(M):
    """torch.linspace(0, 1, M+1, dtype=float64) on an AVX2 CPU: k*s below halfway = (M+1)//2,
    fma(-s, M-k, 1.0) from there (the DEFAULT-capability kernel rounds twice: 1.0 - s*(M-k))."""
    s = 1.0 / M
    h = (M + 1) // 2
    return np.array([s * k if k < h else fma(-s, M - k, 1.0) for k in range(M + 1)])


def pct_q(M):
    """the quantiles numpy.percentile(p, numpy.linspace(0, 1, M+1) * 100) really uses"""
    return np_linspace(M) * 100 / 100


def pct_edges(p, M):
    """numpy.percentile(p, linspace(0,1,M+1)*100) (method 'linear'), re-derived"""
    a = np.sort(p)
    n = len(a)
    out = []
    for q in pct_q(M):
        vi = (n - 1) * q
        if vi >= n - 1:
            out.append(a[n - 1])
            continue
        j = math.floor(vi)
        g = vi - j
        d = a[j + 1] - a[j]
        out.append(a[j + 1] - d * (1 - g) if g >= 0.5 else a[j] + d * g)
    e = np.array(out)
    assert np.array_equal(e, np.percentile(p, np.linspace(0, 1, M + 1) * 100))
    return e


def wpct_edges(p, w, M):
    """numpy.percentile(p, linspace(0,1,M+1)*100, weights=w, method='inverted_cdf'), re-derived"""
    o = np.argsort(p)
    a, ws = p[o], w[o]
    cdf = np.cumsum(ws, dtype=np.float64)
    cdf = cdf / cdf[-1]
    if cdf[0] == 0:
        cdf[cdf == 0] = -1
    e = a[np.minimum(np.searchsorted(cdf, pct_q(M), side="left"), len(a) - 1)]
    assert np.array_equal(e, np.percentile(p, np.linspace(0, 1, M + 1) * 100, weights=w, method="inverted_cdf"))
    return e


def assign(p, M, strategy, w=None):
    """(bin of each row, number of bins, lower and upper edge of each bin, p as averaged)"""
    if strategy == "uniform":
        b = np.minimum(np.floor(p * M), M - 1).astype(int)
        return b, M, [k / M for k in range(M)], [(k + 1) / M for k in range(M)], p
    if strategy in ("sklearn", "quantile"):
        if strategy == "sklearn":
            e = np_linspace(M)
        else:
            e = pct_edges(p, M) if w is None else wpct_edges(p, w, M)
        return np.searchsorted(e[1:-1], p, side="left"), M, list(e[:-1]), list(e[1:]), p
    if strategy == "netcal":
        e = np_linspace(M)
        pc = np.clip(p, EPS, 1 - EPS)
        return np.searchsorted(e, pc, side="right") - 1, M, list(e[:-1]), list(e[1:]), pc
    if strategy == "torchmetrics":
        e = torch_linspace(M)
        return np.searchsorted(e, p, side="right") - 1, M + 1, list(e[:-1]) + [1.0], list(e[1:]) + [1.0], p
    if strategy == "relplot":
        s = 1.0 / M
        nb = int(1.0 / s) + 1  # M + 1, but M when 1.0/s < M (M = 93, 99, 105, 117, 123, 186, ...)
        lo = [k * s for k in range(M)]
        hi = [min((k + 1) * s, 1.0) for k in range(M)]
        if nb == M + 1:  # the extra bin [1, 1] of p = 1.0
            lo, hi = lo + [1.0], hi + [1.0]
        return (p / s).astype(int), nb, lo, hi, p
    if strategy == "kumar":
        e = [i / M for i in range(1, M + 1)]
        return np.searchsorted(e, p, side="left"), M, [0.0] + e[:-1], e, p
    raise ValueError(strategy)


def wilson(r, n, z):
    d = 1 + z * z / n
    center = (r + z * z / (2 * n)) / d
    half = z / d * math.sqrt(r * (1 - r) / n + z * z / (4 * n * n))
    return min(max(center - half, 0.0), 1.0), min(max(center + half, 0.0), 1.0)


_WCHECK = [0]


def wilson_checked(r, n, z):
    lo, hi = wilson(r, n, z)
    if _WCHECK[0] < 200:  # statsmodels cross-check on the first few hundred bins
        from statsmodels.stats.proportion import proportion_confint
        from scipy.stats import norm
        slo, shi = proportion_confint(r * n, n, alpha=2 * norm.sf(z), method="wilson")
        assert abs(slo - lo) < 1e-12 and abs(shi - hi) < 1e-12, (r, n, z, lo, slo, hi, shi)
        _WCHECK[0] += 1
    return lo, hi


def zlevel(level):
    from scipy.stats import norm
    return float(norm.ppf(1 - (1 - level) / 2))


def ref_bins(p, y, M, strategy, w=None):
    b, nb, lo, hi, pu = assign(p, M, strategy, w)
    wv = np.ones_like(p) if w is None else w
    out = []
    order = np.argsort(b, kind="stable")
    bs = b[order]
    cuts = np.searchsorted(bs, np.arange(nb + 1), side="left")
    for k in range(nb):
        ix = order[cuts[k]:cuts[k + 1]]
        W = math.fsum(wv[ix])
        out.append(dict(bin=k, lower=lo[k], upper=hi[k], count=len(ix), weight=W,
                        err=math.fsum(wv[ix] * (y[ix] - pu[ix])), swp=math.fsum(wv[ix] * pu[ix]),
                        swy=math.fsum(wv[ix] * y[ix]), sw2=math.fsum(wv[ix] ** 2)))
    return out


def ref_metrics(p, y, M, strategy, w=None):
    bins = ref_bins(p, y, M, strategy, w)
    W = math.fsum(b["weight"] for b in bins)
    ne = [b for b in bins if b["weight"] > 0]
    dev = [abs(b["swy"] / b["weight"] - b["swp"] / b["weight"]) for b in ne]
    return dict(ece=math.fsum(abs(b["err"]) for b in bins) / W, mce=max(dev), ace=math.fsum(dev) / len(dev),
                rmsce=math.sqrt(math.fsum(b["weight"] / W * d * d for b, d in zip(ne, dev))), bins=bins)


# --------------------------------------------------------------------------------------------
# The tools' own numbers (unweighted)


def tool_bins(p, y, M, strategy):
    """per-bin (count, mean_p, frac_pos) as the tool computes them (None means for empty bins),
    and the tool's metric values."""
    t = tools()
    N = len(p)
    yi = y.astype(np.int64)
    if strategy in ("sklearn", "quantile"):
        kind = "uniform" if strategy == "sklearn" else "quantile"
        pt, pp = t["calibration_curve"](yi, p, n_bins=M, strategy=kind)
        # the counts: the same line of sklearn/calibration.py (binids = np.searchsorted(bins[1:-1], y_prob))
        edges = np.linspace(0.0, 1.0, M + 1) if kind == "uniform" else np.percentile(p, np.linspace(0, 1, M + 1) * 100)
        cnt = np.bincount(np.searchsorted(edges[1:-1], p), minlength=M)
        rows, it = [], iter(zip(pt, pp))
        for k in range(M):
            if cnt[k]:
                fy, mp = next(it)
                rows.append((int(cnt[k]), float(mp), float(fy)))
            else:
                rows.append((0, None, None))
        dev = [abs(r[2] - r[1]) for r in rows if r[0]]
        vals = dict(ece=math.fsum(r[0] / N * abs(r[2] - r[1]) for r in rows if r[0]), mce=max(dev))
        return rows, vals
    if strategy == "netcal":
        nc = t["ECE"](bins=M)
        X, matched, _, bounds, _ = nc.prepare(p, yi)
        (acc, conf), nsh, _, _ = nc.binning(bounds[0], X[0], matched[0], X[0][:, 0])
        rows = [(int(c), float(cf), float(a)) if c else (0, None, None) for c, a, cf in zip(nsh, acc, conf)]
        vals = dict(ece=t["ECE"](bins=M).measure(p, yi), mce=t["MCE"](bins=M).measure(p, yi),
                    ace=t["ACE"](bins=M).measure(p, yi))
        return rows, vals
    if strategy == "torchmetrics":
        torch = t["torch"]
        from torchmetrics.functional.classification.calibration_error import _binning_bucketize
        pt_, yt_ = torch.tensor(p, dtype=torch.float64), torch.tensor(yi)
        bb = torch.linspace(0, 1, M + 1, dtype=torch.float64)
        acc, conf, prop = _binning_bucketize(pt_, yt_, bb)
        cnt = torch.bincount(torch.bucketize(pt_, bb, right=True) - 1, minlength=M + 1).numpy()
        assert np.array_equal(bb.numpy(), torch_linspace(M)), "torch.linspace is not the FMA (AVX2) kernel here"
        rows = [(int(c), float(cf), float(a)) if c else (0, None, None) for c, a, cf in zip(cnt, acc.numpy(), conf.numpy())]
        vals = {k: float(t["bce"](pt_, yt_, n_bins=M, norm=n)) for k, n in (("ece", "l1"), ("mce", "max"), ("rmsce", "l2"))}
        return rows, vals
    if strategy == "relplot":
        rm = t["relplot"]
        sums = rm.binning(p, yi, bin_size=1.0 / M, shift=0)  # per-bin sum of (p - y), relplot's own
        b, nb, *_ = assign(p, M, "relplot")
        cnt = np.bincount(b, minlength=nb)
        check = np.zeros(nb)
        np.add.at(check, b, p - yi)
        assert np.array_equal(sums, check), "relplot bin rule"
        rows = []
        for k in range(nb):
            if cnt[k]:
                m = b == k
                rows.append((int(cnt[k]), float(np.mean(p[m])), float(np.mean(yi[m]))))
            else:
                rows.append((0, None, None))
        vals = dict(ece=float(rm.binnedECE(p, yi, nbins=M)),
                    mce=max(abs(s) / c for s, c in zip(sums, cnt) if c))
        return rows, vals
    if strategy == "kumar":
        ku = t["kumar"]
        binned = ku.fast_bin(list(zip(p, yi)), ku.get_equal_prob_bins(p, num_bins=M))
        rows = []
        for d in binned:
            d = np.asarray(d)
            rows.append((len(d), float(np.mean(d[:, 0])), float(np.mean(d[:, 1]))) if len(d) else (0, None, None))
        vals = dict(ece=float(ku.get_ece(p, yi, num_bins=M)), mce=max(abs(r[1] - r[2]) for r in rows if r[0]))
        return rows, vals
    raise ValueError(strategy)


BIGDIFF = {}  # largest |tool - exact| per metric on the 1M-row tables


def values(p, y, M, strategy, w=None):
    """{ece, mce, ace, rmsce, rows}: the tool's numbers (unweighted, not 'uniform'), else the reference.
    rows: per bin (bin, lower, upper, count, weight, mean_p, frac_pos, n for Wilson)."""
    ref = ref_metrics(p, y, M, strategy, w)
    rows = []
    for b in ref["bins"]:
        W = b["weight"]
        n = None if W == 0 else (b["count"] if w is None else W * W / b["sw2"])
        rows.append([b["bin"], b["lower"], b["upper"], b["count"], W, None if W == 0 else b["swp"] / W,
                     None if W == 0 else b["swy"] / W, n])
    out = dict(ece=ref["ece"], mce=ref["mce"], ace=ref["ace"], rmsce=ref["rmsce"], rows=rows)
    if w is not None or strategy == "uniform":
        return out
    trows, tv = tool_bins(p, y, M, strategy)
    assert len(trows) == len(rows), (strategy, M, len(trows), len(rows))
    for r, (c, mp, fy) in zip(rows, trows):
        assert r[3] == c, (strategy, M, r, c)
        if c:
            # the tools sum each bin sequentially (np.bincount, scatter_add): on the 1M-row tables their
            # per-bin means are off the exact (fsum) ones by up to ~5e-14
            assert abs(r[5] - mp) < 1e-12 and abs(r[6] - fy) < 1e-12, (strategy, M, r, mp, fy)
            r[5], r[6] = mp, fy
    ne = [(r[3], abs(r[6] - r[5])) for r in rows if r[3]]
    N = len(p)
    derived = dict(ece=math.fsum(c / N * d for c, d in ne), mce=max(d for _, d in ne), ace=math.fsum(d for _, d in ne) / len(ne),
                   rmsce=math.sqrt(math.fsum(c / N * d * d for c, d in ne)))
    for k, v in derived.items():
        v = tv.get(k, v)
        assert abs(v - ref[k]) < (1e-14 if N < 10000 else 1e-12) * max(1.0, ref[k]), (strategy, M, k, v, ref[k])
        if N >= 10000:
            BIGDIFF[k] = max(BIGDIFF.get(k, 0.0), abs(v - ref[k]))
        out[k] = v
    return out


def rel_rows(vals, level=0.95):
    z = zlevel(level)
    out = []
    for k, lo, hi, c, W, mp, fy, n in vals["rows"]:
        wl = wilson_checked(fy, n, z) if n else (None, None)
        out.append([k, sql_round(lo, 9), sql_round(hi, 9), c, sql_round(W, 9), sql_round(mp, 9), sql_round(fy, 9),
                    sql_round(wl[0], 9), sql_round(wl[1], 9)])
    return out


def normalized_entropy(p, y, w=None):
    t = tools()
    v = 1 - t["d2"](y.astype(np.int64), p, sample_weight=w)
    wv = np.ones_like(p) if w is None else w
    pc = np.clip(p, EPS, 1 - EPS)
    W = math.fsum(wv)
    ll = math.fsum(-wv * np.where(y == 1, np.log(pc), np.log(1 - pc))) / W
    r = math.fsum(wv * y) / W
    h = -(r * math.log(r) + (1 - r) * math.log(1 - r))
    assert abs(v - ll / h) < 1e-13 * max(1, v), (v, ll / h)
    return v


# --------------------------------------------------------------------------------------------
# Tables


def cols(rows):
    a = np.array([r[1:4] for r in rows], dtype=np.float64)
    return a[:, 0], a[:, 1], a[:, 2]


def edge_rows():
    """p exactly on the edges of every rule for M = 10 and 15 (k/M, k*(1/M), torch's fma edges),
    0 and 1 and their neighbours; every other distinct value has rows with both labels (ties with
    mixed labels). The labels were picked by a hill-climb (scratch) so that the strategies' ece and
    mce differ: 7 different bin assignments for M = 10, 5 for M = 15 (15: netcal = uniform and
    sklearn = kumar on these values), 21 of the 24 possible distinct (ece, mce) values."""
    vals = set()
    for M in (10, 15):
        s = 1.0 / M
        for k in range(M + 1):
            vals.update([k / M, k * s, float(torch_linspace(M)[k])])
    vals.update([EPS, 1 - EPS, float(np.nextafter(1.0, 0.0)), 0.6666666666666667])
    vals = sorted(vals)
    labels = "100000000100100000011011011001001000110110111111011"
    rows, i = [], 0
    wcycle = [1.0, 0.5, 2.0, 0.25, 1.5, 3.0]
    for j, v in enumerate(vals):
        n = 1 if j % 3 == 2 else 2
        if v in (0.0, 1.0):
            n = 3
        for _ in range(n):
            rows.append((i + 1, v, int(labels[i]), wcycle[(i + 1) % len(wcycle)]))
            i += 1
    assert i == len(labels)
    return rows


E_ROWS = edge_rows()


def e_table():
    body = ",\n".join(f"  ({i}, {fmt(p)}, {y}, {fmt(w)})" for i, p, y, w in E_ROWS)
    return ("statement ok\nCREATE TABLE e(id INT, p DOUBLE, y INT, w DOUBLE) AS VALUES\n" + body + "\n")


def t_table():
    body = ",\n".join("  (" + ", ".join("NULL" if v is None else (f"'{v}'" if isinstance(v, str) else fmt(v)) for v in r) + ")"
                      for r in ROWS)
    return "statement ok\nCREATE TABLE t(id INT, p DOUBLE, y INT, w DOUBLE, f VARCHAR, q DOUBLE) AS VALUES\n" + body + "\n"


C_TABLE = ("statement ok\nCREATE TABLE c AS SELECT value AS i, 0.1 AS p, CASE WHEN value % 10 = 0 THEN 1 ELSE 0 END AS y, "
           "((value % 3) + 1) / 2.0 AS w FROM generate_series(1, 100)\n")


def c_table():
    i = np.arange(1, 101)
    return np.full(100, 0.1), (i % 10 == 0).astype(float), ((i % 3) + 1) / 2.0


BIG_TABLE = ("statement ok\nCREATE TABLE big AS SELECT ((value * 7919) % 1000003) / 1000003.0 AS p, "
             "CASE WHEN ((value * 104729) % 1000) / 1000.0 < ((value * 7919) % 1000003) / 1000003.0 THEN 1 ELSE 0 END AS y "
             "FROM generate_series(1, 1000000)\n")
BIGR_TABLE = "statement ok\nCREATE TABLE bigr AS SELECT round(p, 2) AS p, y FROM big\n"


def big_tables():
    """the same float values as the SQL: Int64 arithmetic, then one Float64 division (DataFusion casts
    the Int64 operand to Float64; exact below 2^53), round(p, 2) = (p*100).round()/100 half away from 0."""
    i = np.arange(1, 1_000_001, dtype=np.int64)
    p = ((i * 7919) % 1000003) / 1000003.0
    u = ((i * 104729) % 1000) / 1000.0
    y = (u < p).astype(np.float64)
    x = p * 100.0
    fl = np.floor(x)
    r = np.where(x - fl >= 0.5, fl + 1, fl) / 100.0  # p >= 0: half away from zero = half up
    assert all(sql_round(float(a), 2) == float(b) for a, b in zip(p[:2000], r[:2000]))
    return p, y, r


# --------------------------------------------------------------------------------------------
# Blocks

REL_SQL = ("SELECT r['bin'], round(r['lower'], 9), round(r['upper'], 9), r['count'], round(r['weight'], 9), "
           "round(r['mean_p'], 9), round(r['frac_pos'], 9), round(r['frac_pos_lower'], 9), round(r['frac_pos_upper'], 9) "
           "FROM (SELECT unnest({call}) AS r FROM {src}) ORDER BY 1")


def rel_block(call, src, rows, comment):
    return exact(REL_SQL.format(call=call, src=src), "IRRIRRRRR", rows, comment)


def args(M, s, w):
    return f"{M}, '{s}'" + (", w" if w is not None else "")


SRC = {"uniform": "calibsql's own rule min(floor(p*M), M-1) (numpy)",
       "quantile": "sklearn calibration_curve(strategy='quantile')",
       "sklearn": "sklearn calibration_curve(strategy='uniform')",
       "netcal": "netcal 1.4.0 ECE/MCE/ACE(bins=M)",
       "torchmetrics": "torchmetrics 1.9.0 binary_calibration_error (float64, AVX2 torch)",
       "relplot": "relplot 1.0.3 binnedECE",
       "kumar": "uncertainty-calibration 0.1.4 get_ece / fast_bin"}


def src_of(s, w, metric):
    if w is not None:
        return "reference (no tool takes weights)" + (": edges numpy.percentile(..., weights=w, method='inverted_cdf')"
                                                       if s == "quantile" else "")
    if metric == "mce" and s in ("sklearn", "quantile", "kumar", "relplot"):
        return SRC[s] + ", max over non-empty bins of the tool's per-bin |frac_pos - mean_p|"
    return SRC[s]


def metric_blocks(name, src, p, y, w=None, Ms=(10, 15), rel=True, tol=1e-12):
    out = []
    for M in Ms:
        for s in STRATS:
            v = values(p, y, M, s, w)
            for fn in ("ece", "mce"):
                out.append(close(f"{fn}(p, y, {args(M, s, w)})", v[fn], tol=tol, src=src,
                                 comment=f"{name}: {fn} {s} M={M}; {src_of(s, w, fn)} = {fmt(v[fn])}"))
            if rel:
                out.append(rel_block(f"reliability(p, y, {args(M, s, w)})", src, rel_rows(v),
                                     f"{name}: reliability {s} M={M}; {src_of(s, w, 'rel')}; Wilson 95% "
                                     f"(n = {'count' if w is None else 'Kish (sum w)^2 / sum w^2'})"))
    return out


def ace_rmsce_blocks(name, src, p, y, w=None):
    out = []
    for fn in ("ace", "rmsce"):
        dflt = "quantile" if fn == "ace" else "uniform"
        v = values(p, y, 15, dflt, w)[fn]
        call = f"{fn}(p, y)" if w is None else f"{fn}(p, y, 15, '{dflt}', w)"
        out.append(close(call, v, src=src, comment=f"{name}: {call}, defaults 15 '{dflt}'; {fmt(v)}"))
        for M in (10, 15):
            for s in STRATS:
                v = values(p, y, M, s, w)[fn]
                how = src_of(s, w, fn)
                if w is None and fn == "ace":
                    how = "netcal ACE(bins=M) (equal-width bins)" if s == "netcal" else "mean over non-empty bins of the tool's |frac_pos - mean_p|"
                if w is None and fn == "rmsce":
                    how = "torchmetrics binary_calibration_error(norm='l2')" if s == "torchmetrics" else \
                        "sqrt(sum n_b/N (frac_pos - mean_p)^2) from the tool's bins"
                out.append(close(f"{fn}(p, y, {args(M, s, w)})", v, src=src, comment=f"{name}: {fn} {s} M={M}; {how} = {fmt(v)}"))
    return out


# Tolerances on the 1M-row tables. The tools sum each bin sequentially (np.bincount, scatter_add,
# np.add.at): their per-bin means of ~1e5 rows are off the exact value by up to 1.6e-13 (netcal mce on
# bigr, M=15; BIGDIFF after a run), and calibsql's own sums are off by a similar, different amount.
# ece/ace/rmsce weight each bin by n_b/N or average over bins (tool - exact <= 4e-14): 1e-12 holds.
# mce is one bin's |acc - conf| (1.6e-13 seen) and normalized_entropy is a ratio of 1M-term sums: 1e-10.
BIG_TOL = {"ece": 1e-12, "mce": 1e-10, "ace": 1e-12, "rmsce": 1e-12, "normalized_entropy": 1e-10}


def sections():
    tp, ty, tw = cols(ROWS)
    ep, ey, ew = cols([(r[0], r[1], r[2], r[3]) for r in E_ROWS])
    cp, cy, cw = c_table()

    edges = metric_blocks("e (edge values)", "e", ep, ey)
    edges_w = metric_blocks("e weighted", "e", ep, ey, ew)
    t_un = metric_blocks("t", "t", tp, ty)
    t_w = metric_blocks("t weighted", "t", tp, ty, tw, rel=False)
    t_w.append(rel_block("reliability(p, y, 10, 'quantile', w)", "t", rel_rows(values(tp, ty, 10, "quantile", tw)),
                         "t weighted quantile reliability; edges numpy.percentile(weights=w, method='inverted_cdf')"))
    t_w.append(rel_block("reliability(p, y, 10, 'netcal', w)", "t", rel_rows(values(tp, ty, 10, "netcal", tw)),
                         "t weighted netcal reliability (p clipped to [eps, 1-eps] in mean_p)"))

    # Wilson level
    lev = []
    for lvl in (0.9, 0.99):
        for s, w, src, (p, y, ww) in (("sklearn", None, "t", (tp, ty, None)), ("quantile", "w", "t", (tp, ty, tw)),
                                      ("torchmetrics", None, "e", (ep, ey, None))):
            call = f"reliability(p, y, 10, '{s}'" + (", w" if w else "") + f", level => {lvl})"
            lev.append(rel_block(call, src, rel_rows(values(p, y, 10, s, ww), lvl),
                                 f"level => {lvl}: z = norm.ppf(1 - (1 - {lvl})/2) = {fmt(zlevel(lvl))}"))

    ace_r = ace_rmsce_blocks("t", "t", tp, ty) + ace_rmsce_blocks("e", "e", ep, ey) + ace_rmsce_blocks("t weighted", "t", tp, ty, tw)

    ne = []
    for name, src, p, y, w, call in (("t", "t", tp, ty, None, "normalized_entropy(p, y)"),
                                     ("t weighted", "t", tp, ty, tw, "normalized_entropy(p, y, w)"),
                                     ("e (p = 0 and 1 with both labels: clipped)", "e", ep, ey, None, "normalized_entropy(p, y)"),
                                     ("e weighted", "e", ep, ey, ew, "normalized_entropy(p, y, w)")):
        v = normalized_entropy(p, y, w)
        ne.append(close(call, v, src=src, comment=f"{name}: 1 - sklearn d2_log_loss_score(y, p{', sample_weight=w' if w is not None else ''}) = {fmt(v)}"))

    const = []
    for s in STRATS:
        for fn in ("ece", "mce"):
            v = values(cp, cy, 10, s)[fn]
            const.append(close(f"{fn}(p, y, 10, '{s}')", v, src="c",
                               comment=f"constant p = 0.1, 10% positives: one bin, {fn} = |mean y - 0.1| = {fmt(v)} ({SRC[s]})"))
    v = values(cp, cy, 10, "quantile")
    assert abs(v["ece"] - abs(cy.mean() - 0.1)) < 1e-15
    const.append(rel_block("reliability(p, y, 10, 'quantile')", "c", rel_rows(v),
                           "constant p: all 11 quantile edges are 0.1, every row in bin 0, bins 1..9 empty"))
    for fn in ("ece", "mce"):
        v = values(cp, cy, 10, "quantile", cw)[fn]
        const.append(close(f"{fn}(p, y, 10, 'quantile', w)", v, src="c", comment=f"constant p, weighted quantile: one bin; {fmt(v)}"))
    v = values(cp, cy, 15, "quantile")["ace"]
    const.append(close("ace(p, y)", v, src="c", comment=f"constant p: ace over the single non-empty bin = {fmt(v)}"))

    bp, by, br = big_tables()
    big = []
    for tname, p in (("big", bp), ("bigr", br)):
        for M in (10, 15):
            for s in STRATS:
                v = values(p, by, M, s)
                for fn in ("ece", "mce"):
                    big.append(close(f"{fn}(p, y, {M}, '{s}')", v[fn], src=tname, tol=BIG_TOL[fn],
                                     comment=f"{tname} (1M rows): {fn} {s} M={M}; {src_of(s, None, fn)} = {fmt(v[fn])}"))
        for fn, s in (("ace", "quantile"), ("rmsce", "uniform")):
            v = values(p, by, 15, s)[fn]
            big.append(close(f"{fn}(p, y)", v, src=tname, comment=f"{tname}: {fn}(p, y) = {fmt(v)}"))
        v = values(p, by, 15, "torchmetrics")["rmsce"]
        big.append(close("rmsce(p, y, 15, 'torchmetrics')", v, src=tname, comment=f"{tname}: torchmetrics norm='l2' = {fmt(v)}"))
        v = values(p, by, 15, "netcal")["ace"]
        big.append(close("ace(p, y, 15, 'netcal')", v, src=tname, comment=f"{tname}: netcal ACE(bins=15) = {fmt(v)}"))
        v = normalized_entropy(p, by)
        big.append(close("normalized_entropy(p, y)", v, src=tname, tol=BIG_TOL["normalized_entropy"], comment=f"{tname}: 1 - d2_log_loss_score = {fmt(v)}"))
    for s in ("quantile", "torchmetrics", "relplot", "netcal"):
        big.append(rel_block(f"reliability(p, y, 10, '{s}')", "bigr", rel_rows(values(br, by, 10, s)),
                             f"bigr (1M rows, p rounded to 0.01, so on the edges): reliability {s} M=10; {SRC[s]}"))

    tables = [t_table(), e_table(), C_TABLE, BIG_TABLE, BIGR_TABLE]
    return [("tables", tables), ("edge values, unweighted", edges), ("edge values, weighted", edges_w),
            ("t, unweighted", t_un), ("t, weighted", t_w), ("reliability level", lev), ("ace and rmsce", ace_r),
            ("normalized_entropy", ne), ("constant p", const), ("1M rows", big)]


if __name__ == "__main__":
    main(sections(), SLT)
