"""Shared test data and helpers for the scripts that compute the expected values of tests/slt/*.slt.

The reference implementations here follow /work/shared/SPEC.md and docs/SEMANTICS.md directly
with numpy (and are cross-checked against scikit-learn / statsmodels where those have the
metric); they never call calibsql.

Each family script (binned.py, logloss.py, ...) builds the sqllogictest blocks of its .slt file
(tables, then one section per case kind), each with the expected value and how it was computed:
    python3 tests/slt/gen/binned.py            # print the blocks, section by section
    python3 tests/slt/gen/binned.py --check    # assert every block appears verbatim in binned.slt
The error cases at the top of each .slt file are written by hand (regexes on the messages).
To change the data or a case: edit the script, run it, paste the changed blocks into the .slt
file in place of the old ones, and run --check and `cargo test --test sql slt::`.
--check accepts a number that differs from the file's in its last digits only (CHECK_REL below).
Needs the versions of tests/gen/requirements.txt; `bash tests/gen/check.sh` makes that venv and
runs every generator's --check, as CI does.
"""

import math
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "gen"))
from textcheck import compare, find_block  # noqa: E402

# The fixture table `t` of every metric file:
#   id, p (prediction), y (label), w (weight), f (field, NULL = None), q (propensity)
# p has ties with different labels (0.05, 0.2, 0.4, 0.5, 0.6) and sits on bin edges
# (0.0, 0.2, 0.4, 0.6, 0.8, 1.0); weights are binary fractions so weighted sums are exact.
ROWS = [
    (1, 0.0, 0, 1.0, "a", 0.5),
    (2, 0.02, 0, 2.0, "b", 0.05),
    (3, 0.05, 0, 0.5, "c", 1.0),
    (4, 0.05, 1, 1.0, "a", 0.2),
    (5, 0.1, 0, 1.5, None, 0.8),
    (6, 0.12, 0, 1.0, "b", 0.3),
    (7, 0.2, 0, 2.0, "a", 0.02),
    (8, 0.2, 1, 0.5, "c", 0.6),
    (9, 0.2, 0, 1.0, "b", 0.1),
    (10, 0.25, 1, 3.0, "a", 0.4),
    (11, 0.3, 0, 1.0, None, 1.0),
    (12, 0.33, 0, 0.25, "b", 0.15),
    (13, 0.4, 1, 1.0, "c", 0.5),
    (14, 0.4, 0, 2.0, "a", 0.05),
    (15, 0.45, 1, 1.0, "b", 0.9),
    (16, 0.5, 0, 0.5, "a", 0.25),
    (17, 0.5, 1, 1.0, "c", 0.08),
    (18, 0.55, 1, 1.5, None, 0.7),
    (19, 0.6, 0, 1.0, "b", 0.35),
    (20, 0.6, 1, 2.0, "a", 1.0),
    (21, 0.65, 1, 1.0, "c", 0.12),
    (22, 0.7, 0, 0.5, "b", 0.45),
    (23, 0.72, 1, 1.0, "a", 0.6),
    (24, 0.8, 1, 3.0, None, 0.03),
    (25, 0.8, 1, 1.0, "c", 0.2),
    (26, 0.85, 0, 1.0, "b", 0.95),
    (27, 0.9, 1, 2.0, "a", 0.5),
    (28, 0.9, 1, 0.25, "c", 0.1),
    (29, 0.95, 0, 1.0, "b", 0.65),
    (30, 0.97, 1, 1.5, "a", 0.3),
    (31, 0.99, 1, 1.0, "c", 0.85),
    (32, 1.0, 1, 0.5, None, 0.4),
]

# The table `tn` (mixed NULLs): same columns, NULL = None.
NULL_ROWS = [
    (1, 0.3, 1, 1.0, "a", 0.5),
    (2, None, 1, 1.0, "a", 0.5),
    (3, 0.6, None, 2.0, "b", 0.5),
    (4, 0.7, 0, None, "b", 0.5),
    (5, 0.2, 0, 1.0, None, None),
    (6, 0.9, 1, 2.0, None, 0.25),
    (7, 0.45, 0, 0.5, "a", 0.1),
]

EPS = float(np.finfo(np.float64).eps)  # 2.220446049250313e-16


def sql_lit(v):
    if v is None:
        return "NULL"
    if isinstance(v, str):
        return "'" + v.replace("'", "''") + "'"
    if isinstance(v, float):
        return repr(v)
    return str(v)


def create_table(name, rows):
    """The CREATE TABLE statement for `rows` (columns id, p, y, w, f, q)."""
    lines = [
        "statement ok",
        f"CREATE TABLE {name}(id INT, p DOUBLE, y INT, w DOUBLE, f VARCHAR, q DOUBLE) AS VALUES",
    ]
    body = []
    for r in rows:
        body.append("  (" + ", ".join(sql_lit(v) for v in r) + ")")
    lines.append(",\n".join(body))
    return "\n".join(lines) + "\n"


def cols(rows, *names):
    """Columns of `rows` (as float arrays except f), keeping rows where all `names` other than f
    are non-NULL (a NULL field value is data: it forms its own group)."""
    idx = {"id": 0, "p": 1, "y": 2, "w": 3, "f": 4, "q": 5}
    keep = [r for r in rows if all(r[idx[n]] is not None for n in names if n != "f")]
    out = []
    for n in names:
        vals = [r[idx[n]] for r in keep]
        out.append(vals if n == "f" else np.array(vals, dtype=np.float64))
    return out


def sql_round(x, d):
    """DataFusion's round(x, d) for Float64: (x * 10^d).round() / 10^d, half away from zero."""
    if x is None:
        return None
    if math.isnan(x) or math.isinf(x):
        return x
    factor = 10.0**d
    v = x * factor
    fl = math.floor(v)
    frac = v - fl  # exact for |v| < 2^52
    if frac > 0.5 or (frac == 0.5 and v > 0):
        r = fl + 1
    elif frac == 0.5 and v < 0:
        r = fl
    else:
        r = fl
    return float(r) / factor


def fmt(x):
    """A float as the harness prints it (Rust {:?}: shortest round-trip; 1.0, 1e-20, inf, NaN)."""
    if x is None:
        return "NULL"
    if isinstance(x, (bool, np.bool_)):
        return "true" if x else "false"
    if isinstance(x, (int, np.integer)):
        return str(int(x))
    x = float(x)
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    r = repr(x)  # Python: shortest round-trip, e.g. 1e-05, 1e+16, 0.1
    if "e" in r:
        mant, exp = r.split("e")
        exp = int(exp)
        # Rust {:?} uses exponent form for |x| < 1e-5 or >= 1e16, and no '+'/leading zeros.
        return f"{mant}e{exp}"
    return r


def close(sql_expr, expected, tol=1e-12, comment=None, src=None):
    """A block asserting |sql_expr - expected| < tol (scaled up for |expected| > 1).

    `src` is the FROM clause (None: no FROM)."""
    # tolerance relative to the magnitude: tol * 10^ceil(log10(|expected|)) when |expected| > 1
    scale = 10.0 ** math.ceil(math.log10(abs(expected))) if abs(expected) > 1 else 1.0
    tol_s = fmt(float(f"{tol * scale:.0e}"))
    lines = []
    if comment:
        for c in comment.strip().split("\n"):
            lines.append("# " + c)
    lines.append("query T")
    from_ = f" FROM {src}" if src else ""
    lines.append(f"SELECT abs({sql_expr} - {fmt(expected)}) < {tol_s}{from_}")
    lines.append("----")
    lines.append("true")
    return "\n".join(lines) + "\n"


def exact(sql, types, rows, comment=None):
    """A block with exact expected rows (each a list of cells already formatted)."""
    lines = []
    if comment:
        for c in comment.strip().split("\n"):
            lines.append("# " + c)
    lines.append(f"query {types}")
    lines.append(sql)
    lines.append("----")
    for r in rows:
        lines.append(" ".join(fmt(c) if not isinstance(c, str) else c for c in r))
    return "\n".join(lines) + "\n"


# --check's tolerance for the numbers of a block (tests/gen/textcheck.py): the last digits of a
# sum over many rows or of a BLAS dot product differ between processors (AVX2 / AVX-512 kernels,
# observed <= 3e-14 relative); the .slt files compare to 1e-12 (scaled by the magnitude) or looser.
# A `close` block's number may differ more between processors when the value is a ratio of such
# sums (a DeLong z on a million rows: 1.3e-12 relative between two machines), and its test says
# how far it may go: such a block is also found when each number is within a thousandth of the
# test's own tolerance (the `< TOL` of its SQL), still far below what the test could notice.
CHECK_REL = 1e-13
CHECK_ABS = 1e-16
CLOSE_TOL = re.compile(r"^SELECT abs\(.*\) < (\S+)(?: FROM \S+)?$", re.M)


def check_abs(block):
    """The absolute part of --check's tolerance for `block` (see CHECK_REL)."""
    m = CLOSE_TOL.search(block)
    return max(CHECK_ABS, float(m.group(1)) / 1000) if m else CHECK_ABS


def main(sections, slt_name):
    """`sections`: list of (title, [block, ...]) in file order."""
    blocks = [b for _, bs in sections for b in bs]
    if "--check" in sys.argv:
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", slt_name)
        with open(path) as fh:
            text = fh.read()
        missing, noisy, worst = [], 0, 0.0
        for b in blocks:
            found, gap = find_block(b, text, CHECK_REL, check_abs(b))
            if not found:
                missing.append(b)
            elif b not in text:
                noisy, worst = noisy + 1, max(worst, gap)
        for b in missing:
            print("MISSING from", slt_name, ":\n" + b)
        print(f"{slt_name}: {len(blocks) - len(missing)}/{len(blocks)} generated blocks present"
              + (f" ({noisy} up to float noise, at most {worst:.2g} of the tolerance)" if noisy else ""))
        sys.exit(1 if missing else 0)
    for title, bs in sections:
        print(f"######## {title}\n")
        for b in bs:
            print(b)


def standard_tables():
    """CREATE statements of t, tn and tp (t's rows in four INSERTs, i.e. four batches)."""
    out = [create_table("t", ROWS), create_table("tn", NULL_ROWS)]
    tp = ["statement ok\nCREATE TABLE tp AS SELECT * FROM t WHERE id <= 8\n"]
    for lo, hi in ((8, 16), (16, 24), (24, 32)):
        tp.append(f"statement ok\nINSERT INTO tp SELECT * FROM t WHERE id > {lo} AND id <= {hi}\n")
    out.append("\n".join(tp))
    return out


GROUPS = ["a", "b", "c", None]


def group_mask(g):
    return np.array([r[4] == g for r in ROWS])


def group_block(call, values, comment, src="t", tol=1e-12):
    """GROUP BY f over `src`: one row per group (NULL last), true when |call - value| < tol.

    `values`: dict group -> expected value (keys 'a', 'b', 'c', None)."""
    comment = comment + "; per group: " + ", ".join(f"{g if g else 'NULL'}={fmt(values[g])}" for g in GROUPS)
    case = "CASE f " + " ".join(f"WHEN '{g}' THEN {fmt(values[g])}" for g in GROUPS if g is not None) + f" ELSE {fmt(values[None])} END"
    lines = ["# " + comment, "query TT",
             f"SELECT f, abs({call} - {case}) < {fmt(tol)} FROM {src} GROUP BY f ORDER BY f NULLS LAST", "----"]
    lines += [f"{g if g is not None else 'NULL'} true" for g in GROUPS]
    return "\n".join(lines) + "\n"


# The 1000-row table g, generated in SQL from integers and rebuilt here with the same arithmetic:
#   p = ((i * 37) % 101) / 100.0 (101 distinct values, many ties),
#   y = ((i * 37) % 101 + (i * 11) % 50 > 75), w = ((i % 4) + 1) / 2.0
G_TABLE = ("statement ok\nCREATE TABLE g AS SELECT value AS i, least(((value * 37) % 101) / 100.0, 1.0) AS p, "
           "CAST(((value * 37) % 101) + ((value * 11) % 50) > 75 AS INT) AS y, ((value % 4) + 1) / 2.0 AS w "
           "FROM generate_series(1, 1000)\n")


def g_table():
    i = np.arange(1, 1001)
    a = (i * 37) % 101
    p = np.minimum(a / 100.0, 1.0)
    y = ((a + (i * 11) % 50) > 75).astype(float)
    w = ((i % 4) + 1) / 2.0
    return i, p, y, w
