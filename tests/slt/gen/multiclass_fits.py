"""Expected values of tests/slt/multiclass_fits.slt: multiclass temperature scaling
(fit_temperature on a list of logits, calibrate -> softmax(logits / T)), the one-vs-rest fits
(fit_ovr, calibrate with a list of models) and the fits' row weight (w), which is how a fit on a
log whose negatives were downsampled at rate r recovers the full log's model (w = 1/r on the
negatives).

Data: scikit-learn 1.9 make_classification(n_samples=240, n_classes=4, ...) and a
LogisticRegression fitted on rows 0-119 (the same model as top_label.py); its decision_function
gives each row's logits. Rows 120-239 are the calibration set (table `cal`: id, z, label, w,
g), with weights w cycling 0.5, 1, 2, 1.5; rows 0-5 are the rows calibrated (table `test`: id,
z).

References:
  fit_temperature   T = 1 / beta, beta the root of the weighted multinomial log loss's derivative
                    (scipy brentq on numpy's gradient), asserted equal to scikit-learn 1.9
                    CalibratedClassifierCV(FrozenEstimator(model), method='temperature')
                    .fit(X_cal, y_cal [, sample_weight=w])'s 1 / beta_ to 1e-6 (scikit-learn runs
                    Brent's method on the loss's value, which is flat to rounding within about
                    1e-8 of the optimum); calibrate(z, m) = softmax(z / T), asserted equal to its
                    predict_proba to 1e-6. The model's loss is scikit-learn's log_loss of those
                    probabilities on the calibration rows.
  fit_ovr isotonic  CalibratedClassifierCV(FrozenEstimator(model), method='isotonic') on the
                    same rows: one IsotonicRegression(out_of_bounds='clip') per class on the
                    decision function, renormalised; calibrate(z, models) is its predict_proba.
  fit_ovr platt     calibsql's Platt is the maximum-likelihood sigmoid of the labels (not
                    Platt's smoothed targets, scikit-learn's 'sigmoid'): statsmodels 0.15
                    GLM(Binomial) per class with freq_weights, renormalised in numpy.
  fit_platt w       statsmodels GLM(Binomial, freq_weights=w) of (s, y): slope b and intercept c.
  fit_isotonic w    IsotonicRegression(out_of_bounds='clip').fit(s, y, sample_weight=w).

    python3 tests/slt/gen/multiclass_fits.py            # print the blocks
    python3 tests/slt/gen/multiclass_fits.py --check    # assert every block appears verbatim
"""

import warnings

import numpy as np

from common import close, exact, fmt
from common import main as write
from top_label import K, classifier

SLT = "multiclass_fits.slt"
warnings.filterwarnings("ignore")


def lst(v):
    return "[" + ", ".join(repr(float(x)) for x in v) + "]"


def tables(Z, y, w, g, Zt):
    rows = [f"  ({i}, {lst(z)}, {int(k)}, {fmt(wi)}, {gi})"
            for i, (z, k, wi, gi) in enumerate(zip(Z, y, w, g), 1)]
    cal = ("statement ok\nCREATE TABLE cal(id INT, z DOUBLE[], label INT, w DOUBLE, g INT) AS VALUES\n"
           + ",\n".join(rows) + "\n")
    rows = [f"  ({i}, {lst(z)})" for i, z in enumerate(Zt, 1)]
    test = "statement ok\nCREATE TABLE test(id INT, z DOUBLE[]) AS VALUES\n" + ",\n".join(rows) + "\n"
    return [cal, test]


def list_rows(P, digits=9):
    """calibrate's lists, a column a class, each rounded in SQL to `digits` (list_sql)."""
    return [[i] + [round(float(v), digits) for v in p] for i, p in enumerate(P, 1)]


def list_sql(model_sql, digits=9):
    """The query of list_rows: calibrate(z, m) of each test row against the model of `model_sql`."""
    cells = ", ".join(f"round(p[{k + 1}], {digits})" for k in range(K))
    return (f"SELECT id, {cells} FROM (SELECT id, calibrate(z, m) AS p FROM test CROSS JOIN "
            f"({model_sql})) ORDER BY id")


LIST_TYPES = "I" + "R" * K


def sections():
    from sklearn.calibration import CalibratedClassifierCV
    from sklearn.frozen import FrozenEstimator
    from sklearn.isotonic import IsotonicRegression
    from sklearn.metrics import log_loss
    import statsmodels.api as sm

    X, y, model = classifier()
    Xc, yc = X[120:], y[120:]
    Z = model.decision_function(Xc)
    Zt = model.decision_function(X[:6])
    n = len(yc)
    w = np.array([[0.5, 1.0, 2.0, 1.5][i % 4] for i in range(n)])
    g = [i % 3 for i in range(n)]
    out = {"tables": tables(Z, yc, w, g, Zt)}

    # ---- temperature
    from scipy.optimize import brentq
    from scipy.special import softmax

    def temperature(rows=None, weights=None):
        """T as the root of the loss's derivative in beta = 1/T (scipy brentq on numpy's
        gradient), checked against scikit-learn's T to 1e-6: scikit-learn minimises the loss's
        value, which is flat to rounding (1e-16) within about 1e-8 of the optimum, so its T is
        only that close; the root of the gradient is not limited so."""
        rows = np.arange(n) if rows is None else rows
        sw = np.ones(len(rows)) if weights is None else weights[rows]
        z, lab = Z[rows], yc[rows]

        def grad(beta):
            P = softmax(beta * z, axis=1)
            return float(np.sum(sw * ((P * z).sum(axis=1) - z[np.arange(len(lab)), lab])))

        beta = brentq(grad, 1e-3, 1e3, xtol=1e-300, rtol=4 * np.finfo(float).eps, maxiter=500)
        cc = CalibratedClassifierCV(FrozenEstimator(model), method="temperature")
        cc.fit(Xc[rows], yc[rows], sample_weight=None if weights is None else weights[rows])
        t_sklearn = 1.0 / float(cc.calibrated_classifiers_[0].calibrators[0].beta_)
        assert abs(t_sklearn * beta - 1.0) < 1e-6, (t_sklearn, 1.0 / beta)
        return cc, 1.0 / beta

    te = []
    cc, T = temperature()
    te.append(close("m['a']", T, tol=1e-10, src="(SELECT fit_temperature(z, label) AS m FROM cal)",
                    comment=f"T = {fmt(T)}: the root of the loss's gradient in 1/T (scipy brentq), which is\n"
                            "CalibratedClassifierCV(method='temperature')'s 1 / beta_ to 1e-6 (see the script)"))
    P = softmax(Z / T, axis=1)
    assert np.abs(P - cc.predict_proba(X[120:])).max() < 1e-6
    loss = float(log_loss(yc, P))
    te.append(close("m['loss']", loss, tol=1e-9, src="(SELECT fit_temperature(z, label) AS m FROM cal)",
                    comment=f"the model's loss: log_loss of the calibrated probabilities = {fmt(loss)}"))
    Pt = softmax(Zt / T, axis=1)
    assert np.abs(Pt - cc.predict_proba(X[:6])).max() < 1e-6
    te.append(exact(list_sql("SELECT fit_temperature(z, label) AS m FROM cal"), LIST_TYPES, list_rows(Pt),
                    "calibrate(z, m) = softmax(z / T) (scipy; CalibratedClassifierCV.predict_proba to 1e-6),\n"
                    "rounded to 9 digits"))
    cc, T = temperature(weights=w)
    te.append(close("m['a']", T, tol=1e-10, src="(SELECT fit_temperature(z, label, w => w) AS m FROM cal)",
                    comment=f"weighted: T = {fmt(T)} (CalibratedClassifierCV(...).fit(X, y, sample_weight=w) to 1e-6)"))
    te.append(close("m['weight']", float(w.sum()), src="(SELECT fit_temperature(z, label, w => w) AS m FROM cal)",
                    comment="the model's weight is the sum of the weights"))
    rows = []
    for k in range(3):
        _, T = temperature(rows=np.where(np.array(g) == k)[0])
        rows.append([k, round(T, 9)])
    te.append(exact("SELECT g, round(fit_temperature(z, label)['a'], 9) FROM cal GROUP BY g ORDER BY g", "IR",
                    rows, "one temperature per group (row number mod 3), rounded to 9 digits"))
    out["fit_temperature on a list"] = te

    # ---- fit_ovr
    ov = []
    cc = CalibratedClassifierCV(FrozenEstimator(model), method="isotonic").fit(Xc, yc)
    ov.append(exact(list_sql("SELECT fit_ovr(z, label, 'isotonic') AS m FROM cal"), LIST_TYPES,
                    list_rows(cc.predict_proba(X[:6])),
                    "fit_ovr 'isotonic' = CalibratedClassifierCV(method='isotonic').predict_proba, rounded to 9 digits"))
    cc = CalibratedClassifierCV(FrozenEstimator(model), method="isotonic").fit(Xc, yc, sample_weight=w)
    ov.append(exact(list_sql("SELECT fit_ovr(z, label, 'isotonic', w) AS m FROM cal"), LIST_TYPES,
                    list_rows(cc.predict_proba(X[:6])),
                    "weighted: CalibratedClassifierCV(method='isotonic').fit(..., sample_weight=w)"))

    def platt(s, t, weights):
        X1 = sm.add_constant(s)
        r = sm.GLM(t, X1, family=sm.families.Binomial(), freq_weights=weights).fit(tol=1e-14, maxiter=200)
        c, b = r.params
        return b, c

    def ovr_platt(weights):
        P = np.zeros((6, K))
        for k in range(K):
            b, c = platt(Z[:, k], (yc == k).astype(float), weights)
            assert b > 0
            P[:, k] = 1.0 / (1.0 + np.exp(-(b * Zt[:, k] + c)))
        return P / P.sum(axis=1, keepdims=True)

    ov.append(exact(list_sql("SELECT fit_ovr(z, label) AS m FROM cal", 6), LIST_TYPES,
                    list_rows(ovr_platt(np.ones(n)), 6),
                    "fit_ovr default 'platt': statsmodels GLM(Binomial) per class, renormalised, rounded to 6 digits\n"
                    "(the fits stop within about 1e-7 of the optimum: tests/slt/fits.slt)"))
    ov.append(exact(list_sql("SELECT fit_ovr(z, label, 'platt', w) AS m FROM cal", 6), LIST_TYPES,
                    list_rows(ovr_platt(w), 6),
                    "weighted: GLM(Binomial, freq_weights=w) per class"))
    out["fit_ovr"] = ov

    # ---- the binary fits' weight, and downsampled negatives
    s = Z[:, 0]
    t = (yc == 0).astype(float)
    bw = []
    b, c = platt(s, t, w)
    src = "(SELECT fit_platt(z[1], label = 0, w => w) AS m FROM cal)"
    bw.append(close("m['b']", b, tol=1e-6, src=src,
                    comment=f"fit_platt with w: statsmodels GLM(Binomial, freq_weights=w) slope = {fmt(b)}"))
    bw.append(close("m['c']", c, tol=1e-6, src=src, comment=f"and intercept = {fmt(c)}"))
    ir = IsotonicRegression(out_of_bounds="clip").fit(s, t, sample_weight=w)
    grid = [-6.0, -2.0, 0.0, 1.0, 3.0, 8.0]
    rows = [[x, round(float(v), 12)] for x, v in zip(grid, ir.predict(grid))]
    bw.append(exact("SELECT x, round(calibrate(x, m), 12) FROM (VALUES (-6.0), (-2.0), (0.0), (1.0), (3.0), (8.0)) "
                    "AS v(x) CROSS JOIN (SELECT fit_isotonic(z[1], label = 0, w => w) AS m FROM cal) ORDER BY x",
                    "RR", rows, "fit_isotonic with w: IsotonicRegression(...).fit(s, y, sample_weight=w).predict"))
    # Negatives kept at rate 1/4: every fourth negative of class 0's one-vs-rest rows, weight 4.
    keep = np.array([i for i in range(n) if t[i] == 1 or i % 4 == 0])
    dw = np.where(t[keep] == 1, 1.0, 4.0)
    b, c = platt(s[keep], t[keep], dw)
    src = ("(SELECT fit_platt(z[1], label = 0, w => CASE WHEN label = 0 THEN 1 ELSE 4 END) AS m FROM cal "
           "WHERE label = 0 OR (id - 1) % 4 = 0)")
    bw.append(close("m['c']", c, tol=1e-6, src=src,
                    comment="negatives downsampled at rate 1/4 and weighted 4: the weighted GLM's intercept "
                            f"= {fmt(c)}\n(the unweighted fit's intercept is about ln 4 higher)"))
    out["weights"] = bw
    return list(out.items())


if __name__ == "__main__":
    write(sections(), SLT)
