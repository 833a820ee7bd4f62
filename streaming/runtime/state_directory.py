"""The application's state directory, ``state.dir/<application.id>/``: the process that owns it, the only tree
the runtime deletes in, and which task of the instance holds each task directory.

One process (one running ``KafkaStreams`` or test driver) owns an application's directory at a time, through
its lock (:func:`lock_application_dir`, as Kafka Streams' ``StateDirectory.initializeProcessId`` locks
``<state.dir>/<application.id>/.lock``); a second is refused before it opens, wipes or writes anything.
Within the owner, :class:`StateDirectory` gives each task directory to one task at a time.

Every deletion of local state goes through :func:`remove_path`, which resolves the path (symbolic links
included) and refuses anything that is not inside the directory it is given: a store name or a task id
can never make the runtime delete a file elsewhere. Store names and application ids are checked when
they are created too (:mod:`streaming.naming`).
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
from typing import TYPE_CHECKING

from streaming.errors import StateDirectoryLockedError, StreamsError
from streaming.runtime.directory_lock import LOCK_FILE, DirectoryLock, lock_owner, try_lock_directory

if TYPE_CHECKING:  # streaming.state imports this module (remove_path): no import of the topology at run time
    from streaming.topology.topology import Topology


def application_dir(state_dir: str, application_id: str) -> str:
    """``state.dir/<application.id>``: everything the runtime keeps on disk for one application."""
    return os.path.join(state_dir, application_id)


def has_persistent_stores(topology: Topology) -> bool:
    """Whether ``topology`` keeps anything on disk (a persistent task or global store): only then does an
    instance lock its state directory, as in Kafka Streams (``hasPersistentStores``)."""
    return any(builder.persistent for builder in topology.store_builders.values()) \
        or any(definition.store_builder.persistent for definition in topology.global_stores.values())


def lock_application_dir(state_dir: str, application_id: str) -> DirectoryLock:
    """Take the lock of ``state.dir/<application.id>`` for this instance, or raise
    :class:`StateDirectoryLockedError`: one line naming the directory, the holder's pid and the fix."""
    directory = application_dir(state_dir, application_id)
    try:
        lock = try_lock_directory(directory)
    except OSError as exc:
        raise StreamsError(f"cannot lock the state directory {directory}: {exc.strerror or exc} (check "
                           f"state.dir={state_dir!r})") from exc
    if lock is not None:
        return lock
    owner = lock_owner(directory)
    fix = "Give each worker a state.dir of its own (e.g. --set state.dir=/var/lib/brook/worker-2)"
    if owner is None:
        holder = "another process"
    elif owner.is_this_process:
        holder = f"another KafkaStreams instance of this process (pid {owner.pid})"
        fix = "Give each KafkaStreams instance a state.dir of its own"
    elif owner.host and owner.host != socket.gethostname():
        holder = f"another process (pid {owner.pid} on host {owner.host})"
    else:
        holder = f"another process (pid {owner.pid})"
    raise StateDirectoryLockedError(
        f"state directory {directory} is in use by {holder}: two instances of application {application_id!r} "
        f"cannot share local state. {fix}, or stop the other one first")


def clear_application_dir(lock: DirectoryLock) -> None:
    """Delete everything in the locked application directory but its lock file (which must stay: removing it
    would let another process lock a new file while this one still holds the old)."""
    for name in os.listdir(lock.directory):
        if name != LOCK_FILE:
            remove_path(os.path.join(lock.directory, name), inside=lock.directory)


def remove_path(path: str, inside: str) -> None:
    """Delete the file or directory tree ``path``, which must lie strictly inside ``inside``.

    Raises :class:`StreamsError` (deleting nothing) when the resolved path is ``inside`` itself or
    outside it. A path that does not exist is fine.
    """
    root = os.path.realpath(inside)
    target = os.path.realpath(path)
    if os.path.commonpath([root, target]) != root or target == root:
        raise StreamsError(f"refusing to delete {path!r}: it resolves to {target!r}, which is not inside "
                           f"{root!r} (the runtime deletes only its own state)")
    if os.path.isdir(target) and not os.path.islink(path):
        shutil.rmtree(target)
    elif os.path.lexists(path):
        os.remove(path)


class StateDirectory:
    """Which task of this instance holds each task directory (Kafka Streams' StateDirectory locks).

    Shared by an instance's stream threads: a directory (and so its RocksDB files and checkpoint) is
    held by one task at a time, the active task or a standby copy, never both. An active task that
    finds its directory held by another thread's standby marks it wanted and retries; the standby's
    thread closes the standby (writing its checkpoint) when it sees the wish, and the active task then
    opens the directory and restores only the tail. Kafka Streams never places a standby on the client
    running the active task; this is how Brook keeps that true across its threads.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holders: dict[str, tuple[object, bool]] = {}  # task id -> (holder, is_standby)
        self._wanted: set[str] = set()  # held by a standby, waited for by an active task
        self.version = 0  # bumped on every release: standby placement looks again

    def lock_active(self, task_id: str, holder: object) -> bool:
        """Take ``task_id``'s directory for an active task of ``holder``; False (and the directory marked
        wanted) while another holder has it."""
        with self._lock:
            current = self._holders.get(task_id)
            if current is not None and current[0] is not holder:
                if current[1]:
                    self._wanted.add(task_id)
                return False
            self._holders[task_id] = (holder, False)
            self._wanted.discard(task_id)
            return True

    def lock_standby(self, task_id: str, holder: object) -> bool:
        """Take ``task_id``'s directory for a standby copy, only if nobody holds or waits for it."""
        with self._lock:
            if task_id in self._holders or task_id in self._wanted:
                return False
            self._holders[task_id] = (holder, True)
            return True

    def unlock(self, task_id: str, holder: object) -> None:
        with self._lock:
            current = self._holders.get(task_id)
            if current is not None and current[0] is holder:
                del self._holders[task_id]
                self.version += 1

    def wanted(self) -> set[str]:
        """Directories held by standbys that an active task waits for."""
        with self._lock:
            return set(self._wanted)
