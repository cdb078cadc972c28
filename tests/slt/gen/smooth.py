"""Expected values of tests/slt/smooth.slt: smooth_ece (SmoothECE) and ece_debiased (debiased L2 CE).

Unlike the other family scripts, the expected values come from the reference libraries themselves
(the functions are defined as "what these libraries return"):
  smooth_ece(p, y)        = relplot.smECE(p, y)                        (relplot 1.0.3)
  smooth_ece(p, y, sigma) = relplot.smECE_sigma(p, y, sigma)
  ece_debiased(p, y)      = calibration.get_calibration_error(p, y)   (uncertainty-calibration 0.1.4;
                            p=2, debias=True, 1-D binary probabilities)
and every value is cross-checked against the mergeable re-implementation below (per-cell grid sums
for smooth_ece, a map p -> (n, n1) for ece_debiased; see docs/smooth-and-debiased.md), computed on the rows
split in 3 chunks whose states are merged, as partitions would be.

Tolerances: values are compared to 1e-12 (absolute; every value is <= 1) and printed to 13
significant digits (r13), so the file does not depend on the machine that ran this script. relplot's
convolution runs through np.convolve -> BLAS ddot, whose summation order is not a plain loop, and a
merged state sums the rows in another order: both move only the last ~3 digits (observed
differences <= 1e-16). The bandwidth search compares sigma with smECE(sigma); this script asserts
every comparison has a margin > 1e-9, so no rounding can flip it. ece_debiased is sqrt(max(T, 0)):
near T = 0 rounding would be amplified, so the script asserts |T| > 1e-9 (or T exactly 0); where
T <= 0 the result is exactly 0.0 and is compared exactly.

    python3 tests/slt/gen/smooth.py            # print the blocks
    python3 tests/slt/gen/smooth.py --check    # assert every block appears verbatim in smooth.slt
Needs: pip install numpy scipy scikit-learn relplot==1.0.3 uncertainty-calibration==0.1.4
(about 1 minute: the 1,000,000-row table is evaluated several times).
"""

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import math  # noqa: E402

import numpy as np  # noqa: E402

import calibration  # noqa: E402
import calibration.utils as cal_utils  # noqa: E402
import relplot  # noqa: E402
import relplot.metrics  # noqa: E402

from common import (G_TABLE, NULL_ROWS, ROWS, close, cols, exact, fmt, g_table, group_block,  # noqa: E402
                    main, sql_round, standard_tables)

SLT = "smooth.slt"
TOL = 1e-12


def r13(v):
    """A value as printed: 13 significant digits (|error| < 5e-14 * |v|, far inside TOL), so the
    file does not depend on the BLAS kernel or SIMD exp of the machine that ran this script."""
    return None if v is None else float(f"{v:.13g}")

# ---------------------------------------------------------------------------------------------
# The mergeable re-implementation (docs/smooth-and-debiased.md), used only as a cross-check
# ---------------------------------------------------------------------------------------------

SQRT_2PI = math.sqrt(2 * math.pi)


def grid_size(sigma):
    """Grid points G for bandwidth sigma (relplot kernels.py:115-117; round = half to even)."""
    return max(2000, round(20 / sigma)) // 2 + 1


def eval_size(sigma):
    """Evaluation points E (metrics.py:44-47)."""
    return max(round(10 / sigma), 200)


# every grid size the bandwidth search can visit: sigma = 1 and k/1024, k = 2..1023
SEARCH_GRIDS = sorted({grid_size(1.0)} | {grid_size(k / 1024) for k in range(2, 1024)})


def linspace(n):
    """np.linspace(0, 1, n): i * (1 / (n - 1)), the last point exactly 1.0."""
    t = np.arange(n, dtype=np.float64) * (1.0 / (n - 1))
    t[-1] = 1.0
    return t


class SmoothState:
    """Per grid size G: R[j] = sum hat_j(p) * (p - y), C[j] = sum hat_j(p)."""

    def __init__(self, grids):
        self.R = {G: np.zeros(G) for G in grids}
        self.C = {G: np.zeros(G) for G in grids}

    def update(self, p, y):
        r = p - y
        for G in self.R:
            x = p * (G - 1)
            b = np.clip(x.astype(np.int64), 0, G - 2)
            frac = x - b
            np.add.at(self.R[G], b, (1 - frac) * r)
            np.add.at(self.R[G], b + 1, frac * r)
            np.add.at(self.C[G], b, 1 - frac)
            np.add.at(self.C[G], b + 1, frac)

    def merge(self, other):
        for G in self.R:
            self.R[G] += other.R[G]
            self.C[G] += other.C[G]


def reflected_conv(v, sigma):
    """s[m] = sum_{d=0}^{G-1} ker[d] * v_refl(m + G//2 - d); v_refl(i) = v[-i] for i < 0,
    v[2(G-1) - i] for i > G-1; ker[d] = exp(-(t_d - 0.5)^2 / (2 sigma^2)) / (sqrt(2 pi) sigma)."""
    G = len(v)
    t = linspace(G)
    ker = np.exp(-(t - 0.5) * (t - 0.5) / (2 * sigma**2)) / (SQRT_2PI * sigma)
    ext = np.concatenate([v[::-1][:-1], v, v[::-1][1:]])  # ext[e] = v_refl(e - (G - 1))
    m = np.arange(G) + G // 2 + (G - 1)
    s = np.zeros(G)
    for d in range(G):
        s += ker[d] * ext[m - d]
    return s


def interpolate(t, s):
    G = len(s)
    h = 1 / (G - 1)
    i = np.clip((t * (G - 1)).astype(np.int64), 0, G - 2)
    res = (t - i * h) / h
    return s[i] * (1 - res) + s[i + 1] * res


def smece_at(state, sigma):
    G = grid_size(sigma)
    t = linspace(eval_size(sigma))
    num = interpolate(t, reflected_conv(state.R[G], sigma))
    den = interpolate(t, reflected_conv(state.C[G], sigma)) + 0.0001
    return math.fsum(np.abs(num / den) * den) / math.fsum(den)


def smece_auto(state):
    """relplot's search_param(check_smooth_ece, start=1, refine=10), eps = 0.001."""
    def pred(a):
        return a < 0.001 or a < smece_at(state, a)
    if pred(1.0):
        return smece_at(state, 1.0), 1.0
    hi, lo = 1.0, 0.0  # relplot's start (predicate false), end (predicate true)
    for _ in range(10):
        mid = (hi + lo) / 2
        if pred(mid):
            lo = mid
        else:
            hi = mid
    return smece_at(state, hi), hi


def merged_state(p, y, grids):
    states = []
    for idx in np.array_split(np.arange(len(p)), 3):
        s = SmoothState(grids)
        s.update(p[idx], y[idx].astype(np.float64))
        states.append(s)
    for s in states[1:]:
        states[0].merge(s)
    return states[0]


def debiased_state(p, y):
    """The exact mergeable state: distinct p (sorted) -> (n, n1)."""
    keys, inv = np.unique(p, return_inverse=True)
    n = np.bincount(inv, minlength=len(keys)).astype(np.int64)
    n1 = np.bincount(inv, weights=y.astype(np.float64), minlength=len(keys)).astype(np.int64)
    return keys, n, n1


def debiased_from_state(keys, n, n1, force=None):
    """Returns (result, T, discrete); force='discrete'/'equal' overrides the choice."""
    N = int(n.sum())
    D = len(keys)
    discrete = 4 * D < N if force is None else force == "discrete"
    if discrete:
        edges = [(keys[i] + keys[i + 1]) / 2.0 for i in range(D - 1)] + [1.0]
    else:
        k = min(15, N)
        q, r = divmod(N, k)
        cum = np.cumsum(n)

        def x(pos):  # the pos-th (0-based) value of the sorted data
            return keys[np.searchsorted(cum, pos, side="right")]
        edges = sorted(set([(x(i * q + min(i, r) - 1) + x(i * q + min(i, r))) / 2.0 for i in range(1, k)] + [1.0]))
    b = np.searchsorted(np.array(edges), keys, side="left")  # bin = #edges < p
    M = len(edges)
    T = 0.0
    for j in range(M):
        m = b == j
        nb = int(n[m].sum())
        if nb < 2:
            continue
        mp = float((n[m] * keys[m]).sum()) / nb
        my = int(n1[m].sum()) / nb
        T += nb / N * ((mp - my) ** 2 - my * (1.0 - my) / (nb - 1.0))
    return math.sqrt(max(T, 0.0)), T, discrete


# ---------------------------------------------------------------------------------------------
# The references, checked against the re-implementation
# ---------------------------------------------------------------------------------------------

def ref_smooth(p, y, sigma=None):
    """relplot.smECE / smECE_sigma; returns (value, sigma used). None for no rows."""
    p = np.asarray(p, dtype=np.float64)
    y = np.asarray(y).astype(np.int64)
    if len(p) == 0:
        return None, None
    if sigma is None:
        trace = []
        inner = relplot.metrics.smooth_ece

        def traced(f, yy, s):
            v = inner(f, yy, s)
            trace.append((s, float(v)))
            return v
        relplot.metrics.smooth_ece = traced
        try:
            v, width = relplot.smECE(p, y, return_width=True)
        finally:
            relplot.metrics.smooth_ece = inner
        margin = min(abs(s - v2) for s, v2 in trace[:-1]) if len(trace) > 1 else 1.0
        assert margin > 1e-9, f"bandwidth search too close to a tie ({margin}); change the data"
        mine, mwidth = smece_auto(merged_state(p, y, SEARCH_GRIDS))
        assert mwidth == width, (mwidth, width)
    else:
        v, width = relplot.smECE_sigma(p, y, sigma), sigma
        mine = smece_at(merged_state(p, y, [grid_size(sigma)]), sigma)
    v = float(v)
    assert abs(v - mine) < 1e-14, (v, mine)
    return r13(v), width


def ref_debiased(p, y):
    """calibration.get_calibration_error (p=2, debias=True); returns (value, T, discrete)."""
    p = np.asarray(p, dtype=np.float64)
    y = np.asarray(y).astype(np.int64)
    if len(p) == 0:
        return None, None, None
    v = float(calibration.get_calibration_error(p, y))
    mine, T, discrete = debiased_from_state(*debiased_state(p, y))
    assert discrete == bool(cal_utils.is_discrete(p))
    assert abs(v - mine) < 1e-14, (v, mine)
    assert T == 0.0 or abs(T) > 1e-9, f"T = {T} too close to 0: sqrt would amplify rounding; change the data"
    return r13(v), r13(T), discrete


def smooth_block(call, src, p, y, sigma=None, what=""):
    v, width = ref_smooth(p, y, sigma)
    how = f"relplot.smECE (chosen sigma {fmt(width)})" if sigma is None else f"relplot.smECE_sigma(sigma={fmt(sigma)})"
    return close(call, v, tol=TOL, src=src, comment=f"{what}{'; ' if what else ''}{how} = {fmt(v)}")


def debiased_block(call, src, p, y, what=""):
    v, T, discrete = ref_debiased(p, y)
    binning = "distinct values as bins" if discrete else "equal-mass bins"
    c = f"{what}{'; ' if what else ''}{binning}; calibration.get_calibration_error = {fmt(v)}"
    if T <= 0:
        return exact(f"SELECT {call}" + (f" FROM {src}" if src else ""), "R", [[0.0]],
                     c + (f" (T = {fmt(T)} < 0 is clipped: exactly 0.0)" if T < 0 else " (T = 0: no bin has 2 rows)"))
    return close(call, v, tol=TOL, src=src, comment=c)


# ---------------------------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------------------------

# h: 2000 rows, all p distinct (613 is invertible mod the prime 2003), labels drawn as if the true
# probability were p^2 (miscalibrated: smooth_ece about 0.17).
H_TABLE = ("statement ok\nCREATE TABLE h AS SELECT value AS i, ((value * 613) % 2003) / 2003.0 AS p, "
           "CASE WHEN ((value * 389) % 1000) / 1000.0 < (((value * 613) % 2003) / 2003.0) * (((value * 613) % 2003) / 2003.0) "
           "THEN 1 ELSE 0 END AS y FROM generate_series(1, 2000)\n")


def h_table():
    i = np.arange(1, 2001)
    p = ((i * 613) % 2003) / 2003.0
    y = (((i * 389) % 1000) / 1000.0 < p * p).astype(np.int64)
    return i, p, y


# d: 16 distinct p, (k + 0.5) / 16; rows i <= 64 hold each value 4 times (D = 16 = N/4: not
# "discrete", 15 equal-mass bins), all 65 rows make D = 16 < 65/4 (distinct values as bins).
D_TABLE = ("statement ok\nCREATE TABLE d AS SELECT value AS i, ((value % 16) + 0.5) / 16.0 AS p, "
           "CASE WHEN (value * 5) % 7 < 3 THEN 1 ELSE 0 END AS y FROM generate_series(1, 65)\n")


def d_table():
    i = np.arange(1, 66)
    p = ((i % 16) + 0.5) / 16.0
    y = (((i * 5) % 7) < 3).astype(np.int64)
    return i, p, y


# big: 1,000,000 rows, all p distinct (7919 is invertible mod the prime 1000003); y is drawn with
# probability ~p (u = (i * 104729 % 1000) / 1000: well calibrated, smooth_ece ~7e-4, so the search reaches sigma = 2/1024 and the
# 5121-point grid), y2 with probability ~p - 0.02. bigr: the same rows with p = round(p, 2)
# (101 distinct values, so ece_debiased uses them as bins).
BIG_TABLE = ("statement ok\nCREATE TABLE big AS SELECT value AS i, ((value * 7919) % 1000003) / 1000003.0 AS p, "
             "CASE WHEN ((value * 104729) % 1000) / 1000.0 < ((value * 7919) % 1000003) / 1000003.0 THEN 1 ELSE 0 END AS y, "
             "CASE WHEN ((value * 104729) % 1000) / 1000.0 < ((value * 7919) % 1000003) / 1000003.0 - 0.02 THEN 1 ELSE 0 END AS y2 "
             "FROM generate_series(1, 1000000)\n")
BIGR_TABLE = "statement ok\nCREATE TABLE bigr AS SELECT i, round(p, 2) AS p, y, y2 FROM big\n"


def big_table():
    i = np.arange(1, 1000001, dtype=np.int64)
    p = ((i * 7919) % 1000003) / 1000003.0
    u = ((i * 104729) % 1000) / 1000.0
    y = (u < p).astype(np.int64)
    y2 = (u < p - 0.02).astype(np.int64)
    return i, p, y, y2


def round2(p):
    """common.sql_round(x, 2) on an array (the same steps, vectorised), checked on a sample."""
    v = p * 100.0
    fl = np.floor(v)
    frac = v - fl
    r = np.where((frac > 0.5) | ((frac == 0.5) & (v > 0)), fl + 1, fl) / 100.0
    for x, rx in zip(p[::997], r[::997]):
        assert sql_round(float(x), 2) == rx
    return r


# ---------------------------------------------------------------------------------------------
# Sections
# ---------------------------------------------------------------------------------------------

def h_group_block(call, fn, comment, mod=4):
    """GROUP BY i % mod over h: one row per key, true when |call - value| < TOL."""
    hi, hp, hy = h_table()
    vals = [fn(hp[hi % mod == k], hy[hi % mod == k]) for k in range(mod)]
    case = "CASE k " + " ".join(f"WHEN {k} THEN {fmt(v)}" for k, v in enumerate(vals)) + " END"
    lines = ["# " + comment + "; per key: " + ", ".join(f"{k}={fmt(v)}" for k, v in enumerate(vals)), "query IT",
             f"SELECT k, abs({call} - {case}) < {fmt(TOL)} FROM (SELECT i % {mod} AS k, p, y FROM h) GROUP BY k ORDER BY k",
             "----"]
    lines += [f"{k} true" for k in range(mod)]
    return "\n".join(lines) + "\n"


def t_cols(mask=None):
    p, y = cols(ROWS, "p", "y")
    if mask is not None:
        p, y = p[mask], y[mask]
    return p, y


def edge_blocks():
    empty = [exact("SELECT smooth_ece(p, y), smooth_ece(p, y, 0.05), ece_debiased(p, y) FROM t WHERE id > 100", "RRR",
                   [[None] * 3], "no rows: NULL (relplot returns 0.0 and calibration raises; calibsql follows avg)")]
    alln = [exact("SELECT smooth_ece(p, y), smooth_ece(p, y, 0.1), ece_debiased(p, y) FROM tn WHERE p IS NULL OR y IS NULL",
                  "RRR", [[None] * 3], "every row has a NULL p or y: NULL"),
            exact("SELECT smooth_ece(CAST(NULL AS DOUBLE), y), ece_debiased(p, CAST(NULL AS INT)) FROM t", "RR",
                  [[None, None]], "NULL columns: NULL")]
    one = [
        smooth_block("smooth_ece(0.3, 1)", None, [0.3], [1],
                     what="one row: not |1 - 0.3|: the kernel mass reflected at 0 and the 1e-4 added to the density both count"),
        smooth_block("smooth_ece(0.3, 1, 0.05)", None, [0.3], [1], 0.05, what="one row, sigma 0.05"),
        smooth_block("smooth_ece(1.0, 0)", None, [1.0], [0], what="one row at p = 1 (the last grid point)"),
        debiased_block("ece_debiased(0.3, 1)", None, [0.3], [1], what="one row: one bin of 1 row, which counts 0"),
    ]
    m = np.isin(np.arange(1, 33), [7, 9])
    p, y = t_cols(m)
    one.append(debiased_block("ece_debiased(p, y)", "t WHERE id IN (7, 9)", p, y,
                              what="two rows with p = 0.2, y = 0: edge (0.2 + 0.2)/2 = 0.2, both rows in bin 0 (p <= edge): sqrt(0.2^2 - 0)"))
    cls = []
    for yv in (0, 1):
        p, y = t_cols(cols(ROWS, "y")[0] == yv)
        cls.append(smooth_block("smooth_ece(p, y)", f"t WHERE y = {yv}", p, y, what=f"one class (y = {yv})"))
        cls.append(debiased_block("ece_debiased(p, y)", f"t WHERE y = {yv}", p, y, what=f"one class (y = {yv}): variance term 0"))
    return empty, alln, one, cls


def value_blocks():
    p, y = t_cols()
    ids, = cols(ROWS, "id")
    f = [r[4] for r in ROWS]
    ts = [smooth_block("smooth_ece(p, y)", "t", p, y, what="t: 32 rows, ties")]
    for s in (0.05, 0.1, 0.005, 0.25, 1.0):
        ts.append(smooth_block(f"smooth_ece(p, y, {fmt(s)})", "t", p, y, s,
                               what=f"t, sigma {fmt(s)}: {grid_size(s)}-point grid, {eval_size(s)} evaluation points"))
    ts.append(debiased_block("ece_debiased(p, y)", "t", p, y, what="t: 25 distinct p of 32 (not < 32/4)"))

    gi, gp, gy, _ = g_table()
    gs = [smooth_block("smooth_ece(p, y)", "g", gp, gy, what="g: 1000 rows, 101 distinct p"),
          smooth_block("smooth_ece(p, y, 0.05)", "g", gp, gy, 0.05, what="g"),
          smooth_block("smooth_ece(p, y, 0.1)", "g", gp, gy, 0.1, what="g"),
          debiased_block("ece_debiased(p, y)", "g", gp, gy, what="g: 101 distinct p < 1000/4")]

    hi, hp, hy = h_table()
    hs = [smooth_block("smooth_ece(p, y)", "h", hp, hy, what="h: 2000 distinct p, miscalibrated"),
          smooth_block("smooth_ece(p, y, 0.05)", "h", hp, hy, 0.05, what="h"),
          smooth_block("smooth_ece(p, y, 0.1)", "h", hp, hy, 0.1, what="h")]
    for k in (3, 7):  # sigmas the search can visit whose grids have an even number of points
        s = k / 1024
        hs.append(smooth_block(f"smooth_ece(p, y, {fmt(s)})", "h", hp, hy, s,
                               what=f"h, sigma {k}/1024: {grid_size(s)}-point grid (even: the kernel's centre falls between "
                                    f"two points), {eval_size(s)} evaluation points"))
    hs.append(debiased_block("ece_debiased(p, y)", "h", hp, hy, what="h: 15 equal-mass bins of 134 or 133 rows"))

    di, dp, dy = d_table()
    ds = []
    m = di <= 64
    v64, _, disc = ref_debiased(dp[m], dy[m])
    alt = r13(debiased_from_state(*debiased_state(dp[m], dy[m]), force="discrete")[0])
    assert not disc and abs(alt - v64) > 1e-6
    ds.append(debiased_block("ece_debiased(p, y)", "d WHERE i <= 64", dp[m], dy[m],
                             what=f"d, 64 rows: 16 distinct p, not < 64/4 (distinct values as bins would give {fmt(alt)})"))
    v65, _, disc = ref_debiased(dp, dy)
    alt = r13(debiased_from_state(*debiased_state(dp, dy), force="equal")[0])
    assert disc and abs(alt - v65) > 1e-6
    ds.append(debiased_block("ece_debiased(p, y)", "d", dp, dy,
                             what=f"d, 65 rows: 16 distinct p < 65/4 (15 equal-mass bins would give {fmt(alt)})"))
    ds.append(smooth_block("smooth_ece(p, y)", "d", dp, dy, what="d, 65 rows"))

    # NULLs, GROUP BY, FILTER
    pn, yn = cols(NULL_ROWS, "p", "y")
    nulls = [smooth_block("smooth_ece(p, y)", "tn", pn, yn, what="tn: rows with a NULL p or y skipped (ids 1,4,5,6,7 remain)"),
             smooth_block("smooth_ece(p, y, 0.1)", "tn", pn, yn, 0.1, what="tn"),
             debiased_block("ece_debiased(p, y)", "tn", pn, yn, what="tn")]
    group = []
    for call, fn in (("smooth_ece(p, y)", lambda a, b: ref_smooth(a, b)[0]),
                     ("smooth_ece(p, y, 0.1)", lambda a, b: ref_smooth(a, b, 0.1)[0]),
                     ("ece_debiased(p, y)", lambda a, b: ref_debiased(a, b)[0])):
        vals = {g: fn(p[np.array([x == g for x in f])], y[np.array([x == g for x in f])]) for g in ["a", "b", "c", None]}
        group.append(group_block(call, vals, f"GROUP BY f (NULL is a group): {call}", tol=TOL))
    group.append(h_group_block("smooth_ece(p, y)", lambda a, b: ref_smooth(a, b)[0], "GROUP BY i % 4 over h (500 rows each)"))
    group.append(h_group_block("smooth_ece(p, y, 0.05)", lambda a, b: ref_smooth(a, b, 0.05)[0], "GROUP BY i % 4 over h"))
    group.append(h_group_block("ece_debiased(p, y)", lambda a, b: ref_debiased(a, b)[0], "GROUP BY i % 4 over h"))
    filt = []
    m = ids % 2 == 0
    filt.append(smooth_block("smooth_ece(p, y) FILTER (WHERE id % 2 = 0)", "t", p[m], y[m], what="FILTER: even ids"))
    filt.append(debiased_block("ece_debiased(p, y) FILTER (WHERE id % 2 = 0)", "t", p[m], y[m], what="FILTER: even ids"))
    m = hi % 3 == 0
    filt.append(smooth_block("smooth_ece(p, y, 0.1) FILTER (WHERE i % 3 = 0)", "h", hp[m], hy[m], 0.1, what="FILTER over h"))
    filt.append(debiased_block("ece_debiased(p, y) FILTER (WHERE i % 3 = 0)", "h", hp[m], hy[m], what="FILTER over h"))
    filt.append(debiased_block("ece_debiased(p, y)", "h WHERE p > 0.5", hp[hp > 0.5], hy[hp > 0.5], what="WHERE p > 0.5 over h"))
    return ts, gs, hs, ds, nulls, group, filt


def big_blocks():
    _, p, y, y2 = big_table()
    pr = round2(p)
    out = []
    for src, pp, lab, yy, what, short in (
            ("big", p, "y", y, "big (1,000,000 rows, all p distinct), y = [u < p]: calibrated but for the 0.001 steps of u", "big, y"),
            ("big", p, "y2", y2, "big, y2 = [u < p - 0.02]: p 0.02 too high", "big, y2"),
            ("bigr", pr, "y", y, "bigr = round(p, 2): 101 distinct p", "bigr, y"),
            ("bigr", pr, "y2", y2, "bigr = round(p, 2), y2", "bigr, y2")):
        out.append(smooth_block(f"smooth_ece(p, {lab})", src, pp, yy, what=what))
        for s in (0.05, 0.1):
            out.append(smooth_block(f"smooth_ece(p, {lab}, {fmt(s)})", src, pp, yy, s, what=short))
        out.append(debiased_block(f"ece_debiased(p, {lab})", src, pp, yy, what=what))
    return out


def partition_blocks():
    out = ["statement ok\nSET datafusion.execution.target_partitions = 4\n",
           "statement ok\nSET datafusion.execution.batch_size = 3\n"]
    p, y = t_cols()
    f = [r[4] for r in ROWS]
    out.append(smooth_block("smooth_ece(p, y)", "tp", p, y, what="tp: t in 4 batches over 4 partitions (states merged)"))
    out.append(smooth_block("smooth_ece(p, y, 0.05)", "tp", p, y, 0.05, what="tp"))
    out.append(debiased_block("ece_debiased(p, y)", "tp", p, y, what="tp"))
    for call, fn in (("smooth_ece(p, y)", lambda a, b: ref_smooth(a, b)[0]),
                     ("ece_debiased(p, y)", lambda a, b: ref_debiased(a, b)[0])):
        vals = {g: fn(p[np.array([x == g for x in f])], y[np.array([x == g for x in f])]) for g in ["a", "b", "c", None]}
        out.append(group_block(call, vals, f"GROUP BY f over tp (partial states merged): {call}", src="tp", tol=TOL))
    src = "(SELECT * FROM t WHERE id % 3 = 0 UNION ALL SELECT * FROM t WHERE id % 3 <> 0)"
    out.append(smooth_block("smooth_ece(p, y)", src, p, y, what="UNION ALL of two parts"))
    out.append(debiased_block("ece_debiased(p, y)", src, p, y, what="UNION ALL of two parts"))
    _, gp, gy, _ = g_table()
    out.append(smooth_block("smooth_ece(p, y)", "g", gp, gy, what="g in batches of 3 over 4 partitions"))
    out.append(debiased_block("ece_debiased(p, y)", "g", gp, gy, what="g in batches of 3 over 4 partitions"))
    _, hp, hy = h_table()
    out.append(smooth_block("smooth_ece(p, y)", "h", hp, hy, what="h in batches of 3 over 4 partitions"))
    out.append(debiased_block("ece_debiased(p, y)", "h", hp, hy, what="h in batches of 3 over 4 partitions"))
    out.append(h_group_block("smooth_ece(p, y)", lambda a, b: ref_smooth(a, b)[0], "GROUP BY i % 4 over h, 4 partitions"))
    out.append(h_group_block("ece_debiased(p, y)", lambda a, b: ref_debiased(a, b)[0], "GROUP BY i % 4 over h, 4 partitions"))
    return out


def sections():
    empty, alln, one, cls = edge_blocks()
    ts, gs, hs, ds, nulls, group, filt = value_blocks()
    tables = standard_tables() + [G_TABLE, H_TABLE, D_TABLE, BIG_TABLE, BIGR_TABLE]
    return [("tables", tables), ("empty", empty), ("all NULL", alln), ("one and two rows", one), ("one class", cls),
            ("t: ties, every sigma", ts), ("g: few distinct values", gs), ("h: continuous, miscalibrated", hs),
            ("d: the distinct-values threshold", ds), ("mixed NULL", nulls), ("GROUP BY", group), ("FILTER", filt),
            ("1,000,000 rows", big_blocks()), ("partitions", partition_blocks())]


if __name__ == "__main__":
    main(sections(), SLT)
