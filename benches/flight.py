"""Fetching a whole table of 3 columns into Python four ways: ADBC and pyarrow.flight over
`calibsql serve`'s Arrow Flight SQL listener, psycopg over its Postgres listener, and pyarrow
reading the same Parquet files locally, each with the CPU seconds the server and the client
spent (client and server share this machine's cores, so their sum bounds the wall time). Then the server's memory: how far it rises above its resting size while
1 and 4 ADBC clients at once stream the whole table, against the same scan summed to one row
(the query's own memory): the difference is what streaming costs, to set against one batch.
A bench, not a test: it asserts nothing.

    python benches/flight.py [--binary PATH] [--rows 2M] [--repeat 3]

Needs pyarrow, psycopg 3 and adbc-driver-flightsql (the Python tests' venv has them:
~/.cache/calibsql/venv/bin/python) and a calibsql built with the serve feature (by default
$CARGO_TARGET_DIR's release binary, else its debug one: benches/serving.py).
`--rows` are generated; the table is the test half of them. Each way runs --repeat times; the
best time counts (the first run also warms the page cache).
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import threading
import time
from pathlib import Path

import adbc_driver_flightsql.dbapi as flightsql
import psycopg
import pyarrow.flight
import pyarrow.parquet as pq

from serving import (PASSWORD, USER, default_binary, peak_rss_mib, port, reset_peak_rss,
                     rss_mib, serving)

COLUMNS = ["site_id", "p_model", "click"]
QUERY = f"SELECT {', '.join(COLUMNS)} FROM t"


def server_cpu(pid: int) -> float:
    """CPU seconds (user and system) process `pid` has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def client_cpu() -> float:
    """CPU seconds this process (the client, its driver's threads included) has used."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def best(repeat: int, fetch, pid: int) -> tuple[float, int, float, float]:
    """The shortest of `repeat` runs of `fetch` (which returns its row count), the rows, and the
    mean CPU seconds of the server (`pid`) and of the client per run."""
    times, rows = [], 0
    server, client = server_cpu(pid), client_cpu()
    for _ in range(repeat):
        started = time.perf_counter()
        rows = fetch()
        times.append(time.perf_counter() - started)
    return (min(times), rows, (server_cpu(pid) - server) / repeat,
            (client_cpu() - client) / repeat)


def statement_command(query: str) -> bytes:
    """A Flight SQL `CommandStatementQuery` for `query`, packed in a protobuf `Any`, as a
    `FlightDescriptor`'s command (pyarrow.flight speaks Flight, not Flight SQL's messages)."""
    def field(number: int, data: bytes) -> bytes:  # a length-delimited protobuf field
        length, size = b"", len(data)
        while size > 0x7F:
            length += bytes([size & 0x7F | 0x80])
            size >>= 7
        return bytes([number << 3 | 2]) + length + bytes([size]) + data
    return (field(1, b"type.googleapis.com/arrow.flight.protocol.sql.CommandStatementQuery")
            + field(2, field(1, query.encode())))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", type=Path, default=None)
    parser.add_argument("--rows", default="2M", help="rows generated (half are the table)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    binary = args.binary or default_binary()
    with tempfile.TemporaryDirectory(prefix="calibsql-flight-bench-") as work:
        work = Path(work)
        data = work / "data" / "test"
        with serving(binary, work, args.rows, "--flight-bind", "127.0.0.1:0") as (server, log):
            while "Flight SQL listening on" not in log():
                time.sleep(0.02)
            flight_port = port(log(), r"Flight SQL listening on ")
            pg_port = port(log(), r"serve: listening on ")

            def local() -> int:
                return pq.read_table(data, columns=COLUMNS).num_rows

            def adbc(query: str = QUERY) -> int:
                with flightsql.connect(f"grpc://127.0.0.1:{flight_port}", autocommit=True,
                                       db_kwargs={"username": USER, "password": PASSWORD}) as con:
                    with con.cursor() as cur:
                        cur.execute(query)
                        return cur.fetch_arrow_table().num_rows

            def arrow_flight() -> int:
                client = pyarrow.flight.FlightClient(f"grpc://127.0.0.1:{flight_port}")
                try:
                    token = client.authenticate_basic_token(USER, PASSWORD)
                    options = pyarrow.flight.FlightCallOptions(headers=[token])
                    info = client.get_flight_info(
                        pyarrow.flight.FlightDescriptor.for_command(statement_command(QUERY)),
                        options)
                    return client.do_get(info.endpoints[0].ticket, options).read_all().num_rows
                finally:
                    client.close()

            def summed() -> int:
                # The same scan with a one-row answer: the query's own memory, without streaming.
                return adbc(f"SELECT {', '.join(f'sum({c})' for c in COLUMNS)} FROM t")

            def postgres() -> int:
                with psycopg.connect(host="127.0.0.1", port=pg_port, dbname="calibsql",
                                     user=USER, password=PASSWORD, sslmode="disable",
                                     autocommit=True) as con:
                    return len(con.execute(QUERY).fetchall())

            print(f"calibsql Flight SQL bench: {binary}, {QUERY!r} over {args.rows} generated "
                  f"rows (half in t), best of {args.repeat}")
            results = {}
            ways = [("pyarrow, local Parquet", local), ("ADBC, Flight SQL", adbc),
                    ("pyarrow.flight, Flight SQL", arrow_flight),
                    ("ADBC, the scan summed", summed), ("psycopg, Postgres wire", postgres)]
            for name, fetch in ways:
                fetch()  # the page cache, and the server's first query
                seconds, rows, server_s, client_s = best(args.repeat, fetch, server.pid)
                results[name] = seconds
                print(f"{name:>26}: {rows:>10} rows in {seconds:7.3f} s "
                      f"({rows / seconds / 1e6:6.2f} M rows/s); CPU: server {server_s:6.3f} s, "
                      f"client {client_s:6.3f} s")
            flight = results["ADBC, Flight SQL"]
            local_read = results["pyarrow, local Parquet"]
            print(f"Flight SQL (ADBC) is {results['psycopg, Postgres wire'] / flight:.1f}x "
                  f"psycopg's speed and takes {flight / local_read:.1f}x the local read "
                  f"(pyarrow.flight {results['pyarrow.flight, Flight SQL'] / local_read:.1f}x)")
            # One batch: DataFusion's 8192 rows of the three columns (two BIGINT and a DOUBLE).
            print(f"server memory above its resting size, at its peak (one batch: "
                  f"{8192 * 3 * 8 / 2**20:.2f} MiB):")
            for clients in (1, 4):
                for name, fetch in [("the scan summed", summed), ("the whole table", adbc)]:
                    resting = rss_mib(server.pid)
                    reset_peak_rss(server.pid)
                    threads = [threading.Thread(target=fetch) for _ in range(clients)]
                    for thread in threads:
                        thread.start()
                    for thread in threads:
                        thread.join()
                    print(f"  {clients} ADBC client(s) fetching {name:>15}: "
                          f"+{peak_rss_mib(server.pid) - resting:5.0f} MiB")


if __name__ == "__main__":
    main()
