#!/usr/bin/env python3
"""calibsql's functions inside DuckDB (duckdb/) against calibsql itself and against DuckDB's
best plain-SQL formulation of the same number, over one Parquet table:

    python3 benches/duckdb_extension.py EXTENSION CALIBSQL_BINARY 'DIR/*.parquet' [RUNS]

EXTENSION is a release build (`bash duckdb/build.sh` prints its path), CALIBSQL_BINARY a
release `calibsql`; the table is the bench's (`calibsql generate --rows 40M --out DIR`, whose
test half is 20M rows: columns `p_model`, `click`). DuckDB runs on 2 threads, calibsql on its
default (the machine's cores); each number is the median of RUNS (default 5) after one warm-up,
calibsql's the time it prints for the statement (not the process's start). Prints a table:
function, calibsql ms, extension ms (ratio to calibsql), plain DuckDB SQL ms, the three values;
then the same calls (and `fit_platt`) in a `GROUP BY` of 5,000 and of 200,000 groups.
"""

from __future__ import annotations

import re
import statistics
import subprocess
import sys
import time

import duckdb

extension, binary, table = sys.argv[1], sys.argv[2], sys.argv[3]
runs = int(sys.argv[4]) if len(sys.argv) > 4 else 5

# DuckDB's plain SQL for the same numbers: ECE over calibsql's default bins (15 uniform
# bins, the last closed) and the rank-sum AUC with midranks for ties (benches/duckdb_auc.py).
PLAIN = {
    "ece": """
        SELECT sum(abs(sy - sp)) / sum(n) FROM (
          SELECT least(floor(p_model * 15), 14) AS b, sum(p_model) AS sp,
                 sum(CAST(click AS DOUBLE)) AS sy, count(*) AS n
          FROM t GROUP BY b)""",
    "auc": """
        SELECT (sum(CASE WHEN click = 1 THEN r END) - n1 * (n1 + 1) / 2.0) / (n1 * (cnt - n1))
        FROM (SELECT click,
                     rank() OVER (ORDER BY p_model)
                       + (count(*) OVER (PARTITION BY p_model) - 1) / 2.0 AS r,
                     sum(CAST(click AS DOUBLE)) OVER () AS n1, count(*) OVER () AS cnt
              FROM t)
        GROUP BY n1, cnt""",
}
CALLS = {"ece": "ece(p_model, click)", "auc": "auc(p_model, click)"}


def duck_ms(con, sql: str) -> tuple[float, float]:
    value = con.execute(sql).fetchone()[0]
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        value = con.execute(sql).fetchone()[0]
        times.append((time.perf_counter() - start) * 1000.0)
    return statistics.median(times), value


def calibsql_ms(call: str, query: str = "SELECT {call} AS v FROM t") -> tuple[float, float]:
    sql = "; ".join([query.format(call=call)] * (runs + 1))
    done = subprocess.run(
        [binary, "--table", f"t={table.rsplit('/', 1)[0]}", "--format", "table", "-c", sql],
        capture_output=True, text=True, check=True,
    )
    times = [float(t) * 1000.0 for t in re.findall(r"1 row in ([0-9.]+) s", done.stderr)][1:]
    value = float(re.findall(r"\|\s*([-0-9.e]+)\s*\|", done.stdout)[-1])
    return statistics.median(times), value


con = duckdb.connect(config={"allow_unsigned_extensions": "true"})
con.execute("SET threads TO 2")
con.execute(f"LOAD '{extension}'")
con.execute(f"CREATE VIEW t AS SELECT * FROM read_parquet('{table}')")
print(f"DuckDB {duckdb.__version__}, {runs} runs, medians")
print("function | calibsql ms | extension ms (÷ calibsql) | plain DuckDB SQL ms | values")
for name, call in CALLS.items():
    own, v_own = calibsql_ms(call)
    ext, v_ext = duck_ms(con, f"SELECT {call} FROM t")
    plain, v_plain = duck_ms(con, PLAIN[name])
    print(f"{name} | {own:.0f} | {ext:.0f} ({ext / own:.2f}×) | {plain:.0f} | "
          f"{v_own!r} {v_ext!r} {v_plain!r}")

# Grouped: the same calls per site (5,000 groups) and per user bucket (200,000 groups), summed
# so that one number compares.
GROUPED = {"site_id": "site_id", "user_id % 200000": "user_id % 200000"}
GROUPED_CALLS = {**CALLS, "fit_platt": "fit_platt(p_model, click)['c']"}
print()
print("GROUP BY | function | calibsql ms | extension ms (÷ calibsql) | values")
for key in GROUPED:
    query = f"SELECT sum(v) AS v FROM (SELECT {key} AS g, {{call}} AS v FROM t GROUP BY g)"
    for name, call in GROUPED_CALLS.items():
        own, v_own = calibsql_ms(call, query)
        ext, v_ext = duck_ms(con, query.format(call=call))
        print(f"{key} | {name} | {own:.0f} | {ext:.0f} ({ext / own:.2f}×) | {v_own!r} {v_ext!r}")
