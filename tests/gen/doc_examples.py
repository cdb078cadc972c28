"""The documented examples whose values a reference library computes, derived with that library.

Each function's `#[user_doc]` (udfs/src/**, copied into docs/functions.md, which
tests/sql/functions_doc.rs keeps in step) shows one SQL example and the table it prints;
tests/sql/docs_examples.rs runs every example through calibsql and compares the table. Most
examples are small enough to check on paper (ece of four rows, sigmoid(0), ...). The ones below
are not, so their values come from the library that defines the function, never from calibsql:

  smooth_ece(p, y, 0.1)  relplot 1.0.3 relplot.smECE_sigma(p, y, 0.1)
  ece_debiased(p, y)     uncertainty-calibration 0.1.4 calibration.get_calibration_error(p, y)
  normalized_entropy     1 - scikit-learn d2_log_loss_score(y, p)
  logloss(p, y)          scikit-learn log_loss(y, p)
  brier(p, y)            scikit-learn brier_score_loss(y, p)
  auc(p, y)              scikit-learn roc_auc_score(y, p)
  wilson_interval        statsmodels proportion_confint(50, 100, alpha=2*norm.sf(1.96), method='wilson')

The rows each call sees are the example's VALUES, written out below; --check asserts that the
SQL in docs/functions.md is exactly the SQL below (so the data are the same) and that each
table cell is the library's value rounded as the SQL rounds it (DataFusion's round(x, d),
common.sql_round) and printed as arrow prints a Float64 (common.fmt).

    python3 tests/gen/doc_examples.py            # print each example, the call and its value
    python3 tests/gen/doc_examples.py --check    # the documented tables are these values
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "slt", "gen"))

import numpy as np  # noqa: E402

from common import fmt, sql_round  # noqa: E402

DOC = os.path.join(ROOT, "docs", "functions.md")


def smooth_ece():
    import relplot

    p, y = np.array([0.1, 0.3, 0.6, 0.9]), np.array([0, 1, 0, 1])
    return {"smece": ("relplot.smECE_sigma(p, y, 0.1)", float(relplot.smECE_sigma(p, y, 0.1)), 6)}


def ece_debiased():
    import calibration

    p = np.array([0.2] * 5 + [0.7] * 4)
    y = np.array([1, 1, 0, 1, 0, 1, 1, 1, 1])
    return {"ece": ("calibration.get_calibration_error(p, y)", float(calibration.get_calibration_error(p, y)), 6)}


def normalized_entropy():
    from sklearn.metrics import d2_log_loss_score

    p, y = np.array([0.2, 0.6, 0.3, 0.9]), np.array([0, 1, 0, 1])
    return {"ne": ("1 - sklearn.metrics.d2_log_loss_score(y, p)", float(1 - d2_log_loss_score(y, p)), 6)}


def logloss():
    from sklearn.metrics import log_loss

    p, y = np.array([0.5, 0.5]), np.array([1, 0])
    return {"ll": ("sklearn.metrics.log_loss(y, p)", float(log_loss(y, p)), 6)}


def brier():
    from sklearn.metrics import brier_score_loss

    p, y = np.array([0.5, 0.5]), np.array([1, 0])
    return {"brier": ("sklearn.metrics.brier_score_loss(y, p)", float(brier_score_loss(y, p)), None)}


def auc():
    from sklearn.metrics import roc_auc_score

    p, y = np.array([0.1, 0.4, 0.4, 0.8]), np.array([0, 1, 0, 1])
    return {"auc": ("sklearn.metrics.roc_auc_score(y, p)", float(roc_auc_score(y, p)), None)}


def wilson_interval():
    from scipy.stats import norm
    from statsmodels.stats.proportion import proportion_confint

    call = "proportion_confint(50, 100, alpha=2 * norm.sf(1.96), method='wilson')"
    lo, hi = proportion_confint(50, 100, alpha=2 * norm.sf(1.96), method="wilson")
    return {"lower": (call + "[0]", float(lo), 4), "upper": (call + "[1]", float(hi), 4)}


# function -> (the documented SQL, the reference)
EXAMPLES = {
    "smooth_ece": (
        "SELECT round(smooth_ece(p, y, 0.1), 6) AS smece FROM (VALUES (0.1, 0), (0.3, 1), (0.6, 0), (0.9, 1)) AS t(p, y);",
        smooth_ece,
    ),
    "ece_debiased": (
        "SELECT round(ece_debiased(p, y), 6) AS ece FROM (VALUES (0.2, 1), (0.2, 1), (0.2, 0), (0.2, 1), (0.2, 0), "
        "(0.7, 1), (0.7, 1), (0.7, 1), (0.7, 1)) AS t(p, y);",
        ece_debiased,
    ),
    "normalized_entropy": (
        "SELECT round(normalized_entropy(p, y), 6) AS ne FROM (VALUES (0.2, 0), (0.6, 1), (0.3, 0), (0.9, 1)) AS t(p, y);",
        normalized_entropy,
    ),
    "logloss": ("SELECT round(logloss(p, y), 6) AS ll FROM (VALUES (0.5, 1), (0.5, 0)) AS t(p, y);", logloss),
    "brier": ("SELECT brier(p, y) AS brier FROM (VALUES (0.5, 1), (0.5, 0)) AS t(p, y);", brier),
    "auc": ("SELECT auc(p, y) AS auc FROM (VALUES (0.1, 0), (0.4, 1), (0.4, 0), (0.8, 1)) AS t(p, y);", auc),
    "wilson_interval": (
        "SELECT round(w['lower'], 4) AS lower, round(w['upper'], 4) AS upper "
        "FROM (SELECT wilson_interval(0.5, 100, 1.96) AS w);",
        wilson_interval,
    ),
}


def documented(text, name):
    """(sql, {column: cell}) of `name`'s example in docs/functions.md (one row tables only)."""
    head = f"### `{name}`\n"
    start = text.index(head)
    block = text[text.index("```sql\n", start) + 7:]
    block = block[:block.index("```")]
    lines = block.strip().splitlines()
    sql = " ".join(line.strip().removeprefix("> ") for line in lines if not line.startswith(("+", "|")))
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in lines if line.startswith("|")]
    assert len(rows) == 2, (name, rows)
    return sql, dict(zip(rows[0], rows[1]))


def main():
    check = "--check" in sys.argv
    with open(DOC) as fh:
        text = fh.read()
    bad = 0
    for name, (sql, reference) in EXAMPLES.items():
        doc_sql, cells = documented(text, name)
        if check and doc_sql != sql:
            print(f"DIFFERS: {name}: docs/functions.md's example is\n  {doc_sql}\nthis script derives\n  {sql}")
            bad += 1
            continue
        for col, (call, value, digits) in reference().items():
            cell = fmt(value if digits is None else sql_round(value, digits))
            ok = cells.get(col) == cell
            bad += check and not ok
            print(f"{'ok  ' if ok else 'BAD '}{name}: {col} = {call} = {value!r} -> prints {cell}; "
                  f"docs/functions.md shows {cells.get(col)}")
    if check:
        print(f"docs/functions.md: {len(EXAMPLES) - bad}/{len(EXAMPLES)} documented examples derived" if not bad
              else f"docs/functions.md: {bad} example(s) differ from their reference")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
