"""`calibsql serve` from psycopg 3: calibsql's functions with the CLI's numbers, bound
parameters, the types a client gets (float8, json), errors a session recovers from.

The server is the calibsql binary (built with the `serve` feature, part of the test build's
`distributed`), started on 127.0.0.1 port 0 by a fixture that reads the port from its log and
kills it at the end.
"""

from __future__ import annotations

import csv
import io
import math
import re
import subprocess
import time
from pathlib import Path

import pytest

import children

psycopg = pytest.importorskip("psycopg")

PASSWORD = "correct horse battery staple"
#: Hang guard of the server's start, in seconds (about one here).
STARTUP = 120


def hash_password(binary: Path, password: str) -> str:
    proc = children.popen(
        [str(binary), "hash-password"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        out, err = proc.communicate(password + "\n", timeout=children.TIMEOUT)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 0, err
    return out.strip()


@pytest.fixture(scope="module")
def server(binary: Path, logs: Path, tmp_path_factory: pytest.TempPathFactory):
    """A server over the `logs` fixture's test split as `t`; yields its port."""
    work = tmp_path_factory.mktemp("serve")
    users = work / "users"
    users.write_text(f"analyst:{hash_password(binary, PASSWORD)}\n")
    users.chmod(0o600)
    log = work / "log"
    with open(log, "wb") as err:
        proc = children.popen(
            [
                str(binary), "serve", "--users", str(users), "--bind", "127.0.0.1:0",
                "--table", f"t={logs / 'test'}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    try:
        started = time.monotonic()
        while True:
            match = re.search(r"listening on 127\.0\.0\.1:(\d+)", log.read_text())
            if match:
                break
            if proc.poll() is not None:
                pytest.fail(f"calibsql serve exited: {log.read_text()}")
            if time.monotonic() - started > STARTUP:
                pytest.fail(f"calibsql serve did not listen: {log.read_text()}")
            time.sleep(0.02)
        yield int(match.group(1))
    finally:
        proc.kill()
        proc.wait()


def connect(port: int, **kwargs):
    return psycopg.connect(
        host="127.0.0.1", port=port, dbname="calibsql", user="analyst", password=PASSWORD,
        sslmode="disable", autocommit=True, connect_timeout=30, **kwargs,
    )


def cli_rows(binary: Path, logs: Path, sql: str) -> list[list[str]]:
    done = children.run(
        [str(binary), "--table", f"t={logs / 'test'}", "--format", "csv", "-c", sql], text=True
    )
    assert done.returncode == 0, done.stderr
    return list(csv.reader(io.StringIO(done.stdout)))[1:]


def same(value, text: str) -> bool:
    if isinstance(value, float):
        return math.isclose(value, float(text), rel_tol=1e-12, abs_tol=1e-15)
    return str(value) == text


QUERIES = [
    "SELECT ad_type, count(*) AS n, ece(p_model, click) AS ece, "
    "field_rce(p_model, click, site_id) AS rce FROM t GROUP BY ad_type ORDER BY ad_type",
    "WITH m AS (SELECT fit_gaussian_calib(p_model, click) AS model FROM t) "
    "SELECT ece(calibrate(t.p_model, m.model), t.click) AS ece FROM t CROSS JOIN m",
    "SELECT r['bin'] AS bin, r['count'] AS n, r['frac_pos'] AS frac_pos "
    "FROM (SELECT unnest(reliability(p_model, click, 8)) AS r FROM t) ORDER BY bin",
]


@pytest.mark.parametrize("sql", QUERIES)
def test_numbers_match_the_cli(server, binary, logs, sql):
    with connect(server) as con:
        rows = con.execute(sql).fetchall()
    expected = cli_rows(binary, logs, sql)
    assert len(rows) == len(expected)
    for row, want in zip(rows, expected):
        assert all(same(v, w) for v, w in zip(row, want)), (row, want)


def test_types_and_bound_parameters(server):
    with connect(server) as con:
        cur = con.execute(
            "SELECT ece(p_model, click) AS ece, count(*) AS n FROM t "
            "WHERE ad_type = %s AND p_model > %s AND site_id >= %s",
            ("banner", 0.01, 0),
        )
        ece, n = cur.fetchone()
        assert isinstance(ece, float) and n > 0
        # float8 and int8, as Postgres names them.
        assert [d.type_code for d in cur.description] == [701, 20]
        # Nested values (a fitted model, reliability bins) are json: psycopg loads them.
        cur = con.execute(
            "SELECT fit_platt(p_model, click) AS model, reliability(p_model, click, 4) AS bins "
            "FROM t"
        )
        model, bins = cur.fetchone()
        assert [d.type_code for d in cur.description] == [114, 114]
        assert model["method"] == "platt" and len(bins) == 4
        assert sum(b["count"] for b in bins) == con.execute("SELECT count(*) FROM t").fetchone()[0]
        # The same query prepared on the server and run again with other values.
        sql = "SELECT count(*) FROM t WHERE site_id = %s"
        counts = [con.execute(sql, (site,), prepare=True).fetchone()[0] for site in (0, 1, 0)]
        assert counts[0] == counts[2] > 0


def test_a_session_recovers_from_errors(server):
    with connect(server) as con:
        with pytest.raises(psycopg.errors.Error, match="no_such_column"):
            con.execute("SELECT no_such_column FROM t")
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="--allow-path"):
            con.execute("SELECT * FROM '/etc/passwd'")
        assert con.execute("SELECT 1 + 1").fetchone()[0] == 2
