"""Expected values of tests/slt/scalars.slt: sigmoid, logit, wilson_interval, wilson_z,
confcalib_multiplier, popularity_propensity.

  sigmoid(x)  = scipy.special.expit(x);  logit(p) = scipy.special.logit(p)
  wilson_interval(r, n, z) = (r + z^2/2n)/(1 + z^2/n) -/+ z/(1 + z^2/n) sqrt(r(1-r)/n + z^2/4n^2), clamped to
                [0, 1]; cross-checked with statsmodels.stats.proportion.proportion_confint(r*n, n,
                alpha=2*norm.sf(z), method='wilson')
  wilson_z(p_hat, r, n) = |r - p_hat| sqrt(n / (p_hat (1 - p_hat))); cross-checked by solving
                wilson bound(r, n, z) = p_hat for z with scipy.optimize.brentq
  confcalib_multiplier(p_hat, r, n [, lam=1.96]) = bound(r, n, z') / p_hat on p_hat's side,
                z' = lam (2 / (1 + exp(-z/2)) - 1), z = wilson_z(p_hat, r, n); 1 when p_hat = r or n = 0
  popularity_propensity(c, m [, eta=0.5 [, clip=0.1]]) = max((c/m)^eta, clip)
  downsample_correct(p, rate) = p / (p + (1 - p)/rate) (He et al. 2014, section 6.3); cross-checked
                as scipy.special.expit(logit(p) + log(rate)) (the odds times rate) and, with
                fractions.Fraction, as the positive share of a population whose sample, negatives
                kept at rate, has positive share p
"""

import math
from fractions import Fraction

import numpy as np
from scipy.optimize import brentq
from scipy.special import expit, logit
from scipy.stats import norm
from statsmodels.stats.proportion import proportion_confint

from common import close, exact, fmt, main

SLT = "scalars.slt"


def wilson(r, n, z):
    if n <= 0:
        return None
    d = 1 + z * z / n
    center = (r + z * z / (2 * n)) / d
    half = z / d * math.sqrt(r * (1 - r) / n + z * z / (4 * n * n))
    lo, hi = min(max(center - half, 0.0), 1.0), min(max(center + half, 0.0), 1.0)
    if 0 < z < 30:
        slo, shi = proportion_confint(r * n, n, alpha=2 * norm.sf(z), method="wilson")
        assert abs(slo - lo) < 1e-12 and abs(shi - hi) < 1e-12, (r, n, z, lo, slo, hi, shi)
    return lo, hi


def wilson_z(ph, r, n):
    if n == 0 or ph == r:
        return 0.0
    if ph in (0.0, 1.0):
        return math.inf
    z = abs(r - ph) * math.sqrt(n / (ph * (1 - ph)))
    # independent check: the z at which the Wilson bound on p_hat's side reaches p_hat
    side = 1 if ph > r else 0
    zz = brentq(lambda t: wilson(r, n, t)[side] - ph, 0.0, 1e6, xtol=1e-15, rtol=1e-15)
    assert abs(zz - z) < 1e-9 * max(1, z), (ph, r, n, z, zz)
    return z


def confcalib(ph, r, n, lam=1.96):
    if n == 0 or ph == r:
        return 1.0
    z = wilson_z(ph, r, n)
    zp = lam * (2 / (1 + math.exp(-z / 2)) - 1)
    lo, hi = wilson(r, n, zp)
    b = hi if ph > r else lo
    assert min(r, ph) - 1e-15 <= b <= max(r, ph) + 1e-15 or zp > z  # moves p_hat toward r (unless z' > z)
    return b / ph


def popularity(c, m, eta=0.5, clip=0.1):
    return max((c / m) ** eta, clip)


def downsample(p, rate):
    q = p / (p + (1 - p) / rate)
    if 0 < p < 1:
        assert abs(float(expit(logit(p) + math.log(rate))) - q) <= 1e-12 * q, (p, rate)  # through log and exp
    # Bayes on counts: a sample with positives pos and negatives neg (share p) came from a
    # population with the same positives and neg / rate negatives.
    fp, fr = Fraction(p), Fraction(rate)
    pos, neg = fp, 1 - fp
    exact_q = pos / (pos + neg / fr)
    assert abs(float(exact_q) - q) <= 4e-16 * max(q, 1e-300), (p, rate, q, float(exact_q))
    return q


def rel_table(fn_sql, cases, comment, tol=1e-14, types=None):
    """One query over a VALUES list: k, |f(args) - e| <= tol * max(|e|, tiny) per case."""
    vals = []
    for k, (args, e) in enumerate(cases, 1):
        vals.append("(" + ", ".join([str(k)] + [fmt(a) for a in args] + [fmt(e)]) + ")")
    nargs = len(cases[0][0])
    names = [f"a{i}" for i in range(1, nargs + 1)]
    lines = ["# " + line for line in comment.strip().split("\n")]
    for k, (args, e) in enumerate(cases, 1):
        lines.append(f"#   {k}: {fn_sql}({', '.join(fmt(a) for a in args)}) = {fmt(e)}")
    lines += ["query IT",
              f"SELECT k, abs({fn_sql}({', '.join(names)}) - e) <= {fmt(tol)} * abs(e) FROM (VALUES\n  "
              + ",\n  ".join(vals) + f"\n) v(k, {', '.join(names)}, e) ORDER BY k", "----"]
    lines += [f"{k} true" for k in range(1, len(cases) + 1)]
    return "\n".join(lines) + "\n"


def abs_table(expr_sql, cases, comment, nargs, tol=1e-12):
    """Like rel_table with an absolute tolerance; expr_sql uses a1..an and e."""
    vals = []
    for k, (args, e) in enumerate(cases, 1):
        vals.append("(" + ", ".join([str(k)] + [fmt(a) for a in args] + [fmt(e)]) + ")")
    names = [f"a{i}" for i in range(1, nargs + 1)]
    lines = ["# " + line for line in comment.strip().split("\n")]
    for k, (args, e) in enumerate(cases, 1):
        lines.append(f"#   {k}: ({', '.join(fmt(a) for a in args)}) -> {fmt(e)}")
    lines += ["query IT",
              f"SELECT k, abs({expr_sql} - e) < {fmt(tol)} FROM (VALUES\n  " + ",\n  ".join(vals)
              + f"\n) v(k, {', '.join(names)}, e) ORDER BY k", "----"]
    lines += [f"{k} true" for k in range(1, len(cases) + 1)]
    return "\n".join(lines) + "\n"


def sections():
    out = {}

    # ---- sigmoid
    xs = [-800.0, -700.0, -40.0, -5.0, -1.0, -0.5, 0.0, 1e-10, 0.5, 2.0, 5.0, 36.0, 40.0, 800.0]
    sig = [rel_table("sigmoid", [((x,), float(expit(x))) for x in xs],
                     "sigmoid = scipy.special.expit, relative error <= 1e-15 (0 exactly for -800)", tol=1e-15)]
    sig.append(exact("SELECT sigmoid(CAST('inf' AS DOUBLE)), sigmoid(CAST('-inf' AS DOUBLE)), sigmoid(CAST('NaN' AS DOUBLE)), "
                     "sigmoid(NULL), sigmoid(0) AS i64, sigmoid(CAST(0 AS REAL)) AS f32", "RRRRRR",
                     [[1.0, 0.0, math.nan, None, 0.5, 0.5]], "infinities, NaN, NULL, integer and Float32 input"))
    sig.append(close("sigmoid(x)", float(expit(2.0)), src="(VALUES (CAST(2 AS TINYINT))) v(x)",
                     comment=f"tinyint argument: expit(2) = {fmt(float(expit(2.0)))}"))
    sig.append(exact("SELECT k, round(sigmoid(x), 12) FROM (VALUES (1, 0.0), (2, NULL), (3, 2.0), (4, -2.0)) v(k, x) ORDER BY k",
                     "IR", [[1, 0.5], [2, None], [3, round(float(expit(2.0)), 12)], [4, round(float(expit(-2.0)), 12)]],
                     "a column with a NULL; round(expit(x), 12)"))
    out["sigmoid"] = sig

    # ---- logit
    ps = [1e-300, 1e-10, 0.001, 0.1, 0.25, 0.5, 0.75, 0.9, 0.999, 0.999999]
    lg = [rel_table("logit", [((p,), float(logit(p))) for p in ps],
                    "logit = scipy.special.logit, relative error <= 1e-14", tol=1e-14)]
    lg.append(exact("SELECT logit(0.0), logit(1.0), logit(0), logit(1), logit(NULL)", "RRRRR",
                    [[-math.inf, math.inf, -math.inf, math.inf, None]], "logit(0) = -inf, logit(1) = inf (scipy.special.logit), NULL"))
    rt = [((p,), p) for p in (0.001, 0.2, 0.5, 0.8, 0.999)]
    lg.append(abs_table("sigmoid(logit(a1))", rt, "sigmoid(logit(p)) = p (to 1e-12)", 1))
    out["logit"] = lg

    # ---- wilson_interval
    wcases = [(0.3, 100.0, 1.96), (0.05, 20.0, 1.96), (0.0, 10.0, 1.96), (1.0, 10.0, 1.96), (0.5, 1.0, 1.0),
              (0.3, 100.0, 0.0), (0.3, 1e6, 2.576), (0.7, 2.5, 1.0), (0.999, 50.0, 3.0), (0.12, 7.0, 1.645)]
    wi = []
    lo_cases = [((r, n, z), wilson(r, n, z)[0]) for r, n, z in wcases]
    hi_cases = [((r, n, z), wilson(r, n, z)[1]) for r, n, z in wcases]
    wi.append(abs_table("wilson_interval(a1, a2, a3)['lower']", lo_cases,
                        "wilson_interval lower bound: the SPEC formula in numpy, = statsmodels proportion_confint(r*n, n, "
                        "alpha=2*norm.sf(z), method='wilson')[0]", 3))
    wi.append(abs_table("wilson_interval(a1, a2, a3)['upper']", hi_cases, "wilson_interval upper bound (statsmodels [1])", 3))
    wi.append(exact("SELECT wilson_interval(0.3, 0, 1.96), wilson_interval(0.3, -5, 1.96), wilson_interval(NULL, 10, 1.96), "
                    "wilson_interval(0.3, NULL, 1.96), wilson_interval(0.3, 10, NULL)", "TTTTT", [[None] * 5],
                    "n <= 0 gives NULL; any NULL argument gives NULL"))
    lo, hi = wilson(0.3, 100.0, 0.0)
    wi.append(exact("SELECT wilson_interval(0.3, 100, 0.0)", "T", [[f"{{lower: {fmt(lo)}, upper: {fmt(hi)}}}"]],
                    "z = 0: the interval is the point pos_rate; the struct prints as {lower, upper}"))
    out["wilson_interval"] = wi

    # ---- wilson_z
    zcases = [(0.3, 0.25, 100.0), (0.2, 0.25, 100.0), (0.01, 0.5, 1e6), (0.5, 0.1, 3.5), (0.9, 0.6, 40.0), (0.45, 0.5, 12.0)]
    wz = [rel_table("wilson_z", [((a, b, n), wilson_z(a, b, n)) for a, b, n in zcases],
                    "wilson_z: closed form |r - p_hat| sqrt(n / (p_hat (1 - p_hat))), checked against scipy brentq on the "
                    "Wilson bound; relative error <= 1e-13", tol=1e-13)]
    wz.append(exact("SELECT wilson_z(0.25, 0.25, 100), wilson_z(0.0, 0.0, 50), wilson_z(1.0, 1.0, 5), wilson_z(0.3, 0.1, 0), "
                    "wilson_z(0.0, 0.1, 50), wilson_z(1.0, 0.9, 50), wilson_z(NULL, 0.1, 5)", "RRRRRRR",
                    [[0.0, 0.0, 0.0, 0.0, math.inf, math.inf, None]],
                    "0 when p_hat = pos_rate or n = 0; +inf when p_hat is 0 or 1 and differs; NULL"))
    # round trip: the Wilson bound at wilson_z is p_hat
    rcases = [((a, b, n), a) for a, b, n in zcases if a > b]
    wz.append(abs_table("wilson_interval(a2, a3, wilson_z(a1, a2, a3))['upper']", rcases,
                        "round trip: the upper Wilson bound around pos_rate at z = wilson_z(p_hat, ...) is p_hat (p_hat > pos_rate)", 3))
    rcases = [((a, b, n), a) for a, b, n in zcases if a < b]
    wz.append(abs_table("wilson_interval(a2, a3, wilson_z(a1, a2, a3))['lower']", rcases,
                        "round trip on the lower side (p_hat < pos_rate)", 3))
    out["wilson_z"] = wz

    # ---- confcalib_multiplier
    ccases = [(0.3, 0.25, 100.0), (0.2, 0.25, 100.0), (0.01, 0.5, 1e6), (0.5, 0.1, 3.5), (0.9, 0.6, 40.0), (0.05, 0.0, 100.0),
              (1.0, 0.9, 50.0)]
    cc = [rel_table("confcalib_multiplier", [((a, b, n), confcalib(a, b, n)) for a, b, n in ccases],
                    "confcalib_multiplier, default lambda 1.96: bound(pos_rate, n, z')/p_hat, "
                    "z' = 1.96 (2/(1 + exp(-z/2)) - 1); relative error <= 1e-12", tol=1e-12)]
    for lam in (1.0, 3.0, 0.5):
        cases = [((a, b, n), confcalib(a, b, n, lam)) for a, b, n in ccases[:5]]
        vals = []
        for k, (args, e) in enumerate(cases, 1):
            vals.append("(" + ", ".join([str(k)] + [fmt(x) for x in args] + [fmt(e)]) + ")")
        lines = [f"# confcalib_multiplier with lambda {lam}; relative error <= 1e-12"]
        for k, (args, e) in enumerate(cases, 1):
            lines.append(f"#   {k}: {args} -> {fmt(e)}")
        lines += ["query IT", f"SELECT k, abs(confcalib_multiplier(a1, a2, a3, {fmt(lam)}) - e) <= 1e-12 * abs(e) FROM (VALUES\n  "
                  + ",\n  ".join(vals) + "\n) v(k, a1, a2, a3, e) ORDER BY k", "----"] + [f"{k} true" for k in range(1, len(cases) + 1)]
        cc.append("\n".join(lines) + "\n")
    cc.append(exact("SELECT confcalib_multiplier(0.25, 0.25, 100), confcalib_multiplier(0.3, 0.1, 0), "
                    "confcalib_multiplier(0.0, 0.0, 10), confcalib_multiplier(0.3, 0.25, 100, 1.0) < confcalib_multiplier(0.3, 0.25, 100, 3.0), "
                    "confcalib_multiplier(NULL, 0.25, 100)", "RRRTR", [[1.0, 1.0, 1.0, "true", None]],
                    "1 when p_hat = pos_rate or n = 0; a larger lambda (wider interval) keeps p_hat closer: m(lambda 1) < m(lambda 3) < 1; NULL"))
    fused = 0.3 * confcalib(0.3, 0.25, 100.0) ** 0.5 * confcalib(0.3, 0.35, 400.0) ** 0.5
    cc.append(close("0.3 * power(confcalib_multiplier(0.3, 0.25, 100), 0.5) * power(confcalib_multiplier(0.3, 0.35, 400), 0.5)",
                    fused, comment=f"multi-field fusion p * prod m_k^w_k in plain SQL: {fmt(fused)}"))
    out["confcalib_multiplier"] = cc

    # ---- popularity_propensity
    pcases = [(25.0, 100.0), (1.0, 100.0), (0.0, 100.0), (100.0, 100.0), (3.0, 7.0), (2.5, 10.0), (64.0, 1e9)]
    pp = [abs_table("popularity_propensity(a1, a2)", [((c, m), popularity(c, m)) for c, m in pcases],
                    "popularity_propensity, defaults eta 0.5, clip 0.1: max((c/m)^0.5, 0.1)", 2)]
    for eta, clip in ((1.0, 0.1), (2.0, 0.05), (0.0, 0.1), (0.3, 0.0), (0.5, 1.0)):
        cases = [((c, m), popularity(c, m, eta, clip)) for c, m in pcases]
        pp.append(abs_table(f"popularity_propensity(a1, a2, {fmt(eta)}, {fmt(clip)})", cases,
                            f"eta {eta}, clip {clip}: max((c/m)^{eta}, {clip})" + (" (0^0 = 1)" if eta == 0 else ""), 2))
    pp.append(abs_table("popularity_propensity(a1, a2, 0.7)", [((c, m), popularity(c, m, 0.7)) for c, m in pcases[:4]],
                        "eta 0.7, default clip", 2))
    pp.append(exact("SELECT k, round(popularity_propensity(c, max(c) OVER ()), 12) FROM (VALUES (1, 4), (2, 16), (3, 64), (4, NULL)) v(k, c) ORDER BY k",
                    "IR", [[1, popularity(4, 64)], [2, popularity(16, 64)], [3, 1.0], [4, None]],
                    "with the max from a window, integer counts; NULL count gives NULL"))
    pp.append(exact("SELECT popularity_propensity(NULL, 10), popularity_propensity(3, NULL)", "RR", [[None, None]], "NULL arguments"))
    out["popularity_propensity"] = pp

    # ---- downsample_correct
    dcases = [(0.5, 0.1), (0.2, 1.0), (0.01, 0.01), (0.9, 0.05), (1e-9, 0.5), (0.999999, 0.001),
              (0.0, 0.3), (1.0, 0.3), (0.3, 1e-6), (0.42, 0.75)]
    dc = [rel_table("downsample_correct", [((p, r), downsample(p, r)) for p, r in dcases],
                    "downsample_correct = p / (p + (1 - p)/rate), = expit(logit(p) + ln(rate)) and the "
                    "exact Fraction; relative error <= 1e-15 (0 exactly for p = 0)", tol=1e-15)]
    dc.append(exact("SELECT k, round(downsample_correct(p, r), 12) FROM (VALUES (1, 0.5, 0.1), (2, NULL, 0.1), "
                    "(3, 0.5, NULL), (4, 0.25, 0.5)) v(k, p, r) ORDER BY k", "IR",
                    [[1, round(downsample(0.5, 0.1), 12)], [2, None], [3, None], [4, round(downsample(0.25, 0.5), 12)]],
                    "columns, the rate varying by row; NULL p or rate gives NULL"))
    dc.append(exact("SELECT downsample_correct(p => 0.5, rate => 1), downsample_correct(CAST(1 AS INT), CAST(0.5 AS REAL))",
                    "RR", [[0.5, 1.0]], "named arguments; integer and Float32 arguments"))
    out["downsample_correct"] = dc

    return list(out.items())


if __name__ == "__main__":
    main(sections(), SLT)
