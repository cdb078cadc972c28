"""Expected values of tests/slt/field.slt: field_ece, field_rce.

  field_ece(p, y, field [, w])         = sum_z |sum_{i in z} w (y - p)| / N
  field_rce(p, y, field [, eps [, w]]) = (1/N) sum_z N_z |sum_z w (y - p)| / (sum_z w y + eps N_z),
                                         N_z = sum_z w, eps default 0.01
computed with numpy, grouping by the field value in Python (None = NULL is one group, as GROUP BY),
sums with math.fsum. Rows with a NULL p, y or w are skipped; a NULL field is not.
"""

import math

import numpy as np

from common import G_TABLE, GROUPS, g_table, NULL_ROWS, ROWS, close, cols, exact, fmt, group_block, group_mask, main, standard_tables

SLT = "field.slt"


def _groups(p, y, z, w):
    w = np.ones_like(p) if w is None else w
    out = {}
    for i, key in enumerate(z):
        out.setdefault(key, []).append(i)
    return w, {k: np.array(v) for k, v in out.items()}


def field_ece(p, y, z, w=None):
    w, groups = _groups(p, y, z, w)
    n = math.fsum(w)
    if len(p) == 0 or n == 0:
        return None
    return math.fsum(abs(math.fsum(w[ix] * (y[ix] - p[ix]))) for ix in groups.values()) / n


def field_rce(p, y, z, eps=0.01, w=None):
    w, groups = _groups(p, y, z, w)
    n = math.fsum(w)
    if len(p) == 0 or n == 0:
        return None
    terms = []
    for ix in groups.values():
        nz = math.fsum(w[ix])
        num = abs(math.fsum(w[ix] * (y[ix] - p[ix])))
        den = math.fsum(w[ix] * y[ix]) + eps * nz
        terms.append(nz * num / den)
    return math.fsum(terms) / n


def c(call, v, what, src="t"):
    return close(call, v, comment=f"{what}: {fmt(v)}", src=src)


def sections():
    p, y, w, ids = cols(ROWS, "p", "y", "w", "id")
    f = [r[4] for r in ROWS]
    ii = [int(x) for x in ids]

    empty = [exact("SELECT field_ece(p, y, f), field_rce(p, y, f), field_ece(p, y, f, w), field_rce(p, y, f, 0.1, w) FROM t WHERE id > 100",
                   "RRRR", [[None] * 4], "no rows: NULL")]

    one = [close("field_ece(0.3, 1, 'a')", field_ece(np.array([0.3]), np.array([1.0]), ["a"]), comment="one row: |1 - 0.3|"),
           close("field_rce(0.3, 1, 'a')", field_rce(np.array([0.3]), np.array([1.0]), ["a"]),
                 comment=f"one row: 1 * 0.7 / (1 + 0.01) = {fmt(field_rce(np.array([0.3]), np.array([1.0]), ['a']))}"),
           close("field_rce(0.3, 0, 'a', 0.5)", field_rce(np.array([0.3]), np.array([0.0]), ["a"], 0.5),
                 comment=f"one row without positives: 0.3 / (0 + 0.5) = {fmt(field_rce(np.array([0.3]), np.array([0.0]), ['a'], 0.5))}"),
           close("field_ece(0.3, 1, CAST(NULL AS VARCHAR))", 0.7, comment="one row with a NULL field: still counted (NULL is a group)"),
           exact("SELECT field_ece(0.3, 1, 'a', 0.0), field_rce(0.3, 1, 'a', 0.01, 0.0)", "RR", [[None, None]], "total weight 0: NULL"),
           exact("SELECT field_ece(p, y, f, 0.0), field_rce(p, y, f, 0.01, 0.0) FROM t", "RR", [[None, None]], "all weights 0: NULL")]

    alln = [exact("SELECT field_ece(p, y, f), field_rce(p, y, f) FROM tn WHERE p IS NULL OR y IS NULL", "RR", [[None, None]],
                  "every row has a NULL p or y: NULL"),
            exact("SELECT field_ece(CAST(NULL AS DOUBLE), y, f), field_rce(p, y, f, 0.01, CAST(NULL AS DOUBLE)) FROM t", "RR",
                  [[None, None]], "NULL columns")]
    # all field values NULL: one group = |sum (y - p)| / N
    v = field_ece(p, y, [None] * len(p))
    alln.append(c("field_ece(p, y, CAST(NULL AS VARCHAR))", v, "every field value NULL: one group, |sum(y - p)| / N"))
    v = field_rce(p, y, [None] * len(p))
    alln.append(c("field_rce(p, y, CAST(NULL AS INT))", v, "every field value NULL: one group"))

    nulls = []
    pn, yn, fn_ = cols(NULL_ROWS, "p", "y", "f")
    nulls.append(c("field_ece(p, y, f)", field_ece(pn, yn, fn_), "tn: rows with NULL p or y skipped, NULL f kept (ids 1,4,5,6,7)", "tn"))
    nulls.append(c("field_rce(p, y, f)", field_rce(pn, yn, fn_), "tn: field_rce over ids 1,4,5,6,7", "tn"))
    pn, yn, wn, fn_ = cols(NULL_ROWS, "p", "y", "w", "f")
    nulls.append(c("field_ece(p, y, f, w)", field_ece(pn, yn, fn_, wn), "tn: NULL weight skipped too (ids 1,5,6,7)", "tn"))
    nulls.append(c("field_rce(p, y, f, 0.05, w)", field_rce(pn, yn, fn_, 0.05, wn), "tn: weighted field_rce, eps 0.05", "tn"))
    # the NULL field group matters: compare with the same rows where NULL is replaced by 'a'
    v1 = field_ece(p, y, f)
    v2 = field_ece(p, y, [x if x is not None else "b" for x in f])
    assert abs(v1 - v2) > 1e-6
    nulls.append(c("field_ece(p, y, coalesce(f, 'b'))", v2, "NULL merged into 'b' gives a different value than field_ece(p, y, f)"))

    group = []
    odd = [x % 2 == 1 for x in ii]
    for call, ref in (("field_ece(p, y, f)", lambda m: field_ece(p[m], y[m], [f[i] for i in np.nonzero(m)[0]])),
                      ("field_rce(p, y, f)", lambda m: field_rce(p[m], y[m], [f[i] for i in np.nonzero(m)[0]])),
                      ("field_ece(p, y, f, w)", lambda m: field_ece(p[m], y[m], [f[i] for i in np.nonzero(m)[0]], w[m])),
                      ("field_rce(p, y, f, 0.1, w)", lambda m: field_rce(p[m], y[m], [f[i] for i in np.nonzero(m)[0]], 0.1, w[m]))):
        rows = []
        for parity in (0, 1):
            m = np.array([x % 2 == parity for x in ii])
            rows.append((parity, ref(m)))
        lines = [f"# GROUP BY id % 2, {call} per group: " + ", ".join(f"{k}={fmt(v)}" for k, v in rows),
                 "query IT",
                 f"SELECT id % 2, abs({call} - CASE id % 2 WHEN 0 THEN {fmt(rows[0][1])} ELSE {fmt(rows[1][1])} END) < 1e-12 "
                 "FROM t GROUP BY id % 2 ORDER BY 1", "----", "0 true", "1 true"]
        group.append("\n".join(lines) + "\n")
    # GROUP BY the field itself: every group has one field value, so field_ece = |ece with one bin|
    group.append(group_block("field_ece(p, y, f)", {g: field_ece(p[group_mask(g)], y[group_mask(g)], [g] * int(group_mask(g).sum()))
                                                    for g in GROUPS}, "GROUP BY f: one field value per group"))

    m = np.array(ii) % 3 == 0
    fm = [f[i] for i in np.nonzero(m)[0]]
    filt = [c("field_ece(p, y, f) FILTER (WHERE id % 3 = 0)", field_ece(p[m], y[m], fm), "FILTER: ids divisible by 3"),
            c("field_rce(p, y, f, 0.01, w) FILTER (WHERE id % 3 = 0)", field_rce(p[m], y[m], fm, 0.01, w[m]), "FILTER, weighted rce")]
    m = p >= 0.5
    fm = [f[i] for i in np.nonzero(m)[0]]
    filt.append(c("field_rce(p, y, f)", field_rce(p[m], y[m], fm), "WHERE p >= 0.5", "t WHERE p >= 0.5"))

    wz = np.where(np.array(ii) <= 10, 0.0, w)
    wts = [c("field_ece(p, y, f, w)", field_ece(p, y, f, w), "weighted field_ece"),
           c("field_ece(p, y, f, 1.0)", field_ece(p, y, f), "unit weights = unweighted"),
           c("field_rce(p, y, f, 0.01, 2 * w)", field_rce(p, y, f, 0.01, w), "scaled weights change nothing (eps scales with N_z)"),
           c("field_ece(p, y, f, CASE WHEN id <= 10 THEN 0 ELSE w END)", field_ece(p, y, f, wz), "weight 0 for ids 1..10"),
           c("field_rce(p, y, f, 0.01, CASE WHEN id <= 10 THEN 0 ELSE w END)", field_rce(p, y, f, 0.01, wz), "weight 0 for ids 1..10")]

    opt = [c("field_ece(p, y, f)", field_ece(p, y, f), "field_ece over f (a, b, c, NULL)"),
           c("field_rce(p, y, f)", field_rce(p, y, f), "field_rce, default eps 0.01"),
           c("field_rce(p, y, f, 0.01)", field_rce(p, y, f), "the default spelled out"),
           c("field_rce(p, y, f, 0.0)", field_rce(p, y, f, 0.0), "eps 0 (every group has positives)"),
           c("field_rce(p, y, f, 0.5)", field_rce(p, y, f, 0.5), "eps 0.5"),
           c("field_rce(p, y, f, 2.0, w)", field_rce(p, y, f, 2.0, w), "eps 2, weighted"),
           c("field_ece(p, y, id % 4)", field_ece(p, y, [x % 4 for x in ii]), "integer field"),
           c("field_rce(p, y, id % 4, 0.1)", field_rce(p, y, [x % 4 for x in ii], 0.1), "integer field, eps 0.1"),
           c("field_ece(p, y, y = 1)", field_ece(p, y, list(y)), "boolean field: groups y = 0 and y = 1"),
           c("field_ece(p, y, p)", field_ece(p, y, list(p)), "double field: each distinct p is a group"),
           c("field_ece(p, y, id)", field_ece(p, y, ii), "one row per group: mean |y - p|"),
           c("field_ece(p, y, 'x')", field_ece(p, y, ["x"] * len(p)), "one constant field value: |sum(y - p)| / N"),
           c("(field_rce(p, y, f) + field_rce(p, y, id % 3)) / 2",
             (field_rce(p, y, f) + field_rce(p, y, [x % 3 for x in ii])) / 2, "multi-field RCE in plain SQL: the mean over fields"),
           c("field_ece(p, y, CASE WHEN id % 5 = 0 THEN NULL ELSE id % 3 END)",
             field_ece(p, y, [None if x % 5 == 0 else x % 3 for x in ii]), "integer field with NULLs")]

    typ = [c("field_ece(p, y = 1, f)", field_ece(p, y, f), "boolean label"),
           c("field_rce(CAST(p AS REAL), CAST(y AS DOUBLE), f)", field_rce(p.astype(np.float32).astype(np.float64), y, f),
             "Float32 p, double label"),
           c("field_ece(p, y, CAST(f AS BYTEA))", field_ece(p, y, f), "binary field"),
           c("field_ece(p, y, arrow_cast(f, 'Dictionary(Int32, Utf8)'))", field_ece(p, y, f), "dictionary-encoded field"),
           c("field_ece(p, y, CAST(id % 4 AS TINYINT))", field_ece(p, y, [x % 4 for x in ii]), "tinyint field"),
           c("field_ece(p, y, arrow_cast(id % 4, 'Date32'))", field_ece(p, y, [x % 4 for x in ii]), "date field")]

    part = [c("field_ece(p, y, f)", field_ece(p, y, f), "tp: 4 batches, 4 partitions", "tp"),
            c("field_rce(p, y, f, 0.1, w)", field_rce(p, y, f, 0.1, w), "tp, weighted rce", "tp"),
            c("field_ece(p, y, id % 4, w)", field_ece(p, y, [x % 4 for x in ii], w), "tp, integer field", "tp")]
    rows = []
    for parity in (0, 1):
        m = np.array([x % 2 == parity for x in ii])
        rows.append(field_rce(p[m], y[m], [f[i] for i in np.nonzero(m)[0]], 0.01, w[m]))
    part.append("\n".join([f"# GROUP BY id % 2 over 4 partitions: {fmt(rows[0])}, {fmt(rows[1])}", "query IT",
                           f"SELECT id % 2, abs(field_rce(p, y, f, 0.01, w) - CASE id % 2 WHEN 0 THEN {fmt(rows[0])} ELSE {fmt(rows[1])} END) < 1e-12 "
                           "FROM tp GROUP BY id % 2 ORDER BY 1", "----", "0 true", "1 true"]) + "\n")

    gi, gp, gy, gw = g_table()
    part.append(c("field_ece(p, y, i % 37)", field_ece(gp, gy, [int(x) % 37 for x in gi]), "g: 1000 rows, 37 field values", "g"))
    part.append(c("field_rce(p, y, i % 37, 0.05, w)", field_rce(gp, gy, [int(x) % 37 for x in gi], 0.05, gw),
                  "g: weighted rce, 37 field values", "g"))
    part.append(c("field_ece(p, y, CASE WHEN i % 11 = 0 THEN NULL ELSE CAST(i % 5 AS VARCHAR) END, w)",
                  field_ece(gp, gy, [None if int(x) % 11 == 0 else str(int(x) % 5) for x in gi], gw),
                  "g: text field with NULLs", "g"))
    return [("tables", standard_tables() + [G_TABLE]), ("empty", empty), ("one row", one), ("all NULL", alln), ("mixed NULL", nulls),
            ("GROUP BY", group), ("FILTER", filt), ("weights", wts), ("every optional argument / field types", opt),
            ("argument types", typ), ("partitions", part)]


if __name__ == "__main__":
    main(sections(), SLT)
