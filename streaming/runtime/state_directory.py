"""The application's state directory, ``state.dir/<application.id>/``: the only tree the runtime deletes in.

Every deletion of local state goes through :func:`remove_path`, which resolves the path (symbolic links
included) and refuses anything that is not inside the directory it is given: a store name or a task id
can never make the runtime delete a file elsewhere. Store names and application ids are checked when
they are created too (:mod:`streaming.naming`).
"""

from __future__ import annotations

import os
import shutil

from streaming.errors import StreamsError


def application_dir(state_dir: str, application_id: str) -> str:
    """``state.dir/<application.id>``: everything the runtime keeps on disk for one application."""
    return os.path.join(state_dir, application_id)


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
