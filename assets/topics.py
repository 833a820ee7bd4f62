"""External asset specs for the Kafka topics the platform spec declares.

Asset keys are logical topic names (``kafka/orders``); the metadata's ``physical_topic`` names the generation that
carries the topic now (partition scaling, :mod:`streaming.topic_generations`).

The stream workers write these topics, not Dagster, so they are ``dg.AssetSpec``s (external assets):
they show up in the asset graph with their partitions, configs and lineage (an app's outputs depend
on its inputs; a changelog depends on the topic its store is partitioned by). Materializing assets
(changelog compaction, output archive, quality checks) build on these keys.
"""

from __future__ import annotations

import dagster as dg

from assets.platform_spec import PlatformSpec

__all__ = ["CHANGELOG_GROUP", "TOPIC_GROUP", "topic_asset_key", "topic_asset_specs"]

TOPIC_GROUP = "kafka_topics"
CHANGELOG_GROUP = "changelogs"


def topic_asset_key(topic: str) -> dg.AssetKey:
    """``kafka/<topic>``: the asset key of a Kafka topic."""
    return dg.AssetKey(["kafka", topic])


def topic_asset_specs(spec: PlatformSpec) -> list[dg.AssetSpec]:
    """One ``AssetSpec`` per declared topic and per derived changelog topic."""
    writers: dict[str, list[str]] = {}
    readers: dict[str, list[str]] = {}
    upstream: dict[str, set[str]] = {}
    for app_name, app in spec.apps.items():
        for topic in app.inputs:
            readers.setdefault(topic, []).append(app_name)
        for topic in app.outputs:
            writers.setdefault(topic, []).append(app_name)
            # An output depends on the app's inputs, except itself (an intermediate topic the app
            # both writes and reads) and topics the app writes downstream of it.
            upstream.setdefault(topic, set()).update(t for t in app.inputs if t not in app.outputs)
        # An intermediate topic feeds the outputs after it.
        intermediates = [t for t in app.outputs if t in app.inputs]
        for topic in app.outputs:
            if topic not in intermediates:
                upstream[topic].update(intermediates)

    specs = [
        dg.AssetSpec(
            key=topic_asset_key(name),
            description=topic.description or f"Kafka topic {name}",
            group_name=TOPIC_GROUP,
            kinds={"kafka"},
            deps=[topic_asset_key(t) for t in sorted(upstream.get(name, ()))],
            metadata={
                "topic": name,
                "physical_topic": spec.physical_topic(name),
                "partitions": topic.partitions,
                "key": topic.key,
                "value": topic.value,
                "fields": dict(topic.fields),
                "config": dict(topic.config),
                "written_by": writers.get(name, []),
                "read_by": readers.get(name, []),
            },
        )
        for name, topic in spec.topics.items()
    ]
    partitions = spec.topic_partitions()
    for changelog, (app_name, store) in spec.changelog_topics().items():
        specs.append(
            dg.AssetSpec(
                key=topic_asset_key(changelog),
                description=f"Changelog of store {store.name!r} of app {app_name!r} (compacted).",
                group_name=CHANGELOG_GROUP,
                kinds={"kafka"},
                deps=[topic_asset_key(store.partitions_from)],
                metadata={
                    "topic": changelog,
                    "physical_topic": spec.apps[app_name].physical_changelog(store.name),
                    "partitions": partitions[changelog],
                    "app": app_name,
                    "store": store.name,
                    "store_type": store.type,
                    "config": {"cleanup.policy": "compact"},
                },
            )
        )
    return specs
