"""Many notes written together (`write_many`): a page of the portal sync's pull.

Each note is saved as `NoteStore.write` saves one, with the same checks (`NoteStore._checked`),
under the same per-namespace locks, into the same private folders, each file replaced
atomically; but the batch is made durable together (`_files.Batch`: two flushes for the
batch, not two fsyncs per note). This is the note store's own batch write, kept apart from
`notes` (which is about one note at a time): it takes the store's locks and keeps its counts
as `write` does.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Sequence
from typing import NamedTuple

from .._files import Batch
from ..errors import ToolError
from .note_file import Note, file_state, one_line
from .store import Change, NoteChanged, NoteStore, _bump, _generation, _lstat_at

MAX_LOCKED = 64
"""Namespaces a batch write holds locked at once (two descriptors each)."""


class Write(NamedTuple):
    """One note of `write_many`."""

    namespace: str
    key: str
    content: str
    description: str
    kind: str
    updated: str
    expect: Callable[[Note | None], bool] | None = None
    """As `write`'s: the note must still be as the writer read it (else NoteChanged)."""


def write_many(store: NoteStore, writes: Sequence[Write]) -> list[Change | Exception]:
    """Save many notes (a page of the portal sync) as `store.write` saves each, with the same
    checks, into the same private folders, each file replaced atomically, but made durable
    together (`Batch`: two flushes for the batch, not two fsyncs per note). Each note's
    Change, or what refused it (ToolError, OSError: the others are still written); an
    error of the flushes is raised. At most one write per (namespace, key)."""
    results: list[Change | Exception] = [OSError("not written")] * len(writes)
    by_namespace: dict[str, list[int]] = {}
    for n, w in enumerate(writes):
        by_namespace.setdefault(w.namespace, []).append(n)
    if len({(w.namespace, w.key) for w in writes}) != len(writes):
        raise ValueError("write_many: a key written twice in one batch")
    names = sorted(by_namespace)  # the locks taken in one order: batches never deadlock
    for start in range(0, len(names), MAX_LOCKED):
        with contextlib.ExitStack() as stack:
            batch = Batch()
            staged = []
            for namespace in names[start : start + MAX_LOCKED]:
                try:
                    _, dir_fd, lock_fd = stack.enter_context(store._locked(namespace))
                except (ToolError, OSError) as exc:
                    for n in by_namespace[namespace]:
                        results[n] = exc
                    continue
                before = _generation(lock_fd), os.fstat(dir_fd).st_mtime_ns
                done = []
                for n in by_namespace[namespace]:
                    try:
                        done.append((n, _stage(store, batch, dir_fd, before[0], writes[n])))
                    except (ToolError, OSError, NoteChanged) as exc:
                        results[n] = exc
                staged.append((namespace, dir_fd, lock_fd, before, done))
            infos = iter(batch.commit())
            for namespace, dir_fd, lock_fd, before, done in staged:
                if not done:
                    continue
                generation = _bump(lock_fd, before[0])
                after = generation, os.fstat(dir_fd).st_mtime_ns
                store._moved(namespace, before[0], after)
                previous = before
                for n, note in done:
                    results[n] = Change(*after, note, file_state(next(infos)), previous)
                    previous = after
    return results


def _stage(store: NoteStore, batch: Batch, dir_fd: int, generation: int, w: Write) -> Note:
    """One note of `write_many` checked as `write` checks it and staged in `batch`."""
    name = f"{w.key}.md"
    existing = _lstat_at(dir_fd, name)
    note = Note(w.namespace, w.key, w.content, one_line(w.description), w.updated, w.kind)
    version = generation, os.fstat(dir_fd).st_mtime_ns
    data, usage = store._checked(dir_fd, version, note, existing, w.expect)
    batch.stage(dir_fd, name, data)
    after = generation, os.fstat(dir_fd).st_mtime_ns  # the temporary file moved it
    store._counted(w.namespace, usage, existing, len(data), after)
    return note
