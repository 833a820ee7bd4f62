"""``make demo``'s whole output (stdout and stderr, as a user sees it) has no warning, no Spark log line and no
console progress bar: Spark's driver logs errors only, pyspark's pandas warning is filtered, the JVM's startup notice
is dropped (``assets/spark/session.py``). Runs the real ``make demo`` (about 5 minutes), which deletes and recreates
``.brook/demo`` and uses ``.dagster`` of this checkout; the install step is skipped (``-o``: the test runs in the
installed environment), so pip's own output is not part of what is checked."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]
# a [Stage N:====>  (1 + 2) / 4] bar, or any text overwritten with a carriage return
PROGRESS = re.compile(r"\[Stage \d+")


def test_make_demo_prints_no_warning_spark_log_line_or_progress_bar() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "DAGSTER_HOME", "PYTHONWARNINGS"))}
    env["TERM"] = "dumb"
    result = subprocess.run(["make", "--no-print-directory", "-o", ".venv/.installed", "demo"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=900, check=False)
    output = result.stdout.decode(errors="replace")
    # what failed, wherever it was printed (a wrong hourly final's trace comes long before the tail), then the tail
    failed = [line for line in output.split("\n") if "FAILED" in line or "hourly result" in line or "late line" in line]
    assert result.returncode == 0, "\n".join([*failed[:40], "...", output[-4000:]])
    assert "ok  the snapshot restore equals the oracle" in output, output[-4000:]
    noisy = [line for line in output.split("\n")
             if "Warning" in line or "WARN" in line or "\r" in line or PROGRESS.search(line)]
    assert not noisy, "\n".join(repr(line[:300]) for line in noisy)
