"""GlobalStateManager: the global stores of one runtime (a KafkaStreams instance or a test driver).

Stores live under ``state.dir/<application.id>/global/<store>``. Their source topics are their
changelogs: records are applied as they are (key and value bytes; a ``None`` value deletes). The
checkpoint file records the next offset of every source partition that local state covers; like a
task's, it is read and deleted at open and written again on a clean close, so after a crash persistent
global stores are wiped and rebuilt from the start of their topics.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from streaming.config import StreamsConfig
from streaming.runtime.state_directory import application_dir, remove_path
from streaming.runtime.state_manager import take_checkpoint, write_checkpoint_file
from streaming.state.bytes_store import StoreContext
from streaming.state.readonly import ReadOnlyKeyValueStore
from streaming.topology.topology import Topology

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


class GlobalStateManager:
    """Opens the global stores, applies their topics' records, writes the checkpoint, closes them."""

    def __init__(self, topology: Topology, config: StreamsConfig) -> None:
        self.directory = os.path.join(application_dir(config["state.dir"], config.application_id), "global")
        self._config = config
        self._definitions = topology.global_stores
        self.stores: dict[str, Any] = {}
        self.views: dict[str, ReadOnlyKeyValueStore] = {}  # what processors and tests get
        self._store_of_topic: dict[str, Any] = {}
        self.skipped = 0  # records with a None key (a store cannot hold them)

    @property
    def topics(self) -> list[str]:
        return [definition.topic for definition in self._definitions.values()]

    def open(self, use_checkpoint: bool = True) -> dict[TopicPartition, int]:
        """Open every global store. Returns the offset to resume from for each source partition the
        checkpoint covers; the other partitions start at the beginning (their stores wiped first)."""
        checkpoint = self._take_checkpoint() if use_checkpoint else {}
        resume: dict[TopicPartition, int] = {}
        try:
            for name, definition in self._definitions.items():
                store = definition.store_builder.build()
                directory = os.path.join(self.directory, name)
                covered = {tp: offset for tp, offset in checkpoint.items() if tp[0] == definition.topic}
                if store.persistent and covered:
                    resume.update(covered)
                else:
                    remove_path(directory, inside=self.directory)
                store.init(StoreContext(self._config.application_id, "global", directory,
                                        self._config.default_key_serde, self._config.default_value_serde))
                self.stores[name] = store
                self.views[name] = ReadOnlyKeyValueStore(store, definition.topic)
                self._store_of_topic[definition.topic] = store
        except Exception:
            self.close()
            raise
        return resume

    def update(self, topic: str, records: list[tuple[bytes | None, bytes | None, int]]) -> None:
        """Apply records of ``topic`` (serialized key and value, record timestamp) to its store, in order."""
        store = self._store_of_topic[topic]
        if store.timestamped:
            entries: list[Any] = [record for record in records if record[0] is not None]
        else:
            entries = [(key, value) for key, value, _ in records if key is not None]
        if len(entries) < len(records):
            self.skipped += len(records) - len(entries)
            log.debug("global store of topic %r: skipped %d records with a null key", topic,
                      len(records) - len(entries))
        if entries:
            store.restore_batch(entries)

    def _take_checkpoint(self) -> dict[TopicPartition, int]:
        return take_checkpoint(self.directory, "global stores")

    def write_checkpoint(self, positions: dict[TopicPartition, int]) -> None:
        """Record that the persistent stores cover their topics up to ``positions`` (call after close,
        which flushes RocksDB's memtables)."""
        persistent = {d.topic for name, d in self._definitions.items()
                      if name in self.stores and self.stores[name].persistent}
        write_checkpoint_file(self.directory, [{"topic": topic, "partition": partition, "offset": offset}
                                               for (topic, partition), offset in positions.items()
                                               if topic in persistent])

    def close(self) -> None:
        for name, store in self.stores.items():
            try:
                if store.is_open:
                    store.close()
            except Exception:
                log.exception("global store %r failed to close", name)
