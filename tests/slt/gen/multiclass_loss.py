"""Expected values of tests/slt/multiclass_loss.slt: logloss and brier on a multiclass model's
list of class probabilities and class index.

Data: top_label.py's table `mc` (scikit-learn 1.9 make_classification with 4 classes, a
LogisticRegression's predict_proba, tied and one-hot rows, weights w and groups g).

References, scikit-learn 1.9:
  logloss(probs, label [, eps [, w]])  log_loss(label, probs, labels=[0, 1, 2, 3], sample_weight=w)
                                        (probs clipped to [eps, 1 - eps], eps the float64 machine
                                        epsilon; another eps: the same formula in numpy)
  brier(probs, label [, w])            brier_score_loss(label, probs, labels=[0, 1, 2, 3],
                                        scale_by_half=False, sample_weight=w): the squared error
                                        summed over the classes, averaged over rows

    python3 tests/slt/gen/multiclass_loss.py            # print the blocks
    python3 tests/slt/gen/multiclass_loss.py --check    # assert every block appears verbatim
"""

import warnings

import numpy as np

from common import close, exact
from common import main as write
from top_label import K, data, table

SLT = "multiclass_loss.slt"
warnings.filterwarnings("ignore")


def logloss(probs, labels, w=None, eps=None):
    from sklearn.metrics import log_loss

    P, y = np.array(probs), np.array(labels)
    if eps is None:
        return float(log_loss(y, P, labels=list(range(K)), sample_weight=w))
    picked = np.clip(P[np.arange(len(y)), y], eps, 1 - eps)
    return float(np.average(-np.log(picked), weights=w))


def brier(probs, labels, w=None):
    from sklearn.metrics import brier_score_loss

    return float(brier_score_loss(np.array(labels), np.array(probs), labels=list(range(K)),
                                  scale_by_half=False, sample_weight=w))


def sections():
    probs, labels, w, g = data()
    W, G = np.array(w), np.array(g)
    out = {"tables": [table(probs, labels, w, g)]}
    values = [
        close("logloss(probs, label)", logloss(probs, labels), src="mc",
              comment="scikit-learn log_loss(label, probs, labels=range(4))"),
        close("logloss(probs, label, 1e-3)", logloss(probs, labels, eps=1e-3), src="mc",
              comment="eps 1e-3: probs clipped to [1e-3, 1 - 1e-3] (one-hot rows are clipped)"),
        close("logloss(probs, label, w => w)", logloss(probs, labels, W), src="mc",
              comment="weighted: log_loss(..., sample_weight=w)"),
        close("brier(probs, label)", brier(probs, labels), src="mc",
              comment="brier_score_loss(label, probs, labels=range(4), scale_by_half=False)"),
        close("brier(probs, label, w)", brier(probs, labels, W), src="mc",
              comment="weighted: brier_score_loss(..., sample_weight=w)"),
    ]
    out["logloss and brier on lists"] = values
    rows = []
    for k in range(3):
        m = G == k
        sub_p = [p for p, keep in zip(probs, m) if keep]
        sub_y = [y for y, keep in zip(labels, m) if keep]
        rows.append([k, round(logloss(sub_p, sub_y), 12), round(brier(sub_p, sub_y), 12)])
    grouped = [exact("SELECT g, round(logloss(probs, label), 12), round(brier(probs, label), 12) FROM mc "
                     "GROUP BY g ORDER BY g", "IRR", rows, "GROUP BY g (id mod 3), rounded to 12 digits"),
               close("logloss_merge(s)", logloss(probs, labels),
                     src="(SELECT logloss_state(probs, label) AS s FROM mc GROUP BY g)",
                     comment="the three groups' stored states merged: the whole table's value")]
    keep = [i for i in range(len(probs)) if i % 5 != 0]
    grouped.append(close("brier(CASE WHEN id % 5 = 1 THEN NULL ELSE probs END, label)",
                         brier([probs[i] for i in keep], [labels[i] for i in keep]), src="mc",
                         comment="rows with a NULL probs list are skipped (every fifth row here)"))
    out["grouped, merged and NULLs"] = grouped
    return list(out.items())


if __name__ == "__main__":
    write(sections(), SLT)
