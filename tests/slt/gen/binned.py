"""Expected values of tests/slt/binned.slt: ece, mce, reliability (uniform and quantile, weights).

Reference, straight from SPEC.md / SEMANTICS.md (numpy, exact sums with math.fsum):
  uniform bin      = min(floor(p*M), M-1)                       (float arithmetic, as numpy)
  quantile edges   = np.percentile(p, np.linspace(0, 1, M+1) * 100)            (scikit-learn's rule)
  weighted quantile= np.percentile(p, ..., weights=w, method='inverted_cdf')  (numpy >= 2.0)
  quantile bin     = np.searchsorted(edges[1:-1], p, side='left')  (right-closed: equal p share a bin);
                     unweighted, cross-checked against sklearn.calibration.calibration_curve
  ece = sum_m |sum_{i in m} w_i (y_i - p_i)| / sum w
  mce = max over bins with sum w > 0 of |sum w (y - p)| / sum w
  reliability bin k: lower/upper = k/M, (k+1)/M (uniform) or edges[k], edges[k+1] (quantile);
                     count = rows, weight = sum w, mean_p = sum w p / sum w, frac_pos = sum w y / sum w
The unweighted uniform ECE is cross-checked against the textbook form sum_m n_m/N |acc_m - conf_m|.
"""

import math
import sys
from fractions import Fraction

import numpy as np

from common import G_TABLE, NULL_ROWS, ROWS, close, cols, exact, fmt, g_table, main, sql_round, standard_tables

SLT = "binned.slt"


def uniform_bins(p, M):
    return np.minimum(np.floor(p * M), M - 1).astype(int)


def quantile_edges(p, M, w=None):
    q = np.linspace(0, 1, M + 1) * 100
    if w is None:
        return np.percentile(p, q)
    return np.percentile(p, q, weights=w, method="inverted_cdf")


def quantile_bins(p, y, M, w=None):
    return np.searchsorted(quantile_edges(p, M, w)[1:-1], p, side="left")


def bins_of(p, y, M, strategy, w):
    if strategy == "uniform":
        return uniform_bins(p, M)
    return quantile_bins(p, y, M, w if w is not None else None)


def per_bin(p, y, M, strategy="uniform", w=None):
    wv = np.ones_like(p) if w is None else w
    b = bins_of(p, y, M, strategy, w)
    out = []
    for k in range(M):
        m = b == k
        sw = math.fsum(wv[m])
        out.append(
            dict(
                bin=k,
                count=int(m.sum()),
                weight=sw,
                err=math.fsum(wv[m] * (y[m] - p[m])),
                swp=math.fsum(wv[m] * p[m]),
                swy=math.fsum(wv[m] * y[m]),
                pmin=float(p[m].min()) if m.any() else None,
                pmax=float(p[m].max()) if m.any() else None,
            )
        )
    return out


def ece(p, y, M=15, strategy="uniform", w=None):
    bins = per_bin(p, y, M, strategy, w)
    n = math.fsum(b["weight"] for b in bins)
    if len(p) == 0 or n == 0:
        return None
    v = math.fsum(abs(b["err"]) for b in bins) / n
    if strategy == "quantile" and w is None:
        # scikit-learn's own bins: ECE = sum_b n_b/N |frac_pos_b - mean_p_b| over non-empty bins.
        from sklearn.calibration import calibration_curve
        prob_true, prob_pred = calibration_curve(y, p, n_bins=M, strategy="quantile")
        counts = [b["count"] for b in bins if b["count"] > 0]
        ref = sum(c / len(p) * abs(t - q) for c, t, q in zip(counts, prob_true, prob_pred))
        assert abs(ref - v) < 1e-12, (ref, v)
    return v


def mce(p, y, M=15, strategy="uniform", w=None):
    bins = [b for b in per_bin(p, y, M, strategy, w) if b["weight"] > 0]
    if not bins:
        return None
    return max(abs(b["err"]) / b["weight"] for b in bins)


def reliability(p, y, M=15, strategy="uniform", w=None):
    rows = []
    for b in per_bin(p, y, M, strategy, w):
        k = b["bin"]
        if strategy == "uniform":
            lo, hi = k / M, (k + 1) / M
        else:
            e = quantile_edges(p, M, w)
            lo, hi = float(e[k]), float(e[k + 1])
        empty = b["weight"] == 0
        rows.append(
            [
                k,
                sql_round(lo, 9),
                sql_round(hi, 9),
                b["count"],
                sql_round(b["weight"], 9),
                None if empty else sql_round(b["swp"] / b["weight"], 9),
                None if empty else sql_round(b["swy"] / b["weight"], 9),
            ]
        )
    return rows


def textbook_ece(p, y, M):
    """Guo et al. form: sum_m n_m/N |acc_m - conf_m| (independent of the formula above)."""
    b = uniform_bins(p, M)
    tot = 0.0
    for k in range(M):
        m = b == k
        if m.any():
            tot += m.sum() / len(p) * abs(y[m].mean() - p[m].mean())
    return tot


REL_SQL = (
    "SELECT r['bin'], round(r['lower'], 9), round(r['upper'], 9), r['count'], round(r['weight'], 9), "
    "round(r['mean_p'], 9), round(r['frac_pos'], 9) FROM (SELECT unnest({call}) AS r FROM {src})"
)


def rel_block(call, src, rows, comment):
    # rowsort: unnest's rows come in bin order today, but no SQL rule promises it
    return exact(REL_SQL.format(call=call, src=src), "IRRIRRR rowsort", rows, comment)


def _close_from(call, src, v, comment):
    return close(call, v, comment=comment, src=src)


def edge_blocks():
    """empty / one row / all NULL"""
    empty = exact("SELECT ece(p, y), mce(p, y), reliability(p, y), ece(p, y, 5, 'quantile', w), mce(p, y, 5, 'quantile', w) FROM t WHERE id > 100",
                  "RRTRR", [[None] * 5], "no rows: NULL (as avg)")
    one = []
    for fn, v in (("ece", 0.7), ("mce", 0.7)):
        v = abs(1 - 0.3)
        one.append(close(f"{fn}(0.3, 1)", v, comment=f"one row: |1 - 0.3| = {fmt(v)}"))
    v = abs(0 - 0.3)
    one.append(close("ece(0.3, 0, 3, 'quantile', 2.5)", v, comment=f"one row, weighted quantile: |0 - 0.3| = {fmt(v)}"))
    one.append(exact("SELECT ece(0.3, 1, 4, 'uniform', 0.0), mce(0.3, 1, 4, 'uniform', 0.0)", "RR", [[None, None]],
                     "total weight 0: NULL, as for no rows"))
    one.append(exact("SELECT ece(p, y, 4, 'uniform', 0.0), mce(p, y, 4, 'quantile', 0.0), reliability(p, y, 4, 'uniform', 0.0) FROM t",
                     "RRT", [[None, None, None]], "all weights 0: NULL"))
    alln = exact("SELECT ece(p, y), mce(p, y, 3), reliability(p, y, 2), ece(p, y, 4, 'quantile', w) FROM tn WHERE p IS NULL OR y IS NULL",
                 "RRTR", [[None] * 4], "every row has a NULL data argument: NULL")
    alln2 = exact("SELECT ece(CAST(NULL AS DOUBLE), y), mce(p, CAST(NULL AS INT)), ece(p, y, 15, 'uniform', CAST(NULL AS DOUBLE)) FROM t",
                  "RRR", [[None] * 3], "NULL columns")
    return [empty], one, [alln, alln2]


def value_sections():
    p, y, w = cols(ROWS, "p", "y", "w")
    ids, = cols(ROWS, "id")
    f = [r[4] for r in ROWS]
    for M in (15, 10, 5):
        assert abs(ece(p, y, M) - textbook_ece(p, y, M)) < 1e-15

    # mixed NULLs in tn: rows with NULL in any passed data argument are skipped
    nulls = []
    pn, yn = cols(NULL_ROWS, "p", "y")
    v = ece(pn, yn, 5)
    nulls.append(_close_from("ece(p, y, 5)", "tn", v, f"rows with NULL p or y skipped (ids 1,4,5,6,7); ece = {fmt(v)}"))
    v = mce(pn, yn, 5)
    nulls.append(_close_from("mce(p, y, 5)", "tn", v, f"mce over ids 1,4,5,6,7 = {fmt(v)}"))
    pn, yn, wn = cols(NULL_ROWS, "p", "y", "w")
    v = ece(pn, yn, 5, "uniform", wn)
    nulls.append(_close_from("ece(p, y, 5, 'uniform', w)", "tn", v, f"NULL weight skipped too (ids 1,5,6,7); ece = {fmt(v)}"))
    v = mce(pn, yn, 2, "quantile", wn)
    nulls.append(_close_from("mce(p, y, 2, 'quantile', w)", "tn", v, f"mce weighted quantile over ids 1,5,6,7 = {fmt(v)}"))

    # GROUP BY f
    group = []
    for fn, ref, args in (("ece", ece, (5,)), ("mce", mce, (5,)), ("ece", ece, (3, "quantile")), ("ece", ece, (4, "uniform", "w")),
                          ("mce", mce, (2, "quantile", "w"))):
        groups = ["a", "b", "c", None]
        rows = []
        for g in groups:
            m = np.array([x == g for x in f])
            a = list(args)
            if a and a[-1] == "w":
                a[-1] = w[m]
            rows.append((g, ref(p[m], y[m], *a)))
        sargs = ", ".join(f"'{a}'" if isinstance(a, str) and a != "w" else str(a) for a in args)
        call = f"{fn}(p, y, {sargs})"
        comment = f"GROUP BY f (NULL is a group); gen/binned.py {fn}() per group: " + ", ".join(
            f"{g if g else 'NULL'}={fmt(v)}" for g, v in rows)
        lines = ["# " + comment, "query TT", f"SELECT f, abs({call} - CASE f " + " ".join(
            f"WHEN '{g}' THEN {fmt(v)}" for g, v in rows if g is not None) + f" ELSE {fmt(rows[-1][1])} END) < 1e-12 FROM t GROUP BY f ORDER BY f NULLS LAST", "----"]
        for g, _ in rows:
            lines.append(f"{g if g is not None else 'NULL'} true")
        group.append("\n".join(lines) + "\n")

    # FILTER and WHERE
    filt = []
    m = ids % 2 == 0
    v = ece(p[m], y[m], 5)
    filt.append(_close_from("ece(p, y, 5) FILTER (WHERE id % 2 = 0)", "t", v, f"FILTER: even ids only; ece = {fmt(v)}"))
    m2 = p >= 0.5
    v = mce(p[m2], y[m2], 5, "quantile")
    filt.append(_close_from("mce(p, y, 5, 'quantile')", "t WHERE p >= 0.5", v, f"WHERE p >= 0.5; mce quantile = {fmt(v)}"))
    v = ece(p[m2], y[m2], 3, "quantile", w[m2])
    filt.append(_close_from("ece(p, y, 3, 'quantile', w) FILTER (WHERE p >= 0.5)", "t", v, f"FILTER with weighted quantile; ece = {fmt(v)}"))

    # weights
    wts = []
    v10 = ece(p, y, 10)
    wts.append(_close_from("ece(p, y, 10, 'uniform', 1.0)", "t", v10, f"all weights 1 = unweighted ece(p, y, 10) = {fmt(v10)}"))
    wts.append(_close_from("ece(p, y, 10, 'uniform', CAST(1 AS INT))", "t", v10, "integer weight column is coerced"))
    v = ece(p, y, 10, "uniform", 2.5 * w)
    wts.append(_close_from("ece(p, y, 10, 'uniform', 2.5 * w)", "t", v, f"scaling every weight changes nothing: {fmt(v)}"))
    wz = np.where(ids <= 10, 0.0, w)
    for fn, ref in (("ece", ece), ("mce", mce)):
        v = ref(p, y, 10, "uniform", wz)
        v2 = ref(p[ids > 10], y[ids > 10], 10, "uniform", w[ids > 10])
        assert abs(v - v2) < 1e-15
        wts.append(_close_from(f"{fn}(p, y, 10, 'uniform', CASE WHEN id <= 10 THEN 0.0 ELSE w END)", "t", v,
                               f"weight 0 for ids 1..10: they count for nothing (a zero-weight bin is empty for mce); {fn} = {fmt(v)}"))
        v = ref(p, y, 5, "quantile", wz)
        wts.append(_close_from(f"{fn}(p, y, 5, 'quantile', CASE WHEN id <= 10 THEN 0.0 ELSE w END)", "t", v,
                               f"weighted quantile with zero weights (C does not grow across them); {fn} = {fmt(v)}"))

    # every optional argument
    opt = []
    for fn, ref in (("ece", ece), ("mce", mce)):
        calls = [
            (f"{fn}(p, y)", ref(p, y), "default n_bins 15, 'uniform'"),
            (f"{fn}(p, y, 15, 'uniform')", ref(p, y), "the defaults spelled out"),
            (f"{fn}(p, y, 10)", ref(p, y, 10), "n_bins 10"),
            (f"{fn}(p, y, 5, 'uniform')", ref(p, y, 5), "5 uniform bins: p on the edges 0.2/0.4/0.6/0.8 go up, 1.0 to the last bin"),
            (f"{fn}(p, y, 1)", ref(p, y, 1), "one bin"),
            (f"{fn}(p, y, 10000)", ref(p, y, 10000), "n_bins 10000 (the maximum)"),
            (f"{fn}(p, y, 10, 'quantile')", ref(p, y, 10, "quantile"), "10 quantile bins: edges np.percentile(p, linspace(0,1,11)*100), right-closed"),
            (f"{fn}(p, y, 7, 'quantile')", ref(p, y, 7, "quantile"), "7 quantile bins: equal p always share a bin (searchsorted side=left)"),
            (f"{fn}(p, y, 40, 'quantile')", ref(p, y, 40, "quantile"), "more bins than rows: one row per bin, trailing bins empty"),
            (f"{fn}(p, y, 10, 'uniform', w)", ref(p, y, 10, "uniform", w), "weighted, uniform"),
            (f"{fn}(p, y, 4, 'quantile', w)", ref(p, y, 4, "quantile", w), "weighted quantile: edges np.percentile(p, ..., weights=w, method='inverted_cdf')"),
            (f"{fn}(p, y, 6, 'quantile', w)", ref(p, y, 6, "quantile", w), "weighted quantile, 6 bins"),
        ]
        for sql, v, what in calls:
            opt.append(_close_from(sql, "t", v, f"{what}; gen/binned.py {fn}() = {fmt(v)}"))

    # argument types
    typ = []
    typ.append(_close_from("ece(p, y = 1, 10)", "t", v10, f"boolean label; same as ece(p, y, 10) = {fmt(v10)}"))
    typ.append(_close_from("ece(p, CAST(y AS DOUBLE), 10.0)", "t", v10, "double label, n_bins written 10.0; same value"))
    typ.append(_close_from("ece(p, CAST(y AS TINYINT), CAST(10 AS BIGINT))", "t", v10, "tinyint label, bigint n_bins"))
    p32 = p.astype(np.float32).astype(np.float64)
    v32 = ece(p32, y, 10)
    typ.append(_close_from("ece(CAST(p AS REAL), y, 10)", "t", v32,
                           f"Float32 p is widened to Float64 (np.float32(p).astype(np.float64)); 0.7f32 < 0.7 moves to bin 6: {fmt(v32)}"))
    m32 = mce(p32, y, 10)
    typ.append(_close_from("mce(CAST(p AS REAL), y, 10)", "t", m32, f"Float32 p, mce = {fmt(m32)}"))
    v = ece(np.array([0.0, 1.0, 1.0]), np.array([0.0, 1.0, 0.0]), 2)
    typ.append(close("ece(p, y, 2)", v, src="(VALUES (0, 0), (1, 1), (1, 0)) v(p, y)",
                     comment=f"integer p (0 and 1 are probabilities); ece = {fmt(v)}"))

    # partitioned / many batches
    part = []
    for call, v in (("ece(p, y, 10)", ece(p, y, 10)), ("ece(p, y, 7, 'quantile')", ece(p, y, 7, "quantile")),
                    ("mce(p, y, 4, 'quantile', w)", mce(p, y, 4, "quantile", w)),
                    ("ece(p, y, 6, 'quantile', w)", ece(p, y, 6, "quantile", w))):
        part.append(_close_from(call, "tp", v, f"same rows as t in 4 batches over 4 partitions: {fmt(v)}"))
    rows = []
    for g in ["a", "b", "c", None]:
        m = np.array([x == g for x in f])
        rows.append((g, ece(p[m], y[m], 3, "quantile", w[m])))
    lines = ["# GROUP BY over 4 partitions (partial states merged); per group " + ", ".join(f"{g if g else 'NULL'}={fmt(v)}" for g, v in rows),
             "query TT", "SELECT f, abs(ece(p, y, 3, 'quantile', w) - CASE f " + " ".join(
                 f"WHEN '{g}' THEN {fmt(v)}" for g, v in rows if g is not None) + f" ELSE {fmt(rows[-1][1])} END) < 1e-12 FROM tp GROUP BY f ORDER BY f NULLS LAST", "----"]
    lines += [f"{g if g is not None else 'NULL'} true" for g, _ in rows]
    part.append("\n".join(lines) + "\n")
    v = ece(p, y, 7, "quantile")
    part.append(close("ece(p, y, 7, 'quantile')", v, src="(SELECT * FROM t WHERE id % 3 = 0 UNION ALL SELECT * FROM t WHERE id % 3 <> 0)",
                      comment=f"UNION ALL of two parts (two partial states, merged): {fmt(v)}"))
    gi, gp, gy, gw = g_table()
    for call, v in (("ece(p, y)", ece(gp, gy)), ("ece(p, y, 20, 'quantile')", ece(gp, gy, 20, "quantile")),
                    ("ece(p, y, 7, 'quantile', w)", ece(gp, gy, 7, "quantile", gw)),
                    ("mce(p, y, 13, 'quantile')", mce(gp, gy, 13, "quantile")),
                    ("mce(p, y, 9, 'quantile', w)", mce(gp, gy, 9, "quantile", gw))):
        part.append(_close_from(call, "g", v, f"g: 1000 rows, 101 distinct p (ties never split), batches of 3 over 4 partitions: {fmt(v)}"))
    part.append(rel_block("reliability(p, y, 4, 'quantile', w)", "g", reliability(gp, gy, 4, "quantile", gw),
                          "g: weighted quantile reliability over 1000 rows"))
    return nulls, group, filt, wts, opt, typ, part


def rel_blocks():
    out = []
    p, y, w = cols(ROWS, "p", "y", "w")
    ids, = cols(ROWS, "id")
    f = [r[4] for r in ROWS]
    out.append(rel_block("reliability(p, y, 5)", "t", reliability(p, y, 5),
                         "5 uniform bins over t; gen/binned.py reliability(), rounded with DataFusion's round(x, 9)"))
    out.append(rel_block("reliability(p, y, 4, 'quantile')", "t", reliability(p, y, 4, "quantile"),
                         "4 quantile bins of 8 rows; lower/upper = min/max p in the bin"))
    out.append(rel_block("reliability(p, y, 3, 'uniform', w)", "t", reliability(p, y, 3, "uniform", w),
                         "weighted: weight = sum w, mean_p = sum w*p / sum w, frac_pos = sum w*y / sum w"))
    out.append(rel_block("reliability(p, y, 3, 'quantile', w)", "t", reliability(p, y, 3, "quantile", w),
                         "weighted quantile bins: inverted-CDF edges, right-closed"))
    m = (p < 0.25) | (p > 0.8)
    out.append(rel_block("reliability(p, y, 4)", "t WHERE p < 0.25 OR p > 0.8", reliability(p[m], y[m], 4),
                         "empty uniform bins are listed with count 0, weight 0 and NULL means"))
    m = ids <= 3
    out.append(rel_block("reliability(p, y, 5, 'quantile')", "t WHERE id <= 3", reliability(p[m], y[m], 5, "quantile"),
                         "3 rows, 5 quantile bins: trailing bins empty, NULL lower/upper"))
    out.append(rel_block("reliability(0.3, 1, 2)", "(VALUES (1))", reliability(np.array([0.3]), np.array([1.0]), 2),
                         "one row"))
    pn, yn = cols(NULL_ROWS, "p", "y")
    out.append(rel_block("reliability(p, y, 2)", "tn", reliability(pn, yn, 2), "tn: rows with a NULL p or y skipped"))
    out.append(rel_block("reliability(p, y, 2) FILTER (WHERE f = 'c')", "t", reliability(p[np.array([x == "c" for x in f])],
               y[np.array([x == "c" for x in f])], 2), "FILTER (WHERE f = 'c')"))
    out.append(rel_block("reliability(p, y, 3, 'quantile', w)", "tp", reliability(p, y, 3, "quantile", w),
                         "tp (4 batches, 4 partitions): same as over t"))
    # GROUP BY: the counts per group and bin
    rows = []
    for g in ["a", "b", "c", None]:
        m = np.array([x == g for x in f])
        for r in reliability(p[m], y[m], 2, "uniform", w[m]):
            rows.append([g if g else "NULL", r[0], r[3], r[4], r[6]])
    out.append(exact("SELECT f, r['bin'], r['count'], round(r['weight'], 9), round(r['frac_pos'], 9) FROM "
                     "(SELECT f, unnest(reliability(p, y, 2, 'uniform', w)) AS r FROM t GROUP BY f) ORDER BY f NULLS LAST, 2",
                     "TIIRR", rows, "GROUP BY f: one list per group"))
    out.append(exact("SELECT cardinality(reliability(p, y)), cardinality(reliability(p, y, 40, 'quantile')) FROM t",
                     "II", [[15, 40]], "every bin is listed"))
    return out


def sections():
    empty, one, alln = edge_blocks()
    nulls, group, filt, wts, opt, typ, part = value_sections()
    return [("tables", standard_tables() + [G_TABLE]), ("empty", empty), ("one row", one), ("all NULL", alln), ("mixed NULL", nulls),
            ("GROUP BY", group), ("FILTER", filt), ("weights", wts), ("every optional argument", opt),
            ("argument types", typ), ("reliability", rel_blocks()), ("partitions", part)]


if __name__ == "__main__":
    main(sections(), SLT)
