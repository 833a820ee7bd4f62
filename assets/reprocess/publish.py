"""Publishing a reprocessed day (``reprocess.publish: true``): its outputs produced to Kafka, so downstream consumers
get the corrected records.

Each output topic's records of the day's run (``_raw/`` of ``<reprocess root>/<app>/<topic>/date=D/``: key and
value bytes, headers, timestamp) go to ``<topic><publish_suffix>`` — a side topic by default
(``.reprocessed``); an empty suffix writes to the output topics themselves — to the partition the batch run gave
each record (the sink's partitioner, as live), partitions in order, each in offset order. The dead-letter topic's
records are not published (they are in the day's outputs on disk).

The target topics must exist with at least the outputs' partition counts: :func:`check_targets` refuses, naming
them, before the day's run starts. Publishing the same day twice produces its records twice (Kafka has no
"replace a day"): consumers of a side topic should treat a day's records as a unit, keyed by day.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date
from pathlib import Path
from typing import Any

from assets.archive.layout import RAW_DIR, day_dir

__all__ = ["PublishError", "check_targets", "publish_outputs", "target_topic"]


class PublishError(RuntimeError):
    """A reprocessed day cannot be, or was not fully, published (the message names the topics)."""


def target_topic(topic: str, suffix: str) -> str:
    """Where output ``topic``'s reprocessed records are published."""
    return topic + suffix


def check_targets(client_config: Mapping[str, Any], partitions: Mapping[str, int], suffix: str) -> None:
    """Refuse unless every target topic exists with at least its output's partition count (``partitions``:
    output topic -> partition count).

    Raises:
        PublishError: naming each missing or smaller topic.
    """
    from streaming.admin import TopicError, partition_counts

    targets = {target_topic(topic, suffix): count for topic, count in partitions.items()}
    settings = {k: v for k, v in client_config.items() if k != "bootstrap.servers"}
    try:
        found = partition_counts(client_config["bootstrap.servers"], targets, settings)
    except TopicError as exc:
        raise PublishError(f"cannot check the topics to publish the reprocessed outputs to: {exc}") from None
    problems = [f"{topic!r} does not exist" if found[topic] is None else
                f"{topic!r} has {found[topic]} partitions, fewer than {count}"
                for topic, count in sorted(targets.items()) if found[topic] is None or found[topic] < count]  # type: ignore[operator]
    if problems:
        raise PublishError(f"cannot publish the reprocessed outputs: {'; '.join(problems)} (create the topics with "
                           f"the outputs' partition counts, or set reprocess.publish: false)")


def publish_outputs(client_config: Mapping[str, Any], root: Path, topics: list[str], day: date,
                    suffix: str) -> dict[str, int]:
    """Produce ``day``'s records of each of ``topics`` under ``root`` (an app's reprocess directory) to its target
    topic; returns the records published per target topic.

    Raises:
        PublishError: a record was not acknowledged (naming the topic and the broker's error).
    """
    import pyarrow.dataset as ds
    from confluent_kafka import Producer

    producer = Producer({**client_config, "enable.idempotence": True, "linger.ms": 5})
    failures: list[str] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            failures.append(f"{msg.topic()}[{msg.partition()}]: {err}")

    published: dict[str, int] = {}
    for topic in topics:
        path = day_dir(root, topic, day) / RAW_DIR
        target = target_topic(topic, suffix)
        published[target] = 0
        if not path.is_dir():
            continue  # the day's run wrote nothing to it
        table = ds.dataset(path, format="parquet").to_table().sort_by([("partition", "ascending"),
                                                                         ("offset", "ascending")])
        micros = table.column("timestamp").cast("int64").to_pylist()
        for row, ts in zip(table.select(["partition", "key", "value", "headers"]).to_pylist(), micros, strict=True):
            headers = [(h["key"], h["value"]) for h in row["headers"]] if row["headers"] else None
            while True:
                try:
                    producer.produce(target, row["value"], row["key"], partition=row["partition"], timestamp=ts // 1000,
                                     headers=headers, on_delivery=delivered)
                    break
                except BufferError:  # the producer's queue is full: let it drain
                    producer.poll(0.1)
            producer.poll(0)
            published[target] += 1
    if producer.flush(60) or failures:
        raise PublishError(f"publishing the reprocessed outputs of {day}: {len(failures) or 'some'} records were not "
                           f"acknowledged: {failures[0] if failures else 'timed out after 60 s'}")
    return published
