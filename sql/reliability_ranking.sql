-- Reliability diagrams of the ranking model's main calibrators on the unbiased test split
-- (the diagrams of Kweon et al., AAAI 2022, Figure 1). Returns p, y and series for
-- `calibsql plot reliability`, which bins them with the reliability() and ece() functions:
--
--   calibsql plot reliability --table valid=calibsql-demo/valid --table test=calibsql-demo/test \
--            -f sql/reliability_ranking.sql -o reliability_ranking.svg
--
-- Panels are sorted by series, hence the letters. The fits are those of
-- sql/ranking_calibration.sql: on the biased valid split, naive or UERM with the popularity
-- propensity.

WITH models AS (
            SELECT '(b) Platt, naive' AS series, fit_platt(score, click) AS model FROM valid
  UNION ALL SELECT '(c) Platt, UERM',
                   fit_platt(score, click, popularity_propensity(item_count, max_count)) FROM valid
  UNION ALL SELECT '(d) Gamma, UERM',
                   fit_gamma_calib(score, click, popularity_propensity(item_count, max_count)) FROM valid
)
SELECT '(a) uncalibrated, sigmoid' AS series, sigmoid(score) AS p, click AS y FROM test
UNION ALL
SELECT m.series, calibrate(t.score, m.model), t.click FROM test t CROSS JOIN models m;
