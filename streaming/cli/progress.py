"""A state restore listener that shows restore progress (records done / total): one line per snapshot
loaded, then on a terminal a rich bar per changelog tail, elsewhere (a log file, a pipe) a line every
few seconds with the totals."""

from __future__ import annotations

import threading
import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

TP = tuple[str, int]
LINE_EVERY_S = 5.0  # without a terminal: a progress line this often


class RestoreProgressBar:
    """One bar per changelog partition being restored; the display ends when the last restore does.
    When the console is not a terminal, a progress line every :data:`LINE_EVERY_S` seconds instead."""

    def __init__(self, console: Console | None = None) -> None:
        self._console = console or Console(stderr=True)
        self._bars_shown = self._console.is_terminal
        self._progress = Progress(TextColumn("restoring [bold]{task.description}"), BarColumn(),
                                  MofNCompleteColumn(), TimeElapsedColumn(), console=self._console, transient=False)
        self._bars: dict[TP, TaskID] = {}
        self._totals: dict[TP, list[int]] = {}  # without bars: partition -> [done, total]
        self._last_line = 0.0
        self._lock = threading.Lock()

    def on_snapshot_restored(self, topic_partition: TP, store_name: str, snapshot_id: str, next_offset: int,
                             num_restored: int) -> None:
        self._console.print(f"restored [bold]{store_name} [{topic_partition[1]}][/bold] from snapshot {snapshot_id}: "
                            f"{num_restored:,} keys (changelog offsets < {next_offset:,}); then the changelog tail")

    def on_restore_start(self, topic_partition: TP, store_name: str, start_offset: int, end_offset: int) -> None:
        total = max(end_offset - start_offset, 0)
        with self._lock:
            if not self._bars_shown:
                self._totals[topic_partition] = [0, total]
                return
            if not self._bars:
                self._progress.start()
            self._bars[topic_partition] = self._progress.add_task(f"{store_name} [{topic_partition[1]}]", total=total)

    def on_batch_restored(self, topic_partition: TP, store_name: str, batch_end_offset: int,
                          num_restored: int) -> None:
        with self._lock:
            if not self._bars_shown:
                if topic_partition in self._totals:
                    self._totals[topic_partition][0] += num_restored
                self._maybe_line()
                return
            bar = self._bars.get(topic_partition)
            if bar is not None:
                self._progress.advance(bar, num_restored)

    def on_restore_end(self, topic_partition: TP, store_name: str, total_restored: int) -> None:
        with self._lock:
            if not self._bars_shown:
                self._totals.pop(topic_partition, None)
                self._console.print(f"restored {store_name} [{topic_partition[1]}]: {total_restored:,} records")
                return
            bar = self._bars.pop(topic_partition, None)
            if bar is not None:
                self._progress.update(bar, completed=total_restored, total=total_restored)
            if not self._bars:
                self._progress.stop()

    def _maybe_line(self) -> None:
        now = time.monotonic()
        if now - self._last_line < LINE_EVERY_S:
            return
        self._last_line = now
        done = sum(d for d, _ in self._totals.values())
        total = sum(t for _, t in self._totals.values())
        self._console.print(f"restoring {len(self._totals)} changelog partitions: {done:,} of {total:,} records")
