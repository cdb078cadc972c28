"""The processes the Python tests start: each dies with the test process (Linux: the kernel
sends it SIGKILL when pytest ends, even when pytest is killed), runs under a deadline, and one
still running at its deadline is killed and fails the test with the tail of its standard
error. Deadlines are hang guards, many times what a run takes here, not speed checks."""

from __future__ import annotations

import ctypes
import signal
import subprocess
import sys

import pytest

#: Deadline of a command run to completion unless told otherwise, in seconds.
TIMEOUT = 600

_TAIL_LINES = 40
_PR_SET_PDEATHSIG = 1

if sys.platform.startswith("linux"):
    # Looked up here, in the parent: the hook that runs in the child between fork and exec
    # only calls it.
    _prctl = ctypes.CDLL(None, use_errno=True).prctl

    def _die_with_parent() -> None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)

else:
    _die_with_parent = None


def tail(text: str | None) -> str:
    lines = (text or "").splitlines()
    skipped = max(0, len(lines) - _TAIL_LINES)
    return "\n".join(([f"[... {skipped} lines]"] if skipped else []) + lines[skipped:])


def popen(args, *, before_exec=None, **kwargs) -> subprocess.Popen:
    """`subprocess.Popen(args, **kwargs)` for a child that dies with this process and reads
    nothing from standard input. Kill it in a `finally` (or use `run`). `before_exec` runs
    in the child before the program starts (e.g. to place file descriptors)."""
    kwargs.setdefault("stdin", subprocess.DEVNULL)

    def prepare() -> None:
        if before_exec is not None:
            before_exec()
        if _die_with_parent is not None:
            _die_with_parent()

    return subprocess.Popen(args, preexec_fn=prepare, **kwargs)


def communicate(proc: subprocess.Popen, timeout: float):
    """`proc.communicate(timeout=timeout)`; past the deadline the child is killed and the
    test fails with the tail of its standard error."""
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        if isinstance(err, bytes):
            err = err.decode(errors="replace")
        pytest.fail(
            f"{proc.args!r} did not finish within {timeout} s, killed; its standard error "
            f"ends with:\n{tail(err)}"
        )


def run(args, *, timeout: float = TIMEOUT, check: bool = False, **kwargs):
    """`subprocess.run(args, capture_output=True, **kwargs)` as `popen` under a deadline.
    With `check`, a failing child fails the test with the tail of its standard error."""
    proc = popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs)
    try:
        out, err = communicate(proc, timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    if check and done.returncode != 0:
        text = err.decode(errors="replace") if isinstance(err, bytes) else err
        pytest.fail(f"{args!r} exited with {done.returncode}:\n{tail(text)}")
    return done
