"""Throughput and latency of `calibsql serve`: a small `ece` query from 1, 8 and 32 psycopg
clients at once, and the server's peak memory. A bench, not a test: it asserts nothing.

    python benches/serve.py [--binary PATH] [--rows 20K] [--seconds 15]

Needs psycopg 3 (the Python tests' venv has it: ~/.cache/calibsql/venv/bin/python) and a
calibsql built with the serve feature (by default $CARGO_TARGET_DIR's release binary, else
its debug one: benches/serving.py). Each client holds one connection and runs the
query back to back for --seconds; the latency is the client's (send to last row).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from pathlib import Path

import psycopg

from serving import PASSWORD, USER, default_binary, peak_rss_mib, port, serving

QUERY = "SELECT ece(p_model, click) FROM t"


def run_clients(pg_port: int, clients: int, seconds: float) -> list[float]:
    latencies: list[float] = []
    lock = threading.Lock()
    deadline = time.monotonic() + seconds

    def client() -> None:
        mine = []
        with psycopg.connect(host="127.0.0.1", port=pg_port, dbname="calibsql", user=USER,
                             password=PASSWORD, sslmode="disable", autocommit=True) as con:
            con.execute(QUERY).fetchall()  # warm the connection
            while time.monotonic() < deadline:
                started = time.perf_counter()
                con.execute(QUERY).fetchall()
                mine.append(time.perf_counter() - started)
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", type=Path, default=None)
    parser.add_argument("--rows", default="20K", help="rows generated (half are the table)")
    parser.add_argument("--seconds", type=float, default=15.0)
    args = parser.parse_args()
    binary = args.binary or default_binary()
    with tempfile.TemporaryDirectory(prefix="calibsql-serve-bench-") as work:
        with serving(binary, Path(work), args.rows) as (server, log):
            pg_port = port(log(), r"serve: listening on ")
            print(f"calibsql serve bench: {binary}, {QUERY!r} over {args.rows} generated rows "
                  f"(half in t), {args.seconds:g} s per level")
            print(f"{'clients':>7} {'queries':>8} {'qps':>8} {'p50 ms':>8} {'p99 ms':>8}")
            for clients in (1, 8, 32):
                latencies = sorted(run_clients(pg_port, clients, args.seconds))
                p99 = latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]
                print(f"{clients:>7} {len(latencies):>8} {len(latencies) / args.seconds:>8.1f} "
                      f"{statistics.median(latencies) * 1e3:>8.2f} {p99 * 1e3:>8.2f}")
            print(f"server peak RSS: {peak_rss_mib(server.pid):.0f} MiB")


if __name__ == "__main__":
    main()
