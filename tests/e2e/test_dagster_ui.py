"""The Dagster UI as a person sees it: ``make ui`` started as the README says, the asset graph opened in
headless Chromium, Brook's compaction and archive assets found on it, and a screenshot kept.

Needs Debian's ``chromium`` (``.ci/run`` installs it when it is missing); without it the test is skipped
and says so. The screenshot is written to ``test-artifacts/dagster-asset-graph.png`` and its path is
printed at the end of the test session.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.chromium import Browser, chromium_path

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
PORT_TAKEN = "address already in use"  # the webserver's line when its port was taken before it bound it


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_webserver(url: str, process: subprocess.Popen[bytes], log: Path, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None or PORT_TAKEN in log.read_text(errors="replace"):
            raise AssertionError(f"make ui failed ({process.poll()}):\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{url}/server_info", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(1)
    raise AssertionError(f"the Dagster UI did not answer on {url} within {timeout} s:\n{log.read_text()[-3000:]}")


def start_ui(tmp_path: Path, attempt: int) -> tuple[subprocess.Popen[bytes], str, Path]:
    """``make ui`` on a port free a moment ago, in its own session (Dagster's processes ignore signals when started
    from a shell with `&`, so the whole group is stopped)."""
    port = free_port()
    log = tmp_path / f"dagster-ui-{attempt}.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(["make", "--no-print-directory", "ui", f"DAGSTER_HOME={tmp_path / 'dagster'}",
                                    f"UI_PORT={port}"], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                   start_new_session=True, env={**os.environ, "BROOK_BOOTSTRAP_SERVERS": "127.0.0.1:9"})
    return process, f"http://127.0.0.1:{port}", log


def stop_ui(process: subprocess.Popen[bytes]) -> None:
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


@pytest.fixture
def dagster_ui(tmp_path: Path) -> Iterator[str]:
    """``make ui`` with a throwaway DAGSTER_HOME on a free port; stopped (its whole process group) after. The
    port is free when picked but another process of the suite (a broker, a worker) can take it before the
    webserver binds it: then the UI is started again on another port (at most 3 tries)."""
    for attempt in range(3):
        process, url, log = start_ui(tmp_path, attempt)
        try:
            wait_for_webserver(url, process, log)
            break
        except AssertionError:
            stop_ui(process)
            if attempt == 2 or PORT_TAKEN not in log.read_text(errors="replace"):
                raise
    noise = [line for line in log.read_text(errors="replace").splitlines()
             if "warning" in line.lower() or "will not be used" in line or "superseded" in line.lower()]
    try:
        assert not noise, f"make ui printed notices meant for nobody: {noise}"  # issue 20: quiet output
        yield url
    finally:
        stop_ui(process)


def test_the_asset_graph_shows_compaction_and_archive_assets(dagster_ui: str, record_artifact: Any) -> None:
    binary = chromium_path()
    if binary is None:
        pytest.skip("Debian's chromium is not installed (apt-get install chromium; .ci/run installs it): "
                    "the Dagster UI cannot be looked at")
    with Browser(binary) as browser:
        browser.open(f"{dagster_ui}/asset-groups")  # the global asset graph: one node per group
        text = browser.wait_for_text("Global asset lineage", "kafka_topics", "changelogs", "compaction", "archive",
                                     timeout=120)
        dismiss_community_dialog(browser)
        record_artifact(browser.screenshot(ARTIFACTS / "dagster-asset-graph.png"))
        assert "Join the Dagster community" not in browser.text()
        # Each group's graph shows its assets by name: the store's snapshot, and a topic's archive.
        for group, assets in (("compaction", ["order-ids", "-order-ids-changelog"]),  # its upstream, maybe shortened
                              ("archive", ["orders", "orders-rejected"])):
            browser.open(f"{dagster_ui}/locations/brook/asset-groups/{group}/lineage")
            text = browser.wait_for_text(group, *assets, timeout=60)
            assert "Spark" in text and "Parquet" in text  # the assets' kinds
            browser.wait_for_text_gone("Loading")
            record_artifact(browser.screenshot(ARTIFACTS / f"dagster-asset-group-{group}.png"))


def dismiss_community_dialog(browser: Browser, wait: float = 8) -> None:
    """Dagster shows a "Join the Dagster community" dialog on a first visit: skip it, as a person would."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if "Join the Dagster community" in browser.text() and browser.click_button("Skip"):
            time.sleep(0.5)
            return
        time.sleep(0.5)
