-- Field-level calibration of a CTR model: Zhao et al., "Confidence-Aware Multi-Field Model
-- Calibration" (ConfCalib), Table 2, and Pan et al., "Field-aware Calibration" (WWW 2020),
-- Table 6, in SQL: every calibrator fitted on one split, scored on another.
--
--   calibsql generate --rows 1000000 --out calibsql-demo      (or: calibsql demo)
--   calibsql --table valid=calibsql-demo/valid --table test=calibsql-demo/test \
--            -f sql/field_calibration.sql
--
-- `p_model` is a CTR model's predicted click probability, off by a different factor for each
-- site_id (thousands of values, most of them rare), app_id and ad_type (docs/DATA.md). Every
-- calibrator is fitted on `valid` and applied to `test`; the factors are the same in both.
--   - Global calibrators map p (or its logit) alone: Platt, temperature, beta, Gaussian, Gamma,
--     isotonic, histogram (equal-frequency, Zhao's baseline), ILPS (Pan et al. eq. 9-11).
--   - Field-aware ILPS (Pan eq. 7, "ILPS & field z only"): ILPS plus one offset per site_id,
--     with an L2 penalty that keeps rare sites near 0. The penalty is on the summed loss, so it
--     must grow with the rows a value needs before its offset is trusted: with 5,000 mostly
--     rare sites, l2 = 300 (l2 = 1 overfits the rare sites and does worse than ILPS alone).
--   - ConfCalib (Zhao 3.2): per field value (and bin of p), the observed/predicted ratio shrunk
--     by a Wilson-interval confidence. Single-field on site_id; multi-field fuses the three
--     fields' multipliers as p · Π m_k^w_k with weights on the simplex (Σ w = 1, Zhao eq. 4)
--     chosen on the valid split by multi-field RCE over a grid of step 0.25, applied to test.
--     On the simplex the fused multiplier is a weighted geometric mean of the fields' own, so
--     it cannot correct every field fully; the last row applies all three (w = 1, 1, 1).
-- Columns: AUC, log loss, Field-RCE on site_id, multi-field RCE (site_id, app_id, ad_type),
-- ECE (15 equal-width bins) and MVCE (Zhao eq. 7: 10 random partitions of users into 15 bins).

CREATE OR REPLACE TABLE field_models AS
          SELECT 'Platt' AS method, fit_platt(logit(p_model), click) AS model FROM valid
UNION ALL SELECT 'temperature', fit_temperature(logit(p_model), click) FROM valid
UNION ALL SELECT 'beta', fit_beta_calib(p_model, click) FROM valid
UNION ALL SELECT 'Gaussian', fit_gaussian_calib(logit(p_model), click) FROM valid
UNION ALL SELECT 'Gamma', fit_gamma_calib(logit(p_model), click) FROM valid
UNION ALL SELECT 'isotonic', fit_isotonic(p_model, click) FROM valid
UNION ALL SELECT 'histogram (quantile)', fit_histogram(p_model, click, 15, 'quantile') FROM valid
UNION ALL SELECT 'ILPS', fit_ilps(logit(p_model), click) FROM valid;

CREATE OR REPLACE TABLE field_aware_models AS
SELECT fit_field_calib(logit(p_model), click, site_id, 100, 300.0) AS ilps_site,
       fit_confcalib(p_model, click, site_id, 1) AS cc_site,
       fit_confcalib(p_model, click, app_id, 1) AS cc_app,
       fit_confcalib(p_model, click, ad_type, 1) AS cc_ad_type
FROM valid;

-- Each split with its rows' ConfCalib multipliers (p' / p; 1 for a value valid never saw).
CREATE OR REPLACE VIEW valid_multipliers AS
SELECT d.p_model AS p, d.click AS y, d.site_id, d.app_id, d.ad_type,
       calibrate(d.p_model, f.cc_site, d.site_id) / d.p_model AS m_site,
       calibrate(d.p_model, f.cc_app, d.app_id) / d.p_model AS m_app,
       calibrate(d.p_model, f.cc_ad_type, d.ad_type) / d.p_model AS m_ad_type
FROM valid d CROSS JOIN field_aware_models f;
CREATE OR REPLACE VIEW test_multipliers AS
SELECT d.p_model AS p, d.click AS y, d.site_id, d.app_id, d.ad_type, d.user_id,
       calibrate(d.p_model, f.cc_site, d.site_id) / d.p_model AS m_site,
       calibrate(d.p_model, f.cc_app, d.app_id) / d.p_model AS m_app,
       calibrate(d.p_model, f.cc_ad_type, d.ad_type) / d.p_model AS m_ad_type
FROM test d CROSS JOIN field_aware_models f;

-- The fusion weights on the simplex (Σ w = 1, step 0.25), scored on valid.
CREATE OR REPLACE TABLE fusion_grid AS
WITH steps AS (SELECT * FROM (VALUES (0.0), (0.25), (0.5), (0.75), (1.0)) AS s(w)),
simplex AS (SELECT a.w AS w_site, b.w AS w_app, 1.0 - a.w - b.w AS w_ad_type
            FROM steps a CROSS JOIN steps b WHERE a.w + b.w <= 1.0)
SELECT w_site, w_app, w_ad_type, multi_field_rce(p, y, site_id, app_id, ad_type) AS multi_rce
FROM (
  SELECT g.w_site, g.w_app, g.w_ad_type, v.y, v.site_id, v.app_id, v.ad_type,
         least(v.p * power(v.m_site, g.w_site) * power(v.m_app, g.w_app)
                   * power(v.m_ad_type, g.w_ad_type), 1.0) AS p
  FROM valid_multipliers v CROSS JOIN simplex g
)
GROUP BY w_site, w_app, w_ad_type;
CREATE OR REPLACE VIEW fusion_weights AS
SELECT w_site, w_app, w_ad_type FROM fusion_grid
ORDER BY multi_rce, w_site, w_app, w_ad_type LIMIT 1;

WITH predictions AS (
            SELECT 1 AS k, 'uncalibrated' AS method, p_model AS p, click AS y, site_id, app_id, ad_type, user_id
            FROM test
  UNION ALL SELECT CASE m.method WHEN 'Platt' THEN 2 WHEN 'temperature' THEN 3 WHEN 'beta' THEN 4
                                 WHEN 'Gaussian' THEN 5 WHEN 'Gamma' THEN 6 WHEN 'isotonic' THEN 7
                                 WHEN 'histogram (quantile)' THEN 8 ELSE 9 END,
                   m.method,
                   calibrate(CASE WHEN m.method IN ('beta', 'isotonic', 'histogram (quantile)')
                                  THEN t.p_model ELSE logit(t.p_model) END, m.model),
                   t.click, t.site_id, t.app_id, t.ad_type, t.user_id
            FROM test t CROSS JOIN field_models m
  UNION ALL SELECT 10, 'field-aware ILPS, site_id', calibrate(logit(t.p_model), f.ilps_site, t.site_id),
                   t.click, t.site_id, t.app_id, t.ad_type, t.user_id
            FROM test t CROSS JOIN field_aware_models f
  UNION ALL SELECT 11, 'ConfCalib, site_id', least(p * m_site, 1.0), y, site_id, app_id, ad_type, user_id
            FROM test_multipliers
  UNION ALL SELECT 12, 'ConfCalib, multi-field (w = ' || w.w_site || ', ' || w.w_app || ', ' || w.w_ad_type || ')',
                   least(p * power(m_site, w.w_site) * power(m_app, w.w_app) * power(m_ad_type, w.w_ad_type), 1.0),
                   y, site_id, app_id, ad_type, user_id
            FROM test_multipliers CROSS JOIN fusion_weights w
  UNION ALL SELECT 13, 'ConfCalib, all fields (w = 1, 1, 1)', least(p * m_site * m_app * m_ad_type, 1.0),
                   y, site_id, app_id, ad_type, user_id
            FROM test_multipliers
)
SELECT method,
       round(field_rce(p, y, site_id), 4)                          AS field_rce_site,
       round(multi_field_rce(p, y, site_id, app_id, ad_type), 4)   AS multi_field_rce,
       round(auc(p, y), 4)                                         AS auc,
       round(logloss(p, y), 4)                                     AS logloss,
       round(ece(p, y, 15), 4)                                     AS ece,
       round(mvce(p, y, user_id), 4)                               AS mvce
FROM predictions
GROUP BY k, method
ORDER BY k;
