"""A Spark standalone cluster for tests: a master and workers started with pyspark's own ``spark-class``.

The commands are the ones ``platform/runbooks/deploy.md`` gives for a real cluster::

    $SPARK_HOME/bin/spark-class org.apache.spark.deploy.master.Master --host H --port P --webui-port W
    $SPARK_HOME/bin/spark-class org.apache.spark.deploy.worker.Worker --host H --cores C --memory M spark://H:P

with ``SPARK_HOME`` the directory of the installed ``pyspark`` package (its jars and ``bin/``). Each process
runs in a process group of its own (``spark-class`` execs the JVM; a worker's executors are its children),
so :meth:`SparkStandaloneCluster.stop` ends every JVM it started. :meth:`~SparkStandaloneCluster.start`
returns once the master's web UI JSON (``http://H:W/json/``) lists every worker ``ALIVE``::

    with SparkStandaloneCluster(tmp_path / "spark", workers=2) as cluster:
        conf["spark.master"] = cluster.master_url
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from streaming.testing.ports import free_port

__all__ = ["CODE_PACKAGES", "SparkClusterError", "SparkStandaloneCluster", "code_archive", "java_missing", "spark_home"]

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
#: Brook's top-level packages, which Spark's executors import (the Kafka source, compaction, batch tasks).
CODE_PACKAGES = ("streaming", "assets", "apps")


class SparkClusterError(RuntimeError):
    """The cluster did not come up (names the process and the end of its log)."""


def spark_home() -> Path:
    """The installed pyspark package's directory: a Spark distribution (``bin/spark-class``, ``jars/``)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def java_missing() -> str | None:
    """Why no JVM can run here (``None`` when ``java`` is on ``PATH`` or under ``JAVA_HOME``)."""
    if os.environ.get("JAVA_HOME") and (Path(os.environ["JAVA_HOME"]) / "bin" / "java").exists():
        return None
    return None if shutil.which("java") else "no Java: install a JDK 17+ (Debian: openjdk-17-jre-headless)"


def code_archive(root: Path, dest: Path) -> Path:
    """Brook's code zipped for ``spark.submit.pyFiles`` by the runbook's command, run in the checkout ``root``:
    ``python -m zipfile -c brook-code.zip streaming assets apps``. Returns ``dest``."""
    subprocess.run([sys.executable, "-m", "zipfile", "-c", str(dest), *CODE_PACKAGES], cwd=root, check=True,
                   capture_output=True, timeout=120)
    return dest


class SparkStandaloneCluster:
    """A master and ``workers`` workers on ``host`` (free ports), each worker with ``cores`` cores and
    ``memory`` for its executors; logs and work directories under ``workdir``."""

    def __init__(self, workdir: Path, workers: int = 2, cores: int = 1, memory: str = "1g",
                 host: str = "127.0.0.1", daemon_memory: str = "256m") -> None:
        self.workdir, self.workers, self.cores, self.memory, self.host = workdir, workers, cores, memory, host
        self.port, self.webui_port = free_port(host), free_port(host)
        self.env = {**os.environ, "SPARK_HOME": str(spark_home()), "SPARK_DAEMON_MEMORY": daemon_memory,
                    "SPARK_LOCAL_IP": host}
        self.processes: list[tuple[str, subprocess.Popen[bytes]]] = []

    @property
    def master_url(self) -> str:
        """``spark://host:port``: the value of ``spark.master`` for sessions on this cluster."""
        return f"spark://{self.host}:{self.port}"

    @property
    def webui_url(self) -> str:
        """The master's web UI; ``/json/`` under it describes workers and applications."""
        return f"http://{self.host}:{self.webui_port}"

    def master_command(self) -> list[str]:
        """The master's command line."""
        return [str(spark_home() / "bin" / "spark-class"), MASTER_CLASS, "--host", self.host,
                "--port", str(self.port), "--webui-port", str(self.webui_port)]

    def worker_command(self, index: int) -> list[str]:
        """Worker ``index``'s command line (its own work directory, web UI on a free port)."""
        return [str(spark_home() / "bin" / "spark-class"), WORKER_CLASS, "--host", self.host,
                "--webui-port", str(free_port(self.host)), "--cores", str(self.cores), "--memory", self.memory,
                "--work-dir", str(self.worker_dir(index)), self.master_url]

    def worker_dir(self, index: int) -> Path:
        """Where worker ``index`` runs its executors (``<app-id>/<executor-id>/`` under it)."""
        return self.workdir / f"worker-{index}"

    def state(self) -> dict[str, Any]:
        """The master's JSON: ``workers``, ``activeapps``, ``completedapps``, ``aliveworkers``, ..."""
        with urllib.request.urlopen(f"{self.webui_url}/json/", timeout=5) as response:
            return dict(json.load(response))

    def alive_workers(self) -> int:
        """Workers the master lists ``ALIVE`` (0 while its web UI does not answer)."""
        try:
            return sum(1 for worker in self.state()["workers"] if worker["state"] == "ALIVE")
        except (OSError, urllib.error.URLError, ValueError):
            return 0

    def start(self, timeout: float = 90) -> Self:
        """Start the master, then the workers; return once every worker is registered ``ALIVE``."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._spawn("master", self.master_command())
        for index in range(self.workers):
            self.worker_dir(index).mkdir(parents=True, exist_ok=True)
            self._spawn(f"worker-{index}", self.worker_command(index))
        deadline = time.monotonic() + timeout
        while self.alive_workers() < self.workers:
            for name, process in self.processes:
                if process.poll() is not None:
                    self.stop()
                    raise SparkClusterError(f"Spark {name} exited with code {process.returncode}: "
                                            f"{self._log_tail(name)}")
            if time.monotonic() > deadline:
                self.stop()
                raise SparkClusterError(f"{self.workers} Spark workers not registered with {self.master_url} "
                                        f"after {timeout:.0f} s: {self._log_tail('master')}")
            time.sleep(0.5)
        return self

    def stop(self, timeout: float = 20) -> None:
        """SIGTERM each process group (workers first, their executors with them), SIGKILL what remains."""
        for _, process in reversed(self.processes):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for _, process in reversed(self.processes):
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            try:  # executors left behind by a worker that exited first
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.processes.clear()

    def _spawn(self, name: str, command: list[str]) -> None:
        log = (self.workdir / f"{name}.log").open("wb")
        with log:
            process = subprocess.Popen(command, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL, start_new_session=True)
        self.processes.append((name, process))

    def _log_tail(self, name: str) -> str:
        path = self.workdir / f"{name}.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else "(no log)"

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
