"""``brook status APPLICATION_ID``: an app's instances (workers), their tasks and partitions, and lag per partition.

Lag is the group's committed offset against each partition's end, read from fetched high watermarks
(never ListOffsets "latest", which the embedded broker answers wrongly). Instances and their tasks come
from the ``<application.id>-metadata`` topic, where every running instance announces itself and its
assignment (the group protocol carries no assignment Python can read, and the embedded broker's
DescribeGroups lists no members), with or without ``application.server`` (an instance without one is
``instance-<process id>``); see :mod:`streaming.runtime.membership`.
"""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer
from confluent_kafka import ConsumerGroupTopicPartitions
from confluent_kafka.admin import AdminClient

from streaming.admin import watermarks
from streaming.cli.connection import BootstrapOption, ConfigOption, SetOption, client_config
from streaming.naming import REPARTITION_SUFFIX, metadata_topic
from streaming.runtime.cluster import cluster_metadata
from streaming.runtime.membership import STALE_AFTER_S, read_announcements


def status(
    application_id: Annotated[str, typer.Argument(help="The app's application.id (its consumer group).")],
    bootstrap: BootstrapOption = None, config: ConfigOption = None, overrides: SetOption = None,
) -> None:
    """Instances, tasks and lag of a stream application."""
    settings = client_config(bootstrap, config, overrides)
    topics = cluster_metadata(settings).topics
    committed = _committed(settings, application_id)
    if not committed and metadata_topic(application_id) not in topics:
        raise typer.BadParameter(f"no application {application_id!r} on {settings['bootstrap.servers']}: its group "
                                 f"has no committed offsets and it announced no instances", param_hint="APPLICATION_ID")
    instances = read_announcements(settings, application_id)
    typer.echo(f"application {application_id}")
    if instances:
        typer.echo(f"instances ({len(instances)}, as announced on {metadata_topic(application_id)}):")
        now_ms = time.time() * 1000
        for _, announcement in sorted(instances.items()):
            assignment = announcement.assignment
            age_s = (now_ms - announcement.record_timestamp) / 1000
            seen = f"last seen {max(age_s, 0):.0f} s ago" + (
                "" if age_s < STALE_AFTER_S else ", no tombstone: stopped without closing (killed?)")
            typer.echo(f"  {announcement.describe()}  {announcement.state:<11} active tasks "
                       f"{', '.join(assignment.active_tasks) or '-'}; partitions {_partitions(assignment.active)}; "
                       f"standby tasks {', '.join(assignment.standby_tasks) or '-'}; {seen}")
    else:
        typer.echo("instances: none announced")
    # When two hosts claim a partition (one has not announced its loss yet: stopped, or cut off from the
    # network), the later announcement wins, as in metadata_for_key: iterate oldest first.
    owners = {(topic, partition): host for host, a in sorted(instances.items(), key=lambda item: item[1].offset)
              for topic, partitions in a.assignment.active.items() for partition in partitions}
    consumed = sorted({topic for topic, _ in committed} | {topic for topic, _ in owners}, key=lambda t: (
        t.endswith(REPARTITION_SUFFIX), t))  # inputs first, then repartition topics
    partitions = [(topic, p) for topic in consumed if topic in topics for p in sorted(topics[topic].partitions)]
    ends = watermarks(settings["bootstrap.servers"], partitions, client_config=settings) if partitions else {}
    rows = [(f"{topic}[{p}]", committed.get((topic, p)), ends[(topic, p)][1], owners.get((topic, p), "-"))
            for topic, p in partitions]
    width = max([len("partition"), *(len(name) for name, *_ in rows)])
    typer.echo(f"{'partition':<{width}}  {'committed':>9}  {'end':>9}  {'lag':>9}  owner")
    total = 0
    for name, done, end, owner in rows:
        lag = end - (done or 0)
        total += lag
        typer.echo(f"{name:<{width}}  {'-' if done is None else done:>9}  {end:>9}  {lag:>9}  {owner}")
    typer.echo(f"total lag: {total:,} records")


def _partitions(active: dict[str, tuple[int, ...]]) -> str:
    """An instance's input partitions, ``topic[0,2] other[1]`` (``-``: none)."""
    return " ".join(f"{topic}[{','.join(map(str, sorted(parts)))}]" for topic, parts in sorted(active.items())
                    if parts) or "-"


def _committed(settings: dict[str, Any], group: str) -> dict[tuple[str, int], int]:
    """The group's committed offset of every partition it committed."""
    admin = AdminClient(settings)
    future = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group]
    result = future.result(timeout=30)
    return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions
            if tp.offset >= 0 and tp.error is None}
