"""Headless Chromium driven over the DevTools protocol, for the report's page test.

Chromium (Debian's ``chromium``, which tests/run-all.sh installs) runs with ``--remote-debugging-pipe``:
the protocol's JSON messages, each ended by a NUL byte, go to its file descriptor 3 and come
from its descriptor 4. No package is needed beyond the standard library, and no port is
opened. The browser runs under ``children.popen`` (it dies with the test process) and is
closed, then killed if need be, when the ``with`` block ends.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import tempfile
import time
from typing import Any, Optional

import children

#: Seconds one protocol command may take before the test fails.
COMMAND_TIMEOUT = 60


def chromium() -> Optional[str]:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def _high(fd: int) -> int:
    """A copy of ``fd`` numbered 10 or above (so placing the child's 3 and 4 overwrites
    none of the sources), and the original closed."""
    high = fcntl.fcntl(fd, fcntl.F_DUPFD, 10)
    os.close(fd)
    return high


class Browser:
    """One headless Chromium with one page; events are kept in ``self.events``."""

    def __init__(self, path: str) -> None:
        self._profile = tempfile.TemporaryDirectory(prefix="calibsql-chromium-")
        to_child_r, to_child_w = (_high(fd) for fd in os.pipe())
        from_child_r, from_child_w = (_high(fd) for fd in os.pipe())

        def place_fds() -> None:
            os.dup2(to_child_r, 3)
            os.dup2(from_child_w, 4)

        self.proc = children.popen(
            [
                path,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-extensions",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--remote-debugging-pipe",
                f"--user-data-dir={self._profile.name}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            pass_fds=(3, 4),
            before_exec=place_fds,
        )
        os.close(to_child_r)
        os.close(from_child_w)
        self._out = os.fdopen(to_child_w, "wb", buffering=0)
        self._in = os.fdopen(from_child_r, "rb", buffering=0)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict] = []
        self.session: Optional[str] = None

    def __enter__(self) -> "Browser":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        try:
            if self.proc.poll() is None:
                try:
                    self.command("Browser.close", session=False, timeout=10)
                except Exception:
                    pass
                try:
                    self.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    pass
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            if self.proc.stderr:
                self.proc.stderr.close()
            self._out.close()
            self._in.close()
            self._profile.cleanup()

    def _read_message(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            if time.monotonic() > deadline:
                raise TimeoutError("Chromium did not answer in time")
            if self.proc.poll() is not None:
                raise RuntimeError(f"Chromium exited with {self.proc.returncode}")
            chunk = os.read(self._in.fileno(), 1 << 20)
            if not chunk:
                raise RuntimeError("Chromium closed the DevTools pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def command(
        self, method: str, params: Optional[dict] = None, *, session: bool = True, timeout=None
    ) -> dict:
        """Sends one command (to the page's session unless ``session=False``) and returns
        its result; events read meanwhile go to ``self.events``."""
        self._next_id += 1
        message: dict = {"id": self._next_id, "method": method, "params": params or {}}
        if session and self.session:
            message["sessionId"] = self.session
        self._out.write(json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + (timeout or COMMAND_TIMEOUT)
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, method: str, timeout: float = COMMAND_TIMEOUT) -> dict:
        """The first event ``method`` (already received or coming)."""
        for event in self.events:
            if event.get("method") == method:
                return event
        deadline = time.monotonic() + timeout
        while True:
            event = self._read_message(deadline)
            self.events.append(event)
            if event.get("method") == method:
                return event

    def open_page(self) -> None:
        """A new page with network, console, log and page events on."""
        target = self.command("Target.createTarget", {"url": "about:blank"}, session=False)
        attached = self.command(
            "Target.attachToTarget",
            {"targetId": target["targetId"], "flatten": True},
            session=False,
        )
        self.session = attached["sessionId"]
        for domain in ("Page", "Network", "Runtime", "Log"):
            self.command(f"{domain}.enable")

    def evaluate(self, expression: str) -> Any:
        result = self.command(
            "Runtime.evaluate", {"expression": expression, "returnByValue": True}
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")
