"""Fixtures shared by the Python tests: the calibsql binary, generated logs, three runners.

The binary is $CALIBSQL_BIN, else $CARGO_TARGET_DIR/debug/calibsql, else target/debug/calibsql
of the repository (python/run-tests.sh builds it in the same cargo invocation as the extension).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

import children

# The object-store servers' session fixtures (moto_server, azurite_server, gcs_server,
# http_server, plain_http_server).
pytest_plugins = ["stores"]

REPO = Path(__file__).resolve().parents[2]


def calibsql_bin() -> Path:
    if os.environ.get("CALIBSQL_BIN"):
        return Path(os.environ["CALIBSQL_BIN"])
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    return target / "debug" / "calibsql"


@pytest.fixture(scope="session")
def binary() -> Path:
    path = calibsql_bin()
    if not path.exists():
        pytest.fail(f"the calibsql binary is not built: {path} (run cargo build --workspace)")
    return path


@pytest.fixture(scope="session")
def logs(binary: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """40,000 rows of `calibsql generate` (20k valid, 20k test), in two Parquet files each
    split, so that reading is partitioned."""
    out = tmp_path_factory.mktemp("logs")
    children.run(
        [str(binary), "generate", "--rows", "40000", "--out", str(out), "--seed", "7", "-q"],
        check=True,
    )
    return out


class Cli:
    """Runs SQL with the calibsql binary (`--format ndjson`) and parses the rows."""

    def __init__(self, binary: Path, logs: Path) -> None:
        self.binary = binary
        self.logs = logs

    def __call__(self, sql: str) -> list[dict]:
        done = children.run(
            [
                str(self.binary),
                "--table",
                f"valid={self.logs / 'valid'}",
                "--table",
                f"test={self.logs / 'test'}",
                "--format",
                "ndjson",
                "-c",
                sql,
            ],
            text=True,
        )
        assert done.returncode == 0, done.stderr
        return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


@pytest.fixture(scope="session")
def cli(binary: Path, logs: Path) -> Cli:
    return Cli(binary, logs)


@pytest.fixture(scope="session")
def bundled(logs: Path):
    """The bundled engine, with the same two tables."""
    import calibsql

    con = calibsql.connect()
    con.register("valid", logs / "valid")
    con.register("test", logs / "test")
    return lambda sql: con.sql(sql).to_pylist()


@pytest.fixture(scope="session")
def datafusion_ctx(logs: Path):
    """A datafusion-python session with calibsql's functions registered over the FFI."""
    import datafusion

    import calibsql.datafusion

    ctx = datafusion.SessionContext()
    calibsql.datafusion.register_all(ctx)
    ctx.register_parquet("valid", str(logs / "valid"))
    ctx.register_parquet("test", str(logs / "test"))
    return ctx


@pytest.fixture(scope="session")
def via_datafusion(datafusion_ctx):
    return lambda sql: datafusion_ctx.sql(sql).to_pylist()


def assert_rows_equal(actual: list[dict], expected: list[dict], rel: float = 1e-12) -> None:
    """Rows equal up to `rel` relative difference in floats; a key the ndjson output omits
    (a NULL) equals None."""
    assert len(actual) == len(expected), (len(actual), len(expected))
    for i, (a, e) in enumerate(zip(actual, expected)):
        keys = set(a) | set(e)
        for k in keys:
            assert_values_equal(a.get(k), e.get(k), rel, f"row {i} column {k}")


def assert_values_equal(a, e, rel: float, where: str) -> None:
    if isinstance(a, dict) or isinstance(e, dict):
        a, e = a or {}, e or {}
        for k in set(a) | set(e):
            assert_values_equal(a.get(k), e.get(k), rel, f"{where}.{k}")
    elif isinstance(a, (list, tuple)) or isinstance(e, (list, tuple)):
        assert a is not None and e is not None, f"{where}: {a!r} != {e!r}"
        assert len(a) == len(e), f"{where}: {len(a)} != {len(e)} elements"
        for j, (x, y) in enumerate(zip(a, e)):
            assert_values_equal(x, y, rel, f"{where}[{j}]")
    elif isinstance(a, float) or isinstance(e, float):
        assert a is not None and e is not None, f"{where}: {a!r} != {e!r}"
        a, e = float(a), float(e)
        if math.isnan(a) or math.isnan(e):
            assert math.isnan(a) and math.isnan(e), f"{where}: {a} != {e}"
        else:
            assert a == e or abs(a - e) <= rel * max(abs(a), abs(e)), f"{where}: {a!r} != {e!r}"
    else:
        assert a == e, f"{where}: {a!r} != {e!r}"
