-- Is the difference real? ECE with its bootstrap interval per calibrator, and the paired
-- comparison of the two best (for sql/significance.sql; run after nothing: self-contained).
--
--   calibsql --table valid=calibsql-demo/valid --table test=calibsql-demo/test \
--            -f sql/significance_intervals.sql
--
-- The calibrators of sql/ranking_calibration.sql, fitted on `valid` (UERM: clicks weighted by
-- their exposure propensity) and scored on `test`. ece_interval resamples *users*: the key is
-- user_id, so a replicate keeps or drops all of a user's rows together (a cluster bootstrap;
-- a user's rows share the user's effect, so rows are not independent). Its weights depend on
-- the key alone (docs/SEMANTICS.md, "Bootstrap weights"), so the calibrators' intervals are
-- drawn from the same replicates, and ece_diff_interval's paired interval is much narrower
-- than the two intervals side by side suggest.

CREATE OR REPLACE VIEW significance_models AS
          SELECT 'Platt UERM' AS method, 'score' AS input,
                 fit_platt(score, click, popularity_propensity(item_count, max_count)) AS model FROM valid
UNION ALL SELECT 'Gamma UERM', 'score',
                 fit_gamma_calib(score, click, popularity_propensity(item_count, max_count)) FROM valid
UNION ALL SELECT 'beta UERM', 'sigmoid',
                 fit_beta_calib(sigmoid(score), click, popularity_propensity(item_count, max_count)) FROM valid
UNION ALL SELECT 'temperature UERM', 'score',
                 fit_temperature(score, click, popularity_propensity(item_count, max_count)) FROM valid
UNION ALL SELECT 'isotonic naive', 'score', fit_isotonic(score, click) FROM valid;

CREATE OR REPLACE VIEW significance_predictions AS
SELECT m.method, t.user_id, t.click AS y,
       calibrate(CASE WHEN m.input = 'sigmoid' THEN sigmoid(t.score) ELSE t.score END, m.model) AS p
FROM test t CROSS JOIN significance_models m;

-- ECE and AUC per calibrator, each with its 95% interval (bootstrap over users; DeLong).
SELECT method,
       round(e['ece'], 4) AS ece, round(e['lower'], 4) AS ece_lower, round(e['upper'], 4) AS ece_upper,
       round(a['auc'], 4) AS auc, round(a['lower'], 4) AS auc_lower, round(a['upper'], 4) AS auc_upper
FROM (SELECT method, ece_interval(p, y, user_id) AS e, auc_interval(p, y) AS a
      FROM significance_predictions GROUP BY method)
ORDER BY e['ece'];

-- The two calibrators with the lowest ECE, compared on the same rows: the paired bootstrap of
-- their ECE difference (an interval that excludes 0: the difference is real at 95%) and
-- DeLong's paired test of their AUCs.
WITH ranked AS (
  SELECT method, row_number() OVER (ORDER BY ece(p, y)) AS r
  FROM significance_predictions GROUP BY method
),
best AS (
  SELECT a.method AS method_a, b.method AS method_b FROM ranked a, ranked b WHERE a.r = 1 AND b.r = 2
),
paired AS (
  SELECT t.user_id, t.click AS y,
         calibrate(CASE WHEN ma.input = 'sigmoid' THEN sigmoid(t.score) ELSE t.score END, ma.model) AS p_a,
         calibrate(CASE WHEN mb.input = 'sigmoid' THEN sigmoid(t.score) ELSE t.score END, mb.model) AS p_b
  FROM test t CROSS JOIN best
  JOIN significance_models ma ON ma.method = best.method_a
  JOIN significance_models mb ON mb.method = best.method_b
)
SELECT best.method_a, best.method_b,
       round(d['diff'], 4) AS ece_diff, round(d['lower'], 4) AS ece_diff_lower, round(d['upper'], 4) AS ece_diff_upper,
       round(a['diff'], 4) AS auc_diff, round(a['z'], 2) AS auc_z, round(a['p_value'], 4) AS auc_p_value
FROM best CROSS JOIN (SELECT ece_diff_interval(p_a, p_b, y, user_id) AS d, auc_test(p_a, p_b, y) AS a FROM paired);
