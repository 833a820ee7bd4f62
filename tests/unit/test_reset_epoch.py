"""The reset epoch without a broker: the epoch sequence, and which local state a starting worker wipes
(issue 17, item 2: a worker with local state from before a reset wipes it on start)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from streaming.runtime.reset_epoch import EPOCH_FILE, ResetEpoch, next_epoch, wipe_state_of_other_epoch
from streaming.runtime.state_directory import lock_application_dir


def test_epochs_count_up_from_none() -> None:
    assert [next_epoch("none"), next_epoch("1"), next_epoch("9")] == ["1", "2", "10"]
    assert json.loads(ResetEpoch("3", 1_700_000_000_000, "abc").to_json()) == {
        "version": 1, "epoch": "3", "reset_at": 1_700_000_000_000, "plan": "abc"}


def _state(tmp_path: Path, marker: str | None) -> Path:
    """An application directory holding two task directories, a global store and a checkpoint."""
    app = tmp_path / "state" / "app"
    for task in ("0_0", "1_2"):
        (app / task / "counts").mkdir(parents=True)
        (app / task / "counts" / "000001.sst").write_bytes(b"rows")
        (app / task / ".checkpoint").write_text('[{"topic": "app-counts-changelog", "partition": 0, "offset": 9}]')
    (app / "global" / "users").mkdir(parents=True)
    if marker is not None:
        (app / EPOCH_FILE).write_text(json.dumps({"reset_epoch": marker}))
    return app


@pytest.mark.parametrize(("marker", "epoch", "wiped"), [
    (None, "none", False),  # written before reset epochs existed, never reset: kept
    (None, "1", True),  # written before reset epochs existed, reset since: wiped
    ("none", "1", True),  # reset while stopped
    ("1", "1", False),
    ("1", "2", True),
    ("2", "1", True),  # another epoch, whichever way
])
def test_local_state_of_another_epoch_is_wiped_before_anything_opens(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, marker: str | None, epoch: str, wiped: bool) -> None:
    app = _state(tmp_path, marker)
    lock = lock_application_dir(str(tmp_path / "state"), "app")
    try:
        with caplog.at_level(logging.WARNING, logger="streaming.runtime.reset_epoch"):
            removed = wipe_state_of_other_epoch(lock, ResetEpoch(epoch, 1_700_000_000_000))
    finally:
        lock.release()
    left = sorted(path.name for path in app.iterdir())
    assert json.loads((app / EPOCH_FILE).read_text()) == {"reset_epoch": epoch}
    if wiped:
        assert removed == ["0_0", "1_2", "global"]
        assert left == sorted([EPOCH_FILE, ".lock"])
        [line] = caplog.messages
        assert line == (f"state directory {app} was written under reset epoch {marker or 'none'}, the application is "
                        f"at reset epoch {epoch} (reset at 2023-11-14T22:13:20Z): wiping its local state (0_0, 1_2, "
                        "global) to restore it from the changelogs")
    else:
        assert removed == [] and caplog.messages == []
        assert left == sorted([EPOCH_FILE, ".lock", "0_0", "1_2", "global"])


def test_an_empty_directory_only_records_the_epoch(tmp_path: Path) -> None:
    lock = lock_application_dir(str(tmp_path), "app")
    try:
        assert wipe_state_of_other_epoch(lock, ResetEpoch("4")) == []
    finally:
        lock.release()
    assert json.loads((tmp_path / "app" / EPOCH_FILE).read_text()) == {"reset_epoch": "4"}
