"""The restore progress of `brook worker run`: bars on a terminal, a line every few seconds elsewhere."""

from __future__ import annotations

import io

from rich.console import Console

from streaming.cli.progress import RestoreProgressBar


def test_without_a_terminal_restore_progress_is_a_few_lines_not_a_redraw_per_bar() -> None:
    out = io.StringIO()
    progress = RestoreProgressBar(Console(file=out, force_terminal=False, width=120))
    partitions = [("app-s-changelog", p) for p in range(10)]
    for tp in partitions:
        progress.on_restore_start(tp, "s", 0, 1_000)
    for _ in range(10):
        for tp in partitions:
            progress.on_batch_restored(tp, "s", 0, 100)
    for tp in partitions:
        progress.on_restore_end(tp, "s", 1_000)
    lines = out.getvalue().splitlines()
    assert lines[0] == "restoring 10 changelog partitions: 100 of 10,000 records"  # the first batch, then every 5 s
    assert lines[1:] == [f"restored s [{p}]: 1,000 records" for p in range(10)]
