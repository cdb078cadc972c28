"""`calibsql serve --flight-bind` (Arrow Flight SQL) from clients nobody here wrote: ADBC's
Flight SQL driver (Go, from PyPI) for statements with the CLI's numbers, bound parameters,
`executemany`, catalogs and native nested types; polars over ADBC; `pyarrow.flight` for the
handshake, tokens, TLS and cancel; psycopg on the same server's Postgres listener for the
words a refusal is given in, and at the same time as concurrent Flight clients.

Each server is the calibsql binary started on 127.0.0.1 port 0 by `flight_serving`, which reads
both ports from its log and kills it at the end.
"""

from __future__ import annotations

import re
import subprocess
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pyarrow.flight as flight
import pyarrow.parquet as pq
import pytest

import children
from conftest import assert_rows_equal
from test_hardening import cpu_seconds, wait_until_idle
from test_serve import ENDLESS, PASSWORD, psycopg, started

# python/run-tests.sh installs them: a missing one fails, never skips.
import adbc_driver_flightsql.dbapi as adbc  # noqa: E402
from adbc_driver_flightsql import DatabaseOptions  # noqa: E402
from adbc_driver_manager import Error as AdbcError  # noqa: E402


class Server:
    """A running `calibsql serve`: its ports (`pg` is None with --no-postgres), log and process."""

    def __init__(self, proc: subprocess.Popen, log: Path, pg: int | None, port: int) -> None:
        self.proc = proc
        self.log = log
        self.pg = pg
        self.port = port

    def uri(self, tls: bool = False) -> str:
        return f"grpc{'+tls' if tls else ''}://127.0.0.1:{self.port}"

    def log_text(self) -> str:
        return self.log.read_text()


@contextmanager
def flight_serving(binary: Path, logs: Path, work: Path, *extra: str):
    """A server over the `logs` fixture's splits as `valid` and `test` (as the `cli` fixture
    names them) with a Flight SQL listener; yields a `Server`."""
    args = [
        "--bind", "127.0.0.1:0", "--flight-bind", "127.0.0.1:0",
        "--table", f"valid={logs / 'valid'}", "--table", f"test={logs / 'test'}", *extra,
    ]
    ready = r"Flight SQL listening on 127\.0\.0\.1:(\d+)"
    with started(binary, work, args, ready) as (proc, log, match):
        pg = re.search(r"serve: listening on 127\.0\.0\.1:(\d+)", log.read_text())
        yield Server(proc, log, int(pg.group(1)) if pg else None, int(match.group(1)))


def connect(server: Server, password: str = PASSWORD, user: str = "analyst", **db_kwargs):
    return adbc.connect(
        server.uri(db_kwargs.pop("tls", False)),
        db_kwargs={"username": user, "password": password, **db_kwargs},
        autocommit=True,
    )


def rows(con, sql: str, parameters=None) -> list[dict]:
    with con.cursor() as cur:
        cur.execute(sql, parameters)
        return cur.fetch_arrow_table().to_pylist()


def pg_connect(server: Server):
    """psycopg on the Postgres listener of `server`."""
    return psycopg.connect(
        host="127.0.0.1", port=server.pg, dbname="calibsql", user="analyst", password=PASSWORD,
        sslmode="disable", autocommit=True, connect_timeout=30,
    )


def pg_error(server: Server, sql: str) -> str:
    """The message the Postgres listener of `server` refuses `sql` with."""
    with pg_connect(server) as con:
        with pytest.raises(psycopg.Error) as refused:
            con.execute(sql)
    return refused.value.diag.message_primary


@pytest.fixture(scope="module")
def server(binary: Path, logs: Path, tmp_path_factory: pytest.TempPathFactory):
    with flight_serving(binary, logs, tmp_path_factory.mktemp("flight")) as running:
        yield running


@pytest.fixture(scope="module")
def writable(binary: Path, logs: Path, tmp_path_factory: pytest.TempPathFactory):
    work = tmp_path_factory.mktemp("flight-writes")
    (work / "out").mkdir()
    with flight_serving(
        binary, logs, work, "--allow-writes", "--allow-path", str(work / "out"),
    ) as running:
        running.out = work / "out"
        yield running


#: The CLI's numbers, over the same files (`cli` fixture): per-segment ECE and field RCE, a
#: fitted calibrator applied, reliability bins.
QUERIES = [
    "SELECT ad_type, count(*) AS n, ece(p_model, click) AS ece, "
    "field_rce(p_model, click, site_id) AS rce FROM test GROUP BY ad_type ORDER BY ad_type",
    "WITH m AS (SELECT fit_gaussian_calib(p_model, click) AS model FROM valid) "
    "SELECT ece(calibrate(test.p_model, m.model), test.click) AS ece FROM test CROSS JOIN m",
    "SELECT fit_gaussian_calib(p_model, click) AS model FROM valid",
    "SELECT reliability(p_model, click, 8) AS bins FROM test",
]


@pytest.mark.parametrize("sql", QUERIES)
def test_answers_equal_the_clis(server, cli, sql):
    with connect(server) as con:
        assert_rows_equal(rows(con, sql), cli(sql))


def test_models_and_reliability_bins_come_as_arrow_structs_and_lists(server):
    with connect(server) as con, con.cursor() as cur:
        cur.execute(
            "SELECT fit_gaussian_calib(p_model, click) AS model, "
            "reliability(p_model, click, 4) AS bins FROM valid"
        )
        table = cur.fetch_arrow_table()
    assert pa.types.is_struct(table.schema.field("model").type)
    bins = table.schema.field("bins").type
    assert pa.types.is_list(bins) and pa.types.is_struct(bins.value_type)
    assert [b["bin"] for b in table.column("bins")[0].as_py()] == [0, 1, 2, 3]


def test_a_bound_parameter_and_many_rows_of_them(server, cli):
    sql = "SELECT count(*) AS n FROM test WHERE p_model > $1"
    with connect(server) as con:
        for threshold in (0.1, 0.5):
            expected = cli(sql.replace("$1", str(threshold)))
            assert rows(con, sql, (threshold,)) == expected
        # Several parameter rows bound at once: the statement runs once a row, results in
        # order (ADBC binds a table with `adbc_statement.bind`).
        with con.cursor() as cur:
            cur.adbc_statement.set_sql_query(sql)
            cur.adbc_statement.prepare()
            cur.adbc_statement.bind(pa.record_batch([pa.array([0.1, 0.5, 0.9])], names=["$1"]))
            stream, _ = cur.adbc_statement.execute_query()
            got = pa.RecordBatchReader._import_from_c(stream.address).read_all().to_pylist()
        expected = [cli(sql.replace("$1", t))[0] for t in ("0.1", "0.5", "0.9")]
        assert got == expected


def test_executemany_inserts_and_ddl_run(writable):
    with connect(writable) as con, con.cursor() as cur:
        cur.execute("CREATE TABLE m (x BIGINT, y DOUBLE)")
        cur.executemany("INSERT INTO m VALUES ($1, $2)", [(i, i / 4) for i in range(50)])
        assert rows(con, "SELECT count(*) AS n, sum(x) AS sx, sum(y) AS sy FROM m") == [
            {"n": 50, "sx": 1225, "sy": 1225 / 4}
        ]
        # A write through an update with no parameters reports its rows.
        assert cur.adbc_statement is not None
        cur.adbc_statement.set_sql_query("INSERT INTO m VALUES (100, 1.5)")
        assert cur.adbc_statement.execute_update() == 1


def test_each_login_has_its_own_session(server):
    with connect(server) as one, connect(server) as two:
        rows(one, "CREATE VIEW mine AS SELECT 42 AS answer")
        rows(one, "SET datafusion.execution.batch_size = 1234")
        assert rows(one, "SELECT answer FROM mine") == [{"answer": 42}]
        setting = "SELECT value FROM information_schema.df_settings WHERE name = 'datafusion.execution.batch_size'"
        assert rows(one, setting) == [{"value": "1234"}]
        assert rows(two, setting) != [{"value": "1234"}]
        with pytest.raises(AdbcError, match="mine"):
            rows(two, "SELECT answer FROM mine")


def test_catalogs_tables_and_their_schemas(server, logs):
    with connect(server) as con:
        info = con.adbc_get_info()
        assert info["vendor_name"] == "calibsql"
        assert set(con.adbc_get_table_types()) >= {"TABLE", "VIEW"}
        objects = con.adbc_get_objects(depth="all", catalog_filter="calibsql").read_all()
        (catalog,) = objects.to_pylist()
        assert catalog["catalog_name"] == "calibsql"
        public = {s["db_schema_name"]: s for s in catalog["catalog_db_schemas"]}["public"]
        tables = {t["table_name"]: t for t in public["db_schema_tables"]}
        assert set(tables) >= {"test", "valid"}
        parquet = pq.read_schema(next((logs / "test").glob("*.parquet")))
        columns = [c["column_name"] for c in tables["test"]["table_columns"]]
        assert columns == parquet.names
        schema = con.adbc_get_table_schema("test", db_schema_filter="public")
        assert schema.names == parquet.names
        assert schema.field("p_model").type == pa.float64()


def test_polars_reads_over_adbc(server, cli):
    # polars' read_database_uri picks an ADBC driver by the URI's scheme (grpc:// would be a
    # package adbc_driver_grpc, which does not exist) and takes no credentials: an open ADBC
    # connection is its way to Flight SQL.
    polars = pytest.importorskip("polars")
    sql = "SELECT ad_type, count(*) AS n, ece(p_model, click) AS ece FROM test GROUP BY ad_type ORDER BY ad_type"
    with connect(server) as con:
        frame = polars.read_database(sql, connection=con)
    assert frame.schema["ece"] == polars.Float64
    assert_rows_equal(frame.to_dicts(), cli(sql))


def token_of(server: Server, user: str = "analyst", password: str = PASSWORD, **kwargs):
    client = flight.FlightClient(server.uri(kwargs.get("tls", False)), **{
        k: v for k, v in kwargs.items() if k != "tls"
    })
    return client, client.authenticate_basic_token(user, password)


def test_the_handshake_answers_a_token_that_every_call_needs(server):
    client, header = token_of(server)
    assert header[0] == b"authorization" and header[1].startswith(b"Bearer ")
    with_token = flight.FlightCallOptions(headers=[header])
    assert any(a.type == "CancelFlightInfo" for a in client.list_actions(with_token))
    bare = flight.FlightClient(server.uri())
    for call in (
        lambda: list(bare.list_actions()),
        lambda: list(bare.do_action(flight.Action("ClosePreparedStatement", b""))),
        lambda: bare.get_flight_info(flight.FlightDescriptor.for_command(b"x")),
        lambda: bare.do_get(flight.Ticket(b"x")).read_all(),
    ):
        with pytest.raises(flight.FlightUnauthenticatedError, match="no token"):
            call()
    forged = flight.FlightCallOptions(headers=[(b"authorization", b"Bearer AAAA")])
    with pytest.raises(flight.FlightUnauthenticatedError, match="not valid"):
        list(client.list_actions(forged))


@pytest.mark.parametrize("user, password, reason", [
    ("analyst", "not the password", "wrong password"),
    ("mallory", PASSWORD, "unknown user"),
])
def test_a_refused_login_is_logged_without_its_password(server, user, password, reason):
    with pytest.raises(flight.FlightUnauthenticatedError, match="password authentication failed"):
        token_of(server, user, password)
    with pytest.raises(AdbcError, match="password authentication failed"):
        connect(server, password=password, user=user)
    log = server.log_text()
    assert f'Flight SQL login refused for user "{user}"' in log and reason in log
    assert password not in log


def test_an_expired_token_is_refused(binary, logs, tmp_path):
    with flight_serving(binary, logs, tmp_path, "--flight-token-lifetime", "1") as short:
        client, header = token_of(short)
        options = flight.FlightCallOptions(headers=[header])
        list(client.list_actions(options))
        time.sleep(1.5)
        with pytest.raises(flight.FlightUnauthenticatedError, match="expired"):
            list(client.list_actions(options))
        # A new login gets a new token.
        _, again = token_of(short)
        list(client.list_actions(flight.FlightCallOptions(headers=[again])))


def self_signed(work: Path) -> tuple[Path, Path]:
    cert, key = work / "server.crt", work / "server.key"
    children.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
            "-keyout", str(key), "-out", str(cert),
        ],
        check=True,
    )
    return cert, key


@pytest.mark.parametrize("require", [False, True], ids=["tls", "require-tls"])
def test_tls_and_require_tls(binary, logs, tmp_path, cli, require):
    cert, key = self_signed(tmp_path)
    extra = ["--tls-cert", str(cert), "--tls-key", str(key)] + (["--require-tls"] if require else [])
    sql = "SELECT count(*) AS n, ece(p_model, click) AS ece FROM test"
    with flight_serving(binary, logs, tmp_path, *extra) as tls:
        with connect(
            tls, tls=True, **{DatabaseOptions.TLS_ROOT_CERTS.value: cert.read_text()}
        ) as con:
            assert_rows_equal(rows(con, sql), cli(sql))
        client, header = token_of(tls, tls=True, tls_root_certs=cert.read_bytes())
        assert header[1].startswith(b"Bearer ")
        if require:
            with pytest.raises(AdbcError):
                connect(tls)
            # The server logs the refusal as it closes the connection, which the client may
            # see first: wait for the line (a hang guard, not a timing).
            deadline = time.monotonic() + 30
            while "no TLS (--require-tls" not in tls.log_text():
                assert time.monotonic() < deadline, tls.log_text()
                time.sleep(0.05)
        else:
            with connect(tls) as con:
                assert_rows_equal(rows(con, sql), cli(sql))


def test_policy_refusals_are_the_postgres_listeners_words(server, logs):
    outside = next((logs / "valid").glob("*.parquet"))
    with connect(server) as con:
        for sql in [
            f"SELECT count(*) FROM '{outside}'",
            "COPY (SELECT 1 AS x) TO '/tmp/calibsql-flight-copy.csv'",
            "CREATE TABLE m (x BIGINT)",
        ]:
            expected = pg_error(server, sql)
            assert expected.startswith("permission denied")
            with pytest.raises(AdbcError) as refused:
                rows(con, sql)
            assert expected in str(refused.value)
            with con.cursor() as cur:
                with pytest.raises(AdbcError) as refused:
                    cur.adbc_statement.set_sql_query(sql)
                    cur.adbc_statement.execute_update()
                assert expected in str(refused.value)
    assert not Path("/tmp/calibsql-flight-copy.csv").exists()


def test_writes_stay_under_allow_path(writable):
    inside = writable.out / "copy.csv"
    with connect(writable) as con:
        rows(con, f"COPY (SELECT 1 AS x) TO '{inside}'")
        assert inside.read_text().split() == ["x", "1"]
        with pytest.raises(AdbcError, match="not under an --allow-path prefix"):
            rows(con, "COPY (SELECT 1 AS x) TO '/tmp/calibsql-flight-outside.csv'")
    assert not Path("/tmp/calibsql-flight-outside.csv").exists()


def cancel_flight_info(info: flight.FlightInfo) -> bytes:
    """A CancelFlightInfoRequest (field 1: the FlightInfo), protobuf-encoded by hand:
    pyarrow has no call for it."""
    body = info.serialize()
    return b"\x0a" + varint(len(body)) + body


def statement_info(client, options, sql: str) -> flight.FlightInfo:
    """GetFlightInfo of a CommandStatementQuery (an `Any` of it, protobuf-encoded by hand)."""
    text = sql.encode()
    command = b"\x0a" + varint(len(text)) + text
    type_url = b"type.googleapis.com/arrow.flight.protocol.sql.CommandStatementQuery"
    any_ = b"\x0a" + varint(len(type_url)) + type_url + b"\x12" + varint(len(command)) + command
    return client.get_flight_info(flight.FlightDescriptor.for_command(any_), options)


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


@pytest.mark.parametrize("sql", [
    "SELECT ad_type, p_model, click FROM test LIMIT 5",
    "SELECT ad_type, count(*) AS n FROM test GROUP BY ad_type",
    QUERIES[2],
    QUERIES[3],
])
def test_the_announced_schema_is_the_streamed_one(server, sql):
    client, header = token_of(server)
    options = flight.FlightCallOptions(headers=[header])
    info = statement_info(client, options, sql)
    table = client.do_get(info.endpoints[0].ticket, options).read_all()
    assert info.schema == table.schema
    assert table.num_rows > 0


def test_cancel_flight_info_stops_the_query(server):
    client, header = token_of(server)
    options = flight.FlightCallOptions(headers=[header])
    info = statement_info(client, options, ENDLESS)
    answers: list = []

    def cancel() -> None:
        time.sleep(1)
        action = flight.Action("CancelFlightInfo", cancel_flight_info(info))
        answers.extend(client.do_action(action, options))

    cancelling = threading.Thread(target=cancel)
    cancelling.start()
    # The stream ends with gRPC's CANCELLED, which pyarrow raises as KeyboardInterrupt.
    with pytest.raises((flight.FlightCancelledError, KeyboardInterrupt)):
        client.do_get(info.endpoints[0].ticket, options).read_all()
    cancelling.join(timeout=60)
    assert len(answers) == 1
    assert "a statement of analyst is cancelled at its client's request" in server.log_text()
    wait_until_idle(server.proc.pid)
    # The result is gone: a second cancel finds nothing.
    with pytest.raises(pa.ArrowKeyError, match="no such result"):
        list(client.do_action(flight.Action("CancelFlightInfo", cancel_flight_info(info)), options))


def test_a_dropped_stream_and_adbc_cancel_stop_the_query(server):
    pid = server.proc.pid
    with connect(server) as con, con.cursor() as cur:
        cur.execute("SELECT value FROM generate_series(1, 10000000000)")
        reader = cur.fetch_record_batch()
        reader.read_next_batch()
        busy_from = cpu_seconds(pid)
        cur.adbc_cancel()
        with pytest.raises(Exception):
            reader.read_all()
    assert cpu_seconds(pid) >= busy_from
    wait_until_idle(pid)
    with connect(server) as con:
        assert rows(con, "SELECT 1 AS one") == [{"one": 1}]


def test_the_query_timeout_applies(binary, logs, tmp_path):
    with flight_serving(binary, logs, tmp_path, "--query-timeout", "2") as timed:
        with connect(timed) as con:
            started = time.monotonic()
            with pytest.raises(AdbcError, match=r"statement timeout \(2 s\)"):
                rows(con, ENDLESS)
            assert time.monotonic() - started < 60
            wait_until_idle(timed.proc.pid)
            assert rows(con, "SELECT 2 AS two") == [{"two": 2}]


def test_no_postgres_serves_flight_only(binary, logs, tmp_path):
    with flight_serving(binary, logs, tmp_path, "--no-postgres") as only:
        assert only.pg is None
        with connect(only) as con:
            assert rows(con, "SELECT count(*) AS n FROM test") == [{"n": 20000}]


FLIGHT_CLIENTS, PG_CLIENTS, LOAD_SECONDS = 16, 2, 30


def test_16_flight_clients_for_30_seconds_get_the_serial_answers_beside_psycopg(server):
    sqls = [
        f"SELECT site_id, count(*) AS n, ece(p_model, click) AS ece FROM test "
        f"WHERE site_id % {FLIGHT_CLIENTS} = {k} GROUP BY site_id ORDER BY site_id"
        for k in range(FLIGHT_CLIENTS)
    ]
    with connect(server) as con:
        serial = [rows(con, sql) for sql in sqls]
    pg_sql = "SELECT count(*) AS n, brier(p_model, click) AS brier FROM test"
    with pg_connect(server) as pg:
        pg_serial = pg.execute(pg_sql).fetchall()
    stop = time.monotonic() + LOAD_SECONDS
    failures: list[str] = []
    counts = [0] * (FLIGHT_CLIENTS + PG_CLIENTS)

    def flight_client(k: int) -> None:
        try:
            with connect(server) as con:
                while time.monotonic() < stop:
                    got = rows(con, sqls[k])
                    if got != serial[k]:
                        failures.append(f"client {k}: {got!r} != {serial[k]!r}")
                        return
                    counts[k] += 1
        except Exception as e:  # noqa: BLE001 (reported by the test's thread)
            failures.append(f"client {k}: {e!r}")

    def pg_client(k: int) -> None:
        try:
            with pg_connect(server) as pg:
                while time.monotonic() < stop:
                    if pg.execute(pg_sql).fetchall() != pg_serial:
                        failures.append(f"psycopg {k}: a different answer")
                        return
                    counts[FLIGHT_CLIENTS + k] += 1
        except Exception as e:  # noqa: BLE001
            failures.append(f"psycopg {k}: {e!r}")

    threads = [threading.Thread(target=flight_client, args=(k,)) for k in range(FLIGHT_CLIENTS)]
    threads += [threading.Thread(target=pg_client, args=(k,)) for k in range(PG_CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=children.TIMEOUT)
    assert not failures, failures
    # Every client was answered, more than once: none waited out the run behind the others.
    assert all(n > 1 for n in counts), counts


def test_max_connections_counts_both_listeners(binary, logs, tmp_path):
    with flight_serving(binary, logs, tmp_path, "--max-connections", "1") as one:
        with pg_connect(one) as pg:
            assert pg.execute("SELECT 1").fetchone() == (1,)
            with pytest.raises(AdbcError):
                connect(one)
            assert "too many connections (--max-connections)" in one.log_text()
        # Once the Postgres client has left, a Flight client gets its place.
        deadline = time.monotonic() + 60
        while True:
            try:
                with connect(one) as con:
                    assert rows(con, "SELECT 1 AS one") == [{"one": 1}]
                break
            except AdbcError:
                assert time.monotonic() < deadline, one.log_text()
                time.sleep(0.2)
