"""Word count: lines in, ``(word, count)`` out, emitted by a wall-clock punctuator.

Two sub-topologies joined by the ``wordcount-words`` topic: the first splits lines into words and
writes them keyed by word (so every occurrence of a word lands in the same partition, hence the same
task), the second counts them. The counting processor counts words into a key-value store and
remembers which words changed; every ``EMIT_INTERVAL_MS`` of wall-clock time the punctuator forwards
the current count of each changed word (so a word seen 1,000 times in a second is emitted once, with
its latest count) and asks for a commit. Output keys are words (String), values counts (Long), so
the output topic is readable by any Kafka client as Kafka Streams' own word count writes it.
"""

from __future__ import annotations

import re

from streaming import Serdes, Stores, Topology
from streaming.processor import Processor, ProcessorContext, PunctuationType, Record

INPUT_TOPIC = "wordcount-lines"
WORDS_TOPIC = "wordcount-words"  # lines split into words, keyed by word (the repartition step)
OUTPUT_TOPIC = "wordcount-counts"
STORE = "word-counts"
EMIT_INTERVAL_MS = 1_000

_WORD = re.compile(r"[a-z0-9']+")


def words_of(line: str) -> list[str]:
    """Lower-cased words of a line (letters, digits and apostrophes)."""
    return _WORD.findall(line.lower())


class LineSplitter(Processor[str, str]):
    """Forwards one ``(word, word)`` record per word of a line, keyed by the word."""

    def process(self, record: Record[str, str]) -> None:
        if record.value is None:
            return
        for word in words_of(record.value):
            self.context.forward(Record(word, word, record.timestamp))


class WordCountProcessor(Processor[str, str]):
    """Counts words into the ``word-counts`` store (RocksDB, logged to
    ``<application.id>-word-counts-changelog``); a wall-clock punctuator emits changed counts."""

    def init(self, context: ProcessorContext) -> None:
        self.context = context
        self.store = context.get_state_store(STORE)
        self.changed: set[str] = set()
        context.schedule(EMIT_INTERVAL_MS, PunctuationType.WALL_CLOCK_TIME, self.emit_changed)

    def process(self, record: Record[str, str]) -> None:
        word = record.key
        self.store.put(word, (self.store.get(word) or 0) + 1)
        self.changed.add(word)

    def emit_changed(self, timestamp: int) -> None:
        for word in sorted(self.changed):
            self.context.forward(Record(word, self.store.get(word), timestamp))
        self.changed.clear()
        self.context.commit()

    def close(self) -> None:
        # Emit what changed since the last punctuation so a clean stop loses no update.
        if self.changed:
            self.emit_changed(self.context.current_system_time_ms)


def topology() -> Topology:
    """``wordcount-lines`` -> split -> ``wordcount-words`` -> count (+ store) -> ``wordcount-counts``."""
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
        .add_sink("counts", OUTPUT_TOPIC, "count", key_serde=Serdes.String(), value_serde=Serdes.Long())
    )
