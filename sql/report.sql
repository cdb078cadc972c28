-- The calibration report's query: the CTR model and the ranker's raw sigmoid(score) on the
-- test split, with the day, two segment fields and the event id as `key` (which gives the
-- ECE's bootstrap interval and the paired comparison of the two models).
--   calibsql report --table valid=calibsql-demo/monitoring/valid --table test=calibsql-demo/monitoring/test \
--     -f sql/report.sql --field site_id --field ad_type -o report.html
SELECT p_model AS p, click AS y, day, site_id, ad_type, row_id AS key, 'ctr' AS model FROM test
UNION ALL
SELECT sigmoid(score) AS p, click AS y, day, site_id, ad_type, row_id AS key, 'ranker' AS model
FROM test
