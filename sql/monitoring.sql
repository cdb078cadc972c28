-- Calibration over time from stored daily states, with a drift flag.
--   calibsql generate --rows 1M --out data --days 14 --drift-day 10   # p_model × 1.5 from day 10
--   calibsql --table valid=data/valid --table test=data/test -f sql/monitoring.sql
--   calibsql plot metric --table valid=data/valid --table test=data/test -f sql/monitoring.sql \
--     -c "SELECT day AS x, ece AS value, ece_lower AS lower, ece_upper AS upper, model AS series FROM monitoring" \
--     -o drift.svg
--
-- A daily job stores one partial state per day and model (here a table built from the whole
-- log; in production a Delta table the job appends each day's rows to, one version a day,
-- read back with --table daily=states:
--   CREATE EXTERNAL TABLE daily (day INT, model VARCHAR, n BIGINT, ece_s BYTEA, rce_s BYTEA,
--     ll_s BYTEA) STORED AS DELTA LOCATION 'states';
--   INSERT INTO daily SELECT day, 'ctr', count(*), ece_state(p_model, click, 15, 'uniform'),
--     field_rce_state(p_model, click, site_id), logloss_state(p_model, click)
--   FROM today GROUP BY day;
-- ). The report never rescans the
-- logs: daily values and 7-day rolling values are merged from the states (the rolling ones by
-- a sliding window that subtracts the day leaving it). The reference period is the first 7
-- days (days 0–6: a log needs more days than that, and drift after them, to be flagged); a
-- value is flagged when it leaves the reference mean ± 3 standard deviations of the
-- daily values (the rule NannyML uses), and that band is the interval shown with each value.

CREATE TABLE daily AS
SELECT day, model,
       count(*)                               AS n,
       ece_state(p, y, 15, 'uniform')         AS ece_s,
       field_rce_state(p, y, site_id)         AS rce_s,
       logloss_state(p, y)                    AS ll_s
FROM (SELECT day, 'ctr' AS model, p_model AS p, click AS y, site_id FROM test
      UNION ALL
      SELECT day, 'ranker' AS model, sigmoid(score) AS p, click AS y, site_id FROM test)
GROUP BY day, model;

CREATE VIEW daily_metrics AS
SELECT day, model, n,
       ece_merge(ece_s)      OVER today AS ece,
       ece_merge(ece_s)      OVER week  AS ece_7d,
       field_rce_merge(rce_s) OVER today AS rce_site,
       field_rce_merge(rce_s) OVER week  AS rce_site_7d,
       logloss_merge(ll_s)   OVER today AS logloss,
       logloss_merge(ll_s)   OVER week  AS logloss_7d
FROM daily
WINDOW today AS (PARTITION BY model ORDER BY day ROWS BETWEEN CURRENT ROW AND CURRENT ROW),
       week  AS (PARTITION BY model ORDER BY day ROWS BETWEEN 6 PRECEDING AND CURRENT ROW);

CREATE VIEW reference AS
SELECT model,
       avg(ece) AS ece_mean,      stddev(ece) AS ece_sd,
       avg(rce_site) AS rce_mean, stddev(rce_site) AS rce_sd,
       avg(logloss) AS ll_mean,   stddev(logloss) AS ll_sd
FROM daily_metrics WHERE day < 7 GROUP BY model;

CREATE VIEW monitoring AS
SELECT m.day, m.model, m.n,
       m.ece, m.ece_7d, r.ece_mean - 3 * r.ece_sd AS ece_lower, r.ece_mean + 3 * r.ece_sd AS ece_upper,
       m.rce_site, m.rce_site_7d, r.rce_mean - 3 * r.rce_sd AS rce_lower, r.rce_mean + 3 * r.rce_sd AS rce_upper,
       m.logloss, m.logloss_7d, r.ll_mean - 3 * r.ll_sd AS ll_lower, r.ll_mean + 3 * r.ll_sd AS ll_upper
FROM daily_metrics m JOIN reference r ON m.model = r.model;

SELECT day, model, n,
       round(ece, 4) AS ece, round(ece_7d, 4) AS ece_7d,
       CASE WHEN ece NOT BETWEEN ece_lower AND ece_upper THEN 'DRIFT' ELSE '' END AS ece_flag,
       round(rce_site, 4) AS rce_site, round(rce_site_7d, 4) AS rce_site_7d,
       CASE WHEN rce_site NOT BETWEEN rce_lower AND rce_upper THEN 'DRIFT' ELSE '' END AS rce_flag,
       round(logloss, 4) AS logloss,
       CASE WHEN logloss NOT BETWEEN ll_lower AND ll_upper THEN 'DRIFT' ELSE '' END AS ll_flag
FROM monitoring ORDER BY model, day;
