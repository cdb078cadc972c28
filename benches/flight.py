"""Fetching a whole table of 3 columns into Python three ways: ADBC over `calibsql serve`'s
Arrow Flight SQL listener, psycopg over its Postgres listener, and pyarrow reading the same
Parquet files locally; with the server's peak memory. A bench, not a test: it asserts nothing.

    python benches/flight.py [--binary PATH] [--rows 2M] [--repeat 3]

Needs pyarrow, psycopg 3 and adbc-driver-flightsql (the Python tests' venv has them:
~/.cache/calibsql/venv/bin/python) and a calibsql built with the serve feature (the default
binary is target/release/calibsql if it exists, else $CARGO_TARGET_DIR/debug/calibsql).
`--rows` are generated; the table is the test half of them. Each way runs --repeat times; the
best time counts (the first run also warms the page cache).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import tempfile
import time
from pathlib import Path

import adbc_driver_flightsql.dbapi as flightsql
import psycopg
import pyarrow.parquet as pq

PASSWORD = "bench password"
COLUMNS = ["site_id", "p_model", "click"]
QUERY = f"SELECT {', '.join(COLUMNS)} FROM t"


def default_binary() -> Path:
    root = Path(__file__).resolve().parents[1]
    candidates = [root / "target" / "release" / "calibsql"]
    candidates.append(Path(os.environ.get("CARGO_TARGET_DIR", root / "target")) / "debug" / "calibsql")
    for path in candidates:
        if path.exists():
            return path
    raise SystemExit("no calibsql built: build it first (cargo build --release --features serve)")


def peak_rss_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmHWM:\s+(\d+) kB", status).group(1)) / 1024


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
        subprocess.run([binary, "generate", "--rows", args.rows, "--out", work / "data", "-q"], check=True)
        verifier = subprocess.run([binary, "hash-password"], input=PASSWORD + "\n", text=True,
                                  capture_output=True, check=True).stdout.strip()
        users = work / "users"
        users.write_text(f"bench:{verifier}\n")
        users.chmod(0o600)
        log = open(work / "log", "wb")
        server = subprocess.Popen([binary, "serve", "--users", users, "--bind", "127.0.0.1:0",
                                   "--flight-bind", "127.0.0.1:0", "--table", f"t={data}"],
                                  stdout=subprocess.DEVNULL, stderr=log)
        try:
            while not (m := re.search(r"Flight SQL listening on 127\.0\.0\.1:(\d+)",
                                      (work / "log").read_text())):
                if server.poll() is not None:
                    raise SystemExit((work / "log").read_text())
                time.sleep(0.02)
            flight_port = int(m.group(1))
            pg_port = int(re.search(r"serve: listening on 127\.0\.0\.1:(\d+)",
                                    (work / "log").read_text()).group(1))

            def local() -> int:
                return pq.read_table(data, columns=COLUMNS).num_rows

            def adbc() -> int:
                with flightsql.connect(f"grpc://127.0.0.1:{flight_port}", autocommit=True,
                                       db_kwargs={"username": "bench", "password": PASSWORD}) as con:
                    with con.cursor() as cur:
                        cur.execute(QUERY)
                        return cur.fetch_arrow_table().num_rows

            def postgres() -> int:
                with psycopg.connect(host="127.0.0.1", port=pg_port, dbname="calibsql",
                                     user="bench", password=PASSWORD, sslmode="disable",
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
            print(f"server peak RSS: {peak_rss_mib(server.pid):.0f} MiB")
        finally:
            server.kill()
            server.wait()
            log.close()


if __name__ == "__main__":
    main()
