"""The memory skill beside LangGraph's SqliteStore and InMemoryStore, and beside the floors
(a bare atomic fsync'd file write, a bare FTS5 query), measured in one run: the starts and
bulk loads each in a fresh process (as at a real start), the rest side by side in this one.

    .venv/bin/pip install langgraph-checkpoint-sqlite   # the peers (not a project dependency)
    .venv/bin/python bench/memory.py [--sizes 1000 10000 100000] [--repeat 200]

The same namespaces and notes go into every store: N notes spread over 100 callers, with
the owner and shared. LangGraph's `search(query=...)` only ranks by meaning when the store has
an embedding index; without one it ignores the query, so its "search" here is what it offers
instead: a namespace search (the caller's notes, newest first) and a filter search (an exact
field match). Both are reported as such, beside our full-text search.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _timing
from _timing import median_ms

from webagents import Agent, Caller
from webagents.context import AgentInfo, Context
from webagents.notes.index import MemoryIndex, fts_query, namespace_id
from webagents.notes.layout import namespace_folder
from webagents.notes.note_file import Note
from webagents.notes.store import NoteStore
from webagents.rights import rights_of
from webagents.skills.memory import MemorySkill
from webagents.testing import ScriptedModel

CALLERS = 100
# A vocabulary of 5,000 made-up words drawn with a Zipf-like skew, as words in notes are: a
# few very common, most rare. The two query words sit in the middle of the range.
_SYLLABLES = "ba ko ri mu te lo na si pe du ga vi zo ha ne".split()
WORDS = sorted(
    {"".join(random.Random(n).choices(_SYLLABLES, k=3)) + str(n % 7) for n in range(5000)}
)
_WEIGHTS = [1 / (rank + 1) for rank in range(len(WORDS))]
QUERY = f"{WORDS[60]} {WORDS[400]}"


def note_text(rng: random.Random) -> str:
    return " ".join(rng.choices(WORDS, weights=_WEIGHTS, k=40))


def namespaces() -> list[str]:
    return ["owner", "shared"] + [f"caller:user{n}@example.com" for n in range(CALLERS)]


def make_notes(size: int) -> list[tuple[str, str, str, str]]:
    """(namespace, key, content, description) of `size` notes, the same every time."""
    rng = random.Random(size)
    notes = []
    spaces = namespaces()
    for n in range(size):
        namespace = spaces[n % len(spaces)]
        key, content = f"note-{n}", note_text(rng)
        description = f"Note {n} about {rng.choice(WORDS[:200])}"
        notes.append((namespace, key, content, description))
    return notes


def lay_out(root: Path, size: int) -> list[tuple[str, str, str, str]]:
    """Write `size` note files as the skill would (without fsync: this is set-up)."""
    notes = make_notes(size)
    spaces = namespaces()
    for namespace in spaces:
        folder = namespace_folder(root, namespace)
        folder.mkdir(parents=True, exist_ok=True)
        if namespace.startswith("caller:"):
            (folder / ".namespace").write_text(namespace)
    for namespace, key, content, description in notes:
        updated = f"2026-11-{1 + int(key.split('-')[1]) % 28:02d}T10:00:00+00:00"
        note = Note(namespace, key, content, description, updated)
        (namespace_folder(root, namespace) / f"{key}.md").write_text(note.render())
    return notes


def bare_atomic_write(path: Path, data: bytes) -> None:
    """The floor: the least a durable replace of a file takes (write a temporary file, fsync
    it, rename it over the old one, fsync the folder), with nothing else around it."""
    tmp = f"{path}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.write(fd, data)
    os.fsync(fd)
    os.close(fd)
    os.replace(tmp, path)
    folder = os.open(path.parent, os.O_RDONLY)
    os.fsync(folder)
    os.close(folder)


def run_now(coroutine: Any) -> Any:
    """Run a coroutine that never waits (memory_write does its work in the event loop) without
    the cost of starting a loop, which would be counted against it."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value
    coroutine.close()
    raise RuntimeError("the coroutine waited: time it with amedian_ms instead")


def interleaved_ms(
    operations: dict[str, Callable[[], Any]], repeat: int, block: int = 10
) -> dict[str, float]:
    """Medians of operations timed in turns of `block` calls each, so that all see the same
    moments of a busy machine (fsync times drift over a run by half or more). Each turn
    starts with an untimed call: an fsync also writes what the previous operation left
    unsynced (a journal file removed, a page written), which is that operation's cost."""
    times: dict[str, list[float]] = {name: [] for name in operations}
    for _ in range(max(1, repeat // block)):
        for name, fn in operations.items():
            fn()
            for _ in range(block):
                began = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - began)
    return {name: statistics.median(kept) * 1000 for name, kept in times.items()}


def amedian_ms(fn: Callable[[], Any], repeat: int) -> float:
    return asyncio.run(_timing.amedian_ms(fn, repeat))


def in_fresh_process(what: str, size: int, root: Path) -> dict[str, float]:
    """Time one thing in a fresh process, as at a real start (not in this one, which holds
    every note and LangGraph's stores), and how much its peak resident memory grows (SQLite's
    memory included, which tracemalloc would not see). `what`: "start" (the memory index
    from the files, writing its cache file as a start does), "cached start" (from that
    cache, then every namespace's files checked, as their first queries do), or the name
    of a LangGraph store taking in the same notes."""
    done = subprocess.run(
        [sys.executable, __file__, "--child", what, "--sizes", str(size), "--root", str(root)],
        capture_output=True,
        text=True,
        check=True,
    )
    figures: dict[str, float] = json.loads(done.stdout)
    return figures


def child(what: str, size: int, root: Path) -> None:
    """The child of `in_fresh_process`: everything imported and made first, then the one
    thing; its figures as JSON on stdout."""
    notes = make_notes(size) if "start" not in what else []
    stores = langgraph_stores(root.parent / f"child-{size}.db") if "start" not in what else {}
    cache = root / ".index.sqlite"
    if what == "start":
        cache.unlink(missing_ok=True)
    index = MemoryIndex(NoteStore(root), cache=cache)
    figures = {}
    peak_before, resident_before = _peak_kib(), _resident_kib()
    began = time.perf_counter()
    if "start" in what:
        index.rebuild()
    else:
        load_langgraph(stores[what], notes)
    figures["ms"] = (time.perf_counter() - began) * 1000
    peak_after = _peak_kib()
    # The peak of the work itself when it set a new one; else (the imports peaked higher)
    # what it still holds, a lower bound.
    grown = (
        peak_after - resident_before
        if peak_after > peak_before
        else _resident_kib() - resident_before
    )
    figures["peak MiB"] = grown / 1024
    if what == "cached start":
        began = time.perf_counter()
        index.refresh(index.store.namespaces())
        figures["checked ms"] = (time.perf_counter() - began) * 1000
    print(json.dumps(figures))


def _peak_kib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux


def _resident_kib() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def load_langgraph(store: Any, notes: list[tuple[str, str, str, str]]) -> None:
    from langgraph.store.base import PutOp

    puts = [
        PutOp(lg_namespace(ns), key, {"content": content, "description": description})
        for ns, key, content, description in notes
    ]
    for start in range(0, len(puts), 500):  # SQLite caps the variables of one statement
        store.batch(puts[start : start + 500])


def langgraph_stores(path: Path) -> dict[str, Any]:
    try:
        from langgraph.store.memory import InMemoryStore
        from langgraph.store.sqlite import SqliteStore
    except ImportError:
        return {}
    connection = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    sqlite_store = SqliteStore(connection)
    sqlite_store.setup()
    return {"LangGraph SqliteStore": sqlite_store, "LangGraph InMemoryStore": InMemoryStore()}


def lg_namespace(namespace: str) -> tuple[str, ...]:
    """The same namespace for LangGraph, whose labels may not hold periods."""
    return tuple(part.replace(".", "_") for part in namespace.split(":", 1))


def run_size(size: int, repeat: int, work: Path) -> list[tuple[str, str, float]]:
    rows: list[tuple[str, str, float]] = []
    folder = work / f"agent-{size}"
    root = folder / ".webagents" / "memory"
    notes = lay_out(root, size)
    os.sync()  # the set-up's writes reach the disk now, not while the start is timed

    # Start-up, in fresh processes: the index made from the files (page cache warm: they were
    # just written), then from the cache file that start wrote.
    cold = in_fresh_process("start", size, root)
    cached = in_fresh_process("cached start", size, root)
    rows.append(("start without a cache", "webagents", cold["ms"]))
    rows.append(("peak memory of that start (MiB)", "webagents", cold["peak MiB"]))
    rows.append(("start from the cache", "webagents", cached["ms"]))
    rows.append(("peak memory of that start (MiB)", "webagents", cached["peak MiB"]))
    # A cache start leaves each unchanged namespace's files to be checked at its first use:
    # what checking them all costs (the first /memory of the owner, say).
    rows.append(
        ("then every namespace's files checked (first use)", "webagents", cached["checked ms"])
    )

    skill = MemorySkill()  # the skill the rest is measured with (from the cache)
    Agent("bench", skills=[skill], model=ScriptedModel(), directory=folder)
    skill.index.refresh(skill.store.namespaces())

    peers = langgraph_stores(work / f"langgraph-{size}.db")
    for name, store in peers.items():
        load_langgraph(store, notes)  # for the rest; timed in a fresh process:
        loaded = in_fresh_process(name, size, root)
        rows.append(("load every note (bulk)", name, loaded["ms"]))
        rows.append(("peak memory of the bulk load (MiB)", name, loaded["peak MiB"]))

    alice = Caller.verified("user7@example.com")
    ctx = Context(agent=AgentInfo("bench", folder), caller=alice)
    text = note_text(random.Random(0))  # made once: only the writes are timed
    floor = folder / "floor"
    floor.mkdir()
    data = Note("x", "k", text, "A note written by the benchmark", "2026-11-29").render().encode()
    target = lg_namespace("caller:user7@example.com")
    writes = {
        "webagents": lambda: run_now(
            skill.write(ctx, "bench-note", text, "A note written by the benchmark")
        ),
        "floor: bare atomic fsync'd file write": lambda: bare_atomic_write(floor / "k.md", data),
    }
    for name, store in peers.items():
        writes[name] = lambda store=store: store.put(
            target, "bench-note", {"content": text, "description": "A note"}
        )
    for name, ms in interleaved_ms(writes, repeat).items():  # in turns: the same disk moments
        rows.append(("durable write (memory_write)", name, ms))

    # memory_write returns once the file is durable; the index takes the note in at the next
    # query. What that costs the query, for one write:
    def write_then_catch_up() -> float:
        run_now(skill.write(ctx, "bench-note", text, "A note written by the benchmark"))
        began = time.perf_counter()
        skill.index.refresh([])  # takes in what is waiting, and nothing else
        return time.perf_counter() - began

    caught_up = statistics.median(write_then_catch_up() for _ in range(repeat)) * 1000
    rows.append(("the next query taking in one write", "webagents", caught_up))
    rows.append(
        ("read (memory_read)", "webagents", amedian_ms(lambda: skill.read(ctx, "note-9"), repeat))
    )
    rows.append(("list (memory_list)", "webagents", amedian_ms(lambda: skill.list(ctx), repeat)))
    rows.append(
        (
            "search (memory_search)",
            "webagents",
            amedian_ms(lambda: skill.search(ctx, QUERY), repeat),
        )
    )

    db = skill.index._db  # the floor: the same FTS5 query, without anything around it
    own = ["caller:user7@example.com", "shared"]
    match = (
        f"nsid:({' OR '.join(namespace_id(ns) for ns in own)}) AND "
        f"{{key description content}}:({fts_query(QUERY)})"
    )
    rows.append(
        (
            "search (memory_search)",
            "floor: the same FTS5 query, bare",
            median_ms(
                lambda: db.execute(
                    "SELECT n.key FROM notes_fts JOIN notes n ON n.id = notes_fts.rowid "
                    "WHERE notes_fts MATCH ? AND n.namespace IN (?, ?) ORDER BY bm25(notes_fts) "
                    "LIMIT 10",
                    (match, *own),
                ).fetchall(),
                repeat,
            ),
        )
    )
    if size >= 10_000:
        rows.append(
            (
                "build the ## Memory block",
                "webagents",
                median_ms(lambda: skill.block(rights_of(alice)), repeat),
            )
        )

    for name, store in peers.items():
        rows.append(
            (
                "read (memory_read)",
                name,
                median_ms(lambda store=store: store.get(target, "note-9"), repeat),
            )
        )
        rows.append(
            (
                "list (memory_list)",
                name,
                median_ms(lambda store=store: store.search(target, limit=1000), repeat),
            )
        )
        rows.append(
            (
                "search (memory_search)",
                name + ": namespace search (no ranking)",
                median_ms(lambda store=store: store.search(target, limit=10), repeat),
            )
        )
        rows.append(
            (
                "search (memory_search)",
                name + ": filter search (exact field)",
                median_ms(
                    lambda store=store: store.search(
                        target, filter={"description": "Note 9 about " + WORDS[0]}, limit=10
                    ),
                    repeat,
                ),
            )
        )
    skill.index.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000, 100_000])
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--child", help=argparse.SUPPRESS)  # see in_fresh_process
    parser.add_argument("--root", type=Path, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.child:
        child(options.child, options.sizes[0], options.root)
        return
    print(
        f"# bench/memory.py, {time.strftime('%Y-%m-%d')}, {platform.machine()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}, "
        f"median of {options.repeat} (ms unless said)\n"
    )
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp:
        for size in options.sizes:
            print(f"\n## {size} notes\n\n| operation | who | result |\n|---|---|---:|")
            for operation, who, value in run_size(size, options.repeat, Path(tmp)):
                print(f"| {operation} | {who} | {value:.3f} |", flush=True)


if __name__ == "__main__":
    main()
