"""Notebook use: reliability plots are SVG that Jupyter shows, the default connection,
help(), the example script, Ctrl-C and the GIL."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pydoc

import calibsql
import children

REPO = Path(__file__).resolve().parents[2]


def test_reliability_plot_is_valid_svg(tmp_path, logs):
    con = calibsql.connect()
    con.register("test", logs / "test")
    svg = con.plot_reliability(
        "SELECT p_model AS p, click AS y, ad_type AS series FROM test", bins=10, title="CTR"
    )
    text = svg._repr_svg_()
    root = ET.fromstring(text)
    assert root.tag.endswith("svg")
    assert "CTR" in text and "video" in text
    svg.save(tmp_path / "r.svg")
    assert (tmp_path / "r.svg").read_text() == text


def test_default_connection():
    calibsql.register("numbers_for_default", {"p": [0.25, 0.75], "y": [0, 1]})
    rows = calibsql.sql("SELECT brier(p, y) AS b FROM numbers_for_default").to_pylist()
    assert rows == [{"b": 0.0625}]


def test_help_is_useful():
    text = pydoc.render_doc(calibsql, renderer=pydoc.plaintext)
    for word in ("connect", "register", "Result", "to_pandas", "register_all", "Error"):
        assert word in text
    assert "GIL" in pydoc.render_doc(calibsql.Connection.sql, renderer=pydoc.plaintext)
    assert (Path(calibsql.__file__).parent / "py.typed").exists()
    assert (Path(calibsql.__file__).parent / "_calibsql.pyi").exists()


def test_example_script_runs(tmp_path, binary):
    # The script imports the calibsql this test imported.
    package_root = str(Path(calibsql.__file__).resolve().parents[1])
    path = os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, CALIBSQL_BIN=str(binary), PYTHONPATH=path)
    done = children.run(
        [sys.executable, str(REPO / "examples" / "notebook.py"), str(tmp_path)],
        text=True,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert "ece" in done.stdout
    ET.parse(tmp_path / "reliability.svg")


LONG_QUERY = "SELECT sum(v % 7) FROM generate_series(1, 100000000000) AS t(v)"


def test_ctrl_c_cancels_a_query():
    # The query would run for hours (a minute at best on a fast machine with a release
    # build): exiting with 3 at all means it was cancelled, so the deadline below is only a
    # hang guard, not a speed check.
    script = (
        "import calibsql, sys\n"
        "print('running', flush=True)\n"
        "try:\n"
        f"    calibsql.connect().sql({LONG_QUERY!r})\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted', flush=True)\n"
        "    sys.exit(3)\n"
    )
    proc = children.popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        ready, _, _ = select.select([proc.stdout], [], [], children.TIMEOUT)
        assert ready, "the script printed nothing"
        assert proc.stdout.readline().strip() == "running"
        time.sleep(1.5)  # into the query
        proc.send_signal(signal.SIGINT)
        out, err = children.communicate(proc, 120)
        assert proc.returncode == 3, (out, err)
        assert "interrupted" in out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _ticks_during_a_query(con, rows: int) -> tuple[int, float, float]:
    """Runs a query of `rows` rows in a thread while this one ticks (sleeps 1 ms and counts);
    returns the ticks while the query ran, how long it ran, and how long a tick takes here
    when no query runs (all in seconds)."""
    started = time.monotonic()
    for _ in range(20):
        time.sleep(0.001)
    tick = (time.monotonic() - started) / 20

    window = {}
    done = threading.Event()

    def run():
        try:
            window["start"] = time.monotonic()
            con.sql(f"SELECT sum(v % 7) FROM generate_series(1, {rows}) AS t(v)")
            window["end"] = time.monotonic()
        finally:
            done.set()

    worker = threading.Thread(target=run)
    worker.start()
    ticks = []
    while not done.is_set():
        ticks.append(time.monotonic())  # Python runs here while the query runs in Rust.
        time.sleep(0.001)
    worker.join()
    inside = sum(window["start"] < t < window["end"] for t in ticks)
    return inside, window["end"] - window["start"], tick


def test_the_gil_is_released_while_a_query_runs():
    # Judged against this machine's own pace: a query that kept the GIL would leave this
    # thread a tick or two at its edges (when the GIL changes hands around the call); one
    # that releases it lets this thread tick all along. The query grows until it lasts 50
    # of this machine's ticks, so the count means the same on a fast or a slow machine.
    con = calibsql.connect()
    rows = 30_000_000
    for _ in range(6):
        inside, seconds, tick = _ticks_during_a_query(con, rows)
        if seconds >= 50 * tick:
            break
        rows *= 4
    assert seconds >= 50 * tick, (seconds, tick)
    assert inside >= 10, (inside, seconds, tick)
