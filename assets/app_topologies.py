"""The platform spec checked against the apps' code: each app's topology is built and compared.

``platform.yaml`` repeats names that live in the apps' code (topics read and written, stores, the
serdes a topic is written with). A name that drifts apart would make the archive decode a topic
wrongly or compaction look for a store that does not exist, so the code location refuses to load:
:func:`check_apps_against_topologies` names every app, topic, store and format that disagrees.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from assets.platform_spec import AppSpec, PlatformSpec, PlatformSpecError, repo_root
from streaming.serdes import (
    BytesSerde,
    DoubleSerde,
    IntegerSerde,
    JsonSerde,
    LongSerde,
    Serde,
    StringSerde,
    resolve_serde,
)
from streaming.topology import Topology
from streaming.topology.nodes import SinkNodeDef, SourceNodeDef
from streaming.yaml_files import load_yaml

__all__ = ["app_settings", "check_apps_against_topologies", "load_app_topology"]

_FORMAT_OF_SERDE: dict[type[Serde[Any]], str] = {
    StringSerde: "string", LongSerde: "long", IntegerSerde: "integer", DoubleSerde: "double",
    JsonSerde: "json", BytesSerde: "bytes",
}


def load_app_topology(app_name: str, app: AppSpec) -> Topology:
    """Build the app's topology from its ``MODULE:FACTORY`` (raises ``PlatformSpecError`` naming it)."""
    module_name, _, attribute = app.topology.partition(":")
    try:
        factory = getattr(importlib.import_module(module_name), attribute)
        topology = factory() if callable(factory) and not isinstance(factory, Topology) else factory
    except Exception as exc:  # any failure of user code is reported with the app's name
        raise PlatformSpecError(f"app {app_name!r}: cannot build topology {app.topology!r}: {exc}") from exc
    if not isinstance(topology, Topology):
        raise PlatformSpecError(f"app {app_name!r}: {app.topology!r} gave {type(topology).__name__}, not a Topology")
    return topology


def app_settings(app: AppSpec) -> dict[str, Any]:
    """The app's Streams config file (``config``, relative to the repository root), with its ``application_id``."""
    path = Path(app.config)
    config: dict[str, Any] = {}
    resolved = path if path.is_absolute() else repo_root() / path
    if resolved.is_file():
        config = load_yaml(resolved.read_text()) or {}
    return {**config, "application.id": app.application_id}


def _default_serdes(app: AppSpec) -> tuple[Serde[Any], Serde[Any]]:
    """The app's ``default.key.serde`` / ``default.value.serde`` (String / Json unless its config says)."""
    config = app_settings(app)
    return (resolve_serde(config.get("default.key.serde", "String")),
            resolve_serde(config.get("default.value.serde", "Json")))


def _format_of(serde: Serde[Any]) -> str | None:
    """The record format a built-in serde writes, or None for a user serde (not compared)."""
    return _FORMAT_OF_SERDE.get(type(serde))


def _app_problems(spec: PlatformSpec, app_name: str, app: AppSpec, topology: Topology) -> list[str]:
    problems: list[str] = []
    where = f"app {app_name!r} (topology {app.topology})"
    internal = topology.internal_topics
    sources = set(topology.source_topics) - internal
    sinks = set(topology.sink_topics) - internal
    for topic in sorted(sources - set(app.inputs)):
        problems.append(f"{where} reads topic {topic!r}, which is not in its inputs")
    for topic in sorted(set(app.inputs) - sources):
        problems.append(f"{where}: input {topic!r} is not read by the topology (it reads {sorted(sources)})")
    for topic in sorted(sinks - set(app.outputs)):
        problems.append(f"{where} writes topic {topic!r}, which is not in its outputs")
    if topology.dynamic_sinks:  # the outputs its fixed sinks do not write are those its extractors may name
        for topic in sorted((set(app.outputs) - sinks) & (sources | internal)):
            problems.append(f"{where}: output {topic!r} is a topic the app reads or owns, which its dynamic sinks "
                            f"{topology.dynamic_sinks} may not write")
    else:
        for topic in sorted(set(app.outputs) - sinks):
            problems.append(f"{where}: output {topic!r} is not written by the topology (it writes {sorted(sinks)})")

    code_stores = set(topology.store_builders) | set(topology.global_stores)
    for store in app.stores:
        if store.name not in code_stores:
            problems.append(f"{where}: store {store.name!r} is not in the topology (its stores: {sorted(code_stores)})")

    default_key, default_value = _default_serdes(app)
    for subtopology in topology.subtopologies():
        for node in subtopology.nodes:
            if isinstance(node, SourceNodeDef):
                topics = node.topics
            elif isinstance(node, SinkNodeDef):
                topics = [node.topic]
            else:
                continue
            for topic in topics:
                declared = spec.topics.get(topic)
                if declared is None:
                    continue
                for part, serde, wanted in (("key", node.key_serde or default_key, declared.key),
                                            ("value", node.value_serde or default_value, declared.value)):
                    written = _format_of(serde)
                    if written is not None and written != wanted:
                        problems.append(f"{where}: topic {topic!r} declares {part} {wanted!r}, "
                                        f"but node {node.name!r} uses {serde!r}")
    return problems


def check_apps_against_topologies(spec: PlatformSpec) -> None:
    """Build every app's topology and compare its topics, stores and serdes with the spec.

    Raises:
        PlatformSpecError: listing every disagreement, each naming the app, topic or store.
    """
    problems: list[str] = []
    for app_name, app in spec.apps.items():
        try:
            topology = load_app_topology(app_name, app)
        except PlatformSpecError as exc:
            problems.append(str(exc))
            continue
        problems.extend(_app_problems(spec, app_name, app, topology))
    if problems:
        raise PlatformSpecError("the platform spec disagrees with the apps' code:\n- " + "\n- ".join(problems))
