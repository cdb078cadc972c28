-- Is the miscalibration real? Calibration tests and estimates with their uncertainty, on the
-- CTR model of the demo data and two calibrators fitted on the other split.
--
--   calibsql generate --rows 1000000 --out calibsql-demo      (or: calibsql demo)
--   calibsql --table valid=calibsql-demo/valid --table test=calibsql-demo/test \
--            -f sql/significance.sql
--
-- `p_model` is calibrated overall but off by a factor per site_id, app_id and ad_type
-- (docs/DATA.md). Platt and temperature scaling are fitted on `valid` and scored on `test`.
-- Per model (first table):
--   - Spiegelhalter's z and its p-value: is the squared error larger than calibrated
--     predictions would give by chance?
--   - the logistic recalibration: intercept and slope of logit P(click) on logit(p) (0 and 1
--     when calibrated; a slope below 1 means over-confident), and calibration-in-the-large,
--     each with its standard error: an estimate two standard errors from its target is a
--     real miscalibration, one inside them may be chance;
--   - the Hosmer-Lemeshow statistic and p-value (10 groups by quantiles of p);
--   - the CORP decomposition of the Brier score: miscalibration (what isotonic recalibration
--     would remove) and discrimination.
-- Per site (second table): the sites whose bias (observed minus predicted click rate) is
-- significant after Holm's correction over all the sites, at a 5% family-wise error rate.
-- A global metric averages these opposite biases away; the thousands of rare sites show large
-- biases by chance, which the correction discounts. The Wilson z is a normal approximation:
-- a site with one click at p = 0.01 gets z = 10, so only sites with at least 5 expected clicks
-- and 5 expected non-clicks are listed (the correction still counts every site).
-- Then, for the ranking model's calibrators (third and fourth tables): ECE and AUC with their
-- 95% intervals per calibrator, and the paired comparison of the two with the lowest ECE.

CREATE OR REPLACE TABLE significance_models AS
SELECT fit_platt(logit(p_model), click) AS platt, fit_temperature(logit(p_model), click) AS temp
FROM valid;

CREATE OR REPLACE VIEW significance_scored AS
SELECT 'CTR model' AS method, d.p_model AS p, d.click AS y FROM test d
UNION ALL
SELECT 'Platt', calibrate(logit(d.p_model), m.platt), d.click FROM test d CROSS JOIN significance_models m
UNION ALL
SELECT 'temperature', calibrate(logit(d.p_model), m.temp), d.click FROM test d CROSS JOIN significance_models m;

SELECT method, s['n'] AS n,
       round(z['z'], 3) AS spiegelhalter_z, round(z['p_value'], 4) AS spiegelhalter_p,
       round(s['intercept'], 4) AS intercept, round(s['slope'], 4) AS slope,
       round(s['slope_se'], 4) AS slope_se, round(s['citl'], 4) AS citl,
       round(s['citl_se'], 4) AS citl_se,
       round(h['statistic'], 2) AS hl_statistic, round(h['p_value'], 4) AS hl_p,
       round(d['miscalibration'], 6) AS brier_mcb, round(d['discrimination'], 6) AS brier_dsc
FROM (SELECT method, spiegelhalter(p, y) AS z, calibration_slope(p, y) AS s,
             hosmer_lemeshow(p, y) AS h, calibration_decomposition(p, y) AS d
      FROM significance_scored GROUP BY method)
ORDER BY method;

SELECT b['field'] AS site_id, CAST(b['n'] AS BIGINT) AS rows, round(b['mean_p'], 5) AS mean_p,
       round(b['frac_pos'], 5) AS click_rate, round(b['bias'], 5) AS bias,
       round(b['z'], 2) AS z, b['p_adjusted'] AS p_adjusted
FROM (SELECT unnest(field_bias(p_model, click, site_id)) AS b FROM test)
WHERE b['p_adjusted'] < 0.05 AND b['n'] * b['mean_p'] >= 5 AND b['n'] * (1 - b['mean_p']) >= 5
ORDER BY b['p_adjusted'], b['field'];

-- Is a difference between calibrators real? The calibrators of sql/ranking_calibration.sql,
-- fitted on `valid` (UERM: clicks weighted by their exposure propensity) and scored on `test`.
-- ece_interval resamples *users*: the key is user_id, so a replicate keeps or drops all of a
-- user's rows together (a cluster bootstrap: a user's rows share the user's effect). Its
-- weights depend on the key alone (docs/SEMANTICS.md, "Bootstrap weights"), so the
-- calibrators' intervals come from the same replicates, and ece_diff_interval's paired
-- interval is much narrower than the two intervals side by side suggest.

CREATE OR REPLACE VIEW interval_models AS
          SELECT 'Platt UERM' AS method, 'score' AS input,
                 fit_platt(score, click, popularity_propensity(item_count, max_count)) AS model FROM valid
UNION ALL SELECT 'Gamma UERM', 'score',
                 fit_gamma_calib(score, click, popularity_propensity(item_count, max_count)) FROM valid
UNION ALL SELECT 'beta UERM', 'sigmoid',
                 fit_beta_calib(sigmoid(score), click, popularity_propensity(item_count, max_count)) FROM valid
UNION ALL SELECT 'temperature UERM', 'score',
                 fit_temperature(score, click, popularity_propensity(item_count, max_count)) FROM valid
UNION ALL SELECT 'isotonic naive', 'score', fit_isotonic(score, click) FROM valid;

CREATE OR REPLACE VIEW interval_predictions AS
SELECT m.method, t.user_id, t.click AS y,
       calibrate(CASE WHEN m.input = 'sigmoid' THEN sigmoid(t.score) ELSE t.score END, m.model) AS p
FROM test t CROSS JOIN interval_models m;

-- ECE and AUC per calibrator, each with its 95% interval (bootstrap over users; DeLong).
SELECT method,
       round(e['ece'], 4) AS ece, round(e['lower'], 4) AS ece_lower, round(e['upper'], 4) AS ece_upper,
       round(a['auc'], 4) AS auc, round(a['lower'], 4) AS auc_lower, round(a['upper'], 4) AS auc_upper
FROM (SELECT method, ece_interval(p, y, user_id) AS e, auc_interval(p, y) AS a
      FROM interval_predictions GROUP BY method)
ORDER BY e['ece'];

-- The two calibrators with the lowest ECE, compared on the same rows: the paired bootstrap of
-- their ECE difference (an interval that excludes 0: the difference is real at 95%) and
-- DeLong's paired test of their AUCs.
WITH ranked AS (
  SELECT method, row_number() OVER (ORDER BY ece(p, y)) AS r
  FROM interval_predictions GROUP BY method
),
best AS (
  SELECT a.method AS method_a, b.method AS method_b FROM ranked a, ranked b WHERE a.r = 1 AND b.r = 2
),
paired AS (
  SELECT t.user_id, t.click AS y,
         calibrate(CASE WHEN ma.input = 'sigmoid' THEN sigmoid(t.score) ELSE t.score END, ma.model) AS p_a,
         calibrate(CASE WHEN mb.input = 'sigmoid' THEN sigmoid(t.score) ELSE t.score END, mb.model) AS p_b
  FROM test t CROSS JOIN best
  JOIN interval_models ma ON ma.method = best.method_a
  JOIN interval_models mb ON mb.method = best.method_b
)
SELECT best.method_a, best.method_b,
       round(d['diff'], 4) AS ece_diff, round(d['lower'], 4) AS ece_diff_lower, round(d['upper'], 4) AS ece_diff_upper,
       round(a['diff'], 4) AS auc_diff, round(a['z'], 2) AS auc_z, round(a['p_value'], 4) AS auc_p_value
FROM best CROSS JOIN (SELECT ece_diff_interval(p_a, p_b, y, user_id) AS d, auc_test(p_a, p_b, y) AS a FROM paired);
