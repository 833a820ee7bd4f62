"""A state restore listener that draws restore progress (records done / total) with rich: one line per
snapshot loaded, then a bar per changelog tail."""

from __future__ import annotations

import threading

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

TP = tuple[str, int]


class RestoreProgressBar:
    """One bar per changelog partition being restored; the display ends when the last restore does."""

    def __init__(self, console: Console | None = None) -> None:
        self._progress = Progress(TextColumn("restoring [bold]{task.description}"), BarColumn(),
                                  MofNCompleteColumn(), TimeElapsedColumn(),
                                  console=console or Console(stderr=True), transient=False)
        self._bars: dict[TP, TaskID] = {}
        self._lock = threading.Lock()

    def on_snapshot_restored(self, topic_partition: TP, store_name: str, snapshot_id: str, next_offset: int,
                             num_restored: int) -> None:
        self._progress.console.print(f"restored [bold]{store_name} [{topic_partition[1]}][/bold] from snapshot "
                                     f"{snapshot_id}: {num_restored:,} keys (changelog offsets < {next_offset:,}); "
                                     f"then the changelog tail")

    def on_restore_start(self, topic_partition: TP, store_name: str, start_offset: int, end_offset: int) -> None:
        with self._lock:
            if not self._bars:
                self._progress.start()
            self._bars[topic_partition] = self._progress.add_task(
                f"{store_name} [{topic_partition[1]}]", total=max(end_offset - start_offset, 0))

    def on_batch_restored(self, topic_partition: TP, store_name: str, batch_end_offset: int,
                          num_restored: int) -> None:
        with self._lock:
            bar = self._bars.get(topic_partition)
            if bar is not None:
                self._progress.advance(bar, num_restored)

    def on_restore_end(self, topic_partition: TP, store_name: str, total_restored: int) -> None:
        with self._lock:
            bar = self._bars.pop(topic_partition, None)
            if bar is not None:
                self._progress.update(bar, completed=total_restored, total=total_restored)
            if not self._bars:
                self._progress.stop()
