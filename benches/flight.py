"""Fetching a whole table of 3 columns into Python three ways: ADBC over `calibsql serve`'s
Arrow Flight SQL listener, psycopg over its Postgres listener, and pyarrow reading the same
Parquet files locally. Then the server's memory: how far it rises above its resting size while
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
import tempfile
import threading
import time
from pathlib import Path

import adbc_driver_flightsql.dbapi as flightsql
import psycopg
import pyarrow.parquet as pq

from serving import (PASSWORD, USER, default_binary, peak_rss_mib, port, reset_peak_rss,
                     rss_mib, serving)

COLUMNS = ["site_id", "p_model", "click"]
QUERY = f"SELECT {', '.join(COLUMNS)} FROM t"


def best(repeat: int, fetch) -> tuple[float, int]:
    """The shortest of `repeat` runs of `fetch` (which returns its row count), and the rows."""
    times, rows = [], 0
    for _ in range(repeat):
        started = time.perf_counter()
        rows = fetch()
        times.append(time.perf_counter() - started)
    return min(times), rows


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
            for name, fetch in [("pyarrow, local Parquet", local), ("ADBC, Flight SQL", adbc),
                                ("psycopg, Postgres wire", postgres)]:
                seconds, rows = best(args.repeat, fetch)
                results[name] = seconds
                print(f"{name:>24}: {rows:>10} rows in {seconds:7.2f} s "
                      f"({rows / seconds / 1e6:6.2f} M rows/s)")
            flight = results["ADBC, Flight SQL"]
            print(f"Flight SQL is {results['psycopg, Postgres wire'] / flight:.1f}x psycopg's "
                  f"speed and takes {flight / results['pyarrow, local Parquet']:.1f}x the local read")
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
