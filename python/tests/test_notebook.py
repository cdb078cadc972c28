"""Notebook use: reliability plots are SVG that Jupyter shows, the default connection,
help(), the example script, Ctrl-C and the GIL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pydoc

import calibsql

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
    done = subprocess.run(
        [sys.executable, str(REPO / "examples" / "notebook.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert "ece" in done.stdout
    ET.parse(tmp_path / "reliability.svg")


LONG_QUERY = "SELECT sum(v % 7) FROM generate_series(1, 100000000000) AS t(v)"


def test_ctrl_c_cancels_a_query():
    script = (
        "import calibsql, sys\n"
        "print('running', flush=True)\n"
        "try:\n"
        f"    calibsql.connect().sql({LONG_QUERY!r})\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted', flush=True)\n"
        "    sys.exit(3)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().strip() == "running"
        time.sleep(1.5)
        started = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 3, (out, err)
        assert "interrupted" in out
        assert time.monotonic() - started < 30
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_the_gil_is_released_while_a_query_runs():
    con = calibsql.connect()
    done = threading.Event()

    def run():
        try:
            con.sql("SELECT sum(v % 7) FROM generate_series(1, 30000000) AS t(v)")
        finally:
            done.set()

    worker = threading.Thread(target=run)
    worker.start()
    ticks = 0
    while not done.is_set():
        ticks += 1  # Python keeps running in this thread while the query runs in Rust.
        time.sleep(0.001)
    worker.join()
    assert ticks > 10
