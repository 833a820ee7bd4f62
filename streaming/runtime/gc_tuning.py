"""The interpreter's cyclic garbage collector while an instance's stream threads run (``python.gc.threshold0``).

A stream thread keeps many container objects alive for a while: a record cache's entries, a suppression's held
results, buffered records. With the interpreter's default thresholds (a generation-0 pass every 700 net
allocations, older generations every 10 passes of the one below) the collector walks them again and again:
in the 1-minute tumbling benchmark (bench/tumbling.py, 1,000,000 records) 2,900 passes took 1.5-2.2 s of the
worker's 9.5-12.9 CPU seconds, its full passes ~40 ms each over ~75,000 live objects. Brook's per-record
objects form no reference cycles (reference counting frees them: the passes found ~400 cyclic objects in a
million records), so passing less often costs them nothing; cyclic garbage (an exception's traceback) waits for
at most ``threshold0`` allocations more. With 50,000 the same run made 46 passes, 0.07 s.

``raise_threshold0(n)`` raises generation 0's threshold to ``n`` (never lowers one the process set higher) and
returns the function that gives it back: the previous thresholds return when the last instance that raised them
closes, unless something else changed them meanwhile. The setting is the process's: every thread shares it.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable

_lock = threading.Lock()
_holders = 0
_saved: tuple[int, int, int] | None = None  # the thresholds before the first holder raised them
_set: tuple[int, int, int] | None = None  # what the holders set


def raise_threshold0(threshold0: int) -> Callable[[], None]:
    """Raise generation 0's collection threshold to ``threshold0`` while the caller runs (0: leave the collector
    alone); returns the release, to call once (see the module doc)."""
    global _holders, _saved, _set
    if threshold0 <= 0:
        return lambda: None
    with _lock:
        current = gc.get_threshold()
        if _holders == 0:
            _saved = current
        if current[0] < threshold0:
            _set = (threshold0, current[1], current[2])
            gc.set_threshold(*_set)
        _holders += 1
    released = False

    def release() -> None:
        global _holders, _saved, _set
        nonlocal released
        with _lock:
            if released:
                return
            released = True
            _holders -= 1
            if _holders == 0:
                if _set is not None and gc.get_threshold() == _set and _saved is not None:
                    gc.set_threshold(*_saved)
                _saved = _set = None
    return release
