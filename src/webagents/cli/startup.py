"""A server's start with CPython's garbage collector paused.

Loading a server's modules and building its app makes some 160,000 objects that live as long
as the process, and next to no garbage; the collector, run every 700 new objects, scans them
over and over: a fifth of a `portal serve`'s start (0.36 s of 1.65 s of CPU, measured with
`gc.callbacks`), a sixth of a `serve`'s. So the commands that start a server run their start
inside `paused_collector()`, and `serving()`, called once the app is built, moves everything
made so far to the permanent generation (`gc.freeze`: never scanned again, which also keeps
every later full collection short while serving) and turns the collector back on.

The pause ends with the block whatever happens: a start that fails (a refused option, a port
in use) leaves the collector as it found it, in a test's process too.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

_paused = False


@contextmanager
def paused_collector() -> Iterator[None]:
    """The collector off inside the block until `serving()`; as it was, after."""
    global _paused
    was_enabled = gc.isenabled()
    gc.disable()
    _paused = True
    try:
        yield
    finally:
        _paused = False
        if was_enabled:
            gc.enable()


def serving() -> None:
    """The start is over: what it made is frozen and the collector runs again. Does nothing
    outside `paused_collector()` (the collector is left as its caller set it)."""
    global _paused
    if _paused:
        _paused = False
        gc.freeze()
        gc.enable()
