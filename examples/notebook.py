"""A notebook's worth of calibsql from Python, as a script (each `# %%` is a cell in VS Code
and Jupytext). python/tests/test_notebook.py runs it.

    python examples/notebook.py [DIR]

DIR (default: a temporary directory) receives synthetic logs from `calibsql generate` (the
binary: $CALIBSQL_BIN or `calibsql` on PATH) and reliability.svg.
"""

# %% Synthetic logs with known truth
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import calibsql

out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp())
binary = os.environ.get("CALIBSQL_BIN") or shutil.which("calibsql") or "calibsql"
subprocess.run([binary, "generate", "--rows", "100K", "--out", str(out), "-q"], check=True)

# %% Register the logs and ask for the calibration of the CTR model per ad format
con = calibsql.connect()
con.register("valid", out / "valid")  # a directory, a glob or an s3:// URL work the same
con.register("test", out / "test")
per_format = con.sql(
    """
    SELECT ad_type, count(*) AS n, round(ece(p_model, click), 4) AS ece,
           round(logloss(p_model, click), 4) AS logloss
    FROM test GROUP BY ad_type ORDER BY ad_type
    """
)
print(per_format)
df = per_format.to_pandas()  # or .to_polars(), .to_arrow(), pyarrow.table(per_format)

# %% Fit calibrators on half of the test split, store the models as one row, apply them on
# the other half (the valid split's clicks are missing not at random: see docs/DATA.md)
con.sql(
    """
    CREATE VIEW models AS
    SELECT fit_platt(logit(p_model), click) AS platt,
           fit_confcalib(p_model, click, ad_type) AS confcalib
    FROM test WHERE row_id % 2 = 0
    """
)
print(
    con.sql(
        """
        SELECT round(ece(p_model, click), 4) AS ece_raw,
               round(ece(calibrate(logit(p_model), platt), click), 4) AS ece_platt,
               round(field_rce(p_model, click, ad_type), 4) AS field_rce_raw,
               round(field_rce(calibrate(p_model, confcalib, ad_type), click, ad_type), 4)
                   AS field_rce_confcalib
        FROM test CROSS JOIN models WHERE row_id % 2 = 1
        """
    )
)

# %% A reliability diagram: in Jupyter the returned object shows itself inline
svg = con.plot_reliability(
    "SELECT p_model AS p, click AS y, ad_type AS series FROM test", bins=10
)
svg.save(out / "reliability.svg")
print(f"wrote {out / 'reliability.svg'}")

# %% The same functions in a datafusion-python session of your own
try:
    import datafusion
except ImportError:
    datafusion = None
if datafusion is not None:
    import calibsql.datafusion

    ctx = datafusion.SessionContext()
    calibsql.datafusion.register_all(ctx)
    ctx.register_parquet("test", str(out / "test"))
    ctx.sql("SELECT round(ece(p_model, click), 4) AS ece FROM test").show()
