"""What a careless or hostile statement meets in the server and the Python module: deep
expressions refused by name (the server stays up), results that grow with an argument's
value refused under the memory limit with the server's peak memory read, a cancel request
or Ctrl-C stopping a nested-loop join, a sort, a spill merge and 6,000 fits' optimisation in
their operators (the process's CPU time stops), Ctrl-C in the REPL on a pseudo-terminal, and
the clients built on SQLAlchemy. The CLI's side of the same: tests/cli/hardening.rs.

Then what issue 52 found fine already, kept so against `calibsql serve --memory-limit 512M`
as a process, with real clients (psycopg, and raw sockets for what no client sends): 20,000
nested parentheses refused by the parser's recursion limit; an endless `generate_series` and
an endless recursive CTE stopped by `--query-timeout` (3 s here) and the CPU idle after; a
200,000-value IN list answered (and, under the 3 s timeout, stopped at the limit while it is
still being parsed and planned, in both protocols); random bytes, an SSL probe, a 2 GiB startup-message length
and an HTTP request on the port; 30 half-open sockets while a client logs in; 160
wrong-password logins each refused; a client process SIGKILLed mid-query, whose statement the
server cancels when it sees the connection closed (not at the timeout); 16 concurrent clients,
each with its own answer. After each, the process is alive and a fresh connection
answers. (tests/serve/limits.rs has the psql side of the timeout, of a killed client and of
`--max-connections`; tests/serve/login.rs the refused logins' messages and log lines.)
"""

from __future__ import annotations

import math
import os
import random
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import calibsql
import children
from test_serve import ENDLESS, LOGS, PASSWORD, SERVERS, STOP, cli_rows, connect, psycopg, same, serving

#: A nested-loop join (no equality to hash) of 300,000 x 300,000 rows: minutes of work.
NESTED_LOOP = (
    "SELECT count(*) AS n FROM generate_series(1, 300000) a "
    "JOIN generate_series(1, 300000) b ON a.value + b.value = 7 OR a.value * b.value = 12"
)


def chain(terms: int) -> str:
    return "SELECT " + " + ".join(["p_model"] * terms) + " AS s FROM t LIMIT 1"


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmHWM:\s+(\d+) kB", status).group(1)) / 1024


def wait_until_idle(pid: int) -> float:
    """Seconds until a process uses under a quarter of a core over half a second (a hang
    guard of STOP seconds: a join that goes on burns two cores for minutes)."""
    started = time.monotonic()
    while True:
        before = cpu_seconds(pid)
        time.sleep(0.5)
        if cpu_seconds(pid) - before < 0.125:
            return time.monotonic() - started
        assert time.monotonic() - started < STOP, "the cancelled statement is still running"


@pytest.fixture(scope="module")
def limited(binary: Path, logs: Path, tmp_path_factory: pytest.TempPathFactory):
    with serving(
        binary, logs, tmp_path_factory.mktemp("limited"), "--memory-limit", "512M",
        "--query-timeout", "600",
    ) as port:
        yield port


@pytest.mark.parametrize("terms", [5_000, 20_000, 100_000])
def test_deep_expressions_are_refused_and_the_server_stays_up(limited, terms):
    with connect(limited) as con:
        with pytest.raises(psycopg.Error, match="nested deeper than 1000 levels"):
            con.execute(chain(terms))
        assert con.execute("SELECT 1 + 1").fetchone()[0] == 2
        # Bound parameters go through the extended protocol's own parse.
        with pytest.raises(psycopg.Error, match="nested deeper than 1000 levels"):
            con.execute(chain(terms).replace("LIMIT 1", "WHERE p_model > %s LIMIT 1"), (0.5,))
    assert SERVERS[limited].poll() is None


def nested_case(depth: int) -> str:
    return (
        "SELECT " + "CASE WHEN p_model > 0.1 THEN " * depth + "p_model" + " ELSE 0 END" * depth
        + " AS c FROM t LIMIT 1"
    )


def test_a_case_nested_past_the_parsers_limit_is_named_and_the_server_stays_up(limited):
    """sqlparser stops at 50 levels and, for a CASE with ELSE in a CASE, says only
    "Expected: ), found: ELSE": the error names the limit instead."""
    with connect(limited) as con:
        for depth in (60, 1200):
            with pytest.raises(psycopg.Error, match="nests deeper than the parser's limit of 50 levels"):
                con.execute(nested_case(depth))
        assert con.execute(nested_case(40)).fetchone() is not None
    assert SERVERS[limited].poll() is None


def test_deep_expressions_in_the_module(logs):
    con = calibsql.connect().register("t", str(logs / "test"))
    for terms in (5_000, 20_000, 100_000):
        with pytest.raises(calibsql.Error, match="nested deeper than 1000 levels"):
            con.sql(chain(terms))
    assert con.sql(chain(999)).to_pylist()[0]["s"] > 0
    with pytest.raises(calibsql.Error, match="nests deeper than the parser's limit of 50 levels"):
        con.sql(nested_case(60))


CASES = [
    ("SELECT length(repeat('x', 2000000000)) AS n", "repeat: the result would take up to 1.9 GB"),
    ("SELECT length(lpad('a', 2000000000)) AS n", "lpad: the result would take up to 7.5 GB"),
    ("SELECT cardinality(array_repeat(1.5, 500000000)) AS n", "array_repeat: the result would take up to 3.7 GB"),
    # 150 MB of values held by the aggregate's state, refused as they are added.
    (
        "SELECT length(string_agg(repeat('x', 1000), ',')) AS n FROM generate_series(1, 150000)",
        "string_agg: its state would take",
    ),
]


def test_value_sized_results_are_refused_under_the_servers_limit(limited):
    with connect(limited) as con:
        for sql, message in CASES:
            with pytest.raises(psycopg.Error, match=re.escape(message)):
                con.execute(sql)
        assert con.execute("SELECT length(repeat('x', 1000000)) AS n").fetchone()[0] == 1000000
    # The measure: the process within about 1.5 times its limit.
    assert peak_rss_mib(SERVERS[limited].pid) < 1536


def test_value_sized_results_are_refused_in_the_module():
    con = calibsql.connect(memory_limit="512M")
    for sql, message in CASES:
        with pytest.raises(calibsql.Error, match=re.escape(message)):
            con.sql(sql)


#: A sort of 30 million rows behind a window (spilled under 512M; a minute of work here).
LONG_SORT = (
    "SELECT max(rn + value) AS n FROM (SELECT value, row_number() OVER (ORDER BY random()) AS rn "
    "FROM generate_series(1, {rows}))"
)
#: 6,000 field-aware fits, one per group: here (debug build, nothing else running) 3 s of
#: reading, then 8.5 s of optimisation; cancelled 5 s in, in the fits (or, on a loaded
#: machine, while it reads).
FITS = (
    "SELECT count(m) AS n FROM (SELECT g, fit_field_calib(ln(p / (1 - p)), y, site, 30) AS m "
    "FROM (SELECT value % 6000 AS g, (value % 37)::text AS site, random() AS p, "
    "CASE WHEN random() < 0.3 THEN 1 ELSE 0 END AS y FROM generate_series(1, 3000000)) GROUP BY g)"
)


@pytest.mark.parametrize(
    ("sql", "after"),
    [(NESTED_LOOP, 2), (LONG_SORT.format(rows=30_000_000), 2), (FITS, 5)],
    ids=["nested_loop_join", "sort", "fits"],
)
def test_a_cancel_request_stops_the_statements_operators(limited, sql, after):
    """psql's Ctrl-C, psycopg's cancel(): the operators stop, not only the answer. The fits
    are cancelled while they optimise (each group's solver and the loop over the groups look
    at the flag), the sort while it reads and spills."""
    pid = SERVERS[limited].pid
    with connect(limited) as con:
        errors = []

        def run():
            try:
                con.execute(sql)
            except psycopg.Error as e:
                errors.append(e)

        thread = threading.Thread(target=run)
        thread.start()
        time.sleep(after)
        assert thread.is_alive()
        con.cancel_safe()
        thread.join(STOP)
        assert len(errors) == 1 and isinstance(errors[0], psycopg.errors.QueryCanceled), errors
        wait_until_idle(pid)
        assert con.execute("SELECT 1 + 1").fetchone()[0] == 2


def read_until(fd: int, text: str, seen: list[str]) -> None:
    """Reads the terminal `fd` until its output past what earlier calls consumed shows
    `text` (a hang guard of STOP seconds). `seen` holds the output: what was consumed, then
    the rest, which the next call starts from."""
    import select

    output = seen.pop() if seen else ""
    deadline = time.monotonic() + STOP
    while text not in output:
        assert time.monotonic() < deadline, f"no {text!r} in {output!r}"
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            try:
                output += os.read(fd, 4096).decode(errors="replace")
            except OSError:
                break
    assert text in output, output
    end = output.index(text) + len(text)
    seen.extend([output[:end], output[end:]])


def test_ctrl_c_in_the_repl_cancels_a_nested_loop_join_and_the_repl_goes_on(binary, tmp_path):
    """The REPL on a real terminal (a pseudo-terminal): Ctrl-C while a statement runs is the
    terminal's SIGINT to the REPL, which cancels the statement (its operators stop), says
    "cancelled" and prompts again; the next statement answers."""
    import pty

    env = {**os.environ, "HOME": str(tmp_path), "TERM": "dumb"}
    fd, terminal = pty.openpty()
    # setsid -c: a session of its own whose controlling terminal is the pseudo-terminal, so
    # that Ctrl-C there is SIGINT to the REPL (no Python runs in the child: this process has
    # threads, and a forked copy of it may hang on a lock one of them held).
    repl = subprocess.Popen(
        ["setsid", "-c", str(binary)], stdin=terminal, stdout=terminal, stderr=terminal, env=env
    )
    os.close(terminal)
    pid = repl.pid
    seen: list[str] = []
    try:
        read_until(fd, "calibsql> ", seen)
        before = cpu_seconds(pid)
        os.write(fd, (NESTED_LOOP + ";\r").encode())
        # Until the join has worked a CPU-second (a hang guard of STOP seconds).
        deadline = time.monotonic() + STOP
        while cpu_seconds(pid) - before < 1:
            assert time.monotonic() < deadline, "the join is not running"
            time.sleep(0.1)
        os.write(fd, b"\x03")  # Ctrl-C
        read_until(fd, "cancelled", seen)
        read_until(fd, "calibsql> ", seen)
        wait_until_idle(pid)
        os.write(fd, b"SELECT 40 + 2 AS x;\r")
        read_until(fd, "42", seen)
        os.write(fd, b"\\q\r")
        assert repl.wait(STOP) == 0, seen
    finally:
        repl.kill()
        repl.wait()
        os.close(fd)


def open_spill_files() -> set[str]:
    """The spill files this process has open: DataFusion's disk manager keeps them in a
    temporary directory of its own (`…/.tmpXXXX/.tmpYYYY`)."""
    files = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if re.search(r"/\.tmp[^/]+/\.tmp[^/]+$", target):
            files.add(target)
    return files


def test_ctrl_c_stops_a_spill_merge_in_the_module():
    """A sort spilled under a 64M limit keeps each spill file open from when it is written
    until the merge has read it: the first file closed marks the merge, and Ctrl-C then
    stops it (the process's CPU time stops, the spill files are closed)."""
    con = calibsql.connect(memory_limit="64M")
    interrupted = []

    def interrupt_when_merging():
        most = 0
        started = time.monotonic()
        while time.monotonic() - started < STOP:
            files = len(open_spill_files())
            if files < most:
                interrupted.append(files)
                os.kill(os.getpid(), signal.SIGINT)
                return
            most = max(most, files)
            time.sleep(0.05)

    watcher = threading.Thread(target=interrupt_when_merging)
    watcher.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            con.sql(LONG_SORT.format(rows=8_000_000))
    finally:
        watcher.join()
    # Interrupted in the merge, with spill files still to read.
    assert interrupted and interrupted[0] >= 1, interrupted
    wait_until_idle(os.getpid())
    assert open_spill_files() == set()
    assert con.sql("SELECT 40 + 2 AS x").to_pylist() == [{"x": 42}]


def test_ctrl_c_stops_a_nested_loop_join_in_the_module():
    con = calibsql.connect()
    timer = threading.Timer(2, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            con.sql(NESTED_LOOP)
    finally:
        timer.cancel()
    wait_until_idle(os.getpid())
    assert con.sql("SELECT 40 + 2 AS x").to_pylist() == [{"x": 42}]


# What issue 52 found fine already (the module docstring's second paragraph).

#: The `timed` server's --query-timeout, in seconds.
QUERY_TIMEOUT = 3
#: What a timed-out statement may take past QUERY_TIMEOUT before the test fails (a guard for
#: a loaded machine: well under a second here).
SLACK = 30
#: A recursive CTE with no end: one row per iteration, forever.
ENDLESS_RECURSION = (
    "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) AS n FROM r"
)


@pytest.fixture(scope="module")
def timed(binary: Path, logs: Path, tmp_path_factory: pytest.TempPathFactory):
    with serving(
        binary, logs, tmp_path_factory.mktemp("timed"), "--memory-limit", "512M",
        "--query-timeout", str(QUERY_TIMEOUT),
    ) as port:
        yield port


def assert_serving(port: int) -> None:
    """The server process is alive and a fresh connection answers."""
    assert SERVERS[port].poll() is None, "the server died"
    with connect(port) as con:
        assert con.execute("SELECT 1").fetchone()[0] == 1
    assert SERVERS[port].poll() is None, "the server died"


def test_20000_nested_parentheses_are_refused_and_the_server_stays_up(limited):
    deep = "(" * 20_000 + "p_model" + ")" * 20_000
    with connect(limited) as con:
        assert con.execute("SELECT " + "(" * 10 + "1" + ")" * 10 + " AS x").fetchone()[0] == 1
        for sql, params in [
            (f"SELECT {deep} AS x FROM t LIMIT 1", None),
            (f"SELECT count(*) FROM t WHERE {deep} > %s", (0.5,)),
        ]:
            with pytest.raises(psycopg.Error, match="recursion limit exceeded"):
                con.execute(sql, params)
        assert con.execute("SELECT 1 + 1").fetchone()[0] == 2
    assert_serving(limited)


@pytest.mark.parametrize("sql", [ENDLESS, ENDLESS_RECURSION], ids=["generate_series", "recursive_cte"])
def test_an_endless_statement_is_stopped_by_the_query_timeout(timed, sql):
    pid = SERVERS[timed].pid
    with connect(timed) as con:
        started = time.monotonic()
        with pytest.raises(psycopg.errors.QueryCanceled, match="statement timeout"):
            con.execute(sql)
        took = time.monotonic() - started
        assert QUERY_TIMEOUT - 0.5 < took < QUERY_TIMEOUT + SLACK, took
        # Its operators stopped too, not only the answer; the session goes on.
        wait_until_idle(pid)
        assert con.execute("SELECT 1 + 1").fetchone()[0] == 2
    assert peak_rss_mib(pid) < 1536
    assert_serving(timed)


def in_list(values: int, bound: bool) -> str:
    """A count over 1..20 with an IN list of `values` even numbers (10 of 1..20 are in it);
    with `bound`, a bound parameter too (`%s`, 0), which makes psycopg use the extended
    protocol (without one it sends the simple protocol's Query)."""
    listed = ",".join(str(2 * i) for i in range(values))
    condition = "value > %s AND " if bound else ""
    return f"SELECT count(*) AS n FROM generate_series(1, 20) g WHERE {condition}value IN ({listed})"


#: What a statement stopped by the timeout while it is parsed or planned may take past
#: QUERY_TIMEOUT before the client has its error (well under a second here; a guard for a
#: loaded machine, and still far under what the statement takes without the limit, which the
#: test checks first).
PLANNING_SLACK = 3


@pytest.mark.parametrize("protocol", ["simple", "extended"])
def test_the_query_timeout_counts_parsing_and_planning(timed, limited, protocol):
    """Issue 52: the timeout counted from the start of execution, so a statement that takes
    long to parse and plan (a 200,000-value IN list) had its error only after its planning
    plus the timeout. Now the limit counts from the statement's arrival and the client has
    its error at QUERY_TIMEOUT (plus PLANNING_SLACK at most) while the planning goes on on a
    query thread; meanwhile another session is answered, and after it the server goes idle
    and goes on answering."""
    bound = protocol == "extended"
    sql, params = in_list(200_000, bound), ((0,) if bound else None)
    # Without a limit (the `limited` server's is 600 s) the statement is answered, and it
    # takes longer than the timed server's limit and its slack: nearly all of it parsing and
    # planning (its execution counts 20 rows).
    with connect(limited) as con:
        started = time.monotonic()
        assert con.execute(sql, params).fetchone()[0] == 10
        untimed = time.monotonic() - started
    assert untimed > QUERY_TIMEOUT + PLANNING_SLACK, (
        f"the statement took {untimed:.1f} s without a limit: too little to tell the limit's "
        "effect here (make the list longer)"
    )
    pid = SERVERS[timed].pid
    answered = []
    with connect(timed) as con, connect(timed) as other:

        def meanwhile() -> None:
            time.sleep(1)
            answered.append(other.execute("SELECT 40 + 2").fetchone()[0])
            answered.append(time.monotonic())

        thread = threading.Thread(target=meanwhile)
        thread.start()
        started = time.monotonic()
        with pytest.raises(psycopg.errors.QueryCanceled, match=rf"statement timeout \({QUERY_TIMEOUT} s\)"):
            con.execute(sql, params)
        failed = time.monotonic()
        thread.join(STOP)
        took = failed - started
        assert QUERY_TIMEOUT - 0.5 < took < QUERY_TIMEOUT + PLANNING_SLACK, (took, untimed)
        # The other session had its answer while this statement was being planned.
        assert answered[0] == 42 and answered[1] < failed, (answered, failed)
        # The planning step running at the limit ends, the statement goes no further.
        wait_until_idle(pid)
        assert con.execute("SELECT 1 + 1").fetchone()[0] == 2
    assert_serving(timed)


def test_a_200000_value_in_list_is_answered(limited):
    values = ",".join(str(2 * i) for i in range(200_000))
    with connect(limited) as con:
        # The even numbers 2..20 of 1..20 are in the list (0..399,998).
        sql = f"SELECT count(*) AS n FROM generate_series(1, 20) g WHERE value IN ({values})"
        assert con.execute(sql).fetchone()[0] == 10
    assert_serving(limited)


def read_until_closed(sock: socket.socket) -> bytes:
    """What the server sends until it closes the connection (fails after SLACK seconds)."""
    sock.settimeout(SLACK)
    reply = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            pytest.fail(f"the server kept the connection open; it sent {reply[:200]!r}")
        except ConnectionResetError:
            return reply
        if not chunk:
            return reply
        reply += chunk


def startup_message() -> bytes:
    """A protocol 3.0 StartupMessage for analyst on calibsql."""
    body = struct.pack("!i", 196608) + b"user\0analyst\0database\0calibsql\0\0"
    return struct.pack("!i", len(body) + 4) + body


HOSTILE = {
    "random_bytes": random.Random(52).randbytes(4096),
    "2GiB_startup_length": struct.pack("!Ii", 2**31, 196608),
    "2GiB_minus_1_startup_length": struct.pack("!ii", 2**31 - 1, 196608),
    "http_request": b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: curl/8.5.0\r\nAccept: */*\r\n\r\n",
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_bytes_no_client_sends_are_refused_and_the_server_stays_up(limited, name):
    """The server closes the connection (after an error message, or none) without waiting
    for the 2 GiB a length promises or holding memory for it."""
    with socket.create_connection(("127.0.0.1", limited), timeout=SLACK) as sock:
        sock.sendall(HOSTILE[name])
        reply = read_until_closed(sock)
    assert reply == b"" or reply[:1] == b"E", reply[:200]
    assert peak_rss_mib(SERVERS[limited].pid) < 1536
    assert_serving(limited)


def test_an_ssl_probe_is_answered_no_and_the_login_goes_on(limited):
    """libpq's sslmode=prefer: an SSLRequest to a server without TLS gets 'N', and the
    same connection then logs in in plaintext (here up to the password challenge)."""
    with socket.create_connection(("127.0.0.1", limited), timeout=SLACK) as sock:
        sock.sendall(struct.pack("!ii", 8, 80877103))
        assert sock.recv(1) == b"N"
        sock.sendall(startup_message())
        assert sock.recv(1) == b"R"  # AuthenticationSASL
    with socket.create_connection(("127.0.0.1", limited), timeout=SLACK) as sock:
        # A probe, then the bytes of a TLS ClientHello anyway.
        sock.sendall(struct.pack("!ii", 8, 80877103))
        assert sock.recv(1) == b"N"
        sock.sendall(bytes.fromhex("16030100a5010000a10303") + random.Random(7).randbytes(160))
        reply = read_until_closed(sock)
    assert reply == b"" or reply[:1] == b"E", reply[:200]
    assert_serving(limited)


def test_30_half_open_sockets_leave_room_for_a_client(limited):
    """Ten connections that send nothing, ten that stop inside the length of their first
    message, ten that stop at the password challenge; a client logs in and is answered while
    they hang, and after they are closed."""
    socks = []
    try:
        for i in range(30):
            sock = socket.create_connection(("127.0.0.1", limited), timeout=SLACK)
            socks.append(sock)
            if i % 3 == 1:
                sock.sendall(b"\x00\x00")
            elif i % 3 == 2:
                sock.sendall(startup_message())
                assert sock.recv(1) == b"R"
        assert_serving(limited)
    finally:
        for sock in socks:
            sock.close()
    assert_serving(limited)


def test_160_wrong_password_logins_are_refused_and_the_right_one_logs_in(limited):
    for i in range(160):
        with pytest.raises(psycopg.OperationalError, match='password authentication failed for user "analyst"'):
            psycopg.connect(
                host="127.0.0.1", port=limited, dbname="calibsql", user="analyst",
                password=f"guess {i}", sslmode="disable", connect_timeout=30,
            ).close()
    assert_serving(limited)


#: What the server may take to stop a statement after its client's process is killed
#: (about CLOSED_CHECK, 250 ms, plus the operators' next look at the cancel flag, ~100 ms;
#: a guard for a loaded machine, and 60 times under the `limited` server's timeout).
DISCONNECT_SLACK = 10


def test_a_client_killed_mid_query_has_its_statement_cancelled(limited):
    """A psycopg client process running a nested-loop join is SIGKILLed while the server
    works on it; its kernel closes the connection, the server sees it (it watches a running
    statement's socket) and cancels the statement as a cancel request would: the CPU goes
    idle within DISCONNECT_SLACK, not at the `limited` server's --query-timeout (600 s), the
    log says why, and the server goes on answering."""
    port = limited
    pid = SERVERS[port].pid
    log = LOGS[port]
    noticed = log.read_text().count("the client closed it while a statement ran")
    code = (
        "import psycopg\n"
        f"con = psycopg.connect(host='127.0.0.1', port={port}, dbname='calibsql', "
        f"user='analyst', password={PASSWORD!r}, sslmode='disable', autocommit=True)\n"
        "print('connected', flush=True)\n"
        f"con.execute({NESTED_LOOP!r})\n"
    )
    client = children.popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert client.stdout.readline().strip() == "connected"
        # The server works on the join: at least half a core over a fifth of a second.
        started = time.monotonic()
        while True:
            before = cpu_seconds(pid)
            time.sleep(0.2)
            if cpu_seconds(pid) - before >= 0.1:
                break
            assert client.poll() is None, "the client ended before it was killed"
            assert time.monotonic() - started < STOP, "the server never started the join"
        client.send_signal(signal.SIGKILL)
        client.wait(STOP)
        killed = time.monotonic()
    finally:
        client.kill()
        client.wait()
        client.stdout.close()
    wait_until_idle(pid)
    assert time.monotonic() - killed < DISCONNECT_SLACK
    assert log.read_text().count("the client closed it while a statement ran") == noticed + 1
    assert_serving(port)


def row_count(port: int) -> int:
    with connect(port) as con:
        return con.execute("SELECT count(*) FROM t").fetchone()[0]


def test_16_concurrent_clients_each_get_their_own_answer(limited):
    """Sixteen sessions at once (released together), each with statements whose answers
    are its own: a result sent to the wrong session, or lost, fails."""
    clients = 16
    with connect(limited) as con:
        counts = [
            con.execute("SELECT count(*) FROM t WHERE site_id %% 16 = %s", (k,)).fetchone()[0]
            for k in range(clients)
        ]
    assert sum(counts) == row_count(limited)
    start = threading.Barrier(clients, timeout=STOP)
    wrong, errors = [], []

    def client(k: int) -> None:
        try:
            with connect(limited) as con:
                start.wait()
                for round_ in range(3):
                    n = 100_000 + 1_000 * k + round_
                    got = con.execute(
                        f"SELECT {k} AS k, count(*) AS n, sum(value) AS s FROM generate_series(1, {n})"
                    ).fetchone()
                    if tuple(got) != (k, n, n * (n + 1) // 2):
                        wrong.append((k, n, got))
                    got = con.execute("SELECT count(*) FROM t WHERE site_id %% 16 = %s", (k,)).fetchone()[0]
                    if got != counts[k]:
                        wrong.append((k, got, counts[k]))
        except Exception as e:  # noqa: BLE001 - every failure is reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(STOP)
    assert not any(t.is_alive() for t in threads), "a client hung"
    assert not errors, errors[:3]
    assert not wrong, wrong[:3]
    assert_serving(limited)


import sqlalchemy  # noqa: E402  (python/run-tests.sh installs it: a missing one fails, never skips)


def engine(port: int):
    return sqlalchemy.create_engine(
        f"postgresql+psycopg://analyst:{PASSWORD.replace(' ', '%20')}@127.0.0.1:{port}/calibsql"
        "?sslmode=disable"
    )


#: A small table with NULLs and the scalar types calibsql's tables hold besides t's, written
#: by pyarrow: columns, Arrow types, nullability and values.
MIXED = [
    ("id", "int64", False, [1, 2, 3]),
    ("name", "string", True, ["a", None, "c"]),
    ("ok", "bool", True, [True, None, False]),
    ("day", "date32", True, ["2026-11-01", None, "2026-11-03"]),
    ("at", "timestamp", True, ["2026-11-01T10:00:00", None, None]),
    ("ratio", "float32", True, [1.5, None, 2.0]),
    ("rank", "int16", False, [1, 2, 3]),
]


@pytest.fixture(scope="module")
def reflected(binary: Path, logs: Path, tmp_path_factory: pytest.TempPathFactory):
    """A server over t and a Parquet file `mixed` of MIXED's columns."""
    import pyarrow as pa
    import datetime

    import pyarrow.parquet as pq

    types = {
        "int64": pa.int64(), "string": pa.string(), "bool": pa.bool_(), "date32": pa.date32(),
        "timestamp": pa.timestamp("us"), "float32": pa.float32(), "int16": pa.int16(),
    }
    parse = {
        "date32": lambda v: datetime.date.fromisoformat(v),
        "timestamp": lambda v: datetime.datetime.fromisoformat(v),
    }
    schema = pa.schema([pa.field(name, types[t], nullable=n) for name, t, n, _ in MIXED])
    columns = {
        name: [None if v is None else parse.get(t, lambda x: x)(v) for v in values]
        for name, t, _, values in MIXED
    }
    work = tmp_path_factory.mktemp("reflected")
    pq.write_table(pa.table(columns, schema=schema), work / "mixed.parquet")
    with serving(binary, logs, work, "--table", f"mixed={work / 'mixed.parquet'}") as port:
        yield port, work / "mixed.parquet"


def sqlalchemy_types(path: Path) -> list[tuple[str, type, bool]]:
    """What SQLAlchemy's inspector must find for the table in the Parquet file(s) at `path`,
    derived from the files' own Arrow schema (read with pyarrow, not from calibsql): each
    column's name, its nullability, and its type as SQLAlchemy's PostgreSQL dialect names the
    PostgreSQL type the server gives that Arrow type on the wire (arrow-pg's mapping:
    docs/serving.md, "Types"; an 8-bit integer is a smallint, PostgreSQL has no smaller)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from sqlalchemy.dialects import postgresql as pg

    file = path if path.is_file() else sorted(path.glob("*.parquet"))[0]
    by_type = [
        (pa.types.is_int64, pg.BIGINT), (pa.types.is_int32, pg.INTEGER),
        (pa.types.is_int16, pg.SMALLINT), (pa.types.is_int8, pg.SMALLINT),
        (pa.types.is_float64, pg.DOUBLE_PRECISION), (pa.types.is_float32, pg.REAL),
        (pa.types.is_string, pg.TEXT), (pa.types.is_large_string, pg.TEXT),
        (pa.types.is_boolean, pg.BOOLEAN), (pa.types.is_date32, pg.DATE),
        (pa.types.is_timestamp, pg.TIMESTAMP),
    ]
    expected = []
    for field in pq.read_schema(file):
        kind = next(k for test, k in by_type if test(field.type))
        expected.append((field.name, kind, field.nullable))
    return expected


def test_sqlalchemy_and_pandas_over_an_engine(limited, binary, logs):
    import pandas
    e = engine(limited)
    try:
        # The dialect parses the release from version() at connect.
        with e.connect() as c:
            assert e.dialect.server_version_info[:2] == (16, 6)
            assert c.execute(sqlalchemy.text("SHOW standard_conforming_strings")).scalar() == "on"
            assert c.execute(sqlalchemy.text("SELECT current_schema()")).scalar() == "public"
        sql = "SELECT ad_type, ece(p_model, click) AS ece FROM t GROUP BY ad_type ORDER BY ad_type"
        frame = pandas.read_sql(sql, e)
        expected = cli_rows(binary, logs, sql)
        assert len(frame) == len(expected)
        for (ad_type, ece), (want_type, want_ece) in zip(frame.itertuples(index=False), expected):
            assert ad_type == want_type and same(float(ece), want_ece)
        bound = pandas.read_sql(
            sqlalchemy.text("SELECT count(*) AS n FROM t WHERE p_model > :x"), e, params={"x": 0.5}
        )
        assert int(bound["n"][0]) == int(cli_rows(binary, logs, "SELECT count(*) FROM t WHERE p_model > 0.5")[0][0])
    finally:
        e.dispose()


def test_sqlalchemys_inspector_and_read_sql_table(reflected, binary, logs):
    """What SQLAlchemy 2's PostgreSQL inspector reads (Superset's and pandas' table browsers):
    calibsql's tables have no keys, indexes, constraints, defaults or serial columns, so
    those are empty, and the columns are the files' own."""
    import pandas
    port, mixed = reflected
    e = engine(port)
    try:
        inspector = sqlalchemy.inspect(e)
        # Its schema query has a LIKE … ESCAPE '/' (not DataFusion's backslash).
        assert inspector.get_schema_names() == ["public"]
        assert sorted(inspector.get_table_names()) == ["mixed", "t"]
        assert inspector.has_table("t") and not inspector.has_table("nope")
        assert inspector.get_view_names() == []
        assert inspector.get_table_comment("t") == {"text": None}
        for table, path in [("t", logs / "test"), ("mixed", mixed)]:
            # The column query's identity and collation subqueries read the outer row.
            columns = inspector.get_columns(table)
            expected = sqlalchemy_types(path)
            assert [c["name"] for c in columns] == [name for name, _, _ in expected]
            for column, (name, kind, nullable) in zip(columns, expected):
                assert type(column["type"]) is kind, (name, column["type"], kind)
                assert column["nullable"] is nullable, name
                assert column["default"] is None and column["autoincrement"] is False, column
                assert "identity" not in column and "computed" not in column, column
            # The key, index and constraint queries unnest pg_index.indkey.
            assert inspector.get_pk_constraint(table) == {"name": None, "constrained_columns": []}
            assert inspector.get_indexes(table) == []
            assert inspector.get_unique_constraints(table) == []
            assert inspector.get_foreign_keys(table) == []
            assert inspector.get_check_constraints(table) == []
        # pandas reflects the table (the queries above) and reads it all.
        frame = pandas.read_sql_table("t", e)
        assert list(frame.columns) == [name for name, _, _ in sqlalchemy_types(logs / "test")]
        (n, total), = cli_rows(binary, logs, "SELECT count(*), sum(p_model) FROM t")
        assert len(frame) == int(n)
        assert math.isclose(float(frame["p_model"].sum()), float(total), rel_tol=1e-9)
        frame = pandas.read_sql_table("mixed", e)
        assert list(frame.columns) == [name for name, _, _, _ in MIXED]
        for name, kind, _, values in MIXED:
            got = [None if pandas.isna(v) else v for v in frame[name]]
            if kind in ("date32", "timestamp"):
                got = [None if v is None else pandas.Timestamp(v) for v in got]
                values = [None if v is None else pandas.Timestamp(v) for v in values]
            assert got == values, (name, got, values)
    finally:
        e.dispose()
