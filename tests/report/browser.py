"""A real browser for the report's pages: Debian's chromium, headless, driven over the DevTools
protocol (`--remote-debugging-pipe`: JSON messages ending in NUL on fds 3 and 4, so the standard
library is enough and no port is opened). Used by test_pages_in_a_browser.py and test_compare.py.

chromium is a CI requirement (`.ci/run` installs it): without it these tests fail, they never skip.
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import shutil
import struct
import subprocess
import time
from pathlib import Path

import pytest


def chromium() -> str:
    path = shutil.which("chromium")
    if path is None:
        pytest.fail("chromium is not installed: these tests open the report in a real browser; "
                    "install it with `apt-get install -y chromium` (Debian; .ci/run does this)", pytrace=False)
    return path


class Browser:
    """One headless chromium, driven over the DevTools protocol on a pipe (one page at a time)."""

    def __init__(self, profile: Path, log: Path):
        to_chrome_r, self._w = os.pipe()
        self._r, from_chrome_w = os.pipe()

        def fds_3_and_4():  # in the child, before exec: the pipe ends where chromium expects them (the
            # copies above 10 first, as a pipe end may itself be fd 3 or 4)
            a = fcntl.fcntl(to_chrome_r, fcntl.F_DUPFD, 10)
            b = fcntl.fcntl(from_chrome_w, fcntl.F_DUPFD, 10)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self._log = log
        with open(log, "wb") as err:
            self.proc = subprocess.Popen(
                # --no-sandbox: CI runs as root, where chromium's sandbox refuses to start
                [chromium(), "--headless=new", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
                 f"--user-data-dir={profile}", "--no-first-run", "--no-default-browser-check",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--window-size=1400,1000", "about:blank"],
                stdin=subprocess.DEVNULL, stdout=err, stderr=err, preexec_fn=fds_3_and_4, pass_fds=(3, 4))
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buf, self._id, self.events = b"", 0, []

    def _message(self, deadline: float) -> dict:
        while b"\0" not in self._buf:
            ready, _, _ = select.select([self._r], [], [], max(0.0, deadline - time.monotonic()))
            chunk = os.read(self._r, 1 << 16) if ready else None
            if chunk is None:
                raise TimeoutError("chromium did not answer in time")
            if not chunk:
                raise RuntimeError("chromium closed the pipe: " + self._log.read_text(errors="replace")[-2000:])
            self._buf += chunk
        msg, _, self._buf = self._buf.partition(b"\0")
        return json.loads(msg)

    def send(self, method: str, params: dict | None = None, session: str | None = None, timeout: float = 15) -> dict:
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            m = self._message(deadline)
            if m.get("id") == self._id:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m["result"]
            self.events.append(m)

    def wait_for(self, method: str, session: str, timeout: float = 15) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            for m in self.events:
                if m.get("method") == method and m.get("sessionId") == session:
                    return m
            self.events.append(self._message(deadline))

    def open(self, url: str) -> Page:
        """A fresh tab with the debugger on before anything loads, navigated to `url`, loaded."""
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Debugger"):
            self.send(f"{domain}.enable", session=session)
        self.events.clear()
        self.send("Page.navigate", {"url": url}, session=session)
        self.wait_for("Page.loadEventFired", session)
        page = Page(self, session, url)
        page.eval("new Promise(r => setTimeout(r, 300))")  # let anything queued by load run (timers, onload)
        return page

    def close(self):
        try:
            self.send("Browser.close", timeout=5)
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._r)
        os.close(self._w)


class Page:
    def __init__(self, browser: Browser, session: str, url: str):
        self.browser, self.session, self.url = browser, session, url

    def eval(self, expression: str):
        res = self.browser.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                     "awaitPromise": True}, session=self.session)
        if "exceptionDetails" in res:
            raise AssertionError(f"probe failed: {res['exceptionDetails']}")
        return res["result"].get("value")

    def _events(self, method: str) -> list[dict]:
        return [e["params"] for e in self.browser.events if e.get("method") == method
                and e.get("sessionId") == self.session]

    def page_scripts(self) -> list[str]:
        """The source of every script the page itself compiled: inline scripts, event handler
        attributes, javascript: URLs (what our probes evaluate has no URL)."""
        return [self.browser.send("Debugger.getScriptSource", {"scriptId": s["scriptId"]},
                                  session=self.session)["scriptSource"]
                for s in self._events("Debugger.scriptParsed") if s.get("url")]

    def errors(self) -> list[str]:
        """Uncaught exceptions and console.error / console.warn calls."""
        out = [json.dumps(e["exceptionDetails"])[:500] for e in self._events("Runtime.exceptionThrown")]
        out += [json.dumps(e["args"])[:500] for e in self._events("Runtime.consoleAPICalled")
                if e.get("type") in ("error", "warning", "assert")]
        return out


def png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR", f"{path} is not a PNG"
    return struct.unpack(">II", head[16:24])
