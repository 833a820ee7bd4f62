"""Shared helpers for Brook's benchmarks.

Everything here talks to the broker through confluent-kafka only, so the helpers work whether or
not the Brook runtime imports. Brook's own modules (``streaming.broker``, ``streaming.admin``) are
imported inside functions, so ``bench/`` can be imported before they exist.

Broker facts that shaped these helpers (embedded Tansu broker, see docs/broker-limits.md and bench/README.md):

* ListOffsets(latest) -- and so ``Consumer.get_watermark_offsets(..., cached=False)``, which sends
  ListOffsets -- returns the last batch's *base* offset + 1, not the end offset. It is only a lower
  bound. The high watermark carried by Fetch responses (partition EOF, ``cached=True``) is right.
  :class:`EndOffsetWatcher` combines the two: it uses the cheap lower bound to skip ahead and reads
  the tail to the real end.
* Fetch answers are ~4.5 MB per partition, so ``fetch.queue.backoff.ms`` must be low.
* Group joins take ~3 s with the short session/heartbeat timeouts below (~20 s with the defaults).
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import queue
import resource
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"

# --------------------------------------------------------------------------------------------------
# Client settings shared by every side of a benchmark (the hand-written ceiling and Brook).
# --------------------------------------------------------------------------------------------------

#: Consumer settings used by both the ceiling and Brook (Brook gets them as ``consumer.*``).
CONSUMER_SETTINGS: dict[str, Any] = {
    # The embedded broker answers a fetch with ~4.5 MB per partition; with librdkafka's default
    # (1000 ms) a partition whose fetch queue is over the threshold waits a full second before the
    # next fetch, which stalls throughput. 10 ms keeps every partition flowing.
    "fetch.queue.backoff.ms": 10,
    # Brook's own default (the embedded broker holds a fetch for the whole wait): set here so both sides fetch alike.
    "fetch.wait.max.ms": 50,
    # Group join in ~3 s on the embedded broker instead of ~20 s.
    "session.timeout.ms": 6000,
    "heartbeat.interval.ms": 500,
    "auto.offset.reset": "earliest",
    "enable.auto.commit": False,
}

#: Keys of CONSUMER_SETTINGS the stream runtime owns itself (not passed to Brook as ``consumer.*``).
RUNTIME_MANAGED_CONSUMER_KEYS = frozenset({"enable.auto.commit"})

#: Producer settings used by both the ceiling and Brook (Brook gets them as ``producer.*``).
PRODUCER_SETTINGS: dict[str, Any] = {
    "linger.ms": 5,
    "partitioner": "murmur2_random",  # Kafka's (Java client's) default partitioner
    "compression.type": "none",
    # Brook's producer default (and the Java producer's since Kafka 3.0); librdkafka's is false.
    # Set here so the ceiling pays for it too (~10% of the ceiling on the embedded broker).
    "enable.idempotence": True,
}

#: Commit interval of both sides (Kafka Streams' ``commit.interval.ms``; the ceiling commits on it).
COMMIT_INTERVAL_S = 5.0


def parse_overrides(items: Iterable[str] | None) -> dict[str, str]:
    """Parse ``KEY=VALUE`` command-line overrides of client settings."""
    out: dict[str, str] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"bad setting {item!r}: expected KEY=VALUE")
        out[key.strip()] = value.strip()
    return out


def brook_config_strings(settings: dict[str, Any]) -> dict[str, str]:
    """Stringify settings for Brook's ``consumer.*`` / ``producer.*`` pass-through keys."""
    out = {}
    for key, value in settings.items():
        if isinstance(value, bool):
            value = "true" if value else "false"
        out[key] = str(value)
    return out


# --------------------------------------------------------------------------------------------------
# Broker and topics
# --------------------------------------------------------------------------------------------------


@dataclass
class BrokerHandle:
    bootstrap_servers: str
    pid: int | None = None  # known for the embedded broker; None for an external one
    embedded: bool = False

    def cpu_seconds(self) -> float | None:
        """CPU time the broker process has used so far (Linux /proc), or None if unknown."""
        if self.pid is None:
            return None
        try:
            fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            return None


@contextlib.contextmanager
def broker(bootstrap_servers: str | None = None, workdir: str | None = None) -> Iterator[BrokerHandle]:
    """Yield a :class:`BrokerHandle`: ``bootstrap_servers`` if given (an already running broker or
    cluster, left alone), else a fresh embedded broker (``streaming.broker.EmbeddedBroker``) that is
    always stopped on the way out."""
    if bootstrap_servers:
        yield BrokerHandle(bootstrap_servers)
        return
    try:
        from streaming.broker import EmbeddedBroker
    except ImportError as exc:
        raise SystemExit(
            f"cannot start the embedded broker: streaming.broker is not importable ({exc}).\n"
            "Pass --bootstrap HOST:PORT to run against a broker that is already running."
        ) from exc
    with contextlib.ExitStack() as stack:
        if workdir is None:
            workdir = stack.enter_context(tempfile.TemporaryDirectory(prefix="brook-bench-broker-"))
        b = EmbeddedBroker(workdir=workdir)
        b.start()
        try:
            yield BrokerHandle(b.bootstrap_servers, getattr(b, "pid", None), embedded=True)
        finally:
            b.stop()


def create_topics(bootstrap_servers: str, topics: dict[str, int], timeout: float = 30.0) -> None:
    """Create topics (name -> partitions) through ``streaming.admin`` if it is there, else through
    confluent-kafka's AdminClient; then wait until metadata shows every partition."""
    try:
        from streaming.admin import create_topics as brook_create_topics
    except ImportError:
        brook_create_topics = None
    if brook_create_topics is not None:
        brook_create_topics(bootstrap_servers, topics)
    else:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": bootstrap_servers})
        futures = admin.create_topics(
            [NewTopic(name, num_partitions=n, replication_factor=1) for name, n in topics.items()],
            operation_timeout=timeout,
        )
        for future in futures.values():
            future.result(timeout)
    wait_for_topics(bootstrap_servers, topics, timeout)


def wait_for_topics(bootstrap_servers: str, topics: dict[str, int], timeout: float = 30.0) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
    deadline = time.monotonic() + timeout
    while True:
        md = admin.list_topics(timeout=5)
        missing = [
            name
            for name, n in topics.items()
            if name not in md.topics
            or md.topics[name].error is not None
            or len(md.topics[name].partitions) < n
        ]
        if not missing:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"topics not visible in metadata after {timeout:.0f}s: {missing}")
        time.sleep(0.2)


def run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:6]


# --------------------------------------------------------------------------------------------------
# Data: order records whose content is a pure function of the order id, so outputs can be verified
# record by record without keeping the input in memory.
# --------------------------------------------------------------------------------------------------

NUM_KEYS = 10_000
BASE_TS_MS = 1_700_000_000_000
REGIONS = ("eu", "us", "ap", "sa")


def _mix(n: int) -> int:
    return (n * 2654435761 + 0x9E3779B9) & 0xFFFFFFFF


def key_of(n: int) -> str:
    return f"k{(_mix(n) >> 7) % NUM_KEYS:05d}"


def value_of(n: int) -> dict[str, Any]:
    h = _mix(n)
    return {
        "order_id": n,
        "user": f"u{(h >> 3) % 10_000:04d}",
        "amount": (h % 6660) / 100,  # 0.00 .. 66.59: ~85% > 10, ~25% > 50
        "region": REGIONS[(h >> 17) & 3],
        "ts": BASE_TS_MS + n,
    }


def passes_filter(value: dict[str, Any]) -> bool:
    """The benchmark's filter (both sides use exactly this predicate)."""
    return value["amount"] > 10


def map_value(value: dict[str, Any]) -> dict[str, Any]:
    """The benchmark's map_values (both sides use exactly this function)."""
    return {**value, "big": value["amount"] > 50}


@dataclass
class LoadResult:
    records: int
    passing: int
    value_bytes: int
    seconds: float
    end_offsets: dict[int, int]

    @property
    def avg_value_bytes(self) -> float:
        return self.value_bytes / max(self.records, 1)


def produce_waiting(producer: Any, n: int, topic: str, **record: Any) -> None:
    """``producer.produce(topic, **record)`` for a loader (not timed): a full queue is waited out, and delivery
    reports are served at every 10,000th record ``n``."""
    while True:
        try:
            producer.produce(topic, **record)
            break
        except BufferError:
            producer.poll(0.05)
    if n % 10_000 == 0:
        producer.poll(0)


def load_orders(
    bootstrap_servers: str, topic: str, records: int, producer_settings: dict[str, Any]
) -> LoadResult:
    """Produce ``records`` orders (ids 0..records-1) to ``topic``; return counts and the per-partition
    end offsets taken from delivery reports (exact, unlike ListOffsets on the embedded broker)."""
    import orjson
    from confluent_kafka import Producer

    ends: dict[int, int] = {}
    errors: list[str] = []

    def on_delivery(err, msg):
        if err is not None:
            errors.append(str(err))
        else:
            p = msg.partition()
            o = msg.offset() + 1
            if o > ends.get(p, 0):
                ends[p] = o

    conf = {"bootstrap.servers": bootstrap_servers, **producer_settings, "on_delivery": on_delivery}
    # Loading is not timed against anything; bigger batches make it quicker.
    conf.setdefault("queue.buffering.max.messages", 500_000)
    producer = Producer(conf)
    passing = 0
    nbytes = 0
    t0 = time.monotonic()
    dumps = orjson.dumps
    for n in range(records):
        v = value_of(n)
        if passes_filter(v):
            passing += 1
        data = dumps(v)
        nbytes += len(data)
        produce_waiting(producer, n, topic, key=key_of(n).encode(), value=data, timestamp=v["ts"])
    remaining = producer.flush(120)
    seconds = time.monotonic() - t0
    if remaining:
        raise RuntimeError(f"loading {topic}: {remaining} records not delivered after 120 s")
    if errors:
        raise RuntimeError(f"loading {topic}: {len(errors)} delivery errors, first: {errors[0]}")
    if sum(ends.values()) != records:
        raise RuntimeError(f"loading {topic}: end offsets {ends} do not sum to {records} (topic not fresh?)")
    return LoadResult(records, passing, nbytes, seconds, ends)


# --------------------------------------------------------------------------------------------------
# Watching and verifying a run from the outside
# --------------------------------------------------------------------------------------------------


class EndOffsetWatcher:
    """Tracks the true end offsets (high watermarks) of a topic while it is being written.

    ListOffsets(latest) on the embedded broker returns the last batch's base offset + 1 -- a lower
    bound that may be short by up to a whole producer batch. So: seek a plain (group-less) consumer
    to that lower bound (never backwards) and read the tail to partition EOF; the EOF offset comes
    from the Fetch response's high watermark, which is right. Only the last batch or so of each
    partition is transferred per refresh, so watching costs little CPU next to the run measured.
    """

    def __init__(
        self, bootstrap_servers: str, topic: str, partitions: int, consumer_settings: dict[str, Any]
    ) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        self._TP = TopicPartition
        self.topic = topic
        self.partitions = list(range(partitions))
        conf = {
            "bootstrap.servers": bootstrap_servers,
            "group.id": f"bench-watcher-{uuid.uuid4().hex[:8]}",  # never joins; assign() only
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            "fetch.queue.backoff.ms": consumer_settings.get("fetch.queue.backoff.ms", 10),
            "fetch.wait.max.ms": 50,
        }
        self.consumer = Consumer(conf)
        self.consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in self.partitions])
        self.ends = {p: 0 for p in self.partitions}  # proven end offsets (records exist below them)
        self.position = {p: 0 for p in self.partitions}  # where the consumer reads next

    def _skip_ahead(self) -> None:
        for p in self.partitions:
            try:
                tp = self._TP(self.topic, p)
                _, lower = self.consumer.get_watermark_offsets(tp, timeout=5, cached=False)
            except Exception:
                continue
            # lower = last batch base + 1 -> (lower - 1) is an offset that exists; seeking there
            # costs one batch transfer and yields the real end via partition EOF.
            if lower - 1 > self.position[p]:
                try:
                    self.consumer.seek(self._TP(self.topic, p, lower - 1))
                except Exception:
                    continue  # not fetching yet: just read from where we are
                self.position[p] = lower - 1
                if lower > self.ends[p]:
                    self.ends[p] = lower

    def _drain(self, timeout: float) -> None:
        from confluent_kafka import KafkaError

        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            msgs = self.consumer.consume(num_messages=10_000, timeout=max(left, 0))
            for m in msgs:
                err = m.error()
                p = m.partition()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        self.ends[p] = max(self.ends[p], m.offset())
                        self.position[p] = max(self.position[p], m.offset())
                    continue
                off = m.offset() + 1
                self.ends[p] = max(self.ends[p], off)
                self.position[p] = max(self.position[p], off)
            if not msgs or time.monotonic() >= deadline:
                return

    def refresh(self, drain_timeout: float = 0.05) -> int:
        """Update and return the sum of known end offsets (= records in the topic)."""
        self._skip_ahead()
        self._drain(drain_timeout)
        return self.total

    @property
    def total(self) -> int:
        return sum(self.ends.values())

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.consumer.close()


# --------------------------------------------------------------------------------------------------
# Process resources and reporting
# --------------------------------------------------------------------------------------------------


def peak_rss_mb() -> float:
    """Peak resident set size of this process: ``VmHWM`` on Linux, else ru_maxrss (KiB on Linux, bytes on
    macOS). Not ru_maxrss on Linux: it is carried across ``execve``, so a spawned child (every benchmark side)
    would report at least its parent's RSS at the spawn (measured: a child of a 300 MB parent said 313 MB)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / (1024 * 1024) if sys.platform == "darwin" else rss / 1024


def cpu_seconds() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def machine_info() -> dict[str, Any]:
    import confluent_kafka

    ck_version = confluent_kafka.version()  # a str in 2.x (a tuple in some old releases)
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "confluent_kafka": ck_version if isinstance(ck_version, str) else ck_version[0],
        "librdkafka": confluent_kafka.libversion()[0],
    }


def fmt_table(headers: list[str], rows: list[list[Any]], align: str | None = None) -> str:
    """A plain text table; ``align`` is one char per column, 'l' or 'r' (default: first l, rest r)."""
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    align = align or ("l" + "r" * (len(headers) - 1))

    def line(row: list[str]) -> str:
        padded = (c.ljust(w) if a == "l" else c.rjust(w) for c, w, a in zip(row, widths, align))
        return "  ".join(padded).rstrip()

    sep = "  ".join("-" * w for w in widths)
    return "\n".join([line(cells[0]), sep] + [line(r) for r in cells[1:]])


def fmt_float(x: Any, digits: int = 2) -> str:
    """``x`` with ``digits`` decimals, or "-" for None (a table cell or a figure in a report line)."""
    return "-" if x is None else f"{x:.{digits}f}"


def write_results(name: str, results: dict[str, Any], path: Path | None = None) -> Path:
    """Write ``results`` as JSON to ``path`` (default ``bench/results/<name>.json``); return the path."""
    if path is None:
        path = RESULTS_DIR / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2, sort_keys=False, default=str) + "\n")
    return path


def rel_path(path: Path) -> str:
    """``path`` relative to the working directory when it can be (for printing), else as it is."""
    try:
        return os.path.relpath(path)
    except ValueError:
        return str(path)


# --------------------------------------------------------------------------------------------------
# Brook's client settings and reading a topic back
# --------------------------------------------------------------------------------------------------


def brook_client_settings(consumer: dict[str, Any], producer: dict[str, Any]) -> dict[str, str]:
    """Client settings as Brook's pass-through keys: ``consumer.<key>`` (minus the keys the runtime
    owns, RUNTIME_MANAGED_CONSUMER_KEYS) and ``producer.<key>``, values stringified."""
    out: dict[str, str] = {}
    for key, value in brook_config_strings(consumer).items():
        if key not in RUNTIME_MANAGED_CONSUMER_KEYS:
            out[f"consumer.{key}"] = value
    for key, value in brook_config_strings(producer).items():
        out[f"producer.{key}"] = value
    return out


def iter_topic(
    bootstrap_servers: str, topic: str, partitions: int, timeout: float = 300.0, batch: int = 10_000
) -> Iterator[Any]:
    """Yield every record of ``topic`` (confluent-kafka ``Message`` objects, errors excluded), read
    from the beginning with a group-less consumer until partition EOF on every partition -- the
    EOF offset is the Fetch high watermark, right even where ListOffsets is not (embedded broker)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap_servers,
            "group.id": f"bench-read-{uuid.uuid4().hex[:8]}",  # never joins; assign() only
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            "fetch.queue.backoff.ms": 10,
        }
    )
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    eof: set[int] = set()
    deadline = time.monotonic() + timeout
    try:
        while len(eof) < partitions:
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading {topic}: not at EOF on all partitions after {timeout:.0f}s")
            for m in c.consume(num_messages=batch, timeout=0.5):
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        eof.add(m.partition())
                        continue
                    raise RuntimeError(f"reading {topic}: {err}")
                eof.discard(m.partition())
                yield m
    finally:
        c.close()


# --------------------------------------------------------------------------------------------------
# A side in a spawned process (latency.py, backpressure.py; the issue-21 workloads use bench/harness.py)
# --------------------------------------------------------------------------------------------------


class SideFailed(Exception):
    """A side or phase failed: its process reported an error or died, or it ran out of time."""


def pump(q: Any, events: dict[str, Any], block: float = 0.0) -> None:
    """Move every ``(kind, payload)`` message waiting in a child's queue ``q`` into ``events``,
    keeping the first payload of each kind. With ``block`` > 0, wait up to that long for the first
    message; the rest are taken only if already there."""
    while True:
        try:
            kind, payload = q.get(timeout=block) if block else q.get_nowait()
        except queue.Empty:
            return
        events.setdefault(kind, payload)
        block = 0.0


# --------------------------------------------------------------------------------------------------
# A Brook KafkaStreams app inside a side's process
# --------------------------------------------------------------------------------------------------


def close_app(app: Any) -> float:
    """Close ``app`` (waiting up to 60 s where ``close`` takes a timeout); return the seconds it took."""
    tc = time.monotonic()
    try:
        app.close(timeout=60)
    except TypeError:
        app.close()
    return time.monotonic() - tc


def app_metrics(app: Any) -> Any:
    """``app.metrics()`` made plain JSON data (picklable for the queue), None if the app has no
    metrics, or ``"unavailable: ..."`` if they cannot be read."""
    try:
        metrics = app.metrics() if hasattr(app, "metrics") else None
        return json.loads(json.dumps(metrics, default=str))
    except Exception as exc:  # noqa: BLE001 - optional
        return f"unavailable: {exc!r}"
