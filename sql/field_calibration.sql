-- Field-level calibration of a CTR model: the shape of Zhao et al., "Confidence-Aware
-- Multi-Field Model Calibration" (ConfCalib), Table 2, with the Field-RCE of Pan et al.,
-- "Field-aware Calibration" (WWW 2020).
--
--   calibsql generate --rows 1000000 --out calibsql-demo      (or: calibsql demo)
--   calibsql --table valid=calibsql-demo/valid --table test=calibsql-demo/test \
--            -f sql/field_calibration.sql
--
-- `p_model` is a CTR model's predicted click probability, off by a different factor for each
-- site_id (thousands of values, most of them rare), app_id and ad_type. ConfCalib rescales the
-- predictions of each field value towards its observed click rate, by as much as the value's
-- sample size makes credible (the Wilson interval): confcalib_multiplier(avg(p), avg(y), n).
-- Multi-field ConfCalib fuses the fields' multipliers as p · Π m_k^w_k, with the weights w_k
-- chosen on the valid split by a grid search over multi-field RCE (the mean of field_rce over
-- site_id, app_id and ad_type). Multipliers and weights come from valid; scores from test.

-- Per field value: the ConfCalib multiplier, from the valid split.
CREATE OR REPLACE TABLE site_multiplier AS
SELECT site_id, confcalib_multiplier(avg(p_model), avg(click), count(*)) AS m FROM valid GROUP BY site_id;
CREATE OR REPLACE TABLE app_multiplier AS
SELECT app_id, confcalib_multiplier(avg(p_model), avg(click), count(*)) AS m FROM valid GROUP BY app_id;
CREATE OR REPLACE TABLE ad_type_multiplier AS
SELECT ad_type, confcalib_multiplier(avg(p_model), avg(click), count(*)) AS m FROM valid GROUP BY ad_type;

-- Each split with its rows' multipliers (1 for a field value valid never saw).
CREATE OR REPLACE VIEW valid_multipliers AS
SELECT d.p_model AS p, d.click AS y, d.site_id, d.app_id, d.ad_type,
       coalesce(s.m, 1.0) AS m_site, coalesce(a.m, 1.0) AS m_app, coalesce(t.m, 1.0) AS m_ad_type
FROM valid d
LEFT JOIN site_multiplier s ON d.site_id = s.site_id
LEFT JOIN app_multiplier a ON d.app_id = a.app_id
LEFT JOIN ad_type_multiplier t ON d.ad_type = t.ad_type;
CREATE OR REPLACE VIEW test_multipliers AS
SELECT d.p_model AS p, d.click AS y, d.site_id, d.app_id, d.ad_type,
       coalesce(s.m, 1.0) AS m_site, coalesce(a.m, 1.0) AS m_app, coalesce(t.m, 1.0) AS m_ad_type
FROM test d
LEFT JOIN site_multiplier s ON d.site_id = s.site_id
LEFT JOIN app_multiplier a ON d.app_id = a.app_id
LEFT JOIN ad_type_multiplier t ON d.ad_type = t.ad_type;

-- The fusion weights: every combination of 0, 0.5 and 1 per field, scored on valid.
CREATE OR REPLACE TABLE fusion_grid AS
SELECT w_site, w_app, w_ad_type,
       (field_rce(p, y, site_id) + field_rce(p, y, app_id) + field_rce(p, y, ad_type)) / 3 AS multi_rce
FROM (
  SELECT g.w_site, g.w_app, g.w_ad_type, v.y, v.site_id, v.app_id, v.ad_type,
         least(v.p * power(v.m_site, g.w_site) * power(v.m_app, g.w_app)
                   * power(v.m_ad_type, g.w_ad_type), 1.0) AS p
  FROM valid_multipliers v
  CROSS JOIN (SELECT * FROM (VALUES (0.0), (0.5), (1.0)) AS a(w_site)
              CROSS JOIN (VALUES (0.0), (0.5), (1.0)) AS b(w_app)
              CROSS JOIN (VALUES (0.0), (0.5), (1.0)) AS c(w_ad_type)) AS g
)
GROUP BY w_site, w_app, w_ad_type;
CREATE OR REPLACE VIEW fusion_weights AS
SELECT w_site, w_app, w_ad_type FROM fusion_grid
ORDER BY multi_rce, w_site, w_app, w_ad_type LIMIT 1;

WITH predictions AS (
            SELECT 1 AS k, 'uncalibrated' AS method, p, y, site_id, app_id, ad_type
            FROM test_multipliers
  UNION ALL SELECT 2, 'ConfCalib, site_id', least(p * m_site, 1.0), y, site_id, app_id, ad_type
            FROM test_multipliers
  UNION ALL SELECT 3, 'ConfCalib, multi-field (w = ' || w.w_site || ', ' || w.w_app || ', ' || w.w_ad_type || ')',
                   least(p * power(m_site, w.w_site) * power(m_app, w.w_app) * power(m_ad_type, w.w_ad_type), 1.0),
                   y, site_id, app_id, ad_type
            FROM test_multipliers CROSS JOIN fusion_weights w
)
SELECT method,
       round(field_rce(p, y, site_id), 4) AS field_rce_site,
       round((field_rce(p, y, site_id) + field_rce(p, y, app_id) + field_rce(p, y, ad_type)) / 3, 4)
                                          AS multi_field_rce,
       round(ece(p, y, 15), 4)            AS ece,
       round(auc(p, y), 4)                AS auc
FROM predictions
GROUP BY k, method
ORDER BY k;
