-- The stored-model fixture `models.parquet`: one model per calibrator (fit_histogram twice,
-- for its two stored methods), fitted on 600 deterministic rows by the calibsql binary of the
-- commit that added this file (before the model's `method` became an enum). `tests/fits/
-- stored_models.rs` reads it back and applies `calibrate`, so a later change to the model's
-- layout or its method names that would break models users already stored fails there.
-- Rewrite (only on purpose, with a note in the commit): from the repository root,
--   calibsql -f tests/data/models/write.sql
CREATE TABLE rows AS
SELECT CAST(i AS DOUBLE) AS i,
       (CAST(i % 41 AS DOUBLE) - 20.0) / 5.0 AS s,
       1.0 / (1.0 + exp(-(CAST(i % 41 AS DOUBLE) - 20.0) / 5.0)) AS p,
       CASE WHEN CAST((i * 7919) % 1000 AS DOUBLE) / 1000.0
                 < 1.0 / (1.0 + exp(-0.7 * (CAST(i % 41 AS DOUBLE) - 20.0) / 5.0 - 0.3))
            THEN 1 ELSE 0 END AS y,
       CASE i % 3 WHEN 0 THEN 'a' WHEN 1 THEN 'b' ELSE 'c' END AS f
FROM generate_series(1, 600) AS t(i);

COPY (
  SELECT 'fit_platt' AS fit, fit_platt(s, y) AS model FROM rows
  UNION ALL SELECT 'fit_temperature', fit_temperature(s, y) FROM rows
  UNION ALL SELECT 'fit_beta_calib', fit_beta_calib(p, y) FROM rows
  UNION ALL SELECT 'fit_gaussian_calib', fit_gaussian_calib(s, y) FROM rows
  UNION ALL SELECT 'fit_gamma_calib', fit_gamma_calib(s, y) FROM rows
  UNION ALL SELECT 'fit_isotonic', fit_isotonic(s, y) FROM rows
  UNION ALL SELECT 'fit_histogram', fit_histogram(s, y, 8) FROM rows
  UNION ALL SELECT 'fit_histogram_quantile', fit_histogram(s, y, 8, 'quantile') FROM rows
  UNION ALL SELECT 'fit_ilps', fit_ilps(s, y, 5) FROM rows
  UNION ALL SELECT 'fit_bbq', fit_bbq(p, y) FROM rows
  UNION ALL SELECT 'fit_confcalib', fit_confcalib(p, y, f, 4) FROM rows
  UNION ALL SELECT 'fit_field_calib', fit_field_calib(s, y, f, 5) FROM rows
  ORDER BY fit
) TO 'tests/data/models/models.parquet' STORED AS PARQUET;
