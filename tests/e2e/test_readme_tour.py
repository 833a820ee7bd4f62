"""The README's 5-minute tour runs as written: every Python block, and the shell blocks of step 3.

The own-app section runs too, in a folder outside the checkout (test_your_own_app_runs_as_written).
The shell blocks run in bash with ``.venv/bin/brook`` meaning this interpreter's ``brook`` and the
broker's workdir in a temporary directory; the foreground ``brook worker run`` line runs in the
background until the test stops it with SIGINT (the tour's Ctrl-C). ``make ui`` is left to
tests/e2e/test_dagster_ui.py.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
BROOK = str(Path(sys.executable).parent / "brook")


def tour_blocks() -> list[tuple[str, str]]:
    """(language, code) of every fenced block between '## A 5-minute tour' and the next section."""
    readme = (ROOT / "README.md").read_text()
    tour = readme.split("## A 5-minute tour", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```(\w+)\n(.*?)```", tour, re.DOTALL)


def shell(code: str, env: dict[str, str], check: bool = True) -> subprocess.CompletedProcess[str]:
    script = "set -euo pipefail\n" + code.replace(".venv/bin/brook", BROOK)
    result = subprocess.run(["bash", "-c", script], cwd=ROOT, env=env, check=False, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 or not check, f"{code}\nstdout: {result.stdout}\nstderr: {result.stderr}"
    return result


def python(code: str, env: dict[str, str]) -> str:
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, check=False, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, f"{code}\nstderr: {result.stderr}"
    return result.stdout


def test_the_tour_runs_as_written(tmp_path: Path) -> None:
    blocks = tour_blocks()
    assert [lang for lang, _ in blocks] == ["python", "python", "sh", "sh", "python", "sh"], \
        "the tour changed shape: update this test with it"
    (step1, step2, start, inspect, kafka_streams, ui) = (code for _, code in blocks)
    assert ui.strip() == "make ui"
    # TMPDIR: the worker's default state.dir, /tmp/brook-streams, must not hold an earlier run's state
    env = {**os.environ, "BROOK_BROKER_WORKDIR": str(tmp_path / "broker"), "TMPDIR": str(tmp_path)}
    env.pop("BROOK_BOOTSTRAP_SERVERS", None)

    assert "Sub-topology: 0" in python(step1, env)
    assert "'be': 3" in python(step2, env)

    worker_lines = [line for line in start.splitlines() if "brook worker run" in line]
    assert len(worker_lines) == 1
    setup = start.replace(worker_lines[0], "")
    try:
        shell(setup, env)  # no BROOK_BOOTSTRAP_SERVERS from here on: every command finds the embedded broker
        worker_log = tmp_path / "worker.log"
        with worker_log.open("w") as log_file:
            worker = subprocess.Popen(["bash", "-c", worker_lines[0].split("#")[0].replace(".venv/bin/brook", BROOK)],
                                      cwd=ROOT, env=env, stdout=log_file, stderr=subprocess.STDOUT,
                                      start_new_session=True)
        try:
            deadline = time.monotonic() + 120
            shown = subprocess.CompletedProcess([], 1, "", "not run yet")
            # until the worker's first commit, consume shows nothing and status says there is no such app
            while shown.returncode != 0 or not re.search(r"\bbe\s+3\s*$", shown.stdout, re.MULTILINE):
                assert time.monotonic() < deadline, f"the tour's inspect block:\n{shown.stdout}{shown.stderr}\n" \
                                                    f"worker log:\n{worker_log.read_text()}"
                assert worker.poll() is None, f"the worker exited:\n{worker_log.read_text()}"
                time.sleep(1)
                shown = shell(inspect, env, check=False)
            assert re.search(r"^wordcount-counts\s+4$", shown.stdout, re.MULTILINE)  # topics list
            assert "lag" in shown.stdout  # status
            python(kafka_streams, env)
        finally:
            if worker.poll() is None:
                os.killpg(worker.pid, signal.SIGINT)
            assert worker.wait(timeout=60) == 0, worker_log.read_text()
    finally:
        subprocess.run([BROOK, "broker", "stop"], env=env, check=False, capture_output=True, timeout=60)


def own_app_blocks() -> list[tuple[str, str]]:
    """(language, code) of every fenced block of the README's "Write and run your own app"."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Write and run your own app", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```(\w+)\n(.*?)```", section, re.DOTALL)


def test_your_own_app_runs_as_written(tmp_path: Path) -> None:
    """The README's own-app section, in a folder outside the checkout: myapp.py, the broker and topics in one
    shell, the worker in another, produce/consume/status in a third; no environment variables of Brook's."""
    blocks = own_app_blocks()
    assert [lang for lang, _ in blocks] == ["python", "sh", "sh", "sh"], "the section changed shape: update this test"
    (myapp, first, second, third) = (code for _, code in blocks)
    folder = tmp_path / "myapp"
    folder.mkdir()
    (folder / "myapp.py").write_text(myapp)
    env = {key: value for key, value in os.environ.items() if not key.startswith("BROOK_")}
    env.update(TMPDIR=str(tmp_path), PATH=f"{Path(BROOK).parent}{os.pathsep}{env['PATH']}")

    def run(code: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(["bash", "-c", "set -euo pipefail\n" + code], cwd=folder, env=env, check=False,
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 0 or not check, f"{code}\nstdout: {result.stdout}\nstderr: {result.stderr}"
        return result

    [worker_line] = [line for line in second.splitlines() if "brook worker run" in line]
    try:
        run(first)
        worker_log = tmp_path / "worker.log"
        with worker_log.open("w") as log_file:
            worker = subprocess.Popen(["bash", "-c", worker_line.split("#")[0]], cwd=folder, env=env, stdout=log_file,
                                      stderr=subprocess.STDOUT, start_new_session=True)
        try:
            produce, *inspect = third.splitlines()
            run(produce)
            deadline = time.monotonic() + 120
            shown = subprocess.CompletedProcess([], 1, "", "not run yet")
            while shown.returncode != 0 or "BE QUICK" not in shown.stdout or "total lag: 0" not in shown.stdout:
                assert time.monotonic() < deadline, f"{shown.stdout}{shown.stderr}\nworker log:\n{worker_log.read_text()}"
                assert worker.poll() is None, f"the worker exited:\n{worker_log.read_text()}"
                time.sleep(1)
                shown = run("\n".join(inspect), check=False)
            assert "TO BE OR NOT TO BE" in shown.stdout
            assert "partitions lines[" in shown.stdout, shown.stdout  # the worker and its input partitions
        finally:
            if worker.poll() is None:
                os.killpg(worker.pid, signal.SIGINT)
            assert worker.wait(timeout=60) == 0, worker_log.read_text()
    finally:
        subprocess.run([BROOK, "broker", "stop"], cwd=folder, env=env, check=False, capture_output=True, timeout=60)
