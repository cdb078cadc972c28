"""Expected values of tests/slt/cbpe.slt: cbpe, the performance calibrated probabilities imply
without labels (NannyML's confidence-based performance estimation).

The formulas are NannyML 0.13.1's (nannyml/performance_estimation/confidence_based/metrics.py),
written here in numpy: with y_pred = p >= threshold,
  TP = sum(p, y_pred), FP = sum(1 - p, y_pred), FN = sum(p, not y_pred), TN = sum(1 - p, not y_pred)
  accuracy = (TP + TN) / n, precision = TP / (TP + FP), recall = TP / (TP + FN),
  f1 = TP / (TP + (FP + FN) / 2)
and `estimate_roc_auc`: the trapezoids under the curve of the cumulative sums of p (true
positives) and 1 - p (false positives) over the rows in descending p. Two differences, both
NannyML's shortcuts: it rounds those cumulative sums to 5 decimals (here they are not rounded;
on this file's data NannyML's own functions, run once in a venv of their own, agree with these
numbers to 6e-8 and the other fields to 3e-16), and it returns 0 where a denominator is 0 (cbpe returns NULL). Weighted, each
row counts w times (w * p, w * (1 - p), n = sum of w).

The AUC is checked against scikit-learn 1.9's roc_auc_score of every row twice, once as a
positive with sample_weight w * p and once as a negative with w * (1 - p) (the same number by a
different computation: its ROC curve of the weighted labels).

Data: the fixture table `t` (ties, 0 and 1, binary-fraction weights), and `lr`: scikit-learn
make_classification(n_samples=400) scored by a LogisticRegression fitted on half of it
(predict_proba), with a group column g = id mod 3.

    python3 tests/slt/gen/cbpe.py            # print the blocks
    python3 tests/slt/gen/cbpe.py --check    # assert every block appears verbatim in cbpe.slt
"""

import numpy as np

from common import ROWS, close, cols, exact, fmt, standard_tables
from common import main as write

SLT = "cbpe.slt"
FIELDS = ["roc_auc", "accuracy", "precision", "recall", "f1"]


def estimate(p, threshold=0.5, w=None):
    """NannyML's CBPE estimates of probabilities p (weights w), as a dict; None where a
    denominator is 0, and None for all when no row is usable."""
    p = np.asarray(p, dtype=np.float64)
    w = np.ones_like(p) if w is None else np.asarray(w, dtype=np.float64)
    if len(p) == 0 or w.sum() == 0:
        return None
    pos, neg = w * p, w * (1 - p)
    above = p >= threshold
    tp, fp = pos[above].sum(), neg[above].sum()
    fn, tn = pos[~above].sum(), neg[~above].sum()
    ratio = lambda a, b: a / b if b > 0 else None  # noqa: E731
    # estimate_roc_auc: descending p, cumulative expected positives and negatives, trapezoids.
    # Equal p are one step (their points are on one line, so the area is the same).
    order = np.argsort(-p, kind="stable")
    values, starts = np.unique(-p[order], return_index=True)
    tps = np.r_[0, np.cumsum(np.add.reduceat(pos[order], starts))]
    fps = np.r_[0, np.cumsum(np.add.reduceat(neg[order], starts))]
    auc = None
    if tps[-1] > 0 and fps[-1] > 0:
        tpr, fpr = tps / tps[-1], fps / fps[-1]
        auc = float(np.sum((fpr[1:] - fpr[:-1]) * (tpr[1:] + tpr[:-1]) / 2))
        check_auc(p, w, auc)
    return {
        "roc_auc": auc,
        "accuracy": ratio(tp + tn, w.sum()),
        "precision": ratio(tp, tp + fp),
        "recall": ratio(tp, tp + fn),
        "f1": ratio(tp, tp + (fp + fn) / 2),
    }


def check_auc(p, w, auc):
    """scikit-learn's weighted ROC AUC of each row as a positive (w * p) and a negative
    (w * (1 - p)) is the same number."""
    from sklearn.metrics import roc_auc_score

    y = np.r_[np.ones(len(p)), np.zeros(len(p))]
    sk = roc_auc_score(y, np.r_[p, p], sample_weight=np.r_[w * p, w * (1 - p)])
    assert abs(sk - auc) < 1e-12, (sk, auc)


def lr_data():
    from sklearn.datasets import make_classification
    from sklearn.linear_model import LogisticRegression

    X, y = make_classification(n_samples=400, n_features=6, n_informative=3, random_state=11)
    model = LogisticRegression(max_iter=1000).fit(X[:200], y[:200])
    p = model.predict_proba(X)[:, 1]
    return [float(v) for v in p]


def lr_table(p):
    rows = [f"  ({i}, {v!r}, {i % 3})" for i, v in enumerate(p)]
    return "statement ok\nCREATE TABLE lr(id INT, p DOUBLE, g INT) AS VALUES\n" + ",\n".join(rows) + "\n"


def blocks_of(call, est, src, what):
    """One `close` block per field of `call`'s struct (or one block of NULLs)."""
    out = []
    for f in FIELDS:
        v = est[f]
        if v is None:
            out.append(exact(f"SELECT ({call})['{f}'] FROM {src}", "R", [[None]], f"{what}: {f} NULL"))
        else:
            out.append(close(f"({call})['{f}']", v, src=src, comment=f"{what}: {f} = {fmt(v)}"))
    return out


def sections():
    out = {"tables": standard_tables()[:1]}
    p, w = cols(ROWS, "p", "w")
    lr = lr_data()
    out["tables"].append(lr_table(lr))

    out["the fixture table t"] = (
        blocks_of("cbpe(p)", estimate(p), "t", "cbpe(p) on t, threshold 0.5 (NannyML's formulas)")
        + blocks_of("cbpe(p, 0.3)", estimate(p, 0.3), "t", "threshold 0.3")
        + blocks_of("cbpe(p, 0.5, w)", estimate(p, 0.5, w), "t", "weighted by w")
        + blocks_of("cbpe(p, 1.0)", estimate(p, 1.0), "t", "threshold 1: only p = 1 is predicted positive")
    )

    lr_blocks = blocks_of("cbpe(p)", estimate(lr), "lr",
                          "a LogisticRegression's probabilities, 400 rows")
    g = np.arange(len(lr)) % 3
    rows = []
    for k in range(3):
        e = estimate(np.array(lr)[g == k], 0.4)
        rows.append([k] + [round(e[f], 12) for f in FIELDS])
    lr_blocks.append(exact(
        "SELECT g, " + ", ".join(f"round(e['{f}'], 12)" for f in FIELDS)
        + " FROM (SELECT g, cbpe(p, 0.4) AS e FROM lr GROUP BY g) ORDER BY g",
        "IRRRRR", rows, "GROUP BY g (id mod 3), threshold 0.4, rounded to 12 digits"))
    out["a model's probabilities, grouped"] = lr_blocks

    edges = []
    edges += blocks_of("cbpe(p)", estimate([0.0, 0.0, 0.2]), "(VALUES (0.0), (0.0), (0.2)) AS v(p)",
                       "no row predicted positive: precision NULL")
    edges += blocks_of("cbpe(p)", estimate([0.0, 0.0]), "(VALUES (0.0), (0.0)) AS v(p)",
                       "every p 0: no expected positive, so no AUC and no recall")
    edges.append(exact("SELECT cbpe(p) IS NULL FROM t WHERE id < 0", "T", [[True]], "no rows: NULL"))
    keep = [i for i in range(len(p)) if i % 4 != 0]
    edges += blocks_of("cbpe(CASE WHEN id % 4 = 1 THEN NULL ELSE p END)", estimate(p[keep]), "t",
                       "rows with a NULL p are skipped (every fourth)")
    edges += blocks_of("cbpe(p) FILTER (WHERE id % 4 <> 1)", estimate(p[keep]), "t",
                       "FILTER (WHERE ...) picks the same rows")
    out["edges, NULLs and filters"] = edges
    return list(out.items())


if __name__ == "__main__":
    write(sections(), SLT)
