"""Expected values of tests/slt/top_label.slt: ece_top_label, mce_top_label and
reliability_top_label of a multiclass model, in every binning strategy, and ece_classwise.

Data: scikit-learn 1.9 make_classification(n_samples=240, n_classes=4, ...) and a
LogisticRegression's predict_proba (fitted on half the rows): table `mc` (id, probs, label, w, g),
plus rows whose largest probability is tied (the first class counts: numpy argmax, torch.max)
and one-hot rows (confidence 1.0, a bin edge).

Each row's confidence is max(probs) and it is correct when argmax(probs) == label; the values
are the binary strategies' numbers (strategies.py `values`: the tools themselves, asserted
equal to the reference rule) on (confidence, correct). The multiclass tools are checked
against them too:
  'torchmetrics'  torchmetrics 1.9 multiclass_calibration_error(probs, label, num_classes=4,
                  n_bins=M, norm='l1' | 'max') on float64 tensors, to 1e-7: its multiclass path
                  computes in float32 (its binary path, whose numbers these are, keeps float64)
  'kumar'         uncertainty-calibration 0.1.4 get_ece(probs, label, num_bins=M) (top-label)
Weighted and grouped values come from the reference rule (no tool takes weights).

auc(probs, label [, w]) on the list is scikit-learn 1.9 roc_auc_score(label, probs,
multi_class='ovr', average='macro' [, sample_weight=w]).

ece_classwise is the mean over classes k of the binary strategy's ece on (probs[:, k], label == k);
for 'kumar' it is checked against uncertainty-calibration 0.1.4
get_ece(probs, label, num_bins=M, mode='marginal') (Kumar et al.'s marginal error, p = 1).

    python3 tests/slt/gen/top_label.py            # print the blocks
    python3 tests/slt/gen/top_label.py --check    # assert every block appears verbatim in top_label.slt
"""

import math
import warnings

import numpy as np

from common import close, exact, fmt
from common import main as write
from strategies import STRATS, REL_SQL, rel_rows, values

SLT = "top_label.slt"
K = 4
warnings.filterwarnings("ignore")


def classifier():
    """The multiclass data set and model: make_classification's 240 rows of K classes and a
    LogisticRegression fitted on the first 120 (also multiclass_fits.py's)."""
    from sklearn.datasets import make_classification
    from sklearn.linear_model import LogisticRegression

    X, y = make_classification(n_samples=240, n_features=8, n_informative=5, n_redundant=1,
                               n_classes=K, n_clusters_per_class=1, random_state=7)
    return X, y, LogisticRegression(max_iter=1000).fit(X[:120], y[:120])


def data():
    X, y, model = classifier()
    probs = [list(map(float, r)) for r in model.predict_proba(X)]
    labels = [int(v) for v in y]
    # Ties for the largest probability (the first class counts) and one-hot rows.
    probs += [[0.4, 0.4, 0.2, 0.0], [0.25, 0.25, 0.25, 0.25], [0.0, 0.375, 0.375, 0.25],
              [1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0], [0.0, 1.0, 0.0, 0.0]]
    labels += [1, 0, 1, 0, 2, 1]
    n = len(probs)
    w = [[0.5, 1.0, 2.0, 1.5][i % 4] for i in range(n)]
    g = [i % 3 for i in range(n)]
    return probs, labels, w, g


def top_label(probs, labels):
    P = np.array(probs)
    conf = P.max(axis=1)
    correct = (P.argmax(axis=1) == np.array(labels)).astype(np.float64)
    return conf, correct


def table(probs, labels, w, g):
    rows = []
    for i, (p, k, wi, gi) in enumerate(zip(probs, labels, w, g), 1):
        rows.append(f"  ({i}, [{', '.join(repr(v) for v in p)}], {k}, {fmt(wi)}, {gi})")
    return ("statement ok\nCREATE TABLE mc(id INT, probs DOUBLE[], label INT, w DOUBLE, g INT) AS VALUES\n"
            + ",\n".join(rows) + "\n")


def check_tools(probs, labels, conf, correct):
    """The multiclass tools agree with the binary strategies on (confidence, correct)."""
    import torch
    from calibration import get_ece
    from torchmetrics.functional.classification import multiclass_calibration_error

    P = torch.tensor(np.array(probs), dtype=torch.float64)
    Y = torch.tensor(labels)
    # torchmetrics' multiclass path computes in float32 (`confidences.float()`,
    # `accuracies.float()`; its binary path keeps float64): checked to float32's precision.
    for M in (10, 15):
        ours = values(conf, correct, M, "torchmetrics")
        for metric, norm in (("ece", "l1"), ("mce", "max")):
            tm = float(multiclass_calibration_error(P, Y, num_classes=K, n_bins=M, norm=norm))
            assert abs(tm - ours[metric]) < 1e-7, (M, metric, tm, ours[metric])
        ku = float(get_ece(np.array(probs), np.array(labels), num_bins=M))
        assert abs(ku - values(conf, correct, M, "kumar")["ece"]) < 1e-14, (M, ku)


def sections():
    probs, labels, w, g = data()
    conf, correct = top_label(probs, labels)
    check_tools(probs, labels, conf, correct)
    W = np.array(w)
    G = np.array(g)
    out = {"tables": [table(probs, labels, w, g)]}

    blocks = []
    for M in (10, 15):
        for s in STRATS:
            v = values(conf, correct, M, s)
            for fn in ("ece", "mce"):
                blocks.append(close(f"{fn}_top_label(probs, label, {M}, '{s}')", v[fn], src="mc",
                                    comment=f"{fn}_top_label {s} M={M}: the binary tool's {fn} on (max probs, "
                                            f"argmax = label) = {fmt(v[fn])}"))
    v = values(conf, correct, 15, "uniform")
    blocks.append(close("ece_top_label(probs, label)", v["ece"], src="mc",
                        comment=f"defaults: 15 bins, 'uniform' = {fmt(v['ece'])}"))
    out["ece and mce, every strategy"] = blocks

    rel = []
    for s in ("uniform", "torchmetrics", "quantile"):
        v = values(conf, correct, 10, s)
        rel.append(exact(REL_SQL.format(call=f"reliability_top_label(probs, label, 10, '{s}')", src="mc"),
                         "IRRIRRRRR", rel_rows(v),
                         f"reliability_top_label {s} M=10: the binary reliability of (confidence, correct); "
                         "Wilson 95% (n = count)"))
    out["reliability_top_label"] = rel

    weighted = []
    for s in ("uniform", "quantile", "kumar"):
        v = values(conf, correct, 10, s, W)
        for fn in ("ece", "mce"):
            weighted.append(close(f"{fn}_top_label(probs, label, 10, '{s}', w)", v[fn], src="mc",
                                  comment=f"weighted {fn}_top_label {s} M=10 (reference rule) = {fmt(v[fn])}"))
    out["weighted"] = weighted

    grouped = []
    rows = []
    for k in range(3):
        m = G == k
        rows.append([k, round(values(conf[m], correct[m], 10, "torchmetrics")["ece"], 12)])
    grouped.append(exact("SELECT g, round(ece_top_label(probs, label, 10, 'torchmetrics'), 12) FROM mc "
                         "GROUP BY g ORDER BY g", "IR", rows,
                         "GROUP BY g (id mod 3): torchmetrics' number per group, rounded to 12 digits"))
    merged = values(conf, correct, 10, "uniform")["ece"]
    grouped.append(close("ece_top_label_merge(s)", merged,
                         src="(SELECT ece_top_label_state(probs, label, 10) AS s FROM mc GROUP BY g)",
                         comment="the three groups' stored states merged: the whole table's value"))
    out["grouped and merged"] = grouped

    # ece_classwise: each class's binary ece, averaged.
    from calibration import get_ece

    P = np.array(probs)
    Y = np.array(labels)

    def classwise(M, s, w=None, rows=None):
        rows = np.arange(len(Y)) if rows is None else rows
        return float(np.mean([values(P[rows, k], (Y[rows] == k).astype(np.float64), M, s,
                                     None if w is None else w[rows])["ece"] for k in range(K)]))

    for M in (10, 15):
        ku = float(get_ece(P, Y, num_bins=M, mode="marginal"))
        assert abs(ku - classwise(M, "kumar")) < 1e-14, (M, ku, classwise(M, "kumar"))
    cw = []
    for M in (10, 15):
        for s in STRATS:
            v = classwise(M, s)
            cw.append(close(f"ece_classwise(probs, label, {M}, '{s}')", v, src="mc",
                            comment=f"ece_classwise {s} M={M}: the mean over the 4 classes of the binary ece of "
                                    f"(probs[k], label = k) = {fmt(v)}"))
    v = classwise(15, "uniform")
    cw.append(close("ece_classwise(probs, label)", v, src="mc", comment=f"defaults: 15 bins, 'uniform' = {fmt(v)}"))
    for s in ("uniform", "quantile"):
        v = classwise(10, s, W)
        cw.append(close(f"ece_classwise(probs, label, 10, '{s}', w)", v, src="mc",
                        comment=f"weighted ece_classwise {s} M=10 (reference rule) = {fmt(v)}"))
    rows = [[k, round(classwise(10, "uniform", rows=np.where(G == k)[0]), 12)] for k in range(3)]
    cw.append(exact("SELECT g, round(ece_classwise(probs, label, 10), 12) FROM mc GROUP BY g ORDER BY g", "IR",
                    rows, "ece_classwise per group (id mod 3), rounded to 12 digits"))
    cw.append(close("ece_classwise_merge(s)", classwise(10, "uniform"),
                    src="(SELECT ece_classwise_state(probs, label, 10) AS s FROM mc GROUP BY g)",
                    comment="the three groups' stored states merged: the whole table's value"))
    keep = np.array([i for i in range(len(probs)) if i % 5 != 0])
    v = classwise(10, "uniform", rows=keep)
    cw.append(close("ece_classwise(CASE WHEN id % 5 = 1 THEN NULL ELSE probs END, label, 10)", v, src="mc",
                    comment="rows with a NULL probs list are skipped"))
    cw.append(exact("SELECT ece_classwise(probs, label) FROM mc WHERE id < 0", "R", [[None]], "no rows: NULL"))
    out["ece_classwise"] = cw

    # auc on the list: one-vs-rest, macro-averaged.
    from sklearn.metrics import roc_auc_score

    def ovr(rows=None, w=None):
        rows = np.arange(len(Y)) if rows is None else rows
        return float(roc_auc_score(Y[rows], P[rows], multi_class="ovr", average="macro",
                                   sample_weight=None if w is None else w[rows]))

    au = []
    v = ovr()
    au.append(close("auc(probs, label)", v, src="mc",
                    comment=f"auc on a list: scikit-learn roc_auc_score(multi_class='ovr') = {fmt(v)}"))
    v = ovr(w=W)
    au.append(close("auc(probs, label, w)", v, src="mc",
                    comment=f"weighted: roc_auc_score(multi_class='ovr', sample_weight=w) = {fmt(v)}"))
    rows = [[k, round(ovr(rows=np.where(G == k)[0]), 12)] for k in range(3)]
    au.append(exact("SELECT g, round(auc(probs, label), 12) FROM mc GROUP BY g ORDER BY g", "IR", rows,
                    "one-vs-rest auc per group (id mod 3), rounded to 12 digits"))
    v = ovr(rows=keep)
    au.append(close("auc(CASE WHEN id % 5 = 1 THEN NULL ELSE probs END, label)", v, src="mc",
                    comment="rows with a NULL probs list are skipped"))
    out["auc one-vs-rest"] = au

    # NULL rows are skipped; a FILTER picks rows.
    nulls = []
    keep = [i for i in range(len(probs)) if i % 5 != 0]
    v = values(conf[keep], correct[keep], 10, "uniform")
    nulls.append(close("ece_top_label(CASE WHEN id % 5 = 1 THEN NULL ELSE probs END, label, 10)", v["ece"], src="mc",
                       comment="rows with a NULL probs list are skipped (every fifth row here)"))
    nulls.append(close("ece_top_label(probs, label, 10) FILTER (WHERE id % 5 <> 1)", v["ece"], src="mc",
                       comment="FILTER (WHERE ...) picks the same rows"))
    nulls.append(exact("SELECT ece_top_label(probs, label) FROM mc WHERE id < 0", "R", [[None]],
                       "no rows: NULL"))
    out["NULLs and filters"] = nulls
    return list(out.items())


if __name__ == "__main__":
    write(sections(), SLT)
