"""Word count: lines in, ``(word, count)`` out, emitted by a stream-time punctuator.

Two sub-topologies joined by the ``wordcount-words`` topic: the first splits lines into words and
writes them keyed by word (so every occurrence of a word lands in the same partition, hence the same
task), the second counts them. Counts are emitted per ``EMIT_INTERVAL_MS`` of event time: a word is
counted in the interval of its record's timestamp, and once stream time (the highest timestamp the
task has seen) passes the end of an interval, the punctuator forwards the new total of each word
counted in it, stamped with the interval's last millisecond (so a word seen 1,000 times in an interval
is emitted once, with its total). Output keys are words (String), values counts (Long), so the output
topic is readable by any Kafka client as Kafka Streams' own word count writes it.

The output depends only on the records and their order in each partition, not on when the punctuator
runs (after every record, or after a polled batch of them) — which is what lets the platform reprocess
the word count in batch over archived lines with the live app's results (``streaming.batch``): counts
wait for their interval in the ``word-counts-pending`` store, not in memory, and a record whose interval
stream time has passed already is counted in the interval stream time is in. A clean stop (or a task
moving to another worker) emits what is pending, so the last counts are out when the app stops.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from streaming import Serdes, Stores, Topology
from streaming.processor import Processor, ProcessorContext, PunctuationType, Record

INPUT_TOPIC = "wordcount-lines"
WORDS_TOPIC = "wordcount-words"  # lines split into words, keyed by word (the repartition step)
OUTPUT_TOPIC = "wordcount-counts"
STORE = "word-counts"  # word -> total count, as last emitted
PENDING_STORE = "word-counts-pending"  # "<interval start, 15 digits> <word>" -> count in that interval
EMIT_INTERVAL_MS = 1_000

_WORD = re.compile(r"[a-z0-9']+")
_START_DIGITS = 15  # epoch ms fit in 13 digits; zero-padded, pending keys sort by interval, then word


def words_of(line: str) -> list[str]:
    """Lower-cased words of a line (letters, digits and apostrophes)."""
    return _WORD.findall(line.lower())


def interval_start(timestamp: int, interval_ms: int = EMIT_INTERVAL_MS) -> int:
    """The start of the emit interval holding ``timestamp``."""
    return timestamp - timestamp % interval_ms


class LineSplitter(Processor[str, str]):
    """Forwards one ``(word, word)`` record per word of a line, keyed by the word."""

    def process(self, record: Record[str, str]) -> None:
        if record.value is None:
            return
        for word in words_of(record.value):
            self.context.forward(Record(word, word, record.timestamp))


class WordCountProcessor(Processor[str, str]):
    """Counts words per emit interval into ``word-counts-pending``; a stream-time punctuator folds each interval
    stream time has passed into the totals in ``word-counts`` and forwards them (both stores RocksDB, logged to
    ``<application.id>-<store>-changelog``)."""

    def init(self, context: ProcessorContext) -> None:
        self.context = context
        self.totals = context.get_state_store(STORE)
        self.pending = context.get_state_store(PENDING_STORE)
        context.schedule(EMIT_INTERVAL_MS, PunctuationType.STREAM_TIME, self.emit_passed)

    def process(self, record: Record[str, str]) -> None:
        start = interval_start(record.timestamp)
        stream_time = self.context.current_stream_time_ms
        if start + EMIT_INTERVAL_MS <= stream_time:  # its interval is over: count it in the current one
            start = interval_start(stream_time)
        key = f"{start:0{_START_DIGITS}d} {record.key}"
        self.pending.put(key, (self.pending.get(key) or 0) + 1)

    def emit_passed(self, stream_time: int) -> None:
        """Fold and forward every pending interval that ends at or before ``stream_time``, oldest first."""
        self._emit(lambda start: start + EMIT_INTERVAL_MS <= stream_time)

    def _emit(self, due: Callable[[int], bool]) -> None:
        folded = []
        for key, count in self.pending.all():
            start_text, word = key.split(" ", 1)
            start = int(start_text)
            if not due(start):
                break
            total = (self.totals.get(word) or 0) + count
            self.totals.put(word, total)
            self.context.forward(Record(word, total, start + EMIT_INTERVAL_MS - 1))
            folded.append(key)
        for key in folded:
            self.pending.delete(key)

    def close(self) -> None:
        # A clean stop emits every pending interval, so the last counts are out when the app stops.
        self._emit(lambda start: True)


def topology() -> Topology:
    """``wordcount-lines`` -> split -> ``wordcount-words`` -> count (+ stores) -> ``wordcount-counts``."""
    return (
        Topology()
        .add_source("lines", INPUT_TOPIC, key_serde=Serdes.String(), value_serde=Serdes.String())
        .add_processor("split", LineSplitter, "lines")
        .add_sink("words-out", WORDS_TOPIC, "split", key_serde=Serdes.String(), value_serde=Serdes.String())
        .add_source("words", WORDS_TOPIC, key_serde=Serdes.String(), value_serde=Serdes.String())
        .add_processor("count", WordCountProcessor, "words")
        .add_state_store(
            Stores.key_value_store_builder(Stores.persistent_key_value_store(STORE), Serdes.String(), Serdes.Long()),
            "count")
        .add_state_store(
            Stores.key_value_store_builder(Stores.persistent_key_value_store(PENDING_STORE), Serdes.String(),
                                           Serdes.Long()),
            "count")
        .add_sink("counts", OUTPUT_TOPIC, "count", key_serde=Serdes.String(), value_serde=Serdes.Long())
    )
