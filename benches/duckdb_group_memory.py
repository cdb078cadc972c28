#!/usr/bin/env python3
"""Memory a GROUP BY holds per group with calibsql's DuckDB extension, against calibsql:

    python3 benches/duckdb_group_memory.py EXTENSION CALIBSQL_BINARY [GROUPS] [ROWS] [THREADS]

Runs `SELECT sum(v) FROM (SELECT g, F AS v FROM … GROUP BY g)` over the same generated rows
in both (default 4M rows in 200k groups, scores and labels varying within each group) for F = count(*) (the baseline), ece(p, y) and fit_platt(p, y)['c'],
on one thread / one partition (or THREADS of each), each in a process of its own, and prints the peak resident
memory above the baseline divided by the number of groups.
"""

from __future__ import annotations

import subprocess
import sys

extension, binary = sys.argv[1], sys.argv[2]
groups = int(sys.argv[3]) if len(sys.argv) > 3 else 200_000
rows = int(sys.argv[4]) if len(sys.argv) > 4 else 4_000_000
threads = int(sys.argv[5]) if len(sys.argv) > 5 else 1
CALLS = {"baseline": "count(*)", "ece": "ece(p, y)", "fit_platt": "fit_platt(p, y)['c']"}

# The same rows in both engines: row i (0-based) in group i % GROUPS, with a score of 997
# levels and a label that vary within a group (GROUPS is not a multiple of 997 or 7).
P = "CAST((i * 7919) % 997 AS DOUBLE) / 997.0"
Y = "CAST((i * 40503) % 7 % 2 AS DOUBLE)"

DUCK = """
import duckdb, resource
con = duckdb.connect(config={{"allow_unsigned_extensions": "true", "threads": {threads}}})
con.execute("LOAD '{ext}'")
con.execute('''SELECT sum(v) FROM (SELECT g, {call} AS v FROM (
    SELECT i % {groups} AS g, {p} AS p, {y} AS y FROM range({rows}) t(i)) GROUP BY g)''').fetchall()
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def duckdb_kib(call: str) -> int:
    code = DUCK.format(ext=extension, call=call, groups=groups, rows=rows, p=P, y=Y, threads=threads)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[-1])


def calibsql_kib(call: str) -> int:
    sql = (
        f"SET datafusion.execution.target_partitions = {threads}; "
        f"SELECT sum(v) FROM (SELECT g, {call} AS v FROM (SELECT i % {groups} AS g, {P} AS p, "
        f"{Y} AS y FROM (SELECT value AS i FROM generate_series(0, {rows - 1}))) GROUP BY g)"
    )
    out = subprocess.run(
        ["/usr/bin/time", "-f", "%M", binary, "-q", "-c", sql],
        capture_output=True, text=True, check=True,
    )
    return int(out.stderr.split()[-1])


base = {"DuckDB + extension": duckdb_kib(CALLS["baseline"]), "calibsql": calibsql_kib(CALLS["baseline"])}
print(f"{rows} rows, {groups} groups, {threads} thread(s); bytes per group above count(*)")
print("function | DuckDB + extension | calibsql")
for name, call in CALLS.items():
    if name == "baseline":
        continue
    d = (duckdb_kib(call) - base["DuckDB + extension"]) * 1024 / groups
    c = (calibsql_kib(call) - base["calibsql"]) * 1024 / groups
    print(f"{name} | {d:.0f} | {c:.0f}")
