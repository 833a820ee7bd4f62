"""Spark's Python worker daemon, with the modules Brook's Spark tasks use imported once, before it forks.

Spark starts one daemon (``python -m pyspark.daemon``) per executor and forks a Python worker from it for each
task that runs Python; a worker imports what the task's pickled functions need (pyspark's SQL and Arrow layers,
pandas, pyarrow, confluent-kafka, Brook's source and jobs) on every fork, and pyspark's own modules come from
``pyspark.zip``, compiled anew each time. That was ~6 s of a million-record re-shard's ~34 s of Python (bench/
README.md, ``scaling.py``). This daemon imports them first, so every worker forked from it starts with them
(``spark.python.daemon.module``, set by :func:`assets.spark.session.spark_session` for local masters only: a
cluster's executors may not have Brook installed, and get it as ``spark.submit.pyFiles`` after the daemon starts).
"""

from __future__ import annotations

import importlib

from pyspark import daemon

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


def preload() -> None:
    """Import :data:`PRELOADED`."""
    for module in PRELOADED:
        importlib.import_module(module)


if __name__ == "__main__":
    preload()
    daemon.manager()
