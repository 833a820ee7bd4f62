"""The lock of a directory: which process may open, wipe and write what is inside it.

:func:`try_lock_directory` takes an exclusive ``flock`` on ``<directory>/.lock`` and writes the holder's pid
and host into that file, so a refused process can name the holder. A ``flock`` belongs to the open file, not
to the path: the kernel drops it when the holder closes it or dies, so a SIGKILLed process leaves the file
behind (with its pid in it) but never the lock. It also belongs to one *open*, so a second open of the same
file in the same process is refused too (a POSIX ``fcntl`` lock would be granted to its own process again,
and be dropped by any ``close`` of the file in that process). Over NFS, Linux maps ``flock`` to NFS byte-range
locks, which hold across hosts.

This is the one function that decides who owns a directory: the runtime uses it for
``<state.dir>/<application.id>`` (:func:`streaming.runtime.state_directory.lock_application_dir`).
"""

from __future__ import annotations

import fcntl
import os
import socket
from dataclasses import dataclass

LOCK_FILE = ".lock"


@dataclass(frozen=True)
class LockOwner:
    """Who holds a directory's lock, as the holder wrote it into the lock file."""

    pid: int
    host: str

    @property
    def is_this_process(self) -> bool:
        return self.pid == os.getpid() and self.host == socket.gethostname()


class DirectoryLock:
    """A held lock on ``directory``, until :meth:`release` (or the end of the process)."""

    def __init__(self, directory: str, fd: int) -> None:
        self.directory = directory
        self._fd: int | None = fd

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Give the directory up (again: nothing)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)

    def __repr__(self) -> str:
        return f"DirectoryLock({self.directory!r}, {'held' if self.held else 'released'})"


def try_lock_directory(directory: str) -> DirectoryLock | None:
    """Take the lock of ``directory`` (created if missing), or None while another open file holds it: another
    process, or another holder in this process. Raises :class:`OSError` when the directory or its lock file
    cannot be created or opened."""
    os.makedirs(directory, exist_ok=True)
    fd = os.open(os.path.join(directory, LOCK_FILE), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    # Overwrite in place, then cut: a reader never sees an empty file, only the first line it parses.
    owner = f"{os.getpid()} {socket.gethostname()}\n".encode()
    os.pwrite(fd, owner, 0)
    os.ftruncate(fd, len(owner))
    return DirectoryLock(directory, fd)


def lock_owner(directory: str) -> LockOwner | None:
    """The holder the lock file of ``directory`` names (the last holder, if nobody holds it now); None when
    the file is missing or unreadable."""
    try:
        with open(os.path.join(directory, LOCK_FILE)) as file:
            pid, _, host = file.readline().strip().partition(" ")
        return LockOwner(int(pid), host)
    except (OSError, ValueError):
        return None
