"""Failures an operator meets first, through the real ``brook`` CLI: each exits non-zero within seconds,
with one line that names the cause, and no flood of librdkafka lines or tracebacks."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def brook(*args: str, env: dict[str, str] | None = None) -> tuple[int, list[str], float]:
    """Run ``brook ARGS``; return the exit code, the stderr lines and the seconds it took."""
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "streaming.cli.main", *args], cwd=ROOT, capture_output=True,
                            text=True, timeout=60, env={**os.environ, **(env or {})})
    return result.returncode, result.stderr.splitlines(), time.monotonic() - started


def assert_one_clear_line(code: int, lines: list[str], seconds: float, *needles: str) -> None:
    assert code != 0
    assert len(lines) < 10, lines
    assert not any("Traceback" in line for line in lines), lines
    naming = [line for line in lines if all(needle in line for needle in needles)]
    assert len(naming) == 1, (needles, lines)
    assert seconds < 15


def worker(*sets: str, config: str = "apps/wordcount/config.yaml") -> list[str]:
    args = ["worker", "run", "apps.wordcount:topology", "--config", config]
    for item in sets:
        args += ["--set", item]
    return args


def test_a_closed_port(tmp_path: Path) -> None:
    code, lines, seconds = brook(*worker("bootstrap.servers=127.0.0.1:1", f"state.dir={tmp_path}"))
    assert_one_clear_line(code, lines, seconds, "error:", "bootstrap.servers=127.0.0.1:1", "connection refused")


def test_sasl_against_a_plaintext_broker(bootstrap: str, tmp_path: Path) -> None:
    code, lines, seconds = brook(*worker(f"bootstrap.servers={bootstrap}", f"state.dir={tmp_path}",
                                        "security.protocol=SASL_PLAINTEXT", "sasl.mechanism=SCRAM-SHA-256",
                                        "sasl.username=u", "sasl.password=s3cret-password"))
    assert_one_clear_line(code, lines, seconds, "error:", "cannot authenticate", bootstrap, "sasl.mechanism")
    assert not any("s3cret-password" in line for line in lines)


def test_bad_yaml(tmp_path: Path) -> None:
    bad = tmp_path / "worker.yaml"
    bad.write_text("application.id: x\nbootstrap.servers: [a\n  b: c\n")
    code, lines, seconds = brook(*worker(config=str(bad)))
    assert_one_clear_line(code, lines, seconds, "not valid YAML at line 3")


def test_a_typo_in_a_librdkafka_key(tmp_path: Path) -> None:
    code, lines, seconds = brook(*worker("consumer.fetch.max.byts=100", f"state.dir={tmp_path}"))
    assert_one_clear_line(code, lines, seconds, "error:", "unknown config key 'consumer.fetch.max.byts'")


def test_a_missing_topic(bootstrap: str, unique_name: str, tmp_path: Path) -> None:
    code, lines, seconds = brook("worker", "run", "tests.integration.workloads.counting:topology",
                                 "--set", f"bootstrap.servers={bootstrap}", "--set", f"application.id={unique_name}",
                                 "--set", f"state.dir={tmp_path}",
                                 env={"COUNT_INPUT": f"{unique_name}-in", "COUNT_OUTPUT": f"{unique_name}-out"})
    assert_one_clear_line(code, lines, seconds, "error:", "do not exist", f"{unique_name}-in")


def test_a_secret_from_the_environment_reaches_the_client_and_is_never_shown(bootstrap: str, tmp_path: Path) -> None:
    """The password comes from BROOK_SASL_PASSWORD (never on the command line): the client uses it (the
    broker refuses the mechanism, which proves SASL was attempted), and it appears in no output line and
    not in the worker's command line as `ps` shows it."""
    secret = "p4ss-from-env-123"
    args = ["worker", "run", "apps.wordcount:topology", "--config", "apps/wordcount/config.yaml",
            "--set", f"bootstrap.servers={bootstrap}", "--set", f"state.dir={tmp_path}",
            "--set", "security.protocol=SASL_PLAINTEXT", "--set", "sasl.mechanism=SCRAM-SHA-512",
            "--set", "sasl.username=svc"]
    process = subprocess.Popen([sys.executable, "-m", "streaming.cli.main", "--log-level", "DEBUG", *args], cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "BROOK_SASL_PASSWORD": secret})
    command_line = Path(f"/proc/{process.pid}/cmdline").read_bytes().decode(errors="replace")
    out, err = process.communicate(timeout=60)
    assert process.returncode != 0
    assert "cannot authenticate" in err and "SCRAM-SHA-512" in err
    assert secret not in out + err + command_line
    ps = subprocess.run(["ps", "auxww"], capture_output=True, text=True, check=False).stdout
    assert secret not in ps
