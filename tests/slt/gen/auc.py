"""Expected values of tests/slt/auc.slt: auc(p, y [, w]).

  auc = sklearn.metrics.roc_auc_score(y, p, sample_weight=w), cross-checked against an O(n^2)
        weighted Mann-Whitney count: sum_{i pos, j neg} w_i w_j [p_i > p_j] + 1/2 [p_i = p_j],
        divided by (sum_pos w)(sum_neg w). NULL when only one class is present.
The 1000-row table g is generated in SQL from integers and rebuilt here with the same integer
arithmetic:  p = ((i * 37) % 101) / 100.0 clipped to 1,  y = ((i * 37) % 101 + (i * 11) % 50 > 75).
"""

import math

import numpy as np
from sklearn.metrics import roc_auc_score

from common import G_TABLE, GROUPS, g_table, NULL_ROWS, ROWS, close, cols, exact, fmt, group_block, group_mask, main, standard_tables

SLT = "auc.slt"


def mann_whitney(p, y, w):
    pos = y == 1
    neg = ~pos
    num = 0.0
    terms = []
    for i in np.nonzero(pos)[0]:
        for j in np.nonzero(neg)[0]:
            if p[i] > p[j]:
                terms.append(w[i] * w[j])
            elif p[i] == p[j]:
                terms.append(0.5 * w[i] * w[j])
    num = math.fsum(terms)
    return num / (math.fsum(w[pos]) * math.fsum(w[neg]))


def auc(p, y, w=None):
    w = np.ones_like(p) if w is None else w
    keep = w > 0
    if len(set(y[keep])) < 2:
        return None
    v = roc_auc_score(y, p, sample_weight=w)
    mw = mann_whitney(p, y, w)
    assert abs(v - mw) < 1e-13, (v, mw)
    return float(v)


def auc_ranks(p, y):
    """Unweighted AUC for many rows: roc_auc_score, cross-checked against the Mann-Whitney U
    from average ranks (scipy.stats.rankdata), O(n log n) instead of the pairwise count."""
    from scipy.stats import rankdata
    v = roc_auc_score(y, p)
    pos = y == 1
    n1, n0 = int(pos.sum()), int((~pos).sum())
    u = rankdata(p)[pos].sum() - n1 * (n1 + 1) / 2
    assert abs(v - u / (n1 * n0)) < 1e-12, (v, u / (n1 * n0))
    return float(v)


BIG_ROWS = 600_000
BIG_TABLE = (
    "statement ok\n"
    "CREATE TABLE big AS SELECT i, p, CAST(((i * 40503) % 999983) / 999983.0 < p AS INT) AS y "
    "FROM (SELECT value AS i, floor(((value * 2654435761) % 1000003) / 1000003.0 * 100) / 100 AS p "
    f"FROM generate_series(1, {BIG_ROWS}))\n")


def big_table():
    """The rows of `big`, with the same integer and float arithmetic as its SQL."""
    i = np.arange(1, BIG_ROWS + 1, dtype=np.int64)
    p = np.floor(((i * 2654435761) % 1000003) / 1000003.0 * 100) / 100
    y = (((i * 40503) % 999983) / 999983.0 < p).astype(np.int64)
    return i, p, y


def c(call, v, what, src="t"):
    return close(call, v, comment=f"{what}: {fmt(v)}", src=src)


def sections():
    p, y, w = cols(ROWS, "p", "y", "w")
    ids, = cols(ROWS, "id")

    tables = standard_tables()
    tables.append(G_TABLE)

    empty = [exact("SELECT auc(p, y), auc(p, y, w) FROM t WHERE id > 100", "RR", [[None, None]], "no rows: NULL")]

    one = [exact("SELECT auc(0.3, 1), auc(0.3, 0, 2.0)", "RR", [[None, None]], "one row: one class, NULL"),
           exact("SELECT auc(p, 1), auc(p, 0), auc(p, y) FILTER (WHERE y = 1) FROM t", "RRR", [[None, None, None]],
                 "one class only: NULL"),
           c("auc(p, y)", auc(np.array([0.3, 0.7]), np.array([0.0, 1.0])), "two rows ranked right", "(VALUES (0.3, 0), (0.7, 1)) v(p, y)"),
           c("auc(p, y)", auc(np.array([0.3, 0.7]), np.array([1.0, 0.0])), "two rows ranked wrong", "(VALUES (0.3, 1), (0.7, 0)) v(p, y)"),
           c("auc(p, y)", auc(np.array([0.5, 0.5]), np.array([1.0, 0.0])), "a tie counts one half", "(VALUES (0.5, 1), (0.5, 0)) v(p, y)"),
           exact("SELECT auc(p, y, w) FROM (VALUES (0.3, 0, 1.0), (0.7, 1, 0.0)) v(p, y, w)", "R", [[None]],
                 "the only positive has weight 0: no positive weight, NULL (as total weight 0)"),
           exact("SELECT auc(p, y, 0.0) FROM t", "R", [[None]], "all weights 0: NULL")]

    alln = [exact("SELECT auc(p, y), auc(p, y, w) FROM tn WHERE p IS NULL OR y IS NULL", "RR", [[None, None]],
                  "every row has a NULL data argument: NULL"),
            exact("SELECT auc(CAST(NULL AS DOUBLE), y), auc(p, y, CAST(NULL AS DOUBLE)) FROM t", "RR", [[None, None]], "NULL columns")]

    pn, yn = cols(NULL_ROWS, "p", "y")
    pw, yw, ww = cols(NULL_ROWS, "p", "y", "w")
    nulls = [c("auc(p, y)", auc(pn, yn), "tn: rows with NULL p or y skipped (ids 1,4,5,6,7)", "tn"),
             c("auc(p, y, w)", auc(pw, yw, ww), "tn: NULL weight skipped too (ids 1,5,6,7)", "tn")]

    group = [group_block("auc(p, y)", {g: auc(p[group_mask(g)], y[group_mask(g)]) for g in GROUPS}, "GROUP BY f: auc(p, y)"),
             group_block("auc(p, y, w)", {g: auc(p[group_mask(g)], y[group_mask(g)], w[group_mask(g)]) for g in GROUPS},
                         "GROUP BY f: auc(p, y, w)")]
    # a group with one class only gives NULL next to the others
    yy = y[ids <= 6]
    rows = [["false", fmt(auc(p[(ids <= 6) & (ids % 2 == 0)], y[(ids <= 6) & (ids % 2 == 0)]))],
            ["true", fmt(auc(p[(ids <= 6) & (ids % 2 == 1)], y[(ids <= 6) & (ids % 2 == 1)]))]]
    group.append(exact("SELECT id % 2 = 1, auc(p, y) FROM t WHERE id <= 6 GROUP BY id % 2 = 1 ORDER BY 1", "TR", rows,
                       "ids 1..6: even ids 2,4,6 have both classes; odd ids 1,3,5 are all y = 0, so NULL"))

    m = ids % 2 == 0
    filt = [c("auc(p, y) FILTER (WHERE id % 2 = 0)", auc(p[m], y[m]), "FILTER: even ids"),
            c("auc(p, y, w) FILTER (WHERE id % 2 = 0)", auc(p[m], y[m], w[m]), "FILTER: even ids, weighted"),
            c("auc(p, y)", auc(p[p >= 0.5], y[p >= 0.5]), "WHERE p >= 0.5", "t WHERE p >= 0.5")]

    wz = np.where(ids <= 10, 0.0, w)
    wts = [c("auc(p, y, w)", auc(p, y, w), "sklearn roc_auc_score(y, p, sample_weight=w)"),
           c("auc(p, y, 1.0)", auc(p, y), "unit weights = unweighted"),
           c("auc(p, y, 4 * w)", auc(p, y, w), "scaled weights change nothing"),
           c("auc(p, y, CASE WHEN id <= 10 THEN 0 ELSE w END)", auc(p, y, wz), "weight 0 for ids 1..10")]

    gi, gp, gy, gw = g_table()
    opt = [c("auc(p, y)", auc(p, y), "sklearn roc_auc_score(y, p); ties at 0.05, 0.2, 0.4, 0.5, 0.6 across classes"),
           c("auc(1 - p, y)", auc(1 - p, y), "reversed scores"),
           c("auc(p, y)", auc(gp, gy), "1000 generated rows, 101 distinct p, many ties", "g"),
           c("auc(p, y, w)", auc(gp, gy, gw), "1000 generated rows, weighted", "g")]

    typ = [c("auc(p, y = 1)", auc(p, y), "boolean label"),
           c("auc(CAST(p AS REAL), CAST(y AS DOUBLE))", auc(p.astype(np.float32).astype(np.float64), y), "Float32 p, double label"),
           c("auc(p, y, CAST(w * 4 AS INT))", auc(p, y, w * 4), "integer weights")]

    part = [c("auc(p, y)", auc(p, y), "tp: 4 batches, 4 partitions", "tp"),
            c("auc(p, y, w)", auc(p, y, w), "tp, weighted", "tp"),
            group_block("auc(p, y, w)", {g: auc(p[group_mask(g)], y[group_mask(g)], w[group_mask(g)]) for g in GROUPS},
                        "GROUP BY over 4 partitions", src="tp"),
            c("auc(p, y)", auc(gp, gy), "g after repartitioning: 1000 rows in batches of 3 over 4 partitions",
              "(SELECT * FROM g ORDER BY i % 7, i)")]

    bi, bp, by = big_table()
    even = bi % 2 == 0
    counted = [BIG_TABLE,
               exact("SELECT count(*), count(DISTINCT p), sum(y) FROM big", "III",
                     [[BIG_ROWS, len(np.unique(bp)), int(by.sum())]], "big is the table the script rebuilds"),
               c("auc(p, y)", auc_ranks(bp, by),
                 "600,000 rows, 100 distinct p: a group past 65,536 rows of its own is\n"
                 "counted per distinct score (udfs/src/metrics/auc.rs)", "big"),
               exact("SELECT i % 2, abs(auc(p, y) - CASE i % 2 WHEN 0 THEN "
                     f"{fmt(auc_ranks(bp[even], by[even]))} ELSE {fmt(auc_ranks(bp[~even], by[~even]))} END) < 1e-12 "
                     "FROM big GROUP BY i % 2 ORDER BY 1", "IT", [["0", "true"], ["1", "true"]],
                     "GROUP BY i % 2: two counted groups of 300,000 rows")]

    return [("tables", tables), ("empty", empty), ("one row / one class", one), ("all NULL", alln), ("mixed NULL", nulls),
            ("GROUP BY", group), ("FILTER", filt), ("weights", wts), ("values", opt), ("argument types", typ),
            ("partitions", part), ("counted per distinct score", counted)]


if __name__ == "__main__":
    main(sections(), SLT)
