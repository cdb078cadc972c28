#!/usr/bin/env python3
"""DuckDB's hand-written rank-window AUC on a Parquet file: the baseline of `auc(p, y)` in the
speed issue's table. Run by `cargo bench --bench end_to_end` when DuckDB is importable
(`pip install duckdb`; `CALIBSQL_BENCH_PYTHON` names the interpreter), or by hand:

    python3 benches/duckdb_auc.py FILE.parquet [RUNS]

Prints one line: `median_ms peak_rss_mib auc duckdb_version`, with DuckDB on 2 threads (the
machine's cores, as calibsql uses) and the peak resident memory of this process.
"""
import resource
import statistics
import sys
import time

import duckdb

path = sys.argv[1]
runs = int(sys.argv[2]) if len(sys.argv) > 2 else 5
con = duckdb.connect()
con.execute("SET threads TO 2")
sql = f"""
SELECT (sum(CASE WHEN y = 1 THEN r END) - n1 * (n1 + 1) / 2.0) / (n1 * (cnt - n1)) FROM
  (SELECT y, rank() OVER (ORDER BY p) + (count(*) OVER (PARTITION BY p) - 1) / 2.0 AS r,
          sum(CAST(y AS DOUBLE)) OVER () AS n1, count(*) OVER () AS cnt
   FROM read_parquet('{path}'))
GROUP BY n1, cnt
"""
times = []
value = None
for _ in range(runs):
    start = time.perf_counter()
    value = con.execute(sql).fetchone()[0]
    times.append((time.perf_counter() - start) * 1000.0)
peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
print(f"{statistics.median(times):.1f} {peak_mib:.0f} {value!r} {duckdb.__version__}")
