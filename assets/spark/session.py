"""Spark settings from ``platform/spark/spark-defaults.conf`` and a session that can read Kafka.

The conf file has Spark's own format (``key value`` per line, ``#`` comments), so the same file
works with ``spark-submit --properties-file``. :func:`spark_session` starts (or reuses) the
process's session with those settings, ships ``spark.submit.pyFiles`` to its executors and registers the
``brook-kafka`` source in it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from urllib.parse import urlparse

from pyspark.sql import SparkSession

from assets.spark.kafka_source import register_kafka_source

__all__ = ["SparkConfError", "local_spark_session", "read_spark_defaults", "spark_session"]


class SparkConfError(ValueError):
    """The Spark conf file is missing or has a line that is not ``key value``."""


def read_spark_defaults(path: Path | str) -> dict[str, str]:
    """Parse a ``spark-defaults.conf`` file into a dict.

    Raises:
        SparkConfError: the file cannot be read, or a line has a key and no value (names the line).
    """
    conf_path = Path(path)
    try:
        lines = conf_path.read_text().splitlines()
    except OSError as exc:
        raise SparkConfError(f"cannot read Spark conf {conf_path}: {exc}") from exc
    conf: dict[str, str] = {}
    for number, line in enumerate(lines, start=1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        parts = text.split(None, 1)
        if len(parts) != 2:
            raise SparkConfError(f"{conf_path}:{number}: expected 'key value', got {text!r}")
        conf[parts[0]] = parts[1].strip()
    return conf


def spark_session(conf: Mapping[str, str]) -> SparkSession:
    """The process's SparkSession with ``conf`` (an existing session is reused, as ``getOrCreate``
    does), with the ``brook-kafka`` source registered.

    Spark's Python workers (including the one that plans Python data source reads) run
    ``$PYSPARK_PYTHON``, by default ``python3`` from ``PATH``, which may lack Brook and pyarrow; unless
    set, it is pointed at this interpreter before the JVM starts. With a local master, the workers are forked
    from :mod:`assets.spark.worker_daemon`, which imports what Brook's tasks use once.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder
    # workers on this machine: preload (worker_daemon doc); set either way, as builders share their options
    local = conf.get("spark.master", "").startswith("local")
    builder = builder.config("spark.python.daemon.module", "assets.spark.worker_daemon" if local else "pyspark.daemon")
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    _ship_py_files(session, conf.get("spark.submit.pyFiles", ""))
    register_kafka_source(session)
    return session


def _ship_py_files(session: SparkSession, py_files: str) -> None:
    """Send ``spark.submit.pyFiles`` (comma-separated ``.zip``/``.py`` paths: Brook's code for the executors of a
    cluster) to the executors. ``spark-submit`` does it when it starts the process's JVM; a session started
    later in the same process (after another one stopped) must add them itself."""
    shipped = {PurePosixPath(urlparse(uri).path).name for uri in session.sparkContext.listFiles}
    for path in filter(None, (p.strip() for p in py_files.split(","))):
        if PurePosixPath(urlparse(path).path).name not in shipped:
            session.sparkContext.addPyFile(path)


def local_spark_session(cores: int = 2, shuffle_partitions: int = 4) -> SparkSession:
    """A local session with the platform's Spark conf (``platform/spark/spark-defaults.conf``) on
    ``cores`` cores: what the tests and benchmarks run on."""
    conf = read_spark_defaults(Path(__file__).resolve().parents[2] / "platform" / "spark" / "spark-defaults.conf")
    conf.update({"spark.master": f"local[{cores}]", "spark.sql.shuffle.partitions": str(shuffle_partitions)})
    return spark_session(conf)
