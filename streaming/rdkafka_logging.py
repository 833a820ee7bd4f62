"""librdkafka's logs through Python logging, without the floods.

Every client Brook creates gets ``logger=`` :data:`RDKAFKA_LOGGER` (``streaming.rdkafka``), whose
filter lets a message through once per :data:`REPEAT_WINDOW_S` seconds and says how often it held it
back, so a broker that is down logs a line every few seconds, not hundreds.
"""

from __future__ import annotations

import logging
import re
import time

REPEAT_WINDOW_S = 10.0
_TIMINGS = re.compile(r"\(after \d+ms[^)]*\)|\d+ms|#\d+")  # what varies between two repeats of a message


class _RepeatFilter(logging.Filter):
    """Lets a message through once per :data:`REPEAT_WINDOW_S`; says how often it was held back."""

    def __init__(self) -> None:
        super().__init__()
        self._seen: dict[str, tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        text = _TIMINGS.sub("", record.getMessage())
        now = time.monotonic()
        last, held = self._seen.get(text, (0.0, 0))
        if now - last < REPEAT_WINDOW_S:
            self._seen[text] = (last, held + 1)
            return False
        if len(self._seen) > 1000:
            self._seen.clear()
        self._seen[text] = (now, 0)
        if held:
            record.msg = f"{record.getMessage()} (and {held} times more in the last {now - last:.0f} s)"
            record.args = ()
        return True


RDKAFKA_LOGGER = logging.getLogger("streaming.rdkafka")
RDKAFKA_LOGGER.addFilter(_RepeatFilter())
