"""Broker waits: a line in the log when a call that waits for the broker takes long (a broker outage).

While the broker is down, a stream thread blocks inside its commit: in the producer's flush (librdkafka
retries the records until ``message.timeout.ms``) or in the synchronous offset commit (retried until a
group coordinator answers). A blocked thread logs nothing, and librdkafka's own lines reach the log only
when the thread polls its clients again, so the outage would be silent until it ends. The commit path wraps
those calls in :meth:`BrokerWaits.waiting`; a watcher thread (one per process, started on first use) says
every :data:`WARN_AFTER_S` seconds which thread has waited how long for what, and the thread says how long
it waited once the call returns::

    with BROKER_WAITS.waiting("an offset commit waits for the group coordinator"):
        consumer.commit(offsets=offsets, asynchronous=False)
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["BROKER_WAITS", "WARN_AFTER_S", "BrokerWaits"]

log = logging.getLogger(__name__)

WARN_AFTER_S = 5.0


@dataclass
class _Wait:
    thread: str
    what: str
    started: float
    next_warning: float
    warned: bool = False


class BrokerWaits:
    """Tracks the calls that wait for the broker and warns about those that take longer than ``warn_after`` s."""

    def __init__(self, warn_after: float = WARN_AFTER_S) -> None:
        self.warn_after = warn_after
        self._waits: dict[int, _Wait] = {}
        self._lock = threading.Lock()
        self._watcher: threading.Thread | None = None

    @contextlib.contextmanager
    def waiting(self, what: str) -> Iterator[None]:
        """Around a call that waits for the broker; ``what`` says what waits, e.g. "an offset commit waits for
        the group coordinator"."""
        started = time.monotonic()
        wait = _Wait(threading.current_thread().name, what, started, started + self.warn_after)
        with self._lock:
            self._waits[id(wait)] = wait
            if self._watcher is None:
                self._watcher = threading.Thread(target=self._watch, name="broker-waits", daemon=True)
                self._watcher.start()
        try:
            yield
        finally:
            with self._lock:
                del self._waits[id(wait)]
                warned = wait.warned
            if warned:
                log.info("%s: %s: done after %.1f s", wait.thread, what, time.monotonic() - started)

    def _watch(self) -> None:
        while True:
            time.sleep(min(0.5, self.warn_after / 2))
            now = time.monotonic()
            with self._lock:
                due = [wait for wait in self._waits.values() if now >= wait.next_warning]
                for wait in due:
                    wait.next_warning, wait.warned = now + self.warn_after, True
            for wait in due:
                log.warning("%s: %s for %.0f s (broker down or unreachable?); it keeps retrying, and nothing is "
                            "committed meanwhile", wait.thread, wait.what, now - wait.started)


#: The process's tracker, used by the commit path (record collector flush, offset commit).
BROKER_WAITS = BrokerWaits()
