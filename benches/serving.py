"""What the Python benches of `calibsql serve` share: finding the binary, and a server over
generated data with one user, started and stopped around a `with` block."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import time
from pathlib import Path
from typing import Iterator

PASSWORD = "bench password"
USER = "bench"


def default_binary() -> Path:
    """$CARGO_TARGET_DIR's (else target/'s) release calibsql, else its debug one."""
    target = Path(os.environ.get("CARGO_TARGET_DIR", Path(__file__).resolve().parents[1] / "target"))
    for profile in ("release", "debug"):
        if (target / profile / "calibsql").exists():
            return target / profile / "calibsql"
    raise SystemExit(f"no calibsql under {target}: build it first (cargo build --release --features serve)")


def peak_rss_mib(pid: int) -> float:
    """Process `pid`'s peak resident memory since it started or since `reset_peak_rss`."""
    return _status_mib(pid, "VmHWM")


def rss_mib(pid: int) -> float:
    """Process `pid`'s resident memory now."""
    return _status_mib(pid, "VmRSS")


def reset_peak_rss(pid: int) -> None:
    """Starts `peak_rss_mib` again from the memory resident now (Linux: `clear_refs` 5)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def _status_mib(pid: int, field: str) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(rf"{field}:\s+(\d+) kB", status).group(1)) / 1024


@contextlib.contextmanager
def serving(binary: Path, work: Path, rows: str, *extra: str) -> Iterator[tuple[subprocess.Popen, str]]:
    """`calibsql serve` on 127.0.0.1 (port 0) with table `t`, the test half of `rows`
    generated rows in `work/data/test`, one user (USER, PASSWORD) and `extra` flags; yields
    the process and a function returning its log so far. Killed and reaped on the way out."""
    subprocess.run([binary, "generate", "--rows", rows, "--out", work / "data", "-q"], check=True)
    verifier = subprocess.run([binary, "hash-password"], input=PASSWORD + "\n", text=True,
                              capture_output=True, check=True).stdout.strip()
    users = work / "users"
    users.write_text(f"{USER}:{verifier}\n")
    users.chmod(0o600)
    log_path = work / "log"
    with open(log_path, "wb") as log:
        server = subprocess.Popen([binary, "serve", "--users", users, "--bind", "127.0.0.1:0",
                                   "--table", f"t={work / 'data' / 'test'}", *extra],
                                  stdout=subprocess.DEVNULL, stderr=log)
        try:
            while "listening on" not in log_path.read_text():
                if server.poll() is not None:
                    raise SystemExit(log_path.read_text())
                time.sleep(0.02)
            yield server, log_path.read_text
        finally:
            server.kill()
            server.wait()


def port(log: str, pattern: str) -> int:
    """The port a listener's log line (`pattern`, a regex before the port) names."""
    return int(re.search(pattern + r"127\.0\.0\.1:(\d+)", log).group(1))
