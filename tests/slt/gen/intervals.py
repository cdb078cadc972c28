"""Expected values of tests/slt/intervals.slt: ece_interval, ece_diff_interval, auc_interval,
auc_test. Never from calibsql.

  ece_interval / ece_diff_interval: docs/SEMANTICS.md "Bootstrap weights" reproduced here in
      numpy from its text alone (SplitMix64, FNV-1a 64, the Poisson(1) inversion table), the
      per-bin sums of every replicate with np.bincount, the ECE as sum |sum k(y - p)| / sum k, and
      the interval as np.quantile (type 7, numpy's default 'linear'); the point estimate is
      also compared with calibsql's own `ece` (the function must equal it).
  auc_interval / auc_test: a numpy port of R pROC 1.18's DeLong code -- `delongPlacements`
      (each case's placement among the controls, ties one half), `ci.auc.delong` and
      `roc.test`'s paired `delong.paired.calculations` / `delong.paired.test` (z = 0 when the
      difference and its variance are both 0) -- with the placements from average ranks
      (scipy.stats.rankdata), as Sun & Xu 2014 compute them. The port is checked in this
      script against the definition itself, an O(n*m) pairwise count of every case against
      every control (DeLong et al. 1988, eq. 4-6), on the data sets small enough for it, and
      its AUC against sklearn.metrics.roc_auc_score on every data set.

Data sets, built in SQL from integers and rebuilt here with the same integer and float
arithmetic (i from 1):
  mix   5,000 rows:  p_a = ((i*7919) % 9973) / 9973.0,
                     p_b = ((i*7919) % 9973 + (i*104729) % 501) / 10474.0,
                     y   = (((i*2654435761) % 4294967296) / 4294967296.0 < p_a)
  ties  20,000 rows: p_a = ((i*7919) % 11) / 10.0, p_b = ((i*7919) % 11 + (i*31) % 3) / 12.0,
                     y as in mix (11 and 13 distinct scores: heavy ties)
  big   1,000,000 rows: p_a = ((i*7919) % 100003) / 100003.0,
                     p_b = ((i*7919) % 100003 + (i*104729) % 3001) / 103004.0, y as in mix

    python3 intervals.py            # print the blocks (from tests/slt/gen/)
    python3 intervals.py --check    # assert every block is in ../intervals.slt
"""

import numpy as np
from scipy.stats import norm, rankdata
from sklearn.metrics import roc_auc_score

from common import close, main

SLT = "intervals.slt"

# ---------------------------------------------------------------------------------------
# data


def table_sql(name, rows, pa, pb):
    return (
        "statement ok\n"
        f"CREATE TABLE {name} AS SELECT i, p_a, p_b, "
        "CAST(((i * 2654435761) % 4294967296) / 4294967296.0 < p_a AS INT) AS y "
        f"FROM (SELECT value AS i, {pa} AS p_a, {pb} AS p_b FROM generate_series(1, {rows}))\n"
    )


def u_of(i):
    return ((i * 2654435761) % 4294967296) / 4294967296.0


def mix():
    i = np.arange(1, 5001, dtype=np.int64)
    pa = ((i * 7919) % 9973) / 9973.0
    pb = ((i * 7919) % 9973 + (i * 104729) % 501) / 10474.0
    return i, pa, pb, (u_of(i) < pa).astype(np.float64)


def ties():
    i = np.arange(1, 20001, dtype=np.int64)
    pa = ((i * 7919) % 11) / 10.0
    pb = ((i * 7919) % 11 + (i * 31) % 3) / 12.0
    return i, pa, pb, (u_of(i) < pa).astype(np.float64)


def big():
    i = np.arange(1, 1_000_001, dtype=np.int64)
    pa = ((i * 7919) % 100003) / 100003.0
    pb = ((i * 7919) % 100003 + (i * 104729) % 3001) / 103004.0
    return i, pa, pb, (u_of(i) < pa).astype(np.float64)


TABLES = [
    table_sql("mix", 5000, "((value * 7919) % 9973) / 9973.0",
              "((value * 7919) % 9973 + (value * 104729) % 501) / 10474.0"),
    table_sql("ties", 20000, "((value * 7919) % 11) / 10.0",
              "((value * 7919) % 11 + (value * 31) % 3) / 12.0"),
    table_sql("big", 1_000_000, "((value * 7919) % 100003) / 100003.0",
              "((value * 7919) % 100003 + (value * 104729) % 3001) / 103004.0"),
]

# ---------------------------------------------------------------------------------------
# bootstrap weights, from docs/SEMANTICS.md "Bootstrap weights"

U64 = np.uint64
GAMMA = U64(0x9E3779B97F4A7C15)


def splitmix64(x):
    """x: uint64 array. z = x + gamma; z = (z ^ z>>30) * C1; z = (z ^ z>>27) * C2; z ^ z>>31."""
    with np.errstate(over="ignore"):
        z = x + GAMMA
        z = (z ^ (z >> U64(30))) * U64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> U64(27))) * U64(0x94D049BB133111EB)
    return z ^ (z >> U64(31))


def fnv1a64(s):
    h = 0xCBF29CE484222325
    for b in s.encode("utf-8"):
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def key_number(k):
    """An integer key as its 64-bit two's complement; a string by FNV-1a 64 of its UTF-8."""
    if isinstance(k, str):
        return fnv1a64(k)
    return int(k) & 0xFFFFFFFFFFFFFFFF


E_INV = 0.36787944117144233
CDF = []
_term = _sum = E_INV
CDF.append(_sum)
for _j in range(1, 21):
    _term = _term / _j
    _sum = _sum + _term
    CDF.append(_sum)
CDF = np.array(CDF)


def weights(xs, b):
    """Replicate b's Poisson(1) weights of rows whose key numbers are xs (uint64 array)."""
    h = splitmix64(splitmix64(xs) ^ splitmix64(np.array([b], dtype=U64))[0])
    u = (h >> U64(11)).astype(np.float64) * 2.0**-53
    return np.searchsorted(CDF, u, side="right").astype(np.float64)


def uniform_bins(p, m):
    return np.minimum(np.floor(p * m), m - 1).astype(np.int64)


def sklearn_bins(p, m):
    return np.searchsorted(np.linspace(0, 1, m + 1)[1:-1], p, side="left")


def ece_sums(bins, p, y, k, m):
    n = np.bincount(bins, weights=k, minlength=m)
    sp = np.bincount(bins, weights=k * p, minlength=m)
    sy = np.bincount(bins, weights=k * y, minlength=m)
    tot = n.sum()
    return None if tot == 0 else float(np.abs(sy - sp).sum() / tot)


def ece_boot(ps, y, keys, m=15, binning=uniform_bins, level=0.95, reps=200):
    """(estimate, lower, upper) of ece_interval (one p) or ece_diff_interval (two)."""
    xs = np.array([key_number(k) for k in keys], dtype=U64)
    bins = [binning(p, m) for p in ps]

    def stat(k):
        e = [ece_sums(b, p, y, k, m) for b, p in zip(bins, ps)]
        if e[0] is None:
            return None
        return e[0] if len(e) == 1 else e[0] - e[1]

    point = stat(np.ones_like(y))
    vals = [v for v in (stat(weights(xs, b)) for b in range(reps)) if v is not None]
    lo, hi = np.quantile(np.array(vals), [(1 - level) / 2, (1 + level) / 2])
    return point, float(lo), float(hi)


# ---------------------------------------------------------------------------------------
# DeLong: pROC's algorithm (placements from midranks), checked against the pairwise definition


def placements(p, y):
    """pROC delongPlacements with direction '<': (theta, V10 of cases, V01 of controls)."""
    cases, controls = p[y == 1], p[y == 0]
    m, n = len(cases), len(controls)
    z = np.concatenate([cases, controls])
    r_all = rankdata(z)
    v10 = (r_all[:m] - rankdata(cases)) / n
    v01 = 1.0 - (r_all[m:] - rankdata(controls)) / m
    return float(v10.mean()), v10, v01


def placements_pairwise(p, y):
    cases, controls = p[y == 1], p[y == 0]
    psi = (cases[:, None] > controls[None, :]) + 0.5 * (cases[:, None] == controls[None, :])
    return float(psi.mean()), psi.mean(axis=1), psi.mean(axis=0)


def check_port(p, y):
    t1, a1, b1 = placements(p, y)
    t2, a2, b2 = placements_pairwise(p, y)
    assert abs(t1 - t2) < 1e-12 and np.abs(a1 - a2).max() < 1e-12 and np.abs(b1 - b2).max() < 1e-12


def ci_auc(p, y, level=0.95):
    """pROC ci.auc.delong: theta +- qnorm((1+level)/2) sqrt(S), clipped to [0, 1]."""
    theta, x, yv = placements(p, y)
    m, n = len(x), len(yv)
    sx = ((x - theta) ** 2).sum() / (m - 1)
    sy = ((yv - theta) ** 2).sum() / (n - 1)
    se = np.sqrt(sx / m + sy / n)
    z = norm.ppf(1 - (1 - level) / 2)
    assert abs(theta - roc_auc_score(y, p)) < 1e-12
    return theta, max(theta - z * se, 0.0), min(theta + z * se, 1.0)


def roc_test(pa, pb, y):
    """pROC delong.paired.calculations + delong.paired.test: (auc_a, auc_b, diff, se, z, p)."""
    ta, xa, ya = placements(pa, y)
    tb, xb, yb = placements(pb, y)
    m, n = len(xa), len(ya)
    sx = np.cov(np.vstack([xa, xb]))  # denominator m - 1
    sy = np.cov(np.vstack([ya, yb]))
    s = sx / m + sy / n
    var = s[0, 0] + s[1, 1] - 2 * s[0, 1]
    se = float(np.sqrt(var))
    d = ta - tb
    z = 0.0 if d == 0 and se == 0 else d / se
    return ta, tb, d, se, z, float(2 * norm.sf(abs(z)))


# ---------------------------------------------------------------------------------------
# blocks


def c(call, v, what, src, tol=1e-12):
    return close(call, v, tol=tol, comment=what, src=src)


def boot_blocks():
    out = []
    i, pa, pb, y = mix()
    e, lo, hi = ece_boot([pa], y, i)
    what = "mix, key i (an integer), defaults: 15 'uniform' bins, level 0.95, 200 replicates"
    out += [c("ece_interval(p_a, y, i)['ece']", e, what + ": the point estimate", "mix"),
            c("ece_interval(p_a, y, i)['lower']", lo, what + ": the 2.5% quantile of the replicates", "mix"),
            c("ece_interval(p_a, y, i)['upper']", hi, what + ": the 97.5% quantile", "mix")]
    keys = [f"u{k}" for k in i]
    e, lo, hi = ece_boot([pa], y, keys, m=10, binning=sklearn_bins, level=0.9, reps=50)
    what = "mix, key 'u' || i (a string: FNV-1a 64), 10 'sklearn' bins, level 0.9, 50 replicates"
    call = "ece_interval(p_a, y, concat('u', CAST(i AS VARCHAR)), 10, 'sklearn', 0.9, 50)"
    out += [c(call + "['ece']", e, what, "mix"),
            c(call + "['lower']", lo, what, "mix"),
            c(call + "['upper']", hi, what, "mix")]
    e, lo, hi = ece_boot([pa], y, i % 100)
    what = "mix, key i % 100: 100 clusters whose rows share their weights (a cluster bootstrap)"
    out += [c("ece_interval(p_a, y, i % 100)['lower']", lo, what, "mix"),
            c("ece_interval(p_a, y, i % 100)['upper']", hi, what, "mix")]
    e, lo, hi = ece_boot([pa, pb], y, i)
    what = "mix: the paired bootstrap of p_a against p_b, the same weights for both"
    out += [c("ece_diff_interval(p_a, p_b, y, i)['diff']", e, what, "mix"),
            c("ece_diff_interval(p_a, p_b, y, i)['lower']", lo, what, "mix"),
            c("ece_diff_interval(p_a, p_b, y, i)['upper']", hi, what, "mix")]
    i, pa, pb, y = ties()
    e, lo, hi = ece_boot([pa], y, i, m=5)
    what = "ties (11 distinct p), 5 bins: many rows on the bin edges 0.2, 0.4, ..."
    out += [c("ece_interval(p_a, y, i, 5)['lower']", lo, what, "ties"),
            c("ece_interval(p_a, y, i, 5)['upper']", hi, what, "ties")]
    e, lo, hi = ece_boot([pa, pb], y, i, m=5)
    out += [c("ece_diff_interval(p_a, p_b, y, i, 5)['lower']", lo, "ties: paired, 5 bins", "ties"),
            c("ece_diff_interval(p_a, p_b, y, i, 5)['upper']", hi, "ties: paired, 5 bins", "ties")]
    return out


def delong_blocks():
    out = []
    for name, data, pairwise in (("mix", mix, True), ("ties", ties, False), ("big", big, False)):
        _, pa, pb, y = data()
        if pairwise:
            check_port(pa, y)
            check_port(pb, y)
        else:
            # the pairwise count of a 4,000-row slice (every fifth row)
            check_port(pa[::5][:4000], y[::5][:4000])
        a, lo, hi = ci_auc(pa, y)
        what = f"{name}: pROC ci.auc(method = 'delong') port"
        out += [c("auc_interval(p_a, y)['auc']", a, what + ": the AUC", name),
                c("auc_interval(p_a, y)['lower']", lo, what, name),
                c("auc_interval(p_a, y)['upper']", hi, what, name)]
        a, lo, hi = ci_auc(pb, y, level=0.9)
        out += [c("auc_interval(p_b, y, 0.9)['lower']", lo, what + ", level 0.9", name),
                c("auc_interval(p_b, y, 0.9)['upper']", hi, what + ", level 0.9", name)]
        r = roc_test(pa, pb, y)
        what = f"{name}: pROC roc.test(method = 'delong', paired = TRUE) port"
        for field, v, tol in zip(["auc_a", "auc_b", "diff", "se", "z", "p_value"], r,
                                 [1e-12, 1e-12, 1e-12, 1e-14, 1e-9, 1e-12]):
            out.append(c(f"auc_test(p_a, p_b, y)['{field}']", v, f"{what}: {field}", name, tol=tol))
    return out


def sections():
    return [("tables", TABLES), ("ece_interval, ece_diff_interval", boot_blocks()),
            ("auc_interval, auc_test", delong_blocks())]


if __name__ == "__main__":
    main(sections(), SLT)
