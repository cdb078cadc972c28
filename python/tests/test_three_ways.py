"""The same SQL three ways — the calibsql binary (`--format ndjson`), the bundled module, and
datafusion-python with `calibsql.datafusion.register_all` — must give the same rows to 1e-12.

These are consistency tests: all three run the same Rust functions, so they prove that
nothing is lost on the way (the FFI, the Arrow C stream, JSON output), not that the functions
are right. `test_ece_matches_numpy` checks a value against an independent computation; the
functions themselves are checked against numpy/scikit-learn/scipy in the Rust test suite
(tests/slt, tests/fits/calibrators.rs).
"""

from __future__ import annotations

import numpy as np
import pytest

from conftest import assert_rows_equal

QUERIES = {
    # Scalars with literal arguments: across the FFI these arrive as arrays (checked at
    # planning time there, and accepted as constant arrays when run).
    "scalars with literals": """
        SELECT row_id,
               sigmoid(score) AS s,
               logit(p_model) AS l,
               confcalib_multiplier(p_model, 0.02, 150.0, 1.96) AS m,
               confcalib_multiplier(p_model, 0.02, 150.0, 0.0) AS m0,
               popularity_propensity(item_count, max_count, 0.5, 0.1) AS pp,
               wilson_interval(0.25, 40.0 + row_id % 7, 1.96) AS wi,
               wilson_z(p_model, 0.05, 100.0) AS wz
        FROM valid WHERE row_id % 97 = 0 ORDER BY row_id""",
    "ece and friends with bins, strategy and eps": """
        SELECT ece(p_model, click) AS e,
               ece(p_model, click, 10, 'quantile') AS eq,
               ece(p_model, click, 20, 'uniform', 1.0 + (row_id % 3)) AS ew,
               mce(p_model, click, 10) AS m,
               ace(p_model, click, 12) AS a,
               logloss(p_model, click) AS ll,
               brier(p_model, click) AS b,
               auc(p_model, click) AS au,
               normalized_entropy(p_model, click) AS ne,
               field_ece(p_model, click, site_id) AS fe,
               field_rce(p_model, click, site_id) AS fr,
               field_rce(p_model, click, app_id, 0.05) AS fr2,
               multi_field_rce(p_model, click, site_id, app_id, ad_type) AS mfr,
               mvce(p_model, click, row_id, 15, 5) AS mv
        FROM test""",
    "inference: bootstrap and DeLong intervals, paired tests": """
        SELECT ece_interval(p_model, click, user_id)['lower'] AS ei_lo,
               ece_interval(p_model, click, row_id, 10, 'sklearn', 0.9, 50)['upper'] AS ei_hi,
               ece_diff_interval(p_model, sigmoid(score), click, user_id)['diff'] AS ed,
               auc_interval(p_model, click)['lower'] AS ai_lo,
               auc_test(p_model, sigmoid(score), click)['z'] AS at_z
        FROM test""",
    "filter and empty input": """
        SELECT ece(p_model, click) FILTER (WHERE ad_type = 'video') AS video,
               logloss(p_model, click) FILTER (WHERE false) AS nothing
        FROM valid""",
    "reliability, a List<Struct>": """
        SELECT ad_type, reliability(p_model, click, 8) AS r
        FROM test GROUP BY ad_type ORDER BY ad_type""",
    "a fit fed to calibrate": """
        WITH models AS (
            SELECT fit_platt(logit(p_model), click) AS platt,
                   fit_isotonic(p_model, click) AS iso,
                   fit_histogram(p_model, click, 10, 'quantile') AS hist
            FROM valid)
        SELECT ece(calibrate(logit(t.p_model), platt), t.click) AS e_platt,
               ece(calibrate(t.p_model, iso), t.click) AS e_iso,
               logloss(calibrate(t.p_model, hist), t.click) AS l_hist,
               sum(calibrate(t.p_model, iso)) AS s_iso
        FROM test t CROSS JOIN models""",
    "field-aware fit fed to the 3-argument calibrate": """
        WITH m AS (SELECT fit_confcalib(p_model, click, ad_type, 4, 1.0) AS model FROM valid)
        SELECT ad_type, avg(calibrate(t.p_model, m.model, t.ad_type)) AS c
        FROM test t CROSS JOIN m GROUP BY ad_type ORDER BY ad_type""",
    "stored states merged": """
        SELECT ece_merge(s) AS e, count(*) AS days FROM (
            SELECT day, ece_state(p_model, click, 10, 'sklearn') AS s FROM valid GROUP BY day)""",
    "GROUP BY with many groups": """
        SELECT site_id, count(*) AS n, ece(p_model, click) AS e, logloss(p_model, click) AS ll,
               brier(p_model, click) AS b
        FROM valid GROUP BY site_id ORDER BY site_id""",
}


@pytest.mark.parametrize("name", list(QUERIES))
def test_three_ways_agree(name, cli, bundled, via_datafusion):
    sql = QUERIES[name]
    from_cli = cli(sql)
    from_module = bundled(sql)
    from_datafusion = via_datafusion(sql)
    assert len(from_cli) > 0
    assert_rows_equal(from_module, from_cli)
    assert_rows_equal(from_datafusion, from_cli)


def test_many_groups_are_many(bundled):
    rows = bundled("SELECT count(DISTINCT site_id) AS n FROM valid")
    assert rows[0]["n"] > 500


def test_ece_matches_numpy(bundled):
    """15 equal-width bins, numpy's computation of the same rule (sklearn/netcal convention:
    bin k holds p in [k/15, (k+1)/15), p = 1 in the last bin)."""
    rows = bundled("SELECT p_model, click FROM test")
    p = np.array([r["p_model"] for r in rows])
    y = np.array([r["click"] for r in rows], dtype=float)
    bins = np.minimum((p * 15).astype(int), 14)
    ece = 0.0
    for k in range(15):
        sel = bins == k
        if sel.any():
            ece += sel.sum() / len(p) * abs(p[sel].mean() - y[sel].mean())
    ours = bundled("SELECT ece(p_model, click) AS e FROM test")[0]["e"]
    assert ours == pytest.approx(ece, rel=1e-12, abs=1e-15)


def test_spiegelhalter_and_field_bias_match_numpy(bundled):
    """Spiegelhalter's z (rms::val.prob's formula) and field_bias's Holm-adjusted p-values,
    through SQL in the bundled module, against numpy (the normal tail by math.erfc)."""
    import math

    rows = bundled("SELECT p_model, click, ad_type FROM test")
    p = np.array([r["p_model"] for r in rows])
    y = np.array([r["click"] for r in rows], dtype=float)
    z = np.sum((y - p) * (1 - 2 * p)) / np.sqrt(np.sum((1 - 2 * p) ** 2 * p * (1 - p)))
    s = bundled("SELECT spiegelhalter(p_model, click) AS s FROM test")[0]["s"]
    assert s["z"] == pytest.approx(z, rel=1e-10)
    assert s["p_value"] == pytest.approx(math.erfc(abs(z) / math.sqrt(2)), rel=1e-9, abs=1e-300)

    f = np.array([r["ad_type"] for r in rows])
    want = {}
    for v in sorted(set(f)):
        m = f == v
        mean_p, rate, n = p[m].mean(), y[m].mean(), m.sum()
        zv = abs(rate - mean_p) * math.sqrt(n / (mean_p * (1 - mean_p)))
        want[v] = math.erfc(zv / math.sqrt(2))
    # Holm: the k-th smallest p-value times (m - k), running maximum, at most 1.
    order = sorted(want, key=want.get)
    running, holm = 0.0, {}
    for k, v in enumerate(order):
        running = max(running, want[v] * (len(order) - k))
        holm[v] = min(running, 1.0)
    got = bundled("SELECT field_bias(p_model, click, ad_type) AS b FROM test")[0]["b"]
    assert [item["field"] for item in got] == sorted(holm, key=lambda v: (holm[v], want[v], v))
    for item in got:
        assert item["p_value"] == pytest.approx(want[item["field"]], rel=1e-9, abs=1e-300)
        assert item["p_adjusted"] == pytest.approx(holm[item["field"]], rel=1e-9, abs=1e-300)


def test_auc_interval_matches_a_numpy_delong(bundled):
    """auc_interval against DeLong's interval computed here from its definition: each
    positive's and negative's placement from the pairwise comparison (ties one half), the
    placements' sample variances, and auc +- 1.959963984540054 (the 97.5% normal quantile) *
    se."""
    rows = bundled("SELECT p_model, click FROM test WHERE row_id % 40 = 0")
    p = np.array([r["p_model"] for r in rows])
    y = np.array([r["click"] for r in rows])
    pos, neg = p[y == 1], p[y == 0]
    psi = (pos[:, None] > neg[None, :]) + 0.5 * (pos[:, None] == neg[None, :])
    auc = psi.mean()
    v10, v01 = psi.mean(axis=1), psi.mean(axis=0)
    se = np.sqrt(v10.var(ddof=1) / len(pos) + v01.var(ddof=1) / len(neg))
    got = bundled(
        "SELECT r['auc'] AS auc, r['lower'] AS lo, r['upper'] AS hi FROM "
        "(SELECT auc_interval(p_model, click) AS r FROM test WHERE row_id % 40 = 0)"
    )[0]
    assert got["auc"] == pytest.approx(auc, rel=1e-12)
    assert got["lo"] == pytest.approx(max(auc - 1.959963984540054 * se, 0.0), rel=1e-9)
    assert got["hi"] == pytest.approx(min(auc + 1.959963984540054 * se, 1.0), rel=1e-9)
