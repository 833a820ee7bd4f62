"""A worker's own state directory: which one it takes, and the failure it remembers there.

**Which directory.** A worker whose settings name no ``state.dir`` (config file, ``BROOK_STATE_DIR`` or ``--set``)
takes the first ``<default state.dir>/<application.id>/<n>`` (n = 0, 1, ...) no other worker holds, and holds it
(a ``flock`` on ``<n>/.lock``, :mod:`streaming.runtime.directory_lock`) until it exits: the same command started
in more terminals gives each worker a directory of its own, and a worker restarted while the others run takes
the same one again, so it restores only the changelogs' tail. That directory is the worker's ``state.dir``
(its stores live in ``<n>/<application.id>/``, locked again by the runtime).

**The last failure.** A worker that fails writes the one-line reason and the time into its ``state.dir``
(``last-failure-<application.id>.json``); a clean stop and ``brook worker cleanup`` delete it. When the next
failure is the same, the worker says when it failed that way before: a crash loop re-emits the output since the
last commit every time. A changelog that is gone under local state is remembered as needing a cleanup: the
failed restore consumed the checkpoint that showed it, so without this a restart would silently restore the
store from what the new changelog holds.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from streaming.config import KEYS
from streaming.runtime.directory_lock import DirectoryLock, try_lock_directory
from streaming.runtime.state_directory import application_dir


@dataclass
class WorkerStateDir:
    """The worker's ``state.dir``, and the lock of its slot when the worker chose it (None: given explicitly)."""

    path: str
    slot_lock: DirectoryLock | None = None

    @property
    def chosen(self) -> bool:
        """Whether the worker picked this directory itself (no ``state.dir`` in its settings)."""
        return self.slot_lock is not None

    def release(self) -> None:
        """Give the slot up (at exit: the kernel does it anyway)."""
        if self.slot_lock is not None:
            self.slot_lock.release()


def default_state_dir() -> str:
    """The ``state.dir`` a config without one gets."""
    return str(KEYS["state.dir"].default)


def slots_dir(application_id: str, base: str | None = None) -> str:
    """``<default state.dir>/<application.id>``: the parent of the workers' numbered directories."""
    return application_dir(base or default_state_dir(), application_id)


def claim_state_dir(settings: dict[str, Any], application_id: str) -> WorkerStateDir:
    """The worker's ``state.dir``: the one its settings name, else the first free numbered slot (module doc)."""
    if settings.get("state.dir"):
        return WorkerStateDir(str(settings["state.dir"]))
    parent, n = slots_dir(application_id), 0
    while (lock := try_lock_directory(os.path.join(parent, str(n)))) is None:
        n += 1
    return WorkerStateDir(lock.directory, lock)


def numbered_slots(application_id: str) -> list[str]:
    """The numbered directories workers of ``application_id`` took so far, in order."""
    parent = slots_dir(application_id)
    if not os.path.isdir(parent):
        return []
    return [os.path.join(parent, name) for name in sorted(os.listdir(parent), key=lambda n: (len(n), n))
            if name.isdigit() and os.path.isdir(os.path.join(parent, name))]


def _failure_file(state_dir: str, application_id: str) -> str:
    return os.path.join(state_dir, f"last-failure-{application_id}.json")


@dataclass(frozen=True)
class Failure:
    """A failure the worker remembers: when (ISO time, UTC), the one-line reason, and whether the worker must not
    start again before its local state is deleted (``brook worker cleanup``)."""

    time: str
    reason: str
    needs_cleanup: bool = False


def last_failure(state_dir: str, application_id: str) -> Failure | None:
    """The failure the worker in ``state_dir`` remembers, if any (an unreadable record counts as none)."""
    try:
        with open(_failure_file(state_dir, application_id)) as file:
            raw = json.load(file)
        return Failure(str(raw["time"]), str(raw["reason"]), bool(raw.get("needs_cleanup", False)))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def remember_failure(state_dir: str, application_id: str, reason: str, *, needs_cleanup: bool = False) -> str | None:
    """Record ``reason`` as the worker's last failure; return when it failed the same way before (ISO time, UTC),
    else None."""
    previous = last_failure(state_dir, application_id)
    failure = Failure(datetime.now(UTC).isoformat(timespec="seconds"), reason, needs_cleanup)
    os.makedirs(state_dir, exist_ok=True)
    with open(_failure_file(state_dir, application_id), "w") as file:
        json.dump(asdict(failure), file)
    return previous.time if previous is not None and previous.reason == reason else None


def forget_failure(state_dir: str, application_id: str) -> None:
    """The worker stopped cleanly: no failure to repeat."""
    try:
        os.remove(_failure_file(state_dir, application_id))
    except FileNotFoundError:
        pass
