"""Expected values of tests/slt/logloss.slt: logloss, brier, ips_logloss.

  logloss(p, y [, eps [, w]])  = sum w * -[y ln p' + (1-y) ln(1-p')] / sum w, p' = clip(p, eps, 1-eps),
                                 eps default 2.220446049250313e-16:
                                 sklearn.metrics.log_loss(y, p, sample_weight=w, labels=[0, 1]) for the
                                 default eps (sklearn clips to the float64 machine epsilon), numpy with
                                 scipy.special.xlogy for other eps (0 * ln 0 = 0), the two cross-checked.
  brier(p, y [, w])            = sklearn.metrics.brier_score_loss(y, p, sample_weight=w), checked
                                 against numpy sum w (y-p)^2 / sum w.
  ips_logloss(p, y, q [, clip [, eps]]) = mean of -[(y/om) ln p' + (1 - y/om) ln(1-p')],
                                 om = max(q, clip) (clip default 0.1), p' clipped as in logloss (numpy, xlogy).
"""

import math

import numpy as np
from scipy.special import xlogy
from sklearn.metrics import brier_score_loss, log_loss

from common import (EPS, GROUPS, NULL_ROWS, ROWS, close, cols, exact, fmt, group_block, group_mask, main,
                    standard_tables)

SLT = "logloss.slt"


def logloss(p, y, eps=EPS, w=None):
    if len(p) == 0:
        return None
    w = np.ones_like(p) if w is None else w
    if w.sum() == 0:
        return None
    pc = np.clip(p, eps, 1 - eps)
    loss = -(xlogy(y, pc) + xlogy(1 - y, 1 - pc))
    v = math.fsum(w * loss) / math.fsum(w)
    if eps == EPS and np.all(np.isfinite(loss)):
        sk = log_loss(y, p, sample_weight=w, labels=[0, 1])
        assert abs(sk - v) < 1e-14 * max(1, abs(v)), (sk, v)
    return v


def brier(p, y, w=None):
    if len(p) == 0:
        return None
    w = np.ones_like(p) if w is None else w
    if w.sum() == 0:
        return None
    v = math.fsum(w * (y - p) ** 2) / math.fsum(w)
    if len(set(y)) == 2:
        sk = brier_score_loss(y, p, sample_weight=w)
        assert abs(sk - v) < 1e-15, (sk, v)
    return v


def ips_logloss(p, y, q, clip=0.1, eps=EPS):
    if len(p) == 0:
        return None
    om = np.maximum(q, clip)
    pc = np.clip(p, eps, 1 - eps)
    a = y / om
    loss = -(xlogy(a, pc) + xlogy(1 - a, 1 - pc))
    return math.fsum(loss) / len(p)


def c(call, v, what, src="t"):
    return close(call, v, comment=f"{what}: {fmt(v)}", src=src)


def c1(call, v, what):
    """No FROM: the call aggregates one row of literals."""
    return close(call, v, comment=f"{what}: {fmt(v)}")


def sections():
    p, y, w, q = cols(ROWS, "p", "y", "w", "q")
    ids, = cols(ROWS, "id")

    empty = [exact("SELECT logloss(p, y), brier(p, y), ips_logloss(p, y, q), logloss(p, y, 0.01, w), brier(p, y, w), "
                   "ips_logloss(p, y, q, 0.2, 0.01) FROM t WHERE id > 100", "RRRRRR", [[None] * 6], "no rows: NULL")]

    one = []
    one.append(c1("logloss(0.3, 1)", logloss(np.array([0.3]), np.array([1.0])), "one row: -ln 0.3"))
    one.append(c1("logloss(0.3, 0)", logloss(np.array([0.3]), np.array([0.0])), "one row: -ln 0.7"))
    one.append(c1("brier(0.3, 1)", brier(np.array([0.3]), np.array([1.0])), "one row: (1 - 0.3)^2"))
    one.append(c1("ips_logloss(0.3, 1, 0.5)", ips_logloss(np.array([0.3]), np.array([1.0]), np.array([0.5])),
                 "one row: -[2 ln 0.3 + (1 - 2) ln 0.7]"))
    one.append(c1("ips_logloss(0.3, 0, 0.5)", ips_logloss(np.array([0.3]), np.array([0.0]), np.array([0.5])),
                 "one row, y = 0: -ln 0.7"))
    for pp, yy in ((0.0, 1.0), (1.0, 0.0)):
        v = logloss(np.array([pp]), np.array([yy]))
        one.append(c1(f"logloss({pp}, {int(yy)})", v, f"p = {pp}, y = {int(yy)}: clipped to eps, -ln(2.220446049250313e-16)"))
    for pp, yy in ((0.0, 0.0), (1.0, 1.0)):
        v = logloss(np.array([pp]), np.array([yy]), 0.0)
        one.append(c1(f"logloss({pp}, {int(yy)}, 0.0)", v, f"eps 0, p = {pp}, y = {int(yy)}: 0 * ln 0 counts as 0 (scipy xlogy)"))
    one.append(exact("SELECT logloss(0.0, 1, 0.0), logloss(1.0, 0, 0.0)", "RR", [[math.inf, math.inf]],
                     "eps 0 and a confident miss: +infinity (numpy -xlogy(1, 0) = inf)"))
    v = ips_logloss(np.array([1.0]), np.array([1.0]), np.array([1.0]), 0.1, 0.0)
    one.append(c1("ips_logloss(1.0, 1, 1.0, 0.1, 0.0)", v, "eps 0, p = 1, y = 1, propensity 1: (1 - y/om) = 0 times ln 0 counts as 0"))
    one.append(exact("SELECT logloss(0.3, 1, 0.01, 0.0), brier(0.3, 1, 0.0)", "RR", [[None, None]], "total weight 0: NULL"))

    alln = [exact("SELECT logloss(p, y), brier(p, y), ips_logloss(p, y, q), brier(p, y, w) FROM tn WHERE p IS NULL OR y IS NULL",
                  "RRRR", [[None] * 4], "every row has a NULL data argument: NULL"),
            exact("SELECT logloss(p, CAST(NULL AS INT)), brier(CAST(NULL AS DOUBLE), y), ips_logloss(p, y, CAST(NULL AS DOUBLE)), "
                  "logloss(p, y, 0.01, CAST(NULL AS DOUBLE)) FROM t", "RRRR", [[None] * 4], "NULL columns")]

    nulls = []
    pn, yn = cols(NULL_ROWS, "p", "y")
    nulls.append(c("logloss(p, y)", logloss(pn, yn), "tn, rows with NULL p or y skipped (ids 1,4,5,6,7)", "tn"))
    nulls.append(c("brier(p, y)", brier(pn, yn), "tn, brier over ids 1,4,5,6,7", "tn"))
    pn, yn, wn = cols(NULL_ROWS, "p", "y", "w")
    nulls.append(c("logloss(p, y, 0.001, w)", logloss(pn, yn, 0.001, wn), "tn, NULL weight skipped too (ids 1,5,6,7)", "tn"))
    nulls.append(c("brier(p, y, w)", brier(pn, yn, wn), "tn, weighted brier over ids 1,5,6,7", "tn"))
    pn, yn, qn = cols(NULL_ROWS, "p", "y", "q")
    nulls.append(c("ips_logloss(p, y, q)", ips_logloss(pn, yn, qn), "tn, NULL propensity skipped (ids 1,4,6,7)", "tn"))

    group = []
    for call, ref in (("logloss(p, y)", lambda m: logloss(p[m], y[m])),
                      ("brier(p, y)", lambda m: brier(p[m], y[m])),
                      ("logloss(p, y, 0.05, w)", lambda m: logloss(p[m], y[m], 0.05, w[m])),
                      ("brier(p, y, w)", lambda m: brier(p[m], y[m], w[m])),
                      ("ips_logloss(p, y, q)", lambda m: ips_logloss(p[m], y[m], q[m])),
                      ("ips_logloss(p, y, q, 0.3, 0.01)", lambda m: ips_logloss(p[m], y[m], q[m], 0.3, 0.01))):
        vals = {g: ref(group_mask(g)) for g in GROUPS}
        group.append(group_block(call, vals, f"GROUP BY f: {call}"))

    filt = []
    m = ids % 2 == 0
    filt.append(c("logloss(p, y) FILTER (WHERE id % 2 = 0)", logloss(p[m], y[m]), "FILTER: even ids"))
    filt.append(c("brier(p, y, w) FILTER (WHERE id % 2 = 0)", brier(p[m], y[m], w[m]), "FILTER: even ids, weighted brier"))
    filt.append(c("ips_logloss(p, y, q, 0.2) FILTER (WHERE id % 2 = 0)", ips_logloss(p[m], y[m], q[m], 0.2), "FILTER: even ids, ips"))
    m = p >= 0.5
    filt.append(c("logloss(p, y, 0.01, w)", logloss(p[m], y[m], 0.01, w[m]), "WHERE p >= 0.5", "t WHERE p >= 0.5"))

    wts = []
    wts.append(c("logloss(p, y, 2.220446049250313e-16, w)", logloss(p, y, EPS, w), "weighted logloss = sklearn log_loss(y, p, sample_weight=w)"))
    wts.append(c("brier(p, y, w)", brier(p, y, w), "weighted brier = sklearn brier_score_loss(y, p, sample_weight=w)"))
    wts.append(c("brier(p, y, 1.0)", brier(p, y), "unit weights = unweighted"))
    wts.append(c("logloss(p, y, 0.01, 3 * w)", logloss(p, y, 0.01, w), "scaled weights change nothing"))
    wz = np.where(ids <= 10, 0.0, w)
    wts.append(c("logloss(p, y, 0.01, CASE WHEN id <= 10 THEN 0 ELSE w END)", logloss(p, y, 0.01, wz), "zero weights for ids 1..10"))
    wts.append(c("brier(p, y, CASE WHEN id <= 10 THEN 0 ELSE w END)", brier(p, y, wz), "zero weights for ids 1..10"))

    opt = []
    opt.append(c("logloss(p, y)", logloss(p, y), "default eps = float64 machine eps; sklearn log_loss(y, p)"))
    opt.append(c("logloss(p, y, 2.220446049250313e-16)", logloss(p, y), "the default spelled out"))
    for e in (0.01, 0.1, 0.49):
        opt.append(c(f"logloss(p, y, {e})", logloss(p, y, e), f"eps {e}: numpy clip(p, {e}, 1 - {e}) then the mean"))
    m = (p > 0) & (p < 1)
    opt.append(c("logloss(p, y, 0.0)", logloss(p[m], y[m], 0.0), "eps 0 without p in {0, 1}", "t WHERE p > 0 AND p < 1"))
    opt.append(c("logloss(p, y, 0.0)", logloss(p, y, 0.0), "eps 0 with p = 0 (y = 0) and p = 1 (y = 1): those rows lose 0"))
    opt.append(c("logloss(p, y, 0.02, w)", logloss(p, y, 0.02, w), "eps and w"))
    opt.append(c("brier(p, y)", brier(p, y), "brier = sklearn brier_score_loss(y, p)"))
    opt.append(c("ips_logloss(p, y, q)", ips_logloss(p, y, q), "default clip 0.1 (om = max(q, 0.1)), default eps"))
    opt.append(c("ips_logloss(p, y, q, 0.1)", ips_logloss(p, y, q), "the default clip spelled out"))
    for cl in (0.0, 0.05, 0.5, 1.0):
        m = (p > 0) & (p < 1)
        opt.append(c(f"ips_logloss(p, y, q, {cl})", ips_logloss(p, y, q, cl), f"clip {cl}"))
    opt.append(c("ips_logloss(p, y, q, 0.2, 0.01)", ips_logloss(p, y, q, 0.2, 0.01), "clip 0.2, eps 0.01"))
    opt.append(c("ips_logloss(p, y, q, 0.0, 0.3)", ips_logloss(p, y, q, 0.0, 0.3), "clip 0, eps 0.3"))
    opt.append(c("ips_logloss(p, y, 1.0)", logloss(p, y), "propensity 1 everywhere = plain logloss"))
    opt.append(c("ips_logloss(p, y, q, 1.0, 0.01)", logloss(p, y, 0.01), "clip 1 = plain logloss with the same eps"))

    typ = []
    typ.append(c("logloss(p, y = 1)", logloss(p, y), "boolean label"))
    typ.append(c("brier(p, CAST(y AS DOUBLE), CAST(w AS REAL))", brier(p, y, w), "double label, Float32 weight (binary fractions, exact)"))
    p32 = p.astype(np.float32).astype(np.float64)
    typ.append(c("logloss(CAST(p AS REAL), y)", logloss(p32, y), "Float32 p widened to Float64"))
    typ.append(c("ips_logloss(p, CAST(y AS BIGINT), CAST(q AS REAL))", ips_logloss(p, y, q.astype(np.float32).astype(np.float64)),
                 "bigint label, Float32 propensity"))
    typ.append(c("logloss(p, y, 1e-2)", logloss(p, y, 0.01), "eps written 1e-2"))

    part = []
    for call, v in (("logloss(p, y)", logloss(p, y)), ("brier(p, y, w)", brier(p, y, w)),
                    ("ips_logloss(p, y, q, 0.2, 0.01)", ips_logloss(p, y, q, 0.2, 0.01))):
        part.append(c(call, v, "tp: t in 4 batches over 4 partitions", "tp"))
    vals = {g: logloss(p[group_mask(g)], y[group_mask(g)], 0.01, w[group_mask(g)]) for g in GROUPS}
    part.append(group_block("logloss(p, y, 0.01, w)", vals, "GROUP BY over 4 partitions", src="tp"))

    return [("tables", standard_tables()), ("empty", empty), ("one row", one), ("all NULL", alln), ("mixed NULL", nulls),
            ("GROUP BY", group), ("FILTER", filt), ("weights", wts), ("every optional argument", opt),
            ("argument types", typ), ("partitions", part)]


if __name__ == "__main__":
    main(sections(), SLT)
