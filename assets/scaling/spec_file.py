"""Switching the platform spec to a new topic generation: the last step of a scaling, after every check passed.

:func:`switch_generations` rewrites ``platform.yaml`` in place, keeping its comments and layout (ruamel.yaml's
round trip): for each logical topic moved, ``apps.<app>.topic_generations.<topic>`` becomes the new generation
in every app that declares the topic or owns it as an internal topic (two apps that share a topic must agree
on its generation: the spec's own rule), and a declared topic's ``topics.<topic>.partitions`` becomes its new
count (changelogs are derived from their store's ``partitions_from`` topic, so they follow). The result is
validated with the spec's loader before it replaces the file, by an atomic rename: a switch is all or nothing.
"""

from __future__ import annotations

import io
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap

from assets.platform_spec import PlatformSpecError, load_platform_spec

__all__ = ["switch_generations"]


def _yaml() -> YAML:
    yaml = YAML()
    yaml.preserve_quotes = True
    yaml.width = 120
    return yaml


def switch_generations(spec_path: Path, moves: Mapping[str, tuple[int, int]]) -> str:
    """Set each logical topic of ``moves`` (topic -> (generation, partitions)) to its new generation in every
    app that uses it, and a declared topic's partition count; returns the new file's text.

    Raises:
        PlatformSpecError: a topic of ``moves`` is used by no app, or the rewritten spec does not validate
            (the file is left as it was).
    """
    yaml = _yaml()
    document = yaml.load(spec_path.read_text())
    apps: CommentedMap = document.get("apps") or CommentedMap()
    topics: CommentedMap = document.get("topics") or CommentedMap()
    for topic, (generation, partitions) in moves.items():
        users = [name for name, app in apps.items()
                 if topic in (app.get("inputs") or []) or topic in (app.get("outputs") or [])
                 or topic.startswith(f"{app.get('application_id')}-")]
        if not users:
            raise PlatformSpecError(f"platform spec {spec_path}: no app uses topic {topic!r}, so no generation of it "
                                    f"can be switched")
        for name in users:
            app = apps[name]
            if "topic_generations" not in app:
                app["topic_generations"] = CommentedMap()
            app["topic_generations"][topic] = generation
        if topic in topics:
            topics[topic]["partitions"] = partitions
    out = io.StringIO()
    yaml.dump(document, out)
    text = out.getvalue()
    handle, temporary = tempfile.mkstemp(prefix=".platform-", suffix=".yaml", dir=spec_path.parent)
    try:
        with os.fdopen(handle, "w") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        load_platform_spec(temporary)  # raises, naming every problem, before anything is replaced
        os.replace(temporary, spec_path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return text
