"""The calibration report from Python (`con.report`) and its page in a real browser.

`Report.data` is checked against numpy sums of the same rows (ratio, weight, Brier score,
log loss: direct readings of docs/functions.md) and against the CLI's `--json`; the page is
opened by headless Chromium over the DevTools protocol (browser.py), which must see no
request leave the page, no console error, every section and chart drawn, and the
`<script>alert(1)</script>` value as text. The screenshot goes to $CALIBSQL_REPORT_SCREENSHOT
when set (docs/report.png is made so), else into the test's temporary directory.
"""

from __future__ import annotations

import base64
import json
import math
import os
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

import browser
import calibsql
import children

XSS = "<script>alert(1)</script>"

QUERY = f"""
SELECT p_model AS p, click AS y, day, model, site
FROM (SELECT *, 'ctr' AS model,
             CASE WHEN site_id % 7 = 0 THEN '{XSS}' ELSE CAST(site_id % 40 AS VARCHAR) END AS site
      FROM test)
UNION ALL
SELECT sigmoid(score) AS p, click AS y, day, 'ranker' AS model,
       CASE WHEN site_id % 7 = 0 THEN '{XSS}' ELSE CAST(site_id % 40 AS VARCHAR) END AS site
FROM test
"""


@pytest.fixture(scope="module")
def report(logs: Path) -> calibsql.Report:
    con = calibsql.connect()
    con.register("test", logs / "test")
    return con.report(QUERY, fields=["site"], title="Report test")


def test_report_data_matches_numpy(report: calibsql.Report, logs: Path) -> None:
    table = pq.read_table(logs / "test").to_pandas()
    p_ctr = table["p_model"].to_numpy(dtype=float)
    p_ranker = 1.0 / (1.0 + np.exp(-table["score"].to_numpy(dtype=float)))
    y = table["click"].to_numpy(dtype=float)
    data = report.data
    assert data["schema_version"] == 2
    assert [m["model"] for m in data["models"]] == ["ctr", "ranker"]
    for model, p in zip(data["models"], (p_ctr, p_ranker)):
        assert model["rows"] == len(y)
        assert model["weight"] == float(len(y))
        assert math.isclose(model["ratio"], p.sum() / y.sum(), rel_tol=1e-12)
        assert math.isclose(model["brier"], np.mean((y - p) ** 2), rel_tol=1e-10)
        q = np.clip(p, np.finfo(float).eps, 1 - np.finfo(float).eps)
        logloss = -np.mean(y * np.log(q) + (1 - y) * np.log(1 - q))
        assert math.isclose(model["logloss"], logloss, rel_tol=1e-10)
        counts = [b["count"] for b in model["reliability"]]
        assert counts == np.bincount(
            np.minimum((p * 15).astype(int), 14), minlength=15
        ).tolist()
        assert len(model["daily"]) == 14
        values = {s["value"] for s in model["segments"][0]["segments"]}
        assert XSS in values
    inline = report._repr_html_()
    # The page, escaped once by the page and once more for the frame's srcdoc attribute.
    assert inline.startswith("<iframe") and XSS not in inline
    assert "&amp;lt;script&amp;gt;alert(1)" in inline
    assert "ctr" in repr(report)


def test_report_matches_the_cli(report: calibsql.Report, logs: Path, binary: Path, tmp_path: Path) -> None:
    out = tmp_path / "cli.json"
    children.run(
        [
            str(binary), "report", "--table", f"test={logs / 'test'}", "-c", QUERY,
            "--field", "site", "--title", "Report test", "-o", str(tmp_path / "cli.html"),
            "--json", str(out), "-q",
        ],
        check=True,
    )
    skip = ("generated_at", "source")
    cli = {k: v for k, v in json.loads(out.read_text()).items() if k not in skip}
    ours = {k: v for k, v in report.data.items() if k not in skip}
    assert cli == ours


def test_report_errors_name_the_problem() -> None:
    con = calibsql.connect()
    with pytest.raises(calibsql.Error, match="it has no p"):
        con.report("SELECT 0.5 AS q, 1 AS y")
    with pytest.raises(calibsql.Error, match="--field site"):
        con.report("SELECT 0.5 AS p, 1 AS y", fields=["site"])
    with pytest.raises(calibsql.Error, match="strategy must be one of"):
        con.report("SELECT 0.5 AS p, 1 AS y", strategy="nope")
    empty = con.report("SELECT 0.5 AS p, 1 AS y WHERE false")
    assert empty.data["models"] == [] and "no rows" in empty.data["notes"][0]


def test_report_page_in_chromium(report: calibsql.Report, tmp_path: Path) -> None:
    path = browser.chromium()
    if path is None:
        pytest.fail("Chromium is not installed (Debian: apt-get install chromium; tests/run-all.sh does)")
    page = tmp_path / "report.html"
    report.save(page)
    url = page.as_uri()
    with browser.Browser(path) as chrome:
        chrome.open_page()
        chrome.command(
            "Emulation.setDeviceMetricsOverride",
            {"width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": False},
        )
        chrome.command("Page.navigate", {"url": url})
        chrome.wait_for("Page.loadEventFired")
        sections = chrome.evaluate(
            "Array.from(document.querySelectorAll('header, section')).map(s => "
            "[s.id, s.getBoundingClientRect().height])"
        )
        charts = chrome.evaluate(
            "Array.from(document.querySelectorAll('svg')).map(s => { const r = "
            "s.getBoundingClientRect(); return [r.width, r.height, s.querySelectorAll('*').length]; })"
        )
        xss_cells = chrome.evaluate(
            f"Array.from(document.querySelectorAll('td')).filter(td => td.textContent === {json.dumps(XSS)}).length"
        )
        scripts = chrome.evaluate("document.scripts.length")
        embedded = chrome.evaluate("JSON.parse(document.getElementById('calibsql-data').textContent)")
        # Sorting: a click on the segments table's "rows" header orders the rows by it.
        sorted_rows = chrome.evaluate(
            "(() => { const t = document.querySelector('#segments table'); "
            "t.tHead.rows[0].cells[1].click(); "
            "return Array.from(t.tBodies[0].rows).map(r => parseFloat(r.cells[1].dataset.v)); })()"
        )
        metrics = chrome.command("Page.getLayoutMetrics")
        height = min(int(metrics["cssContentSize"]["height"]), 2400)
        shot = chrome.command(
            "Page.captureScreenshot",
            {
                "format": "png",
                "captureBeyondViewport": True,
                "clip": {"x": 0, "y": 0, "width": 1280, "height": height, "scale": 1},
            },
        )
        events = list(chrome.events)

    requests = [
        e["params"]["request"]["url"] for e in events if e.get("method") == "Network.requestWillBeSent"
    ]
    assert requests == [url], f"requests besides the page: {requests}"
    errors = [
        e["params"]
        for e in events
        if (e.get("method") == "Runtime.consoleAPICalled" and e["params"]["type"] in ("error", "assert"))
        or e.get("method") == "Runtime.exceptionThrown"
        or (e.get("method") == "Log.entryAdded" and e["params"]["entry"]["level"] == "error")
    ]
    assert errors == [], errors
    ids = {id_: h for id_, h in sections}
    for id_ in ("header", "headline", "reliability", "bins", "over-time", "segments", "appendix"):
        assert ids.get(id_, 0) > 50, f"section {id_} not drawn: {sections}"
    # Two reliability diagrams, three charts over time, each drawn with content.
    assert len(charts) == 5, charts
    for width, height, elements in charts:
        assert width > 200 and height > 200 and elements > 20, charts
    assert xss_cells == 2  # one per model: shown as text, not run
    assert scripts == 2  # the data and the sorting script, no other
    assert embedded == report.data
    assert sorted_rows == sorted(sorted_rows)
    out = os.environ.get("CALIBSQL_REPORT_SCREENSHOT") or str(tmp_path / "report.png")
    Path(out).write_bytes(base64.b64decode(shot["data"]))
    assert Path(out).stat().st_size > 10_000
