"""ProcessorStateManager: the truth about a task's stores — where they live, which changelog partition
backs each one, and the checkpoint of what local state covers."""

from __future__ import annotations

import json
import logging
import os
from typing import Any

from streaming.runtime.state_directory import application_dir, remove_path
from streaming.topic_generations import TopicGenerations

log = logging.getLogger(__name__)

CHECKPOINT_FILE = ".checkpoint"
TopicPartition = tuple[str, int]


class ProcessorStateManager:
    """State of one task under ``state.dir/<application.id>/<task id>/``.

    The checkpoint file maps changelog partitions to the offset local state covers (the next offset
    to restore from). It is read and deleted when the task opens its stores (``load_checkpoint``) — so a crash leaves no checkpoint and
    the next start wipes and fully restores persistent logged stores — and written again on a clean
    close. In-memory stores always restore from the start of their changelog.
    """

    def __init__(self, state_dir: str, application_id: str, task_id: str, partition: int,
                 generations: TopicGenerations) -> None:
        self.application_id = application_id
        self.generations = generations
        self.task_id = task_id
        self.partition = partition
        self.app_dir = application_dir(state_dir, application_id)
        self.task_dir = os.path.join(self.app_dir, task_id)
        self._checkpoint: dict[TopicPartition, int] = {}
        self.stores: dict[str, Any] = {}
        self.changelogs: dict[TopicPartition, Any] = {}  # changelog partition -> store

    def store_dir(self, store: str) -> str:
        return os.path.join(self.task_dir, store)

    def changelog_partition(self, store: str) -> TopicPartition:
        return self.generations.changelog(self.application_id, store), self.partition

    def load_checkpoint(self) -> None:
        """Read (and delete) the checkpoint: the task now owns its directory."""
        self._checkpoint = take_checkpoint(self.task_dir, f"task {self.task_id}")

    def prepare_store_dir(self, store: str, persistent: bool, logged: bool) -> None:
        """Wipe a persistent logged store's files unless the checkpoint vouches for them."""
        directory = self.store_dir(store)
        if persistent and logged and self.changelog_partition(store) not in self._checkpoint \
                and os.path.exists(directory):
            log.info("task %s: no checkpoint for store %r, wiping local state to restore it", self.task_id, store)
            remove_path(directory, inside=self.task_dir)

    def register(self, store: Any) -> None:
        """Called by each store's ``init``: remember it and its changelog partition (if logged)."""
        self.stores[store.name] = store
        if getattr(store, "changelog", None) is not None:
            self.changelogs[self.changelog_partition(store.name)] = store

    def restore_offsets(self) -> dict[TopicPartition, int]:
        """Where each logged store's restore starts: its checkpoint (persistent stores) or 0."""
        offsets = {}
        for tp, store in self.changelogs.items():
            offsets[tp] = self._checkpoint.get(tp, 0) if store.persistent else 0
        return offsets

    def write_checkpoint(self, end_offsets: dict[TopicPartition, int]) -> None:
        """Record that local state covers each persistent logged store's changelog up to its end offset."""
        entries = [{"topic": tp[0], "partition": tp[1], "offset": end_offsets[tp]}
                   for tp, store in self.changelogs.items() if store.persistent and tp in end_offsets]
        write_checkpoint_file(self.task_dir, entries)


def take_checkpoint(directory: str, owner: str) -> dict[TopicPartition, int]:
    """Read and delete ``directory/.checkpoint``: changelog partition -> offset local state covers."""
    path = os.path.join(directory, CHECKPOINT_FILE)
    if not os.path.exists(path):
        return {}
    try:
        with open(path) as file:
            checkpoint = {(entry["topic"], entry["partition"]): entry["offset"] for entry in json.load(file)}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("%s: unreadable checkpoint %s (%s); restoring from scratch", owner, path, exc)
        checkpoint = {}
    os.remove(path)
    return checkpoint


def write_checkpoint_file(directory: str, entries: list[dict[str, Any]]) -> None:
    """Atomically replace ``directory/.checkpoint`` with ``entries`` (topic, partition, offset)."""
    if not entries:
        return
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, CHECKPOINT_FILE)
    with open(path + ".tmp", "w") as file:
        json.dump(entries, file)
    os.replace(path + ".tmp", path)
