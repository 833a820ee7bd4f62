"""Headless Chromium driven over the Chrome DevTools Protocol: open a page, wait for text, click, screenshot.

Enough to look at the Dagster UI as a person does, with Debian's ``chromium`` and the ``websockets``
package only (no browser download, no npm). The flags are the ones this machine needs: no sandbox (root),
no GPU, and no background networking (the machine's network is closed).
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from websockets.sync.client import ClientConnection, connect

FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--window-size=1600,1000"]


def chromium_path() -> str | None:
    """The Chromium binary on this machine, or None."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Browser:
    """One headless Chromium with one page. Use as a context manager."""

    def __init__(self, binary: str) -> None:
        self._profile = tempfile.mkdtemp(prefix="brook-chromium-")
        port = _free_port()
        self._process = subprocess.Popen([binary, *FLAGS, f"--remote-debugging-port={port}",
                                          f"--user-data-dir={self._profile}", "about:blank"],
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self._ids = itertools.count(1)
        self._exit = contextlib.ExitStack()
        self._socket = self._exit.enter_context(connect(self._page_socket(port), max_size=None, open_timeout=30))
        self.send("Page.enable")
        self.send("Runtime.enable")

    def _page_socket(self, port: int) -> str:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=2) as response:
                    pages = [t for t in json.loads(response.read()) if t.get("type") == "page"]
                if pages:
                    return str(pages[0]["webSocketDebuggerUrl"])
            except OSError:
                pass
            if time.monotonic() > deadline or self._process.poll() is not None:
                raise RuntimeError(f"chromium did not open its DevTools port {port} (exit code {self._process.poll()})")
            time.sleep(0.2)

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        """Call a DevTools method and return its result (events in between are skipped)."""
        message_id = next(self._ids)
        socket_: ClientConnection = self._socket
        socket_.send(json.dumps({"id": message_id, "method": method, "params": params}))
        while True:
            reply = json.loads(socket_.recv(timeout=60))
            if reply.get("id") == message_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return dict(reply.get("result", {}))

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page."""
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression!r} raised: {result['exceptionDetails']}")
        return result.get("result", {}).get("value")

    def open(self, url: str) -> None:
        self.send("Page.navigate", url=url)

    def text(self) -> str:
        """What the page shows as text now."""
        return str(self.evaluate("document.body ? document.body.innerText : ''"))

    def wait_for_text(self, *needles: str, timeout: float = 60) -> str:
        """Wait until every needle is on the page; return the page text. Raises TimeoutError naming the missing."""
        deadline = time.monotonic() + timeout
        while True:
            text = self.text()
            missing = [needle for needle in needles if needle not in text]
            if not missing:
                return text
            if time.monotonic() > deadline:
                raise TimeoutError(f"not on the page after {timeout} s: {missing}; the page shows: {text[:2000]!r}")
            time.sleep(0.5)

    def wait_for_text_gone(self, needle: str, timeout: float = 30) -> None:
        """Wait until ``needle`` is no longer on the page (e.g. "Loading"); returns anyway after ``timeout``."""
        deadline = time.monotonic() + timeout
        while needle in self.text() and time.monotonic() < deadline:
            time.sleep(0.5)

    def click_button(self, label: str) -> bool:
        """Click the first button whose text is ``label``; False if there is none."""
        return bool(self.evaluate(
            f"(() => {{ const b = [...document.querySelectorAll('button')].find(b => b.innerText.trim() === "
            f"{json.dumps(label)}); if (b) {{ b.click(); return true; }} return false; }})()"))

    def screenshot(self, path: Path) -> Path:
        data = self.send("Page.captureScreenshot", format="png")["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        try:
            self._exit.close()
        finally:
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
            shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
