"""Bad input raises calibsql.Error with the CLI's one-line message; nothing crashes."""

from __future__ import annotations

import pyarrow as pa
import pytest

import calibsql
import calibsql.datafusion
import children


def test_error_is_a_value_error():
    assert issubclass(calibsql.Error, ValueError)


def test_bad_value_raises_with_the_cli_message(binary):
    con = calibsql.connect()
    con.register("t", pa.table({"p": [0.2, 1.7], "y": [0, 1]}))
    with pytest.raises(calibsql.Error) as raised:
        con.sql("SELECT ece(p, y) FROM t")
    message = str(raised.value)
    assert "ece: argument p must be in [0, 1], got 1.7" in message
    assert "\n" not in message

    # The CLI prints the same text after "Error: ".
    cli = children.run(
        [str(binary), "-c", "SELECT ece(p, y) FROM (VALUES (0.2, 0), (1.7, 1)) AS t(p, y)"],
        text=True,
    )
    assert cli.returncode == 1
    assert cli.stderr.strip() == f"Error: {message}"


def test_bad_value_through_datafusion_python():
    import datafusion

    ctx = datafusion.SessionContext()
    calibsql.datafusion.register_all(ctx)
    ctx.from_arrow(pa.table({"p": [0.2, 1.7], "y": [0, 1]}), name="t")
    with pytest.raises(Exception, match=r"ece: argument p must be in \[0, 1\], got 1.7"):
        ctx.sql("SELECT ece(p, y) FROM t").collect()
    with pytest.raises(Exception, match="argument lambda must be finite and >= 0, got -1"):
        ctx.sql("SELECT confcalib_multiplier(p, 0.3, 10.0, -1) FROM t").collect()
    with pytest.raises(Exception, match="argument lambda must be a constant"):
        ctx.sql("SELECT confcalib_multiplier(p, 0.3, 10.0, p) FROM t").collect()


def test_missing_file_raises():
    con = calibsql.connect()
    with pytest.raises(calibsql.Error, match="no such file or directory: /no/such/dir/x.parquet"):
        con.register("t", "/no/such/dir/x.parquet")
    with pytest.raises(calibsql.Error, match="No files found|no such file|not found"):
        con.sql("SELECT * FROM '/no/such/dir/y.parquet'")


def test_bad_sql_and_unknown_things():
    con = calibsql.connect()
    with pytest.raises(calibsql.Error, match="SQL error"):
        con.sql("SELEC 1")
    with pytest.raises(calibsql.Error, match="table 'nope' not found|nope"):
        con.sql("SELECT * FROM nope")
    with pytest.raises(calibsql.Error, match="no SQL statement"):
        con.sql("  -- nothing\n")
    with pytest.raises(calibsql.Error, match="format must be one of"):
        con.register("t", "x.parquet", format="xlsx")
    with pytest.raises(calibsql.Error, match="expected a path, URL or data frame"):
        con.register("t", 42)
    con.register("t", pa.table({"a": [1]}))
    with pytest.raises(calibsql.Error, match="table 't' already exists"):
        con.register("t", pa.table({"a": [1]}))
    with pytest.raises(calibsql.Error, match="strategy must be one of uniform, quantile"):
        con.plot_reliability("SELECT 0.5 AS p, 1 AS y", strategy="nope")
    with pytest.raises(calibsql.Error, match="must return columns p and y"):
        con.plot_reliability("SELECT 1 AS a")


def test_bad_connect_arguments():
    with pytest.raises(calibsql.Error, match="target_partitions must be >= 1"):
        calibsql.connect(target_partitions=0)
    with pytest.raises(calibsql.Error, match="memory_limit must be a size"):
        calibsql.connect(memory_limit="lots")
    with pytest.raises(calibsql.Error, match="memory_limit must be > 0"):
        calibsql.connect(memory_limit=-5)


def test_memory_limit_is_enforced():
    # An isotonic fit's blocks stay in memory (kept rows spill; see the next test).
    con = calibsql.connect(memory_limit="1M", target_partitions=1)
    with pytest.raises(calibsql.Error, match="Resources exhausted.*hint"):
        con.sql(
            "SELECT fit_isotonic(CAST((v * 2654435761) % 4294967311 AS DOUBLE) / 4294967311.0, "
            "v % 3 = 0) FROM generate_series(1, 2000000) AS t(v)"
        )


def test_kept_rows_spill_under_the_memory_limit():
    # 16 MB of scores under 4 MB: spilled to disk, the unlimited value. The scores are a
    # permutation-like hash of v, so the value is not trivial; this compares the code with
    # itself (limited and not): auc's references are checked in tests/slt.
    sql = (
        "SELECT auc(CAST((v * 2654435761) % 4294967311 AS DOUBLE) / 4294967311.0, v % 3 = 0) "
        "FROM generate_series(1, 2000000) AS t(v)"
    )
    limited = calibsql.connect(memory_limit="4M", target_partitions=2).sql(sql).to_pylist()
    unlimited = calibsql.connect(target_partitions=2).sql(sql).to_pylist()
    assert limited == unlimited and 0.49 < list(limited[0].values())[0] < 0.51
    # Weighted rows spill with their weights (32 MB under 4 MB).
    weighted = sql.replace("v % 3 = 0)", "v % 3 = 0, 1.0 + v % 5)")
    limited = calibsql.connect(memory_limit="4M", target_partitions=2).sql(weighted).to_pylist()
    unlimited = calibsql.connect(target_partitions=2).sql(weighted).to_pylist()
    (a,), (b,) = limited[0].values(), unlimited[0].values()
    assert abs(a - b) <= 1e-12 and 0.49 < a < 0.51
    # auc_test's pairs spill, both scores of a row together (32 MB under 4 MB).
    paired = (
        "SELECT auc_test(CAST((v * 2654435761) % 4294967311 AS DOUBLE) / 4294967311.0, "
        "(v % 7) / 7.0, v % 3 = 0) AS r FROM generate_series(1, 2000000) AS t(v)"
    )
    limited = calibsql.connect(memory_limit="4M", target_partitions=2).sql(paired).to_pylist()
    unlimited = calibsql.connect(target_partitions=2).sql(paired).to_pylist()
    assert limited == unlimited and limited[0]["r"]["se"] > 0


def test_wrong_datafusion_major_is_refused(monkeypatch):
    # The check's input is patched; installing another datafusion is not needed.
    with pytest.raises(calibsql.Error) as raised:
        calibsql.datafusion.check_datafusion_version("54.1.0")
    assert "version 54.1.0" in str(raised.value) and "DataFusion 55.2.0" in str(raised.value)
    calibsql.datafusion.check_datafusion_version("55.0.0")
    calibsql.datafusion.check_datafusion_version("55.7.1")

    import datafusion

    monkeypatch.setattr(datafusion, "__version__", "56.0.0")
    with pytest.raises(calibsql.Error, match="version 56.0.0.*datafusion 55.x"):
        calibsql.datafusion.register_all(datafusion.SessionContext())


def test_register_all_wants_a_session_context():
    with pytest.raises(calibsql.Error, match="expected a datafusion.SessionContext, got dict"):
        calibsql.datafusion.register_all({})


def test_register_all_without_datafusion_says_what_to_install(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_datafusion(name, *args, **kwargs):
        if name == "datafusion":
            raise ImportError("No module named 'datafusion'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_datafusion)
    with pytest.raises(calibsql.Error, match=r"pip install 'datafusion>=55,<56'"):
        calibsql.datafusion.register_all(object())
