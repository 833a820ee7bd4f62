"""``make demo``: the embedded broker, two worker processes per app over generated data, the platform's
Dagster assets over their output, a summary.

Starts the embedded broker, creates the topics, produces generated lines and orders, runs the word
count (Processor API + wall-clock punctuator) and the orders cleaning pipeline (stateless DSL) in two
``brook worker run`` processes each, shows a progress bar until the workers have committed all
input, stops them with SIGTERM (a clean close), reads the outputs back and checks them against an
oracle computed from the generated input. Then, through Dagster (``apps.demo_platform``): the word
count's changelog is compacted into a snapshot with Spark, the orders topics and the word counts are
archived into daily Parquet partitions and checked with Great Expectations, and a fresh word count
instance restores its store from the snapshot. It prints both summaries and stops the broker.
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from apps.demo_platform import PlatformSummary, run_platform
from apps.orders import LINES_TOPIC, ORDERS_TOPIC, REJECTED_TOPIC
from apps.orders.validation import item_lines, rejection_reason
from apps.wordcount import INPUT_TOPIC as LINES_IN
from apps.wordcount import OUTPUT_TOPIC as COUNTS_OUT
from apps.wordcount import WORDS_TOPIC
from apps.wordcount.topology import words_of
from streaming.admin import create_topics
from streaming.broker import EmbeddedBroker
from streaming.serdes import Serdes
from streaming.testing import generators
from streaming.testing.kafka import committed_offsets, group_lag, produce, read_topic

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / ".brook" / "demo"
PARTITIONS = 4
WORKERS_PER_APP = 2
APPS = {  # application.id -> (topology, config file, input topic)
    "wordcount": ("apps.wordcount:topology", "apps/wordcount/config.yaml", LINES_IN),
    "orders-cleaning": ("apps.orders:cleaning_topology", "apps/orders/config.yaml", ORDERS_TOPIC),
}

console = Console()


def start_worker(app_id: str, index: int, bootstrap: str) -> subprocess.Popen[bytes]:
    target, config, _ = APPS[app_id]
    log = open(WORK / f"{app_id}-worker-{index}.log", "wb")  # noqa: SIM115 - closed with the process
    return subprocess.Popen(
        [sys.executable, "-m", "streaming.cli.main", "worker", "run", target, "--config", str(ROOT / config),
         "--set", f"bootstrap.servers={bootstrap}", "--set", f"state.dir={WORK / f'state-{index}'}"],
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)})


def wait_until_committed(bootstrap: str, ends: dict[str, dict[int, int]], workers: list[subprocess.Popen[bytes]],
                         timeout: float) -> float:
    """Progress bar over committed input offsets; returns the seconds it took."""
    total = sum(sum(e.values()) for e in ends.values())
    started = time.monotonic()
    with Progress(TextColumn("[bold]processing"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=False) as progress:
        bar = progress.add_task("records", total=total)
        while True:
            done = 0
            for app_id, app_ends in ends.items():
                committed = committed_offsets(bootstrap, app_id, APPS[app_id][2], PARTITIONS)
                done += sum(min(committed.get(p, 0), end) for p, end in app_ends.items())
            progress.update(bar, completed=done)
            if done >= total and group_lag(bootstrap, "wordcount", WORDS_TOPIC, PARTITIONS) == 0:
                return time.monotonic() - started  # inputs and the words topic fully committed
            failed = [w for w in workers if w.poll() is not None]
            if failed:
                raise RuntimeError(f"worker pid {failed[0].pid} exited with {failed[0].returncode}; see {WORK}")
            if time.monotonic() - started > timeout:
                raise TimeoutError(f"input not fully committed after {timeout:.0f} s ({done}/{total}); see {WORK}")
            time.sleep(0.5)


def stop_workers(workers: list[subprocess.Popen[bytes]]) -> list[int]:
    for worker in workers:
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
    codes = []
    for worker in workers:
        try:
            codes.append(worker.wait(60))
        except subprocess.TimeoutExpired:
            worker.kill()
            codes.append(worker.wait())
    return codes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=100_000, help="generated lines of text")
    parser.add_argument("--orders", type=int, default=50_000, help="generated orders")
    args = parser.parse_args(argv)
    shutil.rmtree(WORK, ignore_errors=True)  # a fresh broker each run: old local state would not match it
    WORK.mkdir(parents=True, exist_ok=True)

    lines = generators.words(args.lines, seed=1, out_of_order=0.05)
    orders = generators.orders(args.orders, seed=1, out_of_order=0.05, invalid=0.02)
    with EmbeddedBroker(workdir=WORK / "broker") as broker:
        bootstrap = broker.bootstrap_servers
        console.print(f"[bold]embedded broker[/] on {bootstrap}")
        create_topics(bootstrap, {t: PARTITIONS for t in (LINES_IN, WORDS_TOPIC, COUNTS_OUT, ORDERS_TOPIC, LINES_TOPIC,
                                                          REJECTED_TOPIC)})
        loaded = time.monotonic()
        ends = {"wordcount": produce(bootstrap, LINES_IN, lines, Serdes.String(), Serdes.String()),
                "orders-cleaning": produce(bootstrap, ORDERS_TOPIC, orders, Serdes.String(), Serdes.Json())}
        console.print(f"produced {len(lines):,} lines and {len(orders):,} orders in {time.monotonic() - loaded:.1f} s")

        workers = [start_worker(app_id, i, bootstrap) for app_id in APPS for i in range(WORKERS_PER_APP)]
        console.print(f"started {len(workers)} worker processes "
                      f"({WORKERS_PER_APP} per app, pids {', '.join(str(w.pid) for w in workers)})")
        try:
            seconds = wait_until_committed(bootstrap, ends, workers, timeout=300)
        finally:
            codes = stop_workers(workers)
        counts = read_topic(bootstrap, COUNTS_OUT, Serdes.String(), Serdes.Long(), PARTITIONS)
        order_lines = read_topic(bootstrap, LINES_TOPIC, Serdes.String(), Serdes.Json(), PARTITIONS)
        rejected = read_topic(bootstrap, REJECTED_TOPIC, Serdes.String(), Serdes.Json(), PARTITIONS)
        streaming_ok = report(lines, orders, counts, order_lines, rejected, seconds, codes)
        console.print("\n[bold]platform[/]: compaction, archive and quality checks through Dagster "
                      f"(DAGSTER_HOME={os.environ.get('DAGSTER_HOME', 'ephemeral')})")
        started = time.monotonic()
        order_days = sorted({day_of(o.timestamp) for o in orders})
        platform = run_platform(bootstrap, WORK, order_days, day_of(time.time() * 1000), expected_word_counts(lines))
    platform_ok = report_platform(platform, time.monotonic() - started)
    return 0 if streaming_ok and platform_ok else 1


def day_of(timestamp_ms: float) -> str:
    """The UTC day of an epoch-ms timestamp, as an archive partition key."""
    return datetime.fromtimestamp(timestamp_ms / 1000, tz=UTC).strftime("%Y-%m-%d")


def expected_word_counts(lines: list[Any]) -> dict[str, int]:
    return dict(collections.Counter(w for record in lines for w in words_of(record.value)))


def report(lines: list[Any], orders: list[Any], counts: list[Any], order_lines: list[Any], rejected: list[Any],
           seconds: float, codes: list[int]) -> bool:
    expected_counts = expected_word_counts(lines)
    final_counts = {record.key: record.value for record in counts}  # last value per word wins
    valid = [o for o in orders if rejection_reason(o.key, o.value) is None]
    expected_lines = sum(len(item_lines(o.value)) for o in valid)
    masked = all(set(r.value.get("card_number", "")) <= set("*0123456789") for r in order_lines)
    checks = {
        "word counts equal the oracle's": final_counts == dict(expected_counts),
        "one output line per valid order line": len(order_lines) == expected_lines,
        "every invalid order rejected with a reason": len(rejected) == len(orders) - len(valid)
        and all(r.value.get("reason") for r in rejected),
        "no card number in clear": masked and all("card_number" not in r.value for r in order_lines),
        "workers stopped cleanly (exit 0)": all(code == 0 for code in codes),
    }
    records_in = len(lines) + len(orders)
    table = Table(title="Brook demo", show_header=True)
    table.add_column("")
    table.add_column("word count", justify="right")
    table.add_column("orders cleaning", justify="right")
    table.add_row("records in", f"{len(lines):,}", f"{len(orders):,}")
    table.add_row("records out", f"{len(counts):,} count updates",
                  f"{len(order_lines):,} lines + {len(rejected):,} rejected")
    table.add_row("workers", str(WORKERS_PER_APP), str(WORKERS_PER_APP))
    console.print(table)
    console.print(f"processed {records_in:,} records in {seconds:.1f} s "
                  f"({records_in / max(seconds, 1e-9):,.0f} records/s, including group joins)")
    top = Table(title="top 10 words", show_header=True)
    top.add_column("word")
    top.add_column("count", justify="right")
    for word, count in sorted(final_counts.items(), key=lambda kv: (-kv[1], kv[0]))[:10]:
        top.add_row(word, f"{count:,}")
    console.print(top)
    for name, ok in checks.items():
        console.print(f"  {'[green]ok[/]' if ok else '[red]FAILED[/]'}  {name}")
    return all(checks.values())


def report_platform(platform: PlatformSummary, seconds: float) -> bool:
    steps = Table(title="Dagster materializations", show_header=True)
    for column in ("asset", "partition", "result", "run s"):
        steps.add_column(column, justify="right" if column == "run s" else "left")
    for asset, partition, result, run_seconds in platform.steps:
        steps.add_row(asset, partition, result, f"{run_seconds:.1f}")
    console.print(steps)
    checks = Table(title="Great Expectations checks", show_header=True)
    for column in ("check", "day", "severity", "result", "failing"):
        checks.add_column(column)
    for name, day, severity, passed, failing in platform.checks:
        checks.add_row(name, day, severity, "[green]passed[/]" if passed else "[red]failed[/]", failing)
    console.print(checks)
    restore = platform.restore
    if "error" in restore:
        console.print(f"[red]restore from the snapshot failed[/]: {restore['error']}")
    else:
        console.print(f"a fresh word count instance restored {restore['snapshot_keys']:,} keys from the snapshot "
                      f"and {restore['tail_records']:,} changelog records after it; RUNNING in "
                      f"{restore['seconds']:.1f} s (incl. the group join)")
    for failure in platform.failures:
        console.print(f"[red]failed[/]: {failure}")
    console.print(f"platform steps took {seconds:.1f} s")
    results = {
        "compaction, archive and checks materialized": not platform.failures and bool(platform.steps),
        "every ERROR-severity check passed": all(passed for _, _, severity, passed, _ in platform.checks
                                                 if severity == "ERROR") and bool(platform.checks),
        "the snapshot restore equals the oracle": restore.get("equal", False) and restore.get("snapshot_keys", 0) > 0,
    }
    for name, ok in results.items():
        console.print(f"  {'[green]ok[/]' if ok else '[red]FAILED[/]'}  {name}")
    return all(results.values())


if __name__ == "__main__":
    sys.exit(main())
