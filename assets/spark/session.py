"""Spark settings from ``platform/spark/spark-defaults.conf`` and a session that can read Kafka.

The conf file has Spark's own format (``key value`` per line, ``#`` comments), so the same file
works with ``spark-submit --properties-file``. :func:`spark_session` starts (or reuses) the
process's session with those settings, ships ``spark.submit.pyFiles`` to its executors and registers the
``brook-kafka`` source in it.

The session is quiet unless something is wrong (:func:`quiet_conf`): Spark's driver logs errors only
(``platform/spark/log4j2.properties``), without console progress bars; pyspark's warning about pandas 3 is
filtered in this process and in Spark's Python workers; the JVM's own startup notice about the incubator module
Spark's launcher always adds is dropped from its stderr, everything else it writes is passed on.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import warnings
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from urllib.parse import urlparse

from pyspark.sql import SparkSession

from assets.spark.kafka_source import register_kafka_source

__all__ = ["LOG4J2_PROPERTIES", "SparkConfError", "filter_pandas_version_warning", "local_spark_session", "quiet_conf",
           "read_spark_defaults", "spark_session"]

LOG4J2_PROPERTIES = Path(__file__).resolve().parents[2] / "platform" / "spark" / "log4j2.properties"

# pyspark 4.x calls require_minimum_pandas_version() when it imports pyspark.testing.utils and in every pandas_udf;
# with pandas >= 3 that warns, each time a warnings registry is reset (Dagster's runs reset it often). Brook's Spark
# code runs with pandas 3 (its tests do), so the advice is noise; filtered here (the driver) and, through
# spark.executorEnv.PYTHONWARNINGS, in Spark's Python workers. Only this message, only as a FutureWarning.
PANDAS_VERSION_WARNING = "PySpark does not yet fully support pandas"


def filter_pandas_version_warning() -> None:
    """Ignore pyspark's pandas-version FutureWarning in this process (idempotent). Done on import and again by
    :func:`spark_session`: a filter added inside a ``warnings.catch_warnings()`` block (pytest's collection, some of
    Dagster's code paths) is gone when the block ends."""
    warnings.filterwarnings("ignore", message=PANDAS_VERSION_WARNING, category=FutureWarning)


filter_pandas_version_warning()

# What the driver JVM writes to stderr before any logging is set up, that nobody can act on: Spark's launcher puts
# --add-modules=jdk.incubator.vector on every driver's command line (JavaModuleOptions, no option to leave it out)
# and the JVM then announces the incubator module, unconditionally.
_JVM_STARTUP_NOISE = frozenset({b"WARNING: Using incubator modules: jdk.incubator.vector"})


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
    filter_pandas_version_warning()
    local = conf.get("spark.master", "").startswith("local")
    if local:
        # else Spark warns at startup that the machine's hostname resolves to a loopback address (it binds there
        # anyway: spark.driver.bindAddress); a cluster's driver must be reachable, so only for a local master
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    conf = quiet_conf(conf)
    _launch_gateway(conf)
    builder = SparkSession.builder
    # workers on this machine: preload (worker_daemon doc); set either way, as builders share their options
    builder = builder.config("spark.python.daemon.module", "assets.spark.worker_daemon" if local else "pyspark.daemon")
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    _ship_py_files(session, conf.get("spark.submit.pyFiles", ""))
    register_kafka_source(session)
    return session


def quiet_conf(conf: Mapping[str, str]) -> dict[str, str]:
    """``conf`` with Brook's quiet defaults for what it leaves unset: no console progress bars
    (``spark.ui.showConsoleProgress``, drawn with ``\\r`` over whatever else is printed), pyspark's pandas
    warning filtered in Python workers (``spark.executorEnv.PYTHONWARNINGS``) and the driver's log4j2 settings
    from :data:`LOG4J2_PROPERTIES` (errors only) unless ``spark.driver.extraJavaOptions`` names a log4j2 file."""
    quiet = dict(conf)
    quiet.setdefault("spark.ui.showConsoleProgress", "false")
    quiet.setdefault("spark.executorEnv.PYTHONWARNINGS", f"ignore:{PANDAS_VERSION_WARNING}:FutureWarning")
    java_options = quiet.get("spark.driver.extraJavaOptions", "")
    if "log4j2.configurationFile" not in java_options and LOG4J2_PROPERTIES.is_file():
        log4j = f"-Dlog4j2.configurationFile={LOG4J2_PROPERTIES.as_uri()}"
        quiet["spark.driver.extraJavaOptions"] = f"{log4j} {java_options}".strip()
    return quiet


def _launch_gateway(conf: Mapping[str, str]) -> None:
    """Start the driver JVM (as pyspark would on the first session, with ``conf``) with its stderr piped through
    :func:`_forward_jvm_stderr`. Nothing to do if the process has a JVM already, or was started by
    ``spark-submit`` (which owns the JVM)."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    with SparkContext._lock:
        if SparkContext._gateway is not None or "PYSPARK_GATEWAY_PORT" in os.environ:
            return
        gateway = launch_gateway(SparkConf().setAll(list(conf.items())), popen_kwargs={"stderr": subprocess.PIPE})
        threading.Thread(target=_forward_jvm_stderr, args=(gateway.proc.stderr,), name="spark-jvm-stderr",
                         daemon=True).start()
        SparkContext._gateway = gateway
        SparkContext._jvm = gateway.jvm


def _forward_jvm_stderr(stream) -> None:
    """Copy the JVM's stderr (its log, Python workers' stderr) to this process's stderr line by line, leaving
    out :data:`_JVM_STARTUP_NOISE`; until the JVM exits. Never stops early: a JVM whose stderr pipe fills
    up would block."""
    for line in iter(stream.readline, b""):
        if line.rstrip(b"\r\n") in _JVM_STARTUP_NOISE:
            continue
        try:
            os.write(2, line)
        except OSError:
            pass


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
