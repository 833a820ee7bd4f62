"""``make demo``: the embedded broker, two worker processes per app over generated data, the platform's
Dagster assets over their output, a summary.

Starts the embedded broker, creates the topics, runs the word count (Processor API + stream-time
punctuator) and the orders pipeline (typed records, dedupe, validate, encrypt the card number, address and phone,
split, route lines by category, two joins, hourly windowed count with suppressed finals) in two ``brook worker
run`` processes each. Unless ``BROOK_ORDERS_KEY_K1`` holds one, the encryption key is made for the run. It produces generated lines, users
and items at once, and feeds generated orders (with duplicates, invalid, out-of-order and late ones) in
batches as they would arrive live; shows a progress bar until the workers have committed everything,
stops them with SIGTERM (a clean close), reads the outputs back and checks them against oracles
computed from the generated input (``apps.orders.oracle``); an order intake of its own shows load shedding at 3x its
rate limit and the idle watchdog (``apps.demo_overflow``). Then, through Dagster (``apps.demo_platform``): the word
count's changelog is compacted into a snapshot with Spark, the orders topics and the word counts are
archived into daily Parquet partitions and checked with Great Expectations, the archive's first day of the
orders pipeline is reprocessed in batch on Spark (``reprocessed/orders``) and its outputs compared record for
record with what the workers wrote, and a fresh word count instance restores its store from the snapshot. It
prints both summaries and stops the broker; it exits 1 if any check failed.
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

from apps.demo_overflow import OverflowSummary, run_overflow
from apps.demo_platform import UNORDERED, PlatformSummary, ReprocessedDaySummary, run_platform
from apps.orders import oracle
from apps.orders.pipeline import (
    APPLICATION_ID,
    CATEGORIES,
    CATEGORY_TOPIC_PREFIX,
    CATEGORY_TOPICS,
    GRACE,
    HOURLY_TOPIC,
    ITEMS_TOPIC,
    LATE_LINES_TOPIC,
    LINES_TOPIC,
    ORDERS_TOPIC,
    OUTPUT_TOPICS,
    PROFILES_TOPIC,
    REJECTED_TOPIC,
    USERS_TOPIC,
    WINDOW,
)
from apps.orders.profiles import DATABASE_URL_VARIABLE, stored_profiles
from apps.orders.protection import LINE_FIELDS, REJECTED_FIELDS, ensure_key, load_encryption
from apps.wordcount import INPUT_TOPIC as LINES_IN
from apps.wordcount import OUTPUT_TOPIC as COUNTS_OUT
from apps.wordcount import WORDS_TOPIC
from apps.wordcount.topology import words_of
from streaming.admin import create_topics
from streaming.broker import EmbeddedBroker
from streaming.encryption import FieldEncryption, is_encrypted
from streaming.errors import DecryptionError
from streaming.naming import alerts_topic
from streaming.serdes import Serdes
from streaming.testing import generators
from streaming.testing.generators import GeneratedRecord
from streaming.testing.kafka import committed_offsets, group_lag, produce, produce_paced, read_topic

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / ".brook" / "demo"
PARTITIONS = 4
WORKERS_PER_APP = 2
APPS = {  # application.id -> (topology, config file, input topic)
    "wordcount": ("apps.wordcount:topology", "apps/wordcount/config.yaml", LINES_IN),
    APPLICATION_ID: ("apps.orders:topology", "apps/orders/config.yaml", ORDERS_TOPIC),
}
# Topics each app reads after its input: the demo is done when the app has committed them to their end.
LATER_INPUTS = {"wordcount": [WORDS_TOPIC],
                APPLICATION_ID: [f"{APPLICATION_ID}-lines-by-item-left-repartition",
                                 f"{APPLICATION_ID}-lines-by-region-repartition"]}
ORDERS_PER_BATCH = 500  # ~8 min of event time: the workers read the order partitions within minutes of each other
USERS, ITEMS = 2_000, 200
WINDOW_MS, GRACE_MS = int(WINDOW.total_seconds() * 1000), int(GRACE.total_seconds() * 1000)
DAY_MS = 86_400_000
# The orders start at 16:00 on the archive's start_date (2023-11-14), one a second: 8 of their 8.3 hours fall on that
# day, the day the platform half reprocesses (its run replays up to 03:00 the next day, the orders' disorder bound
# past midnight). With most orders after midnight, that run's outputs would be several times what the day's
# archived orders give, and the reprocessed day's row-count check against them (order_lines_cover_valid_orders)
# would fail.
ORDERS_FROM_MS = generators.ORDERS_START_MS - 6 * WINDOW_MS

console = Console()


def start_worker(app_id: str, index: int, bootstrap: str) -> subprocess.Popen[bytes]:
    target, config, _ = APPS[app_id]
    log = open(WORK / f"{app_id}-worker-{index}.log", "wb")  # noqa: SIM115 - closed with the process
    return subprocess.Popen(
        [sys.executable, "-m", "streaming.cli.main", "worker", "run", target, "--config", str(ROOT / config),
         "--set", f"bootstrap.servers={bootstrap}", "--set", f"state.dir={WORK / f'state-{index}'}"],
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)})


class CommitProgress:
    """A progress bar over the workers' committed input offsets, checking that no worker died."""

    def __init__(self, bootstrap: str, total: int, workers: list[subprocess.Popen[bytes]], progress: Progress) -> None:
        self.bootstrap, self.total, self.workers, self.progress = bootstrap, total, workers, progress
        self.bar = progress.add_task("records", total=total)
        self.ends: dict[str, dict[int, int]] = {}
        self.started = time.monotonic()

    def update(self) -> int:
        done = 0
        for app_id, app_ends in self.ends.items():
            committed = committed_offsets(self.bootstrap, app_id, APPS[app_id][2], PARTITIONS)
            done += sum(min(committed.get(p, 0), end) for p, end in app_ends.items())
        self.progress.update(self.bar, completed=done)
        failed = [w for w in self.workers if w.poll() is not None]
        if failed:
            raise RuntimeError(f"worker pid {failed[0].pid} exited with {failed[0].returncode}; see {WORK}")
        return done

    def wait_until_done(self, timeout: float) -> float:
        """Until every input and every later input (repartition topics) is committed; the seconds since start."""
        while True:
            done = self.update()
            if done >= self.total and all(group_lag(self.bootstrap, app_id, topic, PARTITIONS) == 0
                                          for app_id, topics in LATER_INPUTS.items() for topic in topics):
                return time.monotonic() - self.started
            if time.monotonic() - self.started > timeout:
                raise TimeoutError(f"input not fully committed after {timeout:.0f} s ({done}/{self.total}); see {WORK}")
            time.sleep(0.5)


def stop_workers(workers: list[subprocess.Popen[bytes]]) -> list[int]:
    """SIGTERM each worker and wait for it to exit before the next: members of one group leaving at the
    same instant can leave the embedded broker's group stuck for the next member (docs/broker-limits.md),
    and the platform half starts another word count instance in the same group."""
    codes = []
    for worker in workers:
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
        try:
            codes.append(worker.wait(60))
        except subprocess.TimeoutExpired:
            worker.kill()
            codes.append(worker.wait())
    return codes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=100_000, help="generated lines of text")
    parser.add_argument("--orders", type=int, default=30_000, help="generated orders (one a second of event time)")
    args = parser.parse_args(argv)
    shutil.rmtree(WORK, ignore_errors=True)  # a fresh broker each run: old local state would not match it
    WORK.mkdir(parents=True, exist_ok=True)
    if ensure_key():  # the workers and Spark inherit it
        console.print("made an encryption key for this run in BROOK_ORDERS_KEY_K1 (set it to use your own)")
    # The profile service's table: a file of this run's (a database another run wrote to holds newer versions)
    os.environ[DATABASE_URL_VARIABLE] = f"sqlite:///{WORK / 'profiles.db'}"

    lines = generators.words(args.lines, seed=1, out_of_order=0.05)
    # Users and items exist before the orders: from the start of the orders' first day, the archive's start_date,
    # the only day a reprocessing starts on from empty state; the tables must be in that day's archive for its run.
    catalog_from = ORDERS_FROM_MS // DAY_MS * DAY_MS
    users, items = generators.users(USERS, start_ms=catalog_from), generators.items(ITEMS, start_ms=catalog_from)
    orders = generators.orders(args.orders, seed=1, users=USERS, items=ITEMS, start_ms=ORDERS_FROM_MS, out_of_order=0.05,
                               max_disorder_ms=5 * 60_000, late=0.01, lateness_ms=2 * WINDOW_MS, duplicates=0.02,
                               invalid=0.02)
    with EmbeddedBroker(workdir=WORK / "broker") as broker:
        bootstrap = broker.bootstrap_servers
        console.print(f"[bold]embedded broker[/] on {bootstrap}")
        create_topics(bootstrap, {t: PARTITIONS for t in (LINES_IN, WORDS_TOPIC, COUNTS_OUT, ORDERS_TOPIC, USERS_TOPIC,
                                                          ITEMS_TOPIC, *OUTPUT_TOPICS)})
        loaded = time.monotonic()
        produce(bootstrap, USERS_TOPIC, users, Serdes.String(), Serdes.Json())
        produce(bootstrap, ITEMS_TOPIC, items, Serdes.String(), Serdes.Json())
        line_ends = produce(bootstrap, LINES_IN, lines, Serdes.String(), Serdes.String())
        console.print(f"produced {len(lines):,} lines, {len(users)} users and {len(items)} items in "
                      f"{time.monotonic() - loaded:.1f} s; {len(orders):,} orders follow in batches of "
                      f"{ORDERS_PER_BATCH} as the workers take them")

        workers = [start_worker(app_id, i, bootstrap) for app_id in APPS for i in range(WORKERS_PER_APP)]
        console.print(f"started {len(workers)} worker processes "
                      f"({WORKERS_PER_APP} per app, pids {', '.join(str(w.pid) for w in workers)})")
        try:
            with Progress(TextColumn("[bold]processing"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                          console=console, transient=False) as progress:
                tracker = CommitProgress(bootstrap, len(lines) + len(orders), workers, progress)
                tracker.ends["wordcount"] = line_ends
                tracker.ends[APPLICATION_ID] = produce_paced(
                    bootstrap, ORDERS_TOPIC, orders, Serdes.String(), Serdes.Json(), APPLICATION_ID, PARTITIONS,
                    ORDERS_PER_BATCH, timeout=300, on_batch=lambda _: tracker.update())
                seconds = tracker.wait_until_done(timeout=300)
        finally:
            codes = stop_workers(workers)
        counts = read_topic(bootstrap, COUNTS_OUT, Serdes.String(), Serdes.Long(), PARTITIONS)
        # the repartition topics too: a wrong hourly final is traced through them (order_checks)
        outputs = {topic: read_topic(bootstrap, topic, Serdes.String(), Serdes.Json(), PARTITIONS)
                   for topic in (*OUTPUT_TOPICS, *LATER_INPUTS[APPLICATION_ID])}
        idle_alerts = [r.value for r in read_topic(bootstrap, alerts_topic(APPLICATION_ID), Serdes.String(),
                                                   Serdes.Json(), 1) if r.value["state"] == "idle"]
        streaming_ok = report(lines, (orders, users, items), counts, outputs, seconds, codes, len(idle_alerts))
        console.print("\n[bold]load shedding and the idle watchdog[/] (runtime settings) on an order intake of its own")
        overflow_ok = report_overflow(run_overflow(bootstrap))
        console.print("\n[bold]platform[/]: compaction, archive, quality checks and a reprocessed day through Dagster "
                      f"(DAGSTER_HOME={os.environ.get('DAGSTER_HOME', 'ephemeral')})")
        started = time.monotonic()
        order_days = sorted({day_of(o.timestamp) for o in orders})
        platform = run_platform(bootstrap, WORK, order_days, day_of(time.time() * 1000), expected_word_counts(lines))
    platform_ok = report_platform(platform, time.monotonic() - started)
    return 0 if streaming_ok and overflow_ok and platform_ok else 1


def day_of(timestamp_ms: float) -> str:
    """The UTC day of an epoch-ms timestamp, as an archive partition key."""
    return datetime.fromtimestamp(timestamp_ms / 1000, tz=UTC).strftime("%Y-%m-%d")


def expected_word_counts(lines: list[Any]) -> dict[str, int]:
    return dict(collections.Counter(w for record in lines for w in words_of(record.value)))


def report(lines: list[Any], catalog: tuple[list[GeneratedRecord], ...], counts: list[Any],
           outputs: dict[str, list[Any]], seconds: float, codes: list[int], idle_alerts: int) -> bool:
    orders, users, items = catalog
    expected_counts = expected_word_counts(lines)
    final_counts = {record.key: record.value for record in counts}  # last value per word wins
    hourly = [record.value for record in outputs[HOURLY_TOPIC]]
    order_lines, rejected = outputs[LINES_TOPIC], outputs[REJECTED_TOPIC]
    checks = {"word counts equal the oracle's": final_counts == dict(expected_counts),
              **order_checks(orders, users, items, outputs),
              "workers stopped cleanly (exit 0)": all(code == 0 for code in codes)}
    records_in = len(lines) + len(orders)
    table = Table(title="Brook demo", show_header=True)
    table.add_column("")
    table.add_column("word count", justify="right")
    table.add_column("orders pipeline", justify="right")
    table.add_row("records in", f"{len(lines):,} lines", f"{len(orders):,} orders, {len(users)} users, {len(items)} items")
    table.add_row("records out", f"{len(counts):,} count updates",
                  f"{len(order_lines):,} lines, {len(rejected):,} rejected, "
                  f"{len(outputs[LATE_LINES_TOPIC]):,} late, {len(hourly)} hourly finals")
    table.add_row("lines per category", "",
                  ", ".join(f"{c} {len(outputs[CATEGORY_TOPIC_PREFIX + c]):,}" for c in CATEGORIES))
    table.add_row("user profiles", "", f"{len({r.key for r in outputs[PROFILES_TOPIC]}):,} users, "
                                       f"{len(stored_profiles(os.environ[DATABASE_URL_VARIABLE])):,} rows in the database")
    table.add_row("idle alerts (no order for 30 s)", "", str(idle_alerts))
    table.add_row("workers", str(WORKERS_PER_APP), str(WORKERS_PER_APP))
    console.print(table)
    console.print(f"processed {records_in:,} records in {seconds:.1f} s "
                  f"({records_in / max(seconds, 1e-9):,.0f} records/s, orders fed as they would arrive)")
    top = Table(title="top 10 words", show_header=True)
    top.add_column("word")
    top.add_column("count", justify="right")
    for word, count in sorted(final_counts.items(), key=lambda kv: (-kv[1], kv[0]))[:10]:
        top.add_row(word, f"{count:,}")
    console.print(top)
    console.print(hourly_table(hourly))
    for name, ok in checks.items():
        console.print(f"  {'[green]ok[/]' if ok else '[red]FAILED[/]'}  {name}")
    return all(checks.values())


def order_checks(orders: list[GeneratedRecord], users: list[GeneratedRecord], items: list[GeneratedRecord],
                 outputs: dict[str, list[Any]]) -> dict[str, bool]:
    """The orders pipeline's outputs against the oracle (no worker was killed: every result exactly once)."""
    on_time, late = oracle.split_by_lateness(orders, users, items)
    buyers, lines = oracle.hourly_buyers(on_time, WINDOW_MS), oracle.hourly_lines(on_time, WINDOW_MS)
    hourly = [record.value for record in outputs[HOURLY_TOPIC]]
    finals = {(final["region"], final["window_start"]): final for final in hourly}
    last = max(order.timestamp for order in orders)
    closed = {window for window in buyers if window[1] + WINDOW_MS + GRACE_MS <= last - WINDOW_MS}
    first_copies = [order for order in orders if not order.duplicate]
    valid_lines = sorted((o.value["order_id"], line["item"]) for o in first_copies if o.defect is None
                         for line in o.value["items"])
    rejected = outputs[REJECTED_TOPIC]
    wrong = [f"{w}: {f['users']} users / {f['lines']} lines, expected {len(buyers.get(w, ()))} / {lines.get(w, 0)}"
             for w, f in sorted(finals.items()) if f["users"] != len(buyers.get(w, ())) or f["lines"] != lines.get(w)]
    for problem in [*wrong, *(f"{w}: no final" for w in sorted(closed - set(finals)))][:10]:
        console.print(f"  [red]hourly result[/] {problem}")
    for trace in trace_lines([w for w, f in sorted(finals.items()) if f["lines"] != lines.get(w)], on_time,
                             outputs)[:10]:
        console.print(f"  [red]hourly result[/] {trace}")
    late_out = sorted((r.value["order_id"], r.value["item"], r.timestamp) for r in outputs[LATE_LINES_TOPIC])
    late_expected = sorted((line.order_id, line.item, line.timestamp) for line in late)
    for line in sorted(set(late_out) ^ set(late_expected))[:10]:
        console.print(f"  [red]late line[/] {line}: {'late only in the output' if line in late_out else 'not late'}")
    return {
        "hourly local buyers and lines equal the oracle's, one final per closed window":
            len(finals) == len(hourly) and closed <= set(finals) and not wrong,
        "late lines (after their window closed) in order-lines-late, and only they":
            late_out == late_expected,
        "one line per item of each valid order, duplicates dropped":
            sorted((r.value["order_id"], r.value["item"]) for r in outputs[LINES_TOPIC]) == valid_lines,
        "every invalid order rejected with a reason":
            {r.value["order"]["order_id"] for r in rejected} == {o.value["order_id"] for o in first_copies if o.defect}
            and all(r.value.get("reason") for r in rejected),
        **encryption_checks(first_copies, outputs),
        "user profiles in user-profiles and in the profile service's database equal the oracle's":
            {r.key: r.value for r in outputs[PROFILES_TOPIC]} == oracle.profiles(orders, items)
            == stored_profiles(os.environ[DATABASE_URL_VARIABLE]),
        "each line in its item category's topic (order-lines-<category>), and only there":
            sorted((r.value["order_id"], r.value["item"]) for t in CATEGORY_TOPICS for r in outputs[t]
                   if t == CATEGORY_TOPIC_PREFIX + r.value["category"]) == valid_lines
            and sum(len(outputs[t]) for t in CATEGORY_TOPICS) == len(valid_lines),
    }


def encryption_checks(first_copies: list[GeneratedRecord], outputs: dict[str, list[Any]]) -> dict[str, bool]:
    """The card number, address and phone are encrypted in every output: readable with the key (equal to what was
    sent), not without it (another key fails to authenticate), the card also masked for people."""
    sent = {o.value["order_id"]: o.value for o in first_copies}
    encryption = load_encryption()
    rejected = outputs[REJECTED_TOPIC]
    lines = [r.value for topic in (LINES_TOPIC, LATE_LINES_TOPIC, *CATEGORY_TOPICS) for r in outputs[topic]]
    in_clear = [v for v in lines if not (is_encrypted(v["address"]) and is_encrypted(v["phone"]))] + \
        [r.value for r in rejected if not all(is_encrypted(r.value["order"][f]) for f in ("card_number", "address",
                                                                                          "phone"))]
    lines_read = all([line["address"], line["phone"]] == [sent[line["order_id"]]["address"],
                                                          sent[line["order_id"]]["phone"]]
                     for line in (encryption.decrypt_fields(v, LINE_FIELDS) for v in lines))
    fields = ("card_number", "address", "phone")
    rejected_read = all([order[f] for f in fields] == [sent[order["order_id"]][f] for f in fields]
                        and order["card_masked"] == "*" * 12 + sent[order["order_id"]]["card_number"][-4:]
                        for order in (encryption.decrypt_fields(r.value, REJECTED_FIELDS)["order"] for r in rejected))
    stranger = FieldEncryption.from_keys({"k1": FieldEncryption.generate_key()})
    try:
        stranger.decrypt_fields(lines[0], LINE_FIELDS)
        unreadable = False
    except DecryptionError:
        unreadable = True
    return {"card numbers, addresses and phones encrypted in every output, each decrypting with the key to what was "
            "sent, and not with another key": not in_clear and lines_read and rejected_read and unreadable}


def hourly_table(hourly: list[dict[str, Any]]) -> Table:
    """Distinct local buyers (and their lines) per hour and region."""
    regions = sorted({final["region"] for final in hourly})
    table = Table(title="local buyers per hour (users who bought an item made in their region: users / lines)")
    table.add_column("hour (UTC)")
    for region in regions:
        table.add_column(region, justify="right")
    by_hour: dict[int, dict[str, dict[str, Any]]] = {}
    for final in hourly:
        by_hour.setdefault(final["window_start"], {})[final["region"]] = final
    for start in sorted(by_hour):
        cells = [by_hour[start].get(region) for region in regions]
        table.add_row(datetime.fromtimestamp(start / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M"),
                      *(f"{c['users']} / {c['lines']}" if c else "-" for c in cells))
    return table


def report_overflow(summary: OverflowSummary) -> bool:
    """The load-shedding and idle-watchdog step's figures and checks."""
    if summary.error is not None:
        console.print(f"  [red]FAILED[/]  load shedding and idle watchdog step: {summary.error}")
        return False
    console.print(f"  {summary.sent:,} orders at 3x the intake's limit: {summary.processed:,} processed, "
                  f"{summary.shed:,} shed (brook_shed_records_total), {summary.diverted:,} in the shed topic; "
                  f"idle alert after {summary.idle_ms / 1000 if summary.idle_ms else 0:.1f} s, "
                  f"{'resumed' if summary.resumed else 'not resumed'}")
    for name, ok in summary.checks.items():
        console.print(f"  {'[green]ok[/]' if ok else '[red]FAILED[/]'}  {name}")
    return all(summary.checks.values())


def trace_lines(windows: list[tuple[str, int]], on_time: list[oracle.LocalLine], outputs: dict[str, list[Any]]
                ) -> list[str]:
    """Where the oracle's lines of each window in ``windows`` (hourly finals with a wrong line count) went: how many
    the by-item and the by-region repartition topics carried (lost before the aggregate, or in it), naming a few
    missing ones; the outputs must hold both topics (read with the outputs)."""
    carried = {topic: {(r.value["order_id"], r.value["item"]) for r in outputs.get(topic, ())}
               for topic in LATER_INPUTS[APPLICATION_ID]}
    traces = []
    for region, start in windows:
        expected = {(line.order_id, line.item) for line in on_time
                    if line.region == region and oracle.window_of(line.timestamp, WINDOW_MS) == start}
        for topic, ids in carried.items():
            missing = sorted(expected - ids)
            traces.append(f"{(region, start)}: {len(expected) - len(missing)} of its {len(expected)} lines in {topic}"
                          + (f", missing {missing[:3]}" if missing else ""))
    return traces


def report_platform(platform: PlatformSummary, seconds: float) -> bool:
    steps = Table(title="Dagster materializations", show_header=True)
    for column in ("asset", "partition", "result", "run s"):
        steps.add_column(column, justify="right" if column == "run s" else "left")
    for asset, partition, result, run_seconds in platform.steps:
        steps.add_row(asset, partition, result, f"{run_seconds:.1f}")
    console.print(steps)
    checks = Table(title="Great Expectations checks", show_header=True)
    for column in ("on", "check", "day", "severity", "result", "failing"):
        checks.add_column(column)
    for asset, name, day, severity, passed, failing in platform.checks:  # on: archive/<topic> or reprocessed/<app>
        # severity in lower case, as the result: an upper-case WARN reads as a log line's level (it is a check's)
        checks.add_row(asset.split("/")[0], name, day, severity.lower(), "[green]passed[/]" if passed else "[red]failed[/]",
                       failing)
    console.print(checks)
    reprocessed = platform.reprocessed
    if reprocessed is not None:
        report_reprocessed(reprocessed)
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
        "every ERROR-severity check passed": all(passed for _, _, _, severity, passed, _ in platform.checks
                                                 if severity == "ERROR") and bool(platform.checks),
        "the reprocessed day equals the live workers' output, record for record":
            reprocessed is not None and reprocessed.equal,
        "the snapshot restore equals the oracle": restore.get("equal", False) and restore.get("snapshot_keys", 0) > 0,
    }
    for name, ok in results.items():
        console.print(f"  {'[green]ok[/]' if ok else '[red]FAILED[/]'}  {name}")
    return all(results.values())


def report_reprocessed(day: ReprocessedDaySummary) -> None:
    """The reprocessed day: what it read and wrote, and each output topic against what the live workers wrote."""
    if day.error:
        console.print(f"[red]reprocessed/{day.app} {day.day}[/]: {day.error}")
        return
    console.print(f"[bold]reprocessed/{day.app}[/] day {day.day} (from {day.started_from}): "
                  f"{day.records_in:,} records in, {sum(day.records_out.values()):,} out in {day.seconds:.1f} s")
    table = Table(title=f"reprocessed {day.day} against the live workers' output (records)", show_header=True)
    table.add_column("output topic", no_wrap=True)
    for column in ("batch", "live", "keys"):
        table.add_column(column, justify="right")
    table.add_column("order in key", no_wrap=True)
    table.add_column("result", no_wrap=True)
    for comparison in day.comparisons:
        table.add_row(comparison.topic, f"{comparison.batch_records:,}", f"{comparison.live_records:,}",
                      f"{comparison.keys:,}", "compared" if comparison.ordered else "any (below)",
                      "[green]equal[/]" if comparison.equal else f"[red]{comparison.different_keys} keys differ[/]")
    console.print(table)
    leftover = sum(comparison.leftover for comparison in day.comparisons)
    console.print(f"  equal: per key, the batch's records are the live workers' first ones (key and value bytes, "
                  f"timestamp, order within a key), and every live record before {day.complete_before} UTC is among "
                  f"them; the live records after the batch's are the next day's run's ({leftover:,} here). "
                  f"Records of one key with the same timestamp "
                  f"(the lines of one order, from two tasks) and null keys (rejected orders without a user: a random "
                  f"partition live) are compared without order.")
    for topic, why in UNORDERED.items():
        console.print(f"  {topic}: same records per key, in any order: {why}.")
    for comparison in day.comparisons:
        for difference in comparison.differences:
            console.print(f"  [red]{comparison.topic}[/]: {difference}")


if __name__ == "__main__":
    sys.exit(main())
