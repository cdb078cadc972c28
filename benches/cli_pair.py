"""A query and its baseline through the `calibsql` binary, one process per run, alternately.

The in-process bench (`cargo bench --bench end_to_end`) keeps one session and one heap for
every run; this measures what a user's scripted job sees instead, and the spread between
processes. Prints median wall and CPU (user + system of the child) of each query and the
ratio of the medians.

    python3 benches/cli_pair.py BINARY FILE.parquet [RUNS] [QUERY BASELINE]

FILE is registered as table `t`; the default pair is the speed issue's fit against `avg`
over its three columns (the realistic file of `end_to_end`, under
$CARGO_TARGET_DIR/calibsql-bench/).
"""

import resource
import statistics
import subprocess
import sys
import time

FIT = "SELECT fit_gaussian_calib(score, y, propensity) FROM t"
BASE = "SELECT avg(score), avg(y), avg(propensity) FROM t"


def run(binary, path, sql):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(
        [binary, "--format", "json", "--table", f"t={path}", "-c", sql],
        stdout=subprocess.DEVNULL,
        check=True,
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main():
    binary, path = sys.argv[1], sys.argv[2]
    runs = int(sys.argv[3]) if len(sys.argv) > 3 else 20
    query, base = (sys.argv[4], sys.argv[5]) if len(sys.argv) > 5 else (FIT, BASE)
    times = {query: [], base: []}
    for _ in range(runs):
        for sql in (base, query):
            times[sql].append(run(binary, path, sql))
    med = {sql: [statistics.median(t[k] for t in v) for k in (0, 1)] for sql, v in times.items()}
    for name, sql in (("query", query), ("baseline", base)):
        print(f"{name:<9} wall {med[sql][0] * 1e3:7.1f} ms   cpu {med[sql][1] * 1e3:7.1f} ms   {sql}")
    print(
        f"ratio     wall {med[query][0] / med[base][0]:.3f}   cpu {med[query][1] / med[base][1]:.3f}"
        f"   ({runs} alternating runs, one process each)"
    )


if __name__ == "__main__":
    main()
