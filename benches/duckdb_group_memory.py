#!/usr/bin/env python3
"""Memory a GROUP BY holds per group with calibsql's DuckDB extension, against calibsql:

    python3 benches/duckdb_group_memory.py EXTENSION CALIBSQL_BINARY [GROUPS] [ROWS]

Runs `SELECT sum(v) FROM (SELECT g, F AS v FROM … GROUP BY g)` over generated rows (default
4M rows in 200k groups) for F = count(*) (the baseline), ece(p, y) and fit_platt(p, y)['c'],
on one thread / one partition, each in a process of its own, and prints the peak resident
memory above the baseline divided by the number of groups.
"""

from __future__ import annotations

import subprocess
import sys

extension, binary = sys.argv[1], sys.argv[2]
groups = int(sys.argv[3]) if len(sys.argv) > 3 else 200_000
rows = int(sys.argv[4]) if len(sys.argv) > 4 else 4_000_000
CALLS = {"baseline": "count(*)", "ece": "ece(p, y)", "fit_platt": "fit_platt(p, y)['c']"}

DUCK = """
import duckdb, resource
con = duckdb.connect(config={{"allow_unsigned_extensions": "true", "threads": 1}})
con.execute("LOAD '{ext}'")
con.execute('''SELECT sum(v) FROM (SELECT g, {call} AS v FROM (
    SELECT i % {groups} AS g, (hash(i) % 1000) / 1000.0 AS p, (hash(i * 7) % 2)::DOUBLE AS y
    FROM range({rows}) t(i)) GROUP BY g)''').fetchall()
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def duckdb_kib(call: str) -> int:
    code = DUCK.format(ext=extension, call=call, groups=groups, rows=rows)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[-1])


def calibsql_kib(call: str) -> int:
    sql = (
        "SET datafusion.execution.target_partitions = 1; "
        f"SELECT sum(v) FROM (SELECT g, {call} AS v FROM (SELECT value % {groups} AS g, "
        "((value * 2654435761) % 1000) / 1000.0 AS p, CAST((value * 40503) % 2 AS DOUBLE) AS y "
        f"FROM generate_series(1, {rows})) GROUP BY g)"
    )
    out = subprocess.run(
        ["/usr/bin/time", "-f", "%M", binary, "-q", "-c", sql],
        capture_output=True, text=True, check=True,
    )
    return int(out.stderr.split()[-1])


base = {"DuckDB + extension": duckdb_kib(CALLS["baseline"]), "calibsql": calibsql_kib(CALLS["baseline"])}
print(f"{rows} rows, {groups} groups, one thread; bytes per group above count(*)")
print("function | DuckDB + extension | calibsql")
for name, call in CALLS.items():
    if name == "baseline":
        continue
    d = (duckdb_kib(call) - base["DuckDB + extension"]) * 1024 / groups
    c = (calibsql_kib(call) - base["calibsql"]) * 1024 / groups
    print(f"{name} | {d:.0f} | {c:.0f}")
