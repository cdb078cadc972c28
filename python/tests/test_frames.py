"""Data frames in and out: pandas, polars and pyarrow registered and queried, results
converted to each. Expected values are computed by pandas/numpy on the same frame."""

from __future__ import annotations

import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
import pytest

import calibsql


def frame(n: int = 5000, seed: int = 3) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    p = rng.uniform(0.01, 0.99, n)
    return pd.DataFrame(
        {
            "p": p,
            "y": (rng.uniform(size=n) < p).astype(np.int64),
            "site": rng.choice(["a", "b", "c"], n),
        }
    )


def brier_by_site(df: pd.DataFrame) -> dict[str, float]:
    return {s: float(((g.p - g.y) ** 2).mean()) for s, g in df.groupby("site")}


QUERY = "SELECT site, brier(p, y) AS b, count(*) AS n FROM t GROUP BY site ORDER BY site"


@pytest.mark.parametrize(
    "convert",
    [
        pytest.param(lambda df: df, id="pandas"),
        pytest.param(pl.from_pandas, id="polars"),
        pytest.param(lambda df: pa.Table.from_pandas(df, preserve_index=False), id="pyarrow-table"),
        pytest.param(
            lambda df: pa.RecordBatchReader.from_batches(
                pa.Schema.from_pandas(df, preserve_index=False),
                pa.Table.from_pandas(df, preserve_index=False).to_batches(max_chunksize=700),
            ),
            id="pyarrow-reader",
        ),
        pytest.param(lambda df: pa.Table.from_pandas(df).to_pydict(), id="dict"),
    ],
)
def test_frames_register_and_query(convert):
    df = frame()
    con = calibsql.connect(target_partitions=3)
    con.register("t", convert(df))
    r = con.sql(QUERY)
    got = {row["site"]: row["b"] for row in r.to_pylist()}
    want = brier_by_site(df)
    assert got.keys() == want.keys()
    for site in want:
        assert got[site] == pytest.approx(want[site], rel=1e-12)
    assert sum(row["n"] for row in r.to_pylist()) == len(df)


def test_results_round_trip_to_each_library():
    df = frame()
    con = calibsql.connect()
    con.register("t", df)
    r = con.sql("SELECT p, y, site FROM t ORDER BY p")
    expected = df.sort_values("p").reset_index(drop=True)

    as_pandas = r.to_pandas()
    pd.testing.assert_frame_equal(
        as_pandas[["p", "y"]], expected[["p", "y"]], check_dtype=False
    )
    assert list(as_pandas["site"]) == list(expected["site"])

    as_polars = r.to_polars()
    assert as_polars.shape == (len(df), 3)
    assert as_polars["p"].to_list() == expected["p"].to_list()

    as_arrow = r.to_arrow()
    assert isinstance(as_arrow, pa.Table)
    assert as_arrow.column("y").to_pylist() == expected["y"].to_list()
    # The PyCapsule interface: any Arrow consumer reads the result directly, repeatedly.
    assert pa.table(r).equals(as_arrow)
    assert pa.table(r).num_rows == len(df) == len(r) == r.num_rows
    assert r.columns == ["p", "y", "site"]
    assert r.schema.field("p").type == pa.float64()

    # And back in: a result registered as a table.
    con.register("again", r.to_arrow())
    assert con.sql("SELECT count(*) AS n FROM again").to_pylist() == [{"n": len(df)}]


def test_polars_string_view_and_nulls():
    # polars exports strings as Utf8View; nulls in p and y are skipped by the metrics.
    df = pl.DataFrame({"p": [0.2, None, 0.6, 0.9], "y": [0, 1, None, 1], "g": ["x", "x", "y", "y"]})
    con = calibsql.connect()
    con.register("t", df)
    rows = con.sql("SELECT g, brier(p, y) AS b FROM t GROUP BY g ORDER BY g").to_pylist()
    assert rows == [{"g": "x", "b": pytest.approx(0.04)}, {"g": "y", "b": pytest.approx(0.01)}]


def test_empty_frame_and_empty_result():
    con = calibsql.connect()
    con.register("t", pa.table({"p": pa.array([], pa.float64()), "y": pa.array([], pa.int64())}))
    r = con.sql("SELECT ece(p, y) AS e FROM t")
    assert r.to_pylist() == [{"e": None}]
    r = con.sql("SELECT p FROM t")
    assert len(r) == 0 and r.to_pandas().shape == (0, 1) and r.to_polars().shape == (0, 1)
