"""Spark's Python worker daemon, with the modules Brook's Spark tasks use imported once, before it forks.

Spark starts one daemon (``python -m pyspark.daemon``) per executor and forks a Python worker from it for each
task that runs Python; a worker imports what the task's pickled functions need (pyspark's SQL and Arrow layers,
pandas, pyarrow, confluent-kafka, Brook's source and jobs) on every fork. That was ~6 s of a million-record
re-shard's ~34 s of Python (bench/README.md, ``scaling.py``). This daemon imports them first, so every worker forked
from it starts with them (``spark.python.daemon.module``, set by :func:`assets.spark.session.spark_session` for local
masters only: a cluster's executors may not have Brook installed, and get it as ``spark.submit.pyFiles`` after the
daemon starts).

The daemon starts with the first Python task of a session, so its start is on that task's path: every Spark job's
first stage waited for it (1.7 s of a 3-day reprocessing's ~14 s, ``bench/reprocess.py``). Spark puts its own
``pyspark.zip`` (and py4j's) first on the workers' ``PYTHONPATH``; modules in a zip are compiled from source on every
import, as no bytecode is cached for them, which was half the daemon's start (1.55 s against 0.81 s from the
installed package). When the zips are the installed pyspark's own (a pip-installed pyspark is its own
``SPARK_HOME``: the same files), :func:`prefer_installed_pyspark` moves them after the installed packages.
"""

from __future__ import annotations

import importlib
import sys
from importlib.machinery import PathFinder
from pathlib import Path

PRELOADED = (
    "pyarrow",
    "pandas",
    "confluent_kafka",
    "pyspark.sql.pandas.serializers",
    "pyspark.sql.worker.plan_data_source_read",
    "assets.spark.kafka_source",
    "assets.archive.decode",
    "assets.reprocess.job",
    "assets.scaling.migrate",
)


def prefer_installed_pyspark() -> None:
    """Move the zips on ``sys.path`` that lie inside the installed pyspark package after every other entry, so
    pyspark and py4j are imported from the installed packages (with their cached bytecode); zips of another Spark
    installation (``SPARK_HOME`` elsewhere) are left first. Call before anything imports pyspark."""
    spec = PathFinder.find_spec("pyspark", [entry for entry in sys.path if not entry.endswith(".zip")])
    if spec is None or not spec.submodule_search_locations:
        return
    installed = Path(next(iter(spec.submodule_search_locations))).resolve()
    own = [entry for entry in sys.path if entry.endswith(".zip") and Path(entry).resolve().is_relative_to(installed)]
    sys.path[:] = [entry for entry in sys.path if entry not in own] + own


def preload() -> None:
    """Import :data:`PRELOADED`."""
    for module in PRELOADED:
        importlib.import_module(module)


if __name__ == "__main__":
    prefer_installed_pyspark()
    preload()
    from pyspark import daemon

    daemon.manager()
