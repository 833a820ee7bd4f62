"""Publishing a day of archive atomically: write aside, then rename into place.

A day is written into a staging directory next to its final place (``<root>/<topic>/.date=<D>.<id>``,
ignored by readers: its name starts with ``.``), completed with its manifest, then renamed to
``date=<D>``. Re-archiving a day moves the old directory aside (``.date=<D>.<id>.old``) and the new
one in, two renames on the same filesystem, and only then deletes the old one. A crash at any point
leaves either the old day or the new one under ``date=<D>`` (or, between the two renames, the old one
aside, which the next run of that day restores before starting); never a partial day.
"""

from __future__ import annotations

import json
import shutil
import uuid
from datetime import date
from pathlib import Path
from typing import Any

from assets.archive.layout import MANIFEST, day_dir

__all__ = ["discard_staging", "publish_day", "recover_day", "staging_dir"]


def staging_dir(root: Path, topic: str, day: date) -> Path:
    """A fresh, not yet existing directory to write the day into (its parent exists)."""
    final = day_dir(root, topic, day)
    final.parent.mkdir(parents=True, exist_ok=True)
    return final.parent / f".{final.name}.{uuid.uuid4().hex[:12]}"


def _aside(final: Path) -> list[Path]:
    return sorted(final.parent.glob(f".{final.name}.*.old"))


def recover_day(root: Path, topic: str, day: date) -> None:
    """Undo a publish interrupted between its two renames, and drop leftover staging directories.

    A moved-aside old day is put back when no new day took its place; then every leftover staging
    or old directory of the day is deleted.
    """
    final = day_dir(root, topic, day)
    if not final.parent.is_dir():
        return
    old = _aside(final)
    if old and not final.exists():
        old[-1].rename(final)
    for leftover in final.parent.glob(f".{final.name}.*"):
        shutil.rmtree(leftover, ignore_errors=True)


def publish_day(staging: Path, root: Path, topic: str, day: date, manifest: dict[str, Any]) -> Path:
    """Write ``manifest`` into ``staging`` and make it the day's directory, replacing any previous one.

    Returns the day's directory. ``staging`` must be on the same filesystem (see :func:`staging_dir`).
    """
    (staging / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True))
    final = day_dir(root, topic, day)
    old = final.parent / f"{staging.name}.old"
    if final.exists():
        final.rename(old)
    staging.rename(final)
    shutil.rmtree(old, ignore_errors=True)
    return final


def discard_staging(staging: Path) -> None:
    """Delete a staging directory after a failed write (the published day, if any, is untouched)."""
    shutil.rmtree(staging, ignore_errors=True)
