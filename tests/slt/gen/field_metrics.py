"""Expected values of tests/slt/multi_field.slt: multi_field_rce and mvce.

Computed with Python + numpy only (numpy 2.x; any numpy >= 1.20 gives the same numbers: the
data are built with integer arithmetic and every sum is a math.fsum), never with calibsql.
No random numbers are used: every table is a literal list or a deterministic function of
generate_series' `value`, rebuilt here with the same integer arithmetic.

    python3 tests/slt/gen/field_metrics.py > tests/slt/multi_field.slt   # write the file
    python3 tests/slt/gen/field_metrics.py --check          # the file is what this prints
    python3 tests/slt/gen/field_metrics.py --verify-field   # field_rce() below vs field.slt

Definitions
-----------
field_rce(p, y, field [, eps]) (unweighted; read from udfs/src/metrics/field.rs `finish` and
docs/SEMANTICS.md; Pan et al. eq. 6):
    N = number of usable rows (p and y not NULL); NULL result when N = 0.
    per field value z (all NULL field values are ONE value z, as in GROUP BY; a NULL field does
    not make a row unusable):  N_z = #rows, wy_z = sum y, wd_z = sum (y - p)
    term_z = 0                                   if wd_z == 0   (so 0/0 never happens)
           = N_z * |wd_z| / (wy_z + eps * N_z)   otherwise      (eps = 0, wy_z = 0: Infinity)
    field_rce = (sum_z term_z) / N,  eps default 0.01.
multi_field_rce(p, y, f1, ..., fK [, eps]) = (1/K) sum_k field_rce(p, y, f_k, eps); eps is a
    trailing numeric literal (default 0.01), f_k are columns. A row with a NULL p or y is skipped
    (for every field); a NULL value of f_k is that field's NULL group, exactly as field_rce does,
    so multi_field_rce is the mean of the K field_rce values over the same rows.
    (NULL_FIELD_RULE = "skip" below regenerates the file with the other reading: a row with a
    NULL in any field is skipped for every field.)
mvce(p, y, key [, n_bins [, rounds]]), T = n_bins (default 15), R = rounds (default 10):
    key -> u64 k: integers: the value as 64-bit two's complement (value & 0xFFFF_FFFF_FFFF_FFFF);
                  strings: FNV-1a 64 of the UTF-8 bytes (basis 0xcbf29ce484222325,
                  prime 0x100000001b3, wrapping).
    h(k, r) = mix(k ^ (r * 0x9E3779B97F4A7C15 mod 2^64)), mix = SplitMix64's finaliser:
              z ^= z >> 30; z *= 0xbf58476d1ce4e5b9; z ^= z >> 27; z *= 0x94d049bb133111eb;
              z ^= z >> 31   (all mod 2^64)
    round r puts each row in cell (r, h(k, r) mod T);
    mvce = mean over the non-empty cells (r, t) of |sum_{cell} (y - p)| / #rows in the cell.
    (A row with a NULL p or y is skipped; no usable row gives NULL.)
Self-checks of the hash (asserted in hash_self_test): FNV-1a("a") = 0xaf63dc4c8601ec8c (the
published vector); h(0, 1) and h(0, 2) are SplitMix64's first two outputs from seed 0,
0xe220a8397b1dcdaf and 0x6e789e6aa1b965f4.

Floats are compared as in field.slt: `abs(expr - expected) < 1e-12` (1e-11 / 1e-10 ... above
1 / 10), expected printed as the shortest round-trip repr. The 100000-row table's p is a multiple
of 1/128, so its sums are exact in any order.
"""

import math
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import CHECK_ABS, CHECK_REL, NULL_ROWS, ROWS, close, compare, exact, fmt, sql_lit  # noqa: E402

SLT = "multi_field.slt"
NULL_FIELD_RULE = "group"  # "group": as field_rce (NULL field value = one group); "skip": skip the row
M64 = 0xFFFFFFFFFFFFFFFF
GAMMA = 0x9E3779B97F4A7C15


# ---------------------------------------------------------------------------------------------
# reference implementations
# ---------------------------------------------------------------------------------------------

def field_rce(p, y, z, eps=0.01):
    """Unweighted field_rce as udfs/src/metrics/field.rs computes it (None = NULL result).
    p, y: sequences of floats (None = NULL); z: field values (None = the NULL group)."""
    groups = {}
    for pi, yi, zi in zip(p, y, z):
        if pi is None or yi is None:
            continue
        groups.setdefault(zi, []).append((float(pi), float(yi)))
    n = sum(len(v) for v in groups.values())
    if n == 0:
        return None
    terms = []
    for rows in groups.values():
        nz = float(len(rows))
        wy = math.fsum(yi for _, yi in rows)
        wd = math.fsum(yi - pi for pi, yi in rows)
        if wd == 0.0:
            terms.append(0.0)
        else:
            den = wy + eps * nz
            terms.append(math.inf if den == 0.0 else nz * abs(wd) / den)
    return math.fsum(terms) / n


def multi_field_rce(p, y, fields, eps=0.01):
    """Mean over the fields of field_rce (fields: list of K columns)."""
    if NULL_FIELD_RULE == "skip":
        keep = [i for i in range(len(p)) if all(f[i] is not None for f in fields)]
        p = [p[i] for i in keep]
        y = [y[i] for i in keep]
        fields = [[f[i] for i in keep] for f in fields]
    vals = [field_rce(p, y, f, eps) for f in fields]
    if any(v is None for v in vals):
        return None
    return sum(vals) / len(vals)


def fnv1a64(s):
    h = 0xCBF29CE484222325
    for b in s.encode("utf-8"):
        h ^= b
        h = (h * 0x100000001B3) & M64
    return h


def key_u64(key):
    if isinstance(key, str):
        return fnv1a64(key)
    return int(key) & M64


def mix(z):
    z &= M64
    z ^= z >> 30
    z = (z * 0xBF58476D1CE4E5B9) & M64
    z ^= z >> 27
    z = (z * 0x94D049BB133111EB) & M64
    z ^= z >> 31
    return z


def h(k, r):
    return mix(k ^ ((r * GAMMA) & M64))


def hash_self_test():
    assert fnv1a64("a") == 0xAF63DC4C8601EC8C
    assert fnv1a64("") == 0xCBF29CE484222325
    assert h(0, 1) == 0xE220A8397B1DCDAF
    assert h(0, 2) == 0x6E789E6AA1B965F4
    # numpy uint64 gives the same bins (vectorised version used for the big table)
    ks = np.array([key_u64(k) for k in (0, 1, -1, 42, "site7", "")], dtype=np.uint64)
    for r in range(10):
        assert [int(b) for b in bins_np(ks, r, 15)] == [h(int(k), r) % 15 for k in ks]


def bins_np(k, r, t):
    """h(k, r) mod t for a uint64 array (numpy wraps uint64 multiplication mod 2^64)."""
    with np.errstate(over="ignore"):
        z = k ^ np.uint64((r * GAMMA) & M64)
        z = z ^ (z >> np.uint64(30))
        z = z * np.uint64(0xBF58476D1CE4E5B9)
        z = z ^ (z >> np.uint64(27))
        z = z * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return z % np.uint64(t)


def mvce(p, y, keys, n_bins=15, rounds=10):
    """MVCE (None = NULL). keys: ints or strs (one type per call)."""
    rows = [(float(pi), float(yi), key_u64(ki)) for pi, yi, ki in zip(p, y, keys)
            if pi is not None and yi is not None]
    if not rows:
        return None
    cells = {}
    for r in range(rounds):
        for pi, yi, k in rows:
            cells.setdefault((r, h(k, r) % n_bins), []).append(yi - pi)
    vals = [abs(math.fsum(d)) / len(d) for d in cells.values()]
    return math.fsum(vals) / len(vals)


def mvce_np(p, y, k_u64, n_bins=15, rounds=10):
    """mvce for a large table: the bins with numpy uint64, the cell sums with math.fsum."""
    d = np.asarray(y, dtype=np.float64) - np.asarray(p, dtype=np.float64)
    vals = []
    for r in range(rounds):
        b = bins_np(k_u64, r, n_bins).astype(np.int64)
        order = np.argsort(b, kind="stable")
        bs, ds = b[order], d[order]
        cuts = np.flatnonzero(np.diff(bs)) + 1
        for seg in np.split(ds, cuts):
            if len(seg):
                vals.append(abs(math.fsum(seg)) / len(seg))
    return math.fsum(vals) / len(vals)


# ---------------------------------------------------------------------------------------------
# data
# ---------------------------------------------------------------------------------------------

# m: id, p, y, a (Int64 field), b (Utf8 field), c (Int64 field, negative values)
M_ROWS = [
    (1, 0.1, 0, 1, "x", -1),
    (2, 0.35, 1, 2, "y", 7),
    (3, 0.8, 1, 1, "x", -1),
    (4, 0.6, 0, 3, "z", 0),
    (5, 0.25, 0, 2, "x", 7),
    (6, 0.9, 1, 3, "y", -1),
    (7, 0.45, 1, 1, "z", 0),
    (8, 0.05, 0, 2, "y", 7),
    (9, 0.7, 1, 3, "x", 0),
    (10, 0.3, 0, 1, "y", -1),
    (11, 0.55, 0, 2, "z", 7),
    (12, 0.15, 1, 3, "x", 0),
    (13, 0.95, 1, 1, "y", -1),
    (14, 0.4, 0, 2, "z", 7),
    (15, 0.65, 1, 3, "x", 0),
    (16, 0.2, 0, 1, "z", -1),
]

# mn: the same columns with NULLs (p or y NULL: the row is skipped; a or b NULL: NULL group)
MN_ROWS = [
    (1, 0.3, 1, 1, "x", 5),
    (2, None, 1, 1, "x", 5),
    (3, 0.6, None, 2, "y", 6),
    (4, 0.7, 0, None, "y", 6),
    (5, 0.2, 0, 2, None, 5),
    (6, 0.9, 1, None, None, 6),
    (7, 0.45, 0, 1, "x", 5),
    (8, 0.5, 1, 2, "y", 6),
    (9, 0.1, 0, None, "x", 5),
    (10, 0.8, 1, 1, None, 6),
]

# kv: id, p, y, k (Int64 key), s (Utf8 key)
KV_ROWS = [
    (1, 0.1, 0, 0, "site7"),
    (2, 0.9, 1, 1, ""),
    (3, 0.4, 1, -1, "a"),
    (4, 0.6, 0, 42, "site7"),
    (5, 0.25, 1, 0, "b"),
    (6, 0.75, 0, 9223372036854775807, ""),
    (7, 0.5, 1, -9223372036854775808, "naïve"),
    (8, 0.3, 0, 42, "a"),
    (9, 0.85, 1, 1, "site7"),
    (10, 0.2, 0, -1, "b"),
    (11, 0.55, 1, 123456789, "naïve"),
    (12, 0.05, 0, -42, "site8"),
    (13, 0.95, 1, 0, "site8"),
    (14, 0.35, 0, 1000, "a"),
]

BIG_N = 100000
BIG_TABLE = ("statement ok\nCREATE TABLE big AS SELECT value AS i, ((value * 37) % 101) / 128.0 AS p, "
             "CAST(((value * 37) % 101) + ((value * 11) % 50) > 75 AS INT) AS y FROM generate_series(0, 99999)\n")


def big_table():
    """The rows of `big`, as BIG_TABLE builds them: i = 0..99999, a = (37 i) mod 101,
    p = a / 128 (exact), y = (a + (11 i) mod 50 > 75)."""
    i = np.arange(BIG_N, dtype=np.int64)
    a = (i * 37) % 101
    p = a / 128.0
    y = ((a + (i * 11) % 50) > 75).astype(np.float64)
    return i, p, y


def create(name, cols, rows):
    lines = ["statement ok", f"CREATE TABLE {name}({', '.join(cols)}) AS VALUES"]
    lines.append(",\n".join("  (" + ", ".join(sql_lit(v) for v in r) + ")" for r in rows))
    return "\n".join(lines) + "\n"


def col(rows, j):
    return [r[j] for r in rows]


def c(call, v, what, src=None, tol=1e-12):
    return close(call, v, tol=tol, comment=f"{what}: {fmt(v)}", src=src)


def group_block(call, src, key_sql, values, comment):
    """GROUP BY key_sql (integer groups), one `g true` row per group."""
    case = "CASE " + key_sql + " " + " ".join(f"WHEN {g} THEN {fmt(v)}" for g, v in values.items()) + " END"
    big = max(abs(v) for v in values.values())  # tolerance as close(): 1e-12, scaled above 1
    tol = fmt(float(f"{1e-12 * (10.0 ** math.ceil(math.log10(big)) if big > 1 else 1.0):.0e}"))
    lines = ["# " + comment + ": " + ", ".join(f"{g}={fmt(v)}" for g, v in values.items()),
             "query IT",
             f"SELECT {key_sql}, abs({call} - {case}) < {tol} FROM {src} GROUP BY {key_sql} ORDER BY 1",
             "----"] + [f"{g} true" for g in values]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------
# sections
# ---------------------------------------------------------------------------------------------

def sections():
    tables = [create("m", ["id INT", "p DOUBLE", "y INT", "a BIGINT", "b VARCHAR", "c BIGINT"], M_ROWS),
              create("mn", ["id INT", "p DOUBLE", "y INT", "a BIGINT", "b VARCHAR", "c BIGINT"], MN_ROWS),
              create("kv", ["id INT", "p DOUBLE", "y INT", "k BIGINT", "s VARCHAR"], KV_ROWS),
              BIG_TABLE]

    # ---- multi_field_rce on m
    p, y, a, b, cc, ids = col(M_ROWS, 1), col(M_ROWS, 2), col(M_ROWS, 3), col(M_ROWS, 4), col(M_ROWS, 5), col(M_ROWS, 0)
    mf = []
    fa, fb, fc = field_rce(p, y, a), field_rce(p, y, b), field_rce(p, y, cc)
    mf.append(c("multi_field_rce(p, y, a, b)", multi_field_rce(p, y, [a, b]),
                f"2 fields (Int64 a, Utf8 b), eps 0.01: (field_rce a {fmt(fa)} + field_rce b {fmt(fb)}) / 2", "m"))
    mf.append(c("multi_field_rce(p, y, b, a)", multi_field_rce(p, y, [b, a]), "field order does not matter", "m"))
    mf.append(c("multi_field_rce(p, y, a, b, 0.01)", multi_field_rce(p, y, [a, b]), "the default eps spelled out", "m"))
    mf.append(c("multi_field_rce(p, y, a, b, 0.1)", multi_field_rce(p, y, [a, b], 0.1), "eps 0.1", "m"))
    mf.append(c("multi_field_rce(p, y, a, b, 0.0)", multi_field_rce(p, y, [a, b], 0.0),
                "eps 0 (every value of a and b has positives)", "m"))
    mf.append(c("multi_field_rce(p, y, a, b, c)", multi_field_rce(p, y, [a, b, cc]),
                f"3 fields (Int64, Utf8, Int64 with -1): mean of {fmt(fa)}, {fmt(fb)}, {fmt(fc)}", "m"))
    mf.append(c("multi_field_rce(p, y, a, b, c, 0.5)", multi_field_rce(p, y, [a, b, cc], 0.5), "3 fields, eps 0.5", "m"))
    mf.append(c("multi_field_rce(p, y, a, b, c) - (field_rce(p, y, a) + field_rce(p, y, b) + field_rce(p, y, c)) / 3", 0.0,
                "the same as the mean of field_rce in plain SQL", "m"))
    mf.append(c("multi_field_rce(p, y, a, a)", field_rce(p, y, a), "the same field twice = field_rce of it", "m"))
    v = multi_field_rce(p, y, [a, ids])
    mf.append(c("multi_field_rce(p, y, a, CAST(id AS BIGINT))", v,
                "one row per value of the second field: its field_rce is (1/N) sum |y - p| / (y + 0.01)", "m", tol=1e-12))
    mf.append(c("multi_field_rce(p, y = 1, a, b)", multi_field_rce(p, y, [a, b]), "boolean label", "m"))
    # values without positives: eps = 0 gives Infinity, but a value whose gap is exactly 0 adds 0
    vv = [(0.25, 0, "u", 1), (0.25, 1, "u", 1), (0.5, 0, "v", 2), (0.0, 0, "w", 2), (0.5, 1, "v", 1)]
    vp, vy, vs, vi = (list(x) for x in zip(*vv))
    vals = "(" + "), (".join(", ".join(sql_lit(x) for x in r) for r in vv) + ")"
    src = f"(VALUES {vals}) AS v(p, y, s, i)"
    mf.append(c("multi_field_rce(p, y, s, i)", multi_field_rce(vp, vy, [vs, vi]),
                "inline VALUES (Int64 i, Utf8 s); 'w' has no positives, eps 0.01", src))
    inf = multi_field_rce(vp, vy, [vs, vi], 0.0)
    assert inf == math.inf
    mf.append(exact(f"SELECT multi_field_rce(p, y, s, i, 0.0) > 1e300 FROM {src}", "T", [["true"]],
                    "eps 0: 'v' has no positives and a gap of -0.5: Infinity"))
    vz = [(0.25, 0, "u", 1), (0.25, 1, "u", 1), (0.0, 0, "w", 2), (0.5, 1, "v", 1)]
    zp, zy, zs, zi = (list(x) for x in zip(*vz))
    vals = "(" + "), (".join(", ".join(sql_lit(x) for x in r) for r in vz) + ")"
    mf.append(c("multi_field_rce(p, y, s, i, 0.0)", multi_field_rce(zp, zy, [zs, zi], 0.0),
                "eps 0: 'w' (p = 0, y = 0) has no positives but a gap of 0, so it adds 0 (not NaN)",
                f"(VALUES {vals}) AS v(p, y, s, i)"))

    empty = [exact("SELECT multi_field_rce(p, y, a, b), multi_field_rce(p, y, a, b, c, 0.1) FROM m WHERE id > 100", "RR",
                   [[None, None]], "no rows: NULL"),
             exact("SELECT multi_field_rce(p, y, a, b) FROM mn WHERE p IS NULL OR y IS NULL", "R", [[None]],
                   "every row has a NULL p or y: NULL")]

    # ---- NULLs (mn)
    np_, ny, na, nb, nc = col(MN_ROWS, 1), col(MN_ROWS, 2), col(MN_ROWS, 3), col(MN_ROWS, 4), col(MN_ROWS, 5)
    rule = ("a NULL field value is that field's NULL group (as field_rce)" if NULL_FIELD_RULE == "group"
            else "a row with a NULL in any field is skipped")
    nul = [c("multi_field_rce(p, y, a, b)", multi_field_rce(np_, ny, [na, nb]),
             f"mn: rows with a NULL p or y (ids 2, 3) skipped; {rule}", "mn"),
           c("multi_field_rce(p, y, a, b, c, 0.05)", multi_field_rce(np_, ny, [na, nb, nc], 0.05),
             "mn: 3 fields (c has no NULL), eps 0.05", "mn"),
           c("multi_field_rce(p, y, c, c)", field_rce(np_, ny, nc), "mn: a field without NULLs = field_rce(p, y, c)", "mn")]
    if NULL_FIELD_RULE == "group":
        nul.append(c("multi_field_rce(p, y, a, b) - (field_rce(p, y, a) + field_rce(p, y, b)) / 2", 0.0,
                     "mn: equals the mean of field_rce, NULL groups included", "mn"))
    a9 = [-9 if x is None else x for x in na]
    b9 = ["n" if x is None else x for x in nb]
    v1, v2 = multi_field_rce(np_, ny, [na, nb]), multi_field_rce(np_, ny, [a9, b9])
    if NULL_FIELD_RULE == "group":
        assert abs(v1 - v2) < 1e-15
    nul.append(c("multi_field_rce(p, y, coalesce(a, -9), coalesce(b, 'n'))", v2,
                 "mn: NULL replaced by a value of its own", "mn"))
    nul.append(c("multi_field_rce(p, y, CAST(NULL AS BIGINT), b)",
                 multi_field_rce(np_, ny, [[None] * len(np_), nb]),
                 "mn: a field that is all NULL" + (" (one group)" if NULL_FIELD_RULE == "group" else " (every row skipped: NULL)"),
                 "mn") if NULL_FIELD_RULE == "group" else
               exact("SELECT multi_field_rce(p, y, CAST(NULL AS BIGINT), b) FROM mn", "R", [[None]],
                     "mn: a field that is all NULL: every row skipped"))

    # ---- GROUP BY
    grp = []
    for call, fields, eps in (("multi_field_rce(p, y, a, b)", (a, b), 0.01),
                              ("multi_field_rce(p, y, a, b, c, 0.1)", (a, b, cc), 0.1)):
        vals = {}
        for par in (0, 1):
            ix = [i for i in range(len(M_ROWS)) if ids[i] % 2 == par]
            vals[par] = multi_field_rce([p[i] for i in ix], [y[i] for i in ix], [[f[i] for i in ix] for f in fields], eps)
        grp.append(group_block(call, "m", "id % 2", vals, f"GROUP BY id % 2, {call} per group"))
    vals = {}
    for g in (1, 2, 3):
        ix = [i for i in range(len(M_ROWS)) if a[i] == g]
        vals[g] = multi_field_rce([p[i] for i in ix], [y[i] for i in ix], [[b[i] for i in ix], [cc[i] for i in ix]])
    grp.append(group_block("multi_field_rce(p, y, b, c)", "m", "a", vals, "GROUP BY a, fields b and c"))
    m3 = [i for i in range(len(M_ROWS)) if ids[i] % 3 != 0]
    grp.append(c("multi_field_rce(p, y, a, b) FILTER (WHERE id % 3 <> 0)",
                 multi_field_rce([p[i] for i in m3], [y[i] for i in m3], [[a[i] for i in m3], [b[i] for i in m3]]),
                 "FILTER: ids not divisible by 3", "m"))

    # ---- 100000 rows
    bi, bp, by = big_table()
    f7, f13, f5s = list(bi % 7), list(bi % 13), [str(x) for x in bi % 5]
    bp_l, by_l = list(bp), list(by)
    r7, r13 = field_rce(bp_l, by_l, f7), field_rce(bp_l, by_l, f13)
    big = [c("multi_field_rce(p, y, i % 7, i % 13)", multi_field_rce(bp_l, by_l, [f7, f13]),
             f"big: 100000 rows, fields i % 7 and i % 13: (field_rce {fmt(r7)} + {fmt(r13)}) / 2", "big"),
           c("multi_field_rce(p, y, i % 7, i % 13, 0.05)", multi_field_rce(bp_l, by_l, [f7, f13], 0.05), "big: eps 0.05", "big"),
           c("multi_field_rce(p, y, i % 7, i % 13, CAST(i % 5 AS VARCHAR))", multi_field_rce(bp_l, by_l, [f7, f13, f5s]),
             "big: 3 fields, the third Utf8", "big")]

    # ---- mvce on kv
    kp, ky, kk, ks, kid = col(KV_ROWS, 1), col(KV_ROWS, 2), col(KV_ROWS, 3), col(KV_ROWS, 4), col(KV_ROWS, 0)
    gap = abs(math.fsum(yy - pp for pp, yy in zip(kp, ky))) / len(kp)
    mv = [c("mvce(p, y, k)", mvce(kp, ky, kk), "kv: Int64 keys (0, 1, -1, 42, -42, i64 min/max, ...), 15 bins, 10 rounds", "kv"),
          c("mvce(p, y, k, 15, 10)", mvce(kp, ky, kk), "the defaults spelled out", "kv"),
          c("mvce(p, y, k, 4, 3)", mvce(kp, ky, kk, 4, 3), "kv: 4 bins, 3 rounds", "kv"),
          c("mvce(p, y, k, 7)", mvce(kp, ky, kk, 7), "kv: 7 bins, default 10 rounds", "kv"),
          c("mvce(p, y, k, 1, 1)", gap, "one bin, one round: |sum(y - p)| / n", "kv"),
          c("mvce(p, y, k, 1, 5)", gap, "one bin, five rounds: the same cell five times", "kv"),
          c("mvce(p, y, s)", mvce(kp, ky, ks), "kv: Utf8 keys ('site7', '', 'naïve', ...), FNV-1a 64", "kv"),
          c("mvce(p, y, s, 4, 3)", mvce(kp, ky, ks, 4, 3), "kv: Utf8 keys, 4 bins, 3 rounds", "kv"),
          c("mvce(p, y, s, 100, 2)", mvce(kp, ky, ks, 100, 2), "kv: Utf8 keys, 100 bins, 2 rounds", "kv"),
          c("mvce(p, y, k * 0)", mvce(kp, ky, [0] * len(kp)), "one key (0) for every row: |sum(y - p)| / n", "kv"),
          c("mvce(p, y = 1, k, 4, 3)", mvce(kp, ky, kk, 4, 3), "boolean label", "kv")]
    vals = {}
    for par in (0, 1):
        ix = [i for i in range(len(KV_ROWS)) if kid[i] % 2 == par]
        vals[par] = mvce([kp[i] for i in ix], [ky[i] for i in ix], [kk[i] for i in ix], 4, 3)
    mv.append(group_block("mvce(p, y, k, 4, 3)", "kv", "id % 2", vals, "GROUP BY id % 2, mvce(p, y, k, 4, 3) per group"))
    mv.append(exact("SELECT mvce(p, y, k), mvce(p, y, s, 4, 3) FROM kv WHERE id > 100", "RR", [[None, None]], "no rows: NULL"))
    nv = [(0.5, 1, 3), (None, 1, 4), (0.2, None, 5), (0.25, 0, 3), (0.75, 1, 4)]
    vals_sql = "(" + "), (".join(", ".join(sql_lit(x) for x in r) for r in nv) + ")"
    nvp, nvy, nvk = (list(x) for x in zip(*nv))
    mv.append(c("mvce(p, y, k, 4, 3)", mvce(nvp, nvy, nvk, 4, 3), "rows with a NULL p or y are skipped",
                f"(VALUES {vals_sql}) AS v(p, y, k)"))

    # hash probes: two rows (p 0, y 1) and (p 1, y 0) with keys k1, k2, T bins, R rounds: a round
    # where both share a bin gives one cell with gap 0, else two cells with 1, so
    # mvce = 2 * (#rounds apart) / (#rounds together + 2 * #rounds apart).
    probes = []
    for k1, k2, t, r in ((0, 42, 15, 10), (0, 42, 3, 10), (1, -1, 2, 10), (0, 1, 2, 10), ("site7", "", 15, 10),
                         ("site7", "", 3, 10), (42, -1, 4, 10), ("site7", "naïve", 5, 10)):
        together = [rr for rr in range(r) if h(key_u64(k1), rr) % t == h(key_u64(k2), rr) % t]
        v = mvce([0.0, 1.0], [1.0, 0.0], [k1, k2], t, r)
        assert abs(v - 2 * (r - len(together)) / (len(together) + 2 * (r - len(together)))) < 1e-15
        probes.append(c(f"mvce(p, y, k, {t}, {r})", v,
                        f"keys {sql_lit(k1)} and {sql_lit(k2)} share a bin (mod {t}) "
                        + (f"in rounds {together}" if together else "in no round"),
                        f"(VALUES (0.0, 1, {sql_lit(k1)}), (1.0, 0, {sql_lit(k2)})) AS v(p, y, k)"))

    # ---- mvce, 100000 rows
    kb = (bi % 1000).astype(np.uint64)  # non-negative: two's complement = the value
    kbs = np.array([fnv1a64(str(x)) for x in range(1000)], dtype=np.uint64)[bi % 1000]
    bigm = [c("mvce(p, y, i % 1000)", mvce_np(bp, by, kb), "big: key i % 1000, 15 bins, 10 rounds", "big"),
            c("mvce(p, y, i % 1000, 4, 3)", mvce_np(bp, by, kb, 4, 3), "big: 4 bins, 3 rounds", "big"),
            c("mvce(p, y, CAST(i % 1000 AS VARCHAR), 15, 10)", mvce_np(bp, by, kbs), "big: the key as text", "big")]
    # cross-check the vectorised version against the plain one on the first 3000 rows
    assert abs(mvce_np(bp[:3000], by[:3000], kb[:3000], 4, 3) - mvce(list(bp[:3000]), list(by[:3000]),
                                                                       [int(x) for x in kb[:3000]], 4, 3)) < 1e-15

    # ---- partitions: m and kv in 4 batches, 4 partitions
    part = ["statement ok\nSET datafusion.execution.target_partitions = 4\n",
            "statement ok\nSET datafusion.execution.batch_size = 3\n",
            "statement ok\nCREATE TABLE mp AS SELECT * FROM m WHERE id <= 4\n\n"
            + "\n".join(f"statement ok\nINSERT INTO mp SELECT * FROM m WHERE id > {lo} AND id <= {lo + 4}\n"
                        for lo in (4, 8, 12)),
            "statement ok\nCREATE TABLE kvp AS SELECT * FROM kv WHERE id <= 4\n\n"
            + "\n".join(f"statement ok\nINSERT INTO kvp SELECT * FROM kv WHERE id > {lo} AND id <= {lo + 4}\n"
                        for lo in (4, 8, 12)),
            c("multi_field_rce(p, y, a, b, c)", multi_field_rce(p, y, [a, b, cc]), "mp: 4 batches, 4 partitions", "mp"),
            c("multi_field_rce(p, y, a, b, 0.1)", multi_field_rce(p, y, [a, b], 0.1), "mp, eps 0.1", "mp"),
            c("mvce(p, y, k)", mvce(kp, ky, kk), "kvp: 4 batches, 4 partitions", "kvp"),
            c("mvce(p, y, s, 4, 3)", mvce(kp, ky, ks, 4, 3), "kvp, Utf8 keys, 4 bins, 3 rounds", "kvp")]
    vals = {}
    for par in (0, 1):
        ix = [i for i in range(len(M_ROWS)) if ids[i] % 2 == par]
        vals[par] = multi_field_rce([p[i] for i in ix], [y[i] for i in ix], [[a[i] for i in ix], [b[i] for i in ix]])
    part.append(group_block("multi_field_rce(p, y, a, b)", "mp", "id % 2", vals, "GROUP BY id % 2 over 4 partitions"))

    return [("tables", tables), ("multi_field_rce", mf), ("empty", empty), ("NULLs", nul), ("GROUP BY / FILTER", grp),
            ("100000 rows", big), ("mvce", mv), ("mvce hash probes", probes), ("mvce, 100000 rows", bigm),
            ("partitions", part)]


def hash_vectors():
    """Comment lines: key, k (u64), r, h(k, r), h mod 15, h mod 4."""
    out = []
    for key in (0, 1, -1, 42, "site7", ""):
        k = key_u64(key)
        for r in (0, 1, 9):
            hv = h(k, r)
            out.append(f"#   {sql_lit(key):>8} k=0x{k:016x} r={r} h=0x{hv:016x} h%15={hv % 15:>2} h%4={hv % 4}")
    return out


HEADER = """# multi_field_rce, mvce.
#
# Expected values come from tests/slt/gen/field_metrics.py (Python + numpy, never calibsql):
# `python3 tests/slt/gen/field_metrics.py > tests/slt/multi_field.slt` writes this file, `--check`
# asserts it is unchanged. Floats are compared to 1e-12 (1e-11 / 1e-10 for values above 1 / 10).
#
# multi_field_rce(p, y, f1, ..., fK [, eps]) = mean over k of field_rce(p, y, fk, eps), eps a
#   trailing literal (default 0.01); a row with a NULL p or y is skipped, a NULL field value is
#   that field's NULL group (as in field_rce).
# mvce(p, y, key [, n_bins = 15 [, rounds = 10]]): round r puts a row in bin h(k, r) mod n_bins;
#   mvce = mean over the non-empty (round, bin) cells of |sum (y - p)| / rows in the cell.
#   k: integer key as 64-bit two's complement, text key FNV-1a 64 of its UTF-8 bytes;
#   h(k, r) = splitmix64_finaliser(k ^ (r * 0x9E3779B97F4A7C15)).
# Hash test vectors:
"""


def render():
    out = [HEADER + "\n".join(hash_vectors()) + "\n#\n# Tables: m (16 rows, fields a BIGINT, b VARCHAR, c BIGINT), "
           "mn (NULLs), kv (14 rows, keys k BIGINT, s VARCHAR),\n# big (100000 rows from generate_series), "
           "mp / kvp (m / kv in 4 batches).\n"]
    bar = "#" * 76
    for title, blocks in sections():
        out.append(f"{bar}\n# {title}\n{bar}\n")
        out.extend(blocks)
    return "\n".join(out)


def verify_field():
    """Recompute the unweighted field_rce expectations of tests/slt/field.slt with field_rce()."""
    text = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "field.slt")).read()
    p, y, f, ids = col(ROWS, 1), col(ROWS, 2), col(ROWS, 4), col(ROWS, 0)
    tp, ty, tf = col(NULL_ROWS, 1), col(NULL_ROWS, 2), col(NULL_ROWS, 4)

    def sub(mask):
        ix = [i for i in range(len(ROWS)) if mask(i)]
        return [p[i] for i in ix], [y[i] for i in ix], [f[i] for i in ix]

    f32 = [float(np.float32(x)) for x in p]
    cases = [  # (regex on the SELECT line, value)
        (r"abs\(field_rce\(0\.3, 1, 'a'\) - ", field_rce([0.3], [1], ["a"])),
        (r"abs\(field_rce\(0\.3, 0, 'a', 0\.5\) - ", field_rce([0.3], [0], ["a"], 0.5)),
        (r"abs\(field_rce\(p, y, CAST\(NULL AS INT\)\) - ", field_rce(p, y, [None] * len(p))),
        (r"abs\(field_rce\(p, y, f\) - (\S+)\) < \S+ FROM tn$", field_rce(tp, ty, tf)),
        (r"abs\(field_rce\(p, y, f\) - (\S+)\) < \S+ FROM t WHERE p >= 0\.5", field_rce(*sub(lambda i: p[i] >= 0.5))),
        (r"abs\(field_rce\(p, y, f\) - (\S+)\) < \S+ FROM t$", field_rce(p, y, f)),
        (r"abs\(field_rce\(p, y, f, 0\.01\) - ", field_rce(p, y, f)),
        (r"abs\(field_rce\(p, y, f, 0\.0\) - ", field_rce(p, y, f, 0.0)),
        (r"abs\(field_rce\(p, y, f, 0\.5\) - ", field_rce(p, y, f, 0.5)),
        (r"abs\(field_rce\(p, y, id % 4, 0\.1\) - ", field_rce(p, y, [x % 4 for x in ids], 0.1)),
        (r"abs\(\(field_rce\(p, y, f\) \+ field_rce\(p, y, id % 3\)\) / 2 - ",
         multi_field_rce(p, y, [f, [x % 3 for x in ids]])),
        (r"abs\(field_rce\(CAST\(p AS REAL\), CAST\(y AS DOUBLE\), f\) - ", field_rce(f32, y, f)),
    ]
    bad = 0
    for pat, mine in cases:
        lines = [ln for ln in text.splitlines() if re.search(pat, ln)]
        assert len(lines) == 1, (pat, lines)
        m = re.search(r" - (\S+)\) < (\S+)", lines[0])
        exp, tol = float(m.group(1)), float(m.group(2))
        ok = abs(mine - exp) < tol
        bad += not ok
        print(f"{'ok ' if ok else 'BAD'} {fmt(mine):>22} vs {m.group(1):>22} (diff {abs(mine - exp):.1e}, tol {m.group(2)}): {lines[0][:90]}")
    # GROUP BY id % 2 (unweighted field_rce)
    ln = [x for x in text.splitlines() if "abs(field_rce(p, y, f) - CASE id % 2" in x][0]
    m = re.search(r"WHEN 0 THEN (\S+) ELSE (\S+) END", ln)
    for par, s in ((0, m.group(1)), (1, m.group(2))):
        mine = field_rce(*sub(lambda i: ids[i] % 2 == par))
        ok = abs(mine - float(s)) < 1e-12
        bad += not ok
        print(f"{'ok ' if ok else 'BAD'} {fmt(mine):>22} vs {s:>22} GROUP BY id % 2 = {par}")
    # the no-rows block
    assert field_rce([], [], []) is None
    print("ok  NULL for no rows")
    print("field.slt unweighted field_rce:", "all agree" if not bad else f"{bad} DISAGREE")
    return bad


if __name__ == "__main__":
    hash_self_test()
    if "--verify-field" in sys.argv:
        sys.exit(1 if verify_field() else 0)
    text = render()
    if "--check" in sys.argv:
        # the whole file, up to float noise (common.CHECK_REL; today it is identical)
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", SLT)) as fh:
            msg, _ = compare(text, fh.read(), CHECK_REL, CHECK_ABS, what=SLT)
        print(msg or f"{SLT}: unchanged")
        sys.exit(1 if msg else 0)
    sys.stdout.write(text)
