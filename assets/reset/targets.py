"""What resetting an app of the platform spec needs: its ``application.id``, its topology and the snapshot location,
and where plans are written. Dagster-free: ``brook app reset`` uses it too (``streaming/cli/app.py``)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from assets.app_topologies import load_app_topology
from assets.platform_spec import PlatformSpec, PlatformSpecError, repo_root
from streaming.topology import Topology

__all__ = ["PLAN_DIR", "ResetTarget", "plan_path", "reset_target"]

#: Where plans go unless told otherwise, relative to the working directory.
PLAN_DIR = Path(".brook/resets")


@dataclass(frozen=True)
class ResetTarget:
    """An app of the spec, ready to reset: its name, ``application.id``, topology (bound to it and to the app's topic
    generations, so a reset moves the offsets and re-creates the internal topics of the current generation) and the
    snapshot location of the spec (resolved against the checkout)."""

    name: str
    application_id: str
    topology: Topology
    snapshot_location: str


def reset_target(spec: PlatformSpec, name: str) -> ResetTarget:
    """App ``name`` of ``spec``. Raises ``PlatformSpecError`` naming the app and the known ones."""
    if name not in spec.apps:
        raise PlatformSpecError(f"no app {name!r} in the platform spec (apps: {', '.join(sorted(spec.apps))})")
    app = spec.apps[name]
    return ResetTarget(name, app.application_id,
                       load_app_topology(name, app).bind(app.application_id, app.generations),
                       spec.snapshots.resolved_location(repo_root()))


def plan_path(name: str, directory: Path = PLAN_DIR) -> Path:
    """``<directory>/<app>-<UTC time>.json``: where a dry run writes its plan by default."""
    return directory / f"{name}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
