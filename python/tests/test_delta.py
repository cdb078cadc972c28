"""Delta Lake tables: written by delta-rs's own Python package (PyPI `deltalake`), read by
calibsql's CLI, Python module and server; written by calibsql and read back by `deltalake`.

Expected numbers come from the rows as the test built them (numpy arrays, filtered in numpy
the way the table's DELETE filtered them) and textbook formulas in numpy, never from calibsql
or from reading the Delta table. The concurrent writers and the killed writer are real processes.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import calibsql
import children

from deltalake import DeltaTable, write_deltalake

ROWS = 40_000


def batch(seed: int, rows: int = ROWS) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "site": rng.integers(0, 10, rows).astype(np.int64),
        "p": rng.uniform(0.01, 0.99, rows),
        "y": rng.integers(0, 2, rows).astype(np.int64),
    }


def as_arrow(columns: dict[str, np.ndarray]) -> pa.Table:
    return pa.table({k: pa.array(v) for k, v in columns.items()})


def concat(batches: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    return {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}


@pytest.fixture(scope="module")
def events(tmp_path_factory: pytest.TempPathFactory):
    """Three appends partitioned by site, then DELETE WHERE site = 7, then a checkpoint: the
    table at version 3, with the deleted rows' files still on disk. Returns the path, the
    rows of each version (numpy), and the commit times (ms since the epoch)."""
    path = tmp_path_factory.mktemp("delta") / "events"
    batches = [batch(seed) for seed in range(3)]
    for b in batches:
        write_deltalake(str(path), as_arrow(b), partition_by=["site"], mode="append")
        time.sleep(0.05)
    table = DeltaTable(str(path))
    table.delete("site = 7")
    table.create_checkpoint()
    versions = [concat(batches[: i + 1]) for i in range(3)]
    everything = versions[-1]
    keep = everything["site"] != 7
    versions.append({k: v[keep] for k, v in everything.items()})
    times = {h["version"]: h["timestamp"] for h in DeltaTable(str(path)).history()}
    return path, versions, times


def cli(binary: Path, *args: str, check: bool = True):
    done = children.run([str(binary), "--format", "ndjson", *args], text=True)
    if check:
        assert done.returncode == 0, done.stderr
    return done


def rows(done) -> list[dict]:
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def expected_metrics(v: dict[str, np.ndarray]) -> dict:
    p, y = v["p"], v["y"]
    return {
        "n": len(p),
        "clicks": int(y.sum()),
        # brier(p, y) = mean (p - y)^2 (docs/metrics.md)
        "brier": float(np.mean((p - y) ** 2)),
        # -mean(y log p + (1 - y) log(1 - p)) (no p is near 0 or 1 here)
        "logloss": float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p))),
        # Mann-Whitney: the share of (positive, negative) pairs ranked right (p has no ties)
        "auc": float(auc(p, y)),
    }


def auc(p: np.ndarray, y: np.ndarray) -> float:
    ranks = np.empty(len(p))
    ranks[np.argsort(p)] = np.arange(1, len(p) + 1)
    positives = int(y.sum())
    negatives = len(y) - positives
    return (ranks[y == 1].sum() - positives * (positives + 1) / 2) / (positives * negatives)


METRICS = (
    "SELECT count(*) AS n, sum(y) AS clicks, brier(p, y) AS brier, "
    "logloss(p, y) AS logloss, auc(p, y) AS auc FROM {table}"
)


def assert_metrics(got: dict, want: dict) -> None:
    assert got["n"] == want["n"] and got["clicks"] == want["clicks"], (got, want)
    for key in ("brier", "logloss", "auc"):
        assert abs(got[key] - want[key]) <= 1e-9, (key, got[key], want[key])


def test_the_cli_reads_what_the_log_says_not_every_file(binary, events):
    path, versions, _ = events
    parquet_files = sum(1 for _ in path.rglob("*.parquet") if "_delta_log" not in str(_))
    # The deleted partition's files are still there: a Parquet reader would count them.
    assert (path / "site=7").exists() and parquet_files > 10
    got = rows(cli(binary, "--table", f"t={path}", "-c", METRICS.format(table="t")))[0]
    assert_metrics(got, expected_metrics(versions[3]))
    # The table's path in FROM is read through the log too.
    got = rows(cli(binary, "-c", METRICS.format(table=f"'{path}'")))[0]
    assert_metrics(got, expected_metrics(versions[3]))


def test_the_python_module_reads_it_too(events):
    path, versions, _ = events
    con = calibsql.connect().register("t", str(path))
    got = con.sql(METRICS.format(table="t")).to_pylist()[0]
    assert_metrics(got, expected_metrics(versions[3]))
    # Partition columns come back as columns.
    sites = con.sql("SELECT DISTINCT site FROM t ORDER BY site").to_pylist()
    assert [r["site"] for r in sites] == [s for s in range(10) if s != 7]


def test_time_travel_by_version_and_by_timestamp(binary, events):
    path, versions, times = events
    sql = []
    for version in range(4):
        sql.append(
            f"SELECT {version} AS v, count(*) AS n, sum(y) AS clicks "
            f"FROM delta_scan('{path}', version => {version})"
        )
    # Just after version 1's commit, before version 2's: version 1.
    between = times[1] + max(1, (times[2] - times[1]) // 2)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(between / 1000)) + (
        ".%03dZ" % (between % 1000)
    )
    got = rows(cli(binary, "-c", " UNION ALL ".join(sql) + " ORDER BY v"))
    assert [(r["n"], r["clicks"]) for r in got] == [
        (len(v["y"]), int(v["y"].sum())) for v in versions
    ]
    if times[2] - times[1] >= 2:
        by_time = rows(
            cli(binary, "-c", f"SELECT count(*) AS n FROM delta_scan('{path}', timestamp => '{stamp}')")
        )
        assert by_time == [{"n": len(versions[1]["y"])}]
    # Positional: an integer is a version.
    assert rows(cli(binary, "-c", f"SELECT count(*) AS n FROM delta_scan('{path}', 0)")) == [
        {"n": ROWS}
    ]


@pytest.mark.parametrize(
    "call, message",
    [
        ("delta_scan('{path}', version => 99)", "has no version 99 (its latest is 3)"),
        ("delta_scan('{path}', timestamp => '2001-01-01T00:00:00Z')", "has no version as old as"),
        ("delta_scan('{path}', timestamp => 'yesterday')", "is not an RFC 3339 time"),
        ("delta_scan('{path}', version => -1)", "version must be a version number"),
        ("delta_scan('{path}', version => NULL)", "version or timestamp is NULL"),
        ("delta_scan('{path}', version => 1, timestamp => 'x')", "not both"),
        ("delta_scan('{path}', vers => 1)", "has no argument named vers"),
        ("delta_scan('{path}/site=3')", "is not a Delta table"),
        ("delta_scan(42)", "the first argument must be the table's location"),
    ],
)
def test_time_travel_errors_say_what_is_wrong(binary, events, call, message):
    path, _, _ = events
    done = cli(binary, "-c", f"SELECT count(*) FROM {call.format(path=path)}", check=False)
    assert done.returncode != 0
    assert message in done.stderr, done.stderr
    assert "panicked" not in done.stderr and "Backtrace" not in done.stderr


def test_a_partition_filter_reads_only_that_partition(binary, events):
    path, versions, _ = events
    def explain(where: str) -> str:
        done = cli(
            binary, "--table", f"t={path}", "-c",
            f"EXPLAIN ANALYZE SELECT sum(p) FROM t {where}",
        )
        return done.stdout
    everything = explain("")
    one = explain("WHERE site = 3")
    def bytes_scanned(plan: str) -> int:
        import re
        found = re.findall(r"bytes_scanned=(\d+(?:\.\d+)?) ?([KMG]?)", plan)
        assert found, plan
        scale = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9}
        return int(sum(float(n) * scale[u] for n, u in found))
    assert bytes_scanned(one) * 5 < bytes_scanned(everything), (one, everything)
    got = rows(cli(binary, "--table", f"t={path}", "-c", "SELECT count(*) AS n FROM t WHERE site = 3"))
    assert got == [{"n": int((versions[3]["site"] == 3).sum())}]


def test_a_schema_change_and_a_table_with_a_reader_feature_it_cannot_read(binary, tmp_path):
    merged = tmp_path / "merged"
    first = batch(11, 100)
    write_deltalake(str(merged), as_arrow(first))
    second = as_arrow(batch(12, 50)).append_column("extra", pa.array(["x"] * 50))
    write_deltalake(str(merged), second, mode="append", schema_mode="merge")
    got = rows(cli(binary, "--table", f"m={merged}", "-c", "SELECT count(*) AS n, count(extra) AS e FROM m"))
    assert got == [{"n": 150, "e": 50}]

    # A protocol asking for a reader feature delta-rs does not know: named in the error.
    odd = tmp_path / "odd"
    write_deltalake(str(odd), as_arrow(batch(13, 10)))
    log = odd / "_delta_log" / "00000000000000000000.json"
    lines = []
    for line in log.read_text().splitlines():
        action = json.loads(line)
        if "protocol" in action:
            action["protocol"] = {
                "minReaderVersion": 3,
                "minWriterVersion": 7,
                "readerFeatures": ["futureFeatureX"],
                "writerFeatures": ["futureFeatureX"],
            }
        lines.append(json.dumps(action))
    log.write_text("\n".join(lines) + "\n")
    done = cli(binary, "--table", f"o={odd}", "-c", "SELECT count(*) FROM o", check=False)
    assert done.returncode != 0 and "futureFeatureX" in done.stderr, done.stderr
    assert "panicked" not in done.stderr

    # A truncated log entry: an error naming the table, no panic.
    broken = tmp_path / "broken"
    write_deltalake(str(broken), as_arrow(batch(14, 10)))
    write_deltalake(str(broken), as_arrow(batch(15, 10)), mode="append")
    entry = broken / "_delta_log" / "00000000000000000001.json"
    entry.write_text(entry.read_text()[: len(entry.read_text()) // 2])
    done = cli(binary, "--table", f"b={broken}", "-c", "SELECT count(*) FROM b", check=False)
    assert done.returncode != 0 and str(broken) in done.stderr, done.stderr
    assert "panicked" not in done.stderr and "Backtrace" not in done.stderr


Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"


def z85(data: bytes) -> str:
    """ZeroMQ's Z85 (RFC 32): big-endian base 85 of each 4 bytes, as Python's base85 is, in
    another alphabet."""
    import base64

    ours = base64.b85encode(data).decode()
    python = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%&()*+-;<=>?@^_`{|}~"
    return ours.translate(str.maketrans(python, Z85))


def delete_with_a_deletion_vector(table: Path, file: str, positions: list[int]) -> None:
    """Marks rows `positions` (0-based, in the file's row order) of data file `file` deleted
    the way Spark and Databricks do, with a deletion vector, as one new commit (delta-rs's
    own DELETE rewrites files instead, so no PyPI writer makes one). Written by the Delta
    protocol (PROTOCOL.md, "Deletion Vectors"): a `deletion_vector_<uuid>.bin` file holding a
    format byte, then the vector's size (big-endian), the portable RoaringBitmap magic
    1681511377 (little-endian), the 64-bit portable Roaring bitmap (serialized by pyroaring,
    the Roaring authors' binding) and a CRC-32 of magic and bitmap (big-endian); then a commit
    that removes the file's `add` and adds it again with the vector's descriptor (storage
    type "u": the file's UUID in Z85, relative to the table)."""
    import struct
    import uuid
    import zlib

    from pyroaring import BitMap64

    log = table / "_delta_log"
    latest = max(int(entry.stem) for entry in log.glob("*.json"))
    added = None
    for version in range(latest + 1):
        for line in (log / f"{version:020}.json").read_text().splitlines():
            action = json.loads(line)
            if action.get("add", {}).get("path") == file:
                added = action["add"]
    assert added is not None, file
    name = uuid.uuid4()
    bitmap = struct.pack("<I", 1681511377) + BitMap64(positions).serialize()
    (table / f"deletion_vector_{name}.bin").write_bytes(
        b"\x01" + struct.pack(">I", len(bitmap)) + bitmap + struct.pack(">I", zlib.crc32(bitmap))
    )
    now = int(time.time() * 1000)
    removed = {
        "path": file, "deletionTimestamp": now, "dataChange": True, "extendedFileMetadata": True,
        "partitionValues": added["partitionValues"], "size": added["size"],
    }
    vector = {
        "storageType": "u", "pathOrInlineDv": z85(name.bytes), "offset": 1,
        "sizeInBytes": len(bitmap), "cardinality": len(set(positions)),
    }
    commit = [
        {"commitInfo": {"timestamp": now, "operation": "DELETE", "engineInfo": "calibsql tests"}},
        {"remove": removed},
        {"add": {**added, "modificationTime": now, "dataChange": True, "deletionVector": vector}},
    ]
    (log / f"{latest + 1:020}.json").write_text("\n".join(json.dumps(a) for a in commit) + "\n")


def test_rows_deleted_by_a_deletion_vector_are_not_read(binary, tmp_path):
    # Two files; rows of site 7 in the first are deleted by a deletion vector, the file stays.
    path = tmp_path / "vectors"
    first, second = batch(21, 5_000), batch(22, 3_000)
    write_deltalake(
        str(path), as_arrow(first), configuration={"delta.enableDeletionVectors": "true"}
    )
    write_deltalake(str(path), as_arrow(second), mode="append")
    (file,) = DeltaTable(str(path), version=0).file_uris()
    deleted = np.flatnonzero(first["site"] == 7)
    # The rows' order in the Parquet file, read by pyarrow, is the order they were written in.
    assert np.array_equal(pq.read_table(file).column("site").to_numpy(), first["site"])
    delete_with_a_deletion_vector(path, Path(file).name, deleted.tolist())

    keep = first["site"] != 7
    now = concat([{k: v[keep] for k, v in first.items()}, second])
    got = rows(cli(binary, "--table", f"t={path}", "-c", METRICS.format(table="t")))
    assert_metrics(got[0], expected_metrics(now))
    # The same through the Python module, with a filter the scan may push down.
    session = calibsql.connect().register("t", str(path))
    n = session.sql("SELECT count(*) AS n FROM t WHERE site IN (6, 7)").to_pylist()[0]["n"]
    assert n == int(np.isin(now["site"], [6, 7]).sum())
    # Version 1, before the vector, still has every row.
    before = concat([first, second])
    got = rows(cli(binary, "-c", METRICS.format(table=f"delta_scan('{path}', version => 1)")))
    assert_metrics(got[0], expected_metrics(before))
    # An INSERT into the table keeps the deleted rows deleted.
    third = batch(23, 1_000)
    extra = tmp_path / "extra.parquet"
    pq.write_table(as_arrow(third), extra)
    cli(
        binary, "--table", f"t={path}", "--table", f"x={extra}",
        "-c", "INSERT INTO t SELECT site, p, y FROM x",
    )
    # One version more (the `deltalake` package cannot read a table with deletion vectors).
    assert DeltaTable(str(path)).version() == 3
    got = rows(cli(binary, "--table", f"t={path}", "-c", METRICS.format(table="t")))
    assert_metrics(got[0], expected_metrics(concat([now, third])))


def test_a_table_with_column_mapping_is_read_by_its_column_names(binary, tmp_path):
    # Column mapping "name": the Parquet files name their columns `col-<uuid>`, the log maps them.
    path = tmp_path / "mapped"
    b = batch(24, 2_000)
    columns = {"site id": b["site"], "p": b["p"], "y": b["y"]}
    write_deltalake(
        str(path), as_arrow(columns), configuration={"delta.columnMapping.mode": "name"}
    )
    (file,) = DeltaTable(str(path)).file_uris()
    assert all(name.startswith("col-") for name in pq.read_schema(file).names)
    got = rows(cli(
        binary, "--table", f"t={path}", "-c",
        'SELECT count(*) AS n, sum("site id") AS sites, brier(p, y) AS brier FROM t',
    ))
    assert got[0]["n"] == 2_000 and got[0]["sites"] == int(b["site"].sum()), got
    assert abs(got[0]["brier"] - float(np.mean((b["p"] - b["y"]) ** 2))) <= 1e-12, got


def test_calibsql_writes_one_version_per_insert_and_deltalake_reads_it(binary, events, tmp_path):
    source, versions, _ = events
    out = tmp_path / "daily"
    create = (
        f"CREATE EXTERNAL TABLE daily (day VARCHAR, site BIGINT, n BIGINT, brier DOUBLE) "
        f"STORED AS DELTA LOCATION '{out}' PARTITIONED BY (day)"
    )
    for day in ("2026-11-01", "2026-11-02"):
        cli(
            binary, "--table", f"t={source}", "-c", create, "-c",
            f"INSERT INTO daily SELECT '{day}', site, count(*), brier(p, y) FROM t GROUP BY site",
        )
    table = DeltaTable(str(out))
    assert table.version() == 2  # the create, then one commit per INSERT
    assert table.metadata().partition_columns == ["day"]
    written = table.to_pyarrow_table().to_pydict()
    v = versions[3]
    for day in ("2026-11-01", "2026-11-02"):
        for site in (0, 3):
            i = next(
                k for k in range(len(written["day"]))
                if written["day"][k] == day and written["site"][k] == site
            )
            mask = v["site"] == site
            assert written["n"][i] == int(mask.sum())
            want = float(np.mean((v["p"][mask] - v["y"][mask]) ** 2))
            assert abs(written["brier"][i] - want) <= 1e-9
    # Opening the table again (no columns) and replacing its rows.
    cli(
        binary, "-c", f"CREATE EXTERNAL TABLE daily STORED AS DELTA LOCATION '{out}'", "-c",
        "INSERT OVERWRITE daily VALUES ('2026-11-03', 1, 5, 0.25)",
    )
    assert DeltaTable(str(out)).to_pyarrow_table().num_rows == 1
    assert DeltaTable(str(out)).version() == 3
    # Bad writes: a schema mismatch; columns that differ from the table's; no table, no columns.
    done = cli(
        binary, "-c", f"CREATE EXTERNAL TABLE daily STORED AS DELTA LOCATION '{out}'",
        "-c", "INSERT INTO daily VALUES ('x', 'not a number', 1, 0.5)", check=False,
    )
    assert done.returncode != 0 and "panicked" not in done.stderr, done.stderr
    done = cli(
        binary, "-c",
        f"CREATE EXTERNAL TABLE daily (a INT) STORED AS DELTA LOCATION '{out}'", check=False,
    )
    assert done.returncode != 0 and "has the columns" in done.stderr, done.stderr
    done = cli(
        binary, "-c",
        f"CREATE EXTERNAL TABLE x STORED AS DELTA LOCATION '{tmp_path / 'nothing'}'", check=False,
    )
    assert done.returncode != 0 and "there is no Delta table" in done.stderr, done.stderr
    assert DeltaTable(str(out)).version() == 3


def test_a_fitted_model_round_trips_through_a_delta_table(binary, events, tmp_path):
    source, _, _ = events
    out = tmp_path / "models"
    # The model's struct type, as the table's column: taken from a fit over an empty input.
    cli(
        binary, "--table", f"t={source}", "-c",
        f"COPY (SELECT 'platt' AS name, fit_platt(p, y) AS model FROM t) TO '{tmp_path / 'm.parquet'}'",
    )
    model = pq.read_table(tmp_path / "m.parquet")
    write_deltalake(str(out), model)
    got = rows(
        cli(
            binary, "--table", f"t={source}", "--table", f"models={out}", "-c",
            "INSERT INTO models SELECT 'platt', fit_platt(p, y) FROM t", "-c",
            "SELECT count(*) AS n, max(calibrate(0.3, model)) - min(calibrate(0.3, model)) AS spread "
            "FROM models",
        )
    )
    assert got[-1]["n"] == 2 and abs(got[-1]["spread"]) <= 1e-12, got


def test_concurrent_writers_all_land(binary, tmp_path):
    out = tmp_path / "shared"
    write_deltalake(str(out), pa.table({"writer": pa.array([0], pa.int64()), "i": pa.array([0], pa.int64())}))
    writers = 6
    procs = [
        children.popen(
            [
                str(binary), "-c", f"CREATE EXTERNAL TABLE s STORED AS DELTA LOCATION '{out}'",
                "-c", f"INSERT INTO s SELECT {w} AS writer, value AS i FROM generate_series(1, 1000)",
            ],
            stdout=children.subprocess.PIPE, stderr=children.subprocess.PIPE, text=True,
        )
        for w in range(1, writers + 1)
    ]
    for proc in procs:
        out_text, err = children.communicate(proc, 300)
        assert proc.returncode == 0, err
    table = DeltaTable(str(out))
    assert table.version() == writers
    data = table.to_pyarrow_table().to_pydict()
    pairs = set(zip(data["writer"], data["i"]))
    assert len(data["i"]) == 1 + writers * 1000
    assert pairs == {(0, 0)} | {(w, i) for w in range(1, writers + 1) for i in range(1, 1001)}


def test_a_killed_writer_leaves_the_last_whole_version(binary, tmp_path):
    out = tmp_path / "big"
    write_deltalake(str(out), pa.table({"i": pa.array([1, 2, 3], pa.int64())}))
    before = set(p for p in out.rglob("*.parquet"))
    proc = children.popen(
        [
            str(binary), "-c", f"CREATE EXTERNAL TABLE b STORED AS DELTA LOCATION '{out}'",
            "-c", "INSERT INTO b SELECT value AS i FROM generate_series(1, 400000000)",
        ],
        stdout=children.subprocess.DEVNULL, stderr=children.subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if set(out.rglob("*.parquet")) - before:
            break
        time.sleep(0.1)
    assert proc.poll() is None, "the insert ended before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert DeltaTable(str(out)).version() == 0
    assert rows(cli(binary, "--table", f"b={out}", "-c", "SELECT count(*) AS n FROM b")) == [{"n": 3}]
    cli(binary, "-c", f"CREATE EXTERNAL TABLE b STORED AS DELTA LOCATION '{out}'", "-c", "INSERT INTO b VALUES (4)")
    assert DeltaTable(str(out)).version() == 1
    assert sorted(DeltaTable(str(out)).to_pyarrow_table()["i"].to_pylist()) == [1, 2, 3, 4]


def test_the_server_serves_a_delta_table_and_guards_delta_scan(binary, logs, events, tmp_path):
    from test_serve import connect, serving

    path, versions, _ = events
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    small = allowed / "small"
    write_deltalake(str(small), as_arrow(batch(21, 100)))
    write_deltalake(str(small), as_arrow(batch(22, 50)), mode="append")
    with serving(binary, logs, tmp_path, "--table", f"d={path}", "--allow-path", str(allowed)) as port:
        with connect(port) as con:
            n = con.execute("SELECT count(*) FROM d").fetchone()[0]
            assert n == len(versions[3]["y"])
            old = con.execute(f"SELECT count(*) FROM delta_scan('{small}', version => 0)").fetchone()[0]
            assert old == 100
        with connect(port) as con:
            with pytest.raises(Exception) as refused:
                con.execute(f"SELECT count(*) FROM delta_scan('{path}', version => 0)")
            assert "permission denied" in str(refused.value), refused.value
            assert "--allow-path" in str(refused.value)


def test_daily_states_appended_with_copy_merge_to_the_whole_log(binary, events, tmp_path):
    """A monitoring job's shape: each day's `brier_state` row appended to a Delta table with
    COPY … STORED AS DELTA (the first COPY creates the table from the query's columns), then
    merged. Expected: numpy's mean (p - y)^2 over the rows of the days merged."""
    source, versions, _ = events
    states = tmp_path / "states"
    v = versions[3]
    for site in (0, 1, 2):
        cli(
            binary, "--table", f"t={source}", "-c",
            f"COPY (SELECT {site} AS site, count(*) AS n, brier_state(p, y) AS s FROM t "
            f"WHERE site = {site}) TO '{states}' STORED AS DELTA",
        )
    assert DeltaTable(str(states)).version() == 3  # created, then one version per COPY
    got = rows(cli(binary, "--table", f"s={states}", "-c", "SELECT sum(n) AS n, brier_merge(s) AS b FROM s"))
    mask = np.isin(v["site"], [0, 1, 2])
    want = float(np.mean((v["p"][mask] - v["y"][mask]) ** 2))
    assert got[0]["n"] == int(mask.sum()) and abs(got[0]["b"] - want) <= 1e-12, (got, want)
    # Rows whose columns are not the table's are refused, naming both.
    done = cli(binary, "-c", f"COPY (SELECT 1 AS zz) TO '{states}' STORED AS DELTA", check=False)
    assert done.returncode != 0 and "has the columns (site, n, s)" in done.stderr, done.stderr
    assert DeltaTable(str(states)).version() == 3
