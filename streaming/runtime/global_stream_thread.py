"""GlobalStreamThread: keeps one instance's global stores in step with their topics.

Kafka Streams' design: one thread per instance, with its own consumer that assigns itself every
partition of every global topic (no consumer group, nothing committed: the position lives in the
global checkpoint). ``start_and_bootstrap()`` returns once every partition has been read to its end —
partition EOF, derived from the fetched high watermark, never ListOffsets "latest", which the embedded
broker answers wrongly — so stream threads started afterwards see complete global tables. Then the
thread keeps tailing the topics until ``shutdown()``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from streaming.config import StreamsConfig
from streaming.errors import StreamsError
from streaming.runtime.client_configs import global_consumer_config
from streaming.runtime.global_state import GlobalStateManager
from streaming.topology.topology import Topology

log = logging.getLogger(__name__)

TP = tuple[str, int]


class GlobalStreamThread(threading.Thread):
    """Bootstraps the global stores, then applies their topics' new records as they arrive.

    ``on_failure(exc)`` is called (from this thread) if it fails after the bootstrap; a bootstrap
    failure is raised by ``start_and_bootstrap`` instead. A clean ``shutdown()`` writes the checkpoint.
    """

    def __init__(self, topology: Topology, config: StreamsConfig, partition_counts: dict[str, int],
                 on_failure: Callable[[BaseException], None]) -> None:
        super().__init__(name=f"{config.application_id}-GlobalStreamThread", daemon=True)
        self.state = GlobalStateManager(topology, config)
        self._partitions = [(topic, p) for topic in self.state.topics for p in range(partition_counts[topic])]
        self._consumer_config = global_consumer_config(config.consumer_config(), config.application_id)
        self._max_records = config.max_poll_records
        self._poll_seconds = config["poll.ms"] / 1000
        self._on_failure = on_failure
        self._stopping = threading.Event()
        self._bootstrapped = threading.Event()
        self.positions: dict[TP, int] = {}  # next offset per partition that the stores cover
        self.applied = 0
        self.exception: BaseException | None = None

    # -- life cycle ------------------------------------------------------------------------------------------
    def start_and_bootstrap(self) -> None:
        """Start the thread; return when the global stores hold every partition up to its end."""
        started = time.monotonic()
        self.start()
        while not self._bootstrapped.wait(0.1):
            if not self.is_alive():
                break
        if self.exception is not None:
            raise StreamsError(f"global stores {sorted(self.state.views)} could not be bootstrapped from "
                               f"topics {self.state.topics}: {self.exception!r}") from self.exception
        log.info("global stores %s bootstrapped: %d records in %.2f s", sorted(self.state.views), self.applied,
                 time.monotonic() - started)

    def shutdown(self) -> None:
        self._stopping.set()

    def run(self) -> None:
        consumer = None
        clean = False
        try:
            resume = self.state.open()
            consumer = Consumer(self._consumer_config)
            self.positions = {tp: resume.get(tp, 0) for tp in self._partitions}
            consumer.assign([TopicPartition(topic, partition, resume.get((topic, partition), OFFSET_BEGINNING))
                             for topic, partition in self._partitions])
            self._catch_up(consumer)
            self._bootstrapped.set()
            while not self._stopping.is_set():
                self._poll(consumer, self._poll_seconds)
            clean = True
        except BaseException as exc:  # report every failure, including a KeyboardInterrupt in the thread
            self.exception = exc
            if self._bootstrapped.is_set():
                log.error("global stream thread %s failed: %s", self.name, exc, exc_info=exc)
                self._on_failure(exc)
        finally:
            self._bootstrapped.set()
            if consumer is not None:
                try:
                    consumer.close()
                except Exception:
                    log.warning("closing the global consumer failed", exc_info=True)
            self.state.close()
            if clean:
                self.state.write_checkpoint(self.positions)

    # -- reading -----------------------------------------------------------------------------------------------
    def _catch_up(self, consumer: Consumer) -> None:
        """Read every partition to its end (bootstrap). Not named _bootstrap: threading.Thread has one."""
        pending = set(self._partitions)
        last_log = time.monotonic()
        while pending and not self._stopping.is_set():
            pending -= self._poll(consumer, 0.1)
            if time.monotonic() - last_log > 5:
                last_log = time.monotonic()
                log.info("bootstrapping global stores: %d records so far, %d partitions to go", self.applied,
                         len(pending))

    def _poll(self, consumer: Consumer, timeout: float) -> set[TP]:
        """Apply what one consume() returns; return the partitions that reached their end."""
        at_end: set[TP] = set()
        batch: list[tuple[Any, Any]] = []
        batch_topic = None
        positions = self.positions
        for message in consumer.consume(self._max_records, timeout):
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    at_end.add((message.topic(), message.partition()))
                elif error.fatal():
                    raise KafkaException(error)
                else:
                    log.warning("global consumer error on %s[%s]: %s", message.topic(), message.partition(),
                                error)
                continue
            topic = message.topic()
            if topic != batch_topic and batch:
                self._apply(batch_topic, batch)  # type: ignore[arg-type]
                batch = []
            batch_topic = topic
            batch.append((message.key(), message.value(), message.timestamp()[1]))
            positions[(topic, message.partition())] = message.offset() + 1
        if batch:
            self._apply(batch_topic, batch)  # type: ignore[arg-type]
        return at_end

    def _apply(self, topic: str, batch: list[tuple[Any, Any]]) -> None:
        self.state.update(topic, batch)
        self.applied += len(batch)
