"""The embedding queue with real commits, on SQLite and PostgreSQL: it is the database (a new
worker, as after a restart or with another model, finds every note due), its idle look takes
no write lock, a note changed while it was embedded is embedded again, and a write wakes the
worker only once it is committed."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator, Sequence

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session, sessionmaker

from webagents.portal.admin import open_database
from webagents.portal.app import create_app
from webagents.portal.db.engine import make_sessions
from webagents.portal.db.tables import MemoryEntry, MemoryVector
from webagents.portal.memory import service
from webagents.portal.memory.embedding_queue import EmbeddingWorker
from webagents.portal.memory.repository import MemoryStore
from webagents.portal.settings import PortalSettings

from .memory_helpers import Published, SynonymEmbedder, publish

URL = "/api/storage/memory-scoped"


@pytest.fixture
def engine(fresh_database_url: str) -> Iterator[Engine]:
    made = open_database(PortalSettings(database_url=fresh_database_url))
    yield made
    made.dispose()


def _published(sessions: sessionmaker[Session], owner: str = "alice") -> Published:
    with sessions() as session:
        return publish(session, owner, f"{owner}-helper")  # it commits


def _put(sessions: sessionmaker[Session], agent: Published, key: str, content: str) -> None:
    with sessions() as session:
        store = MemoryStore.for_agent(session, agent.scope)
        service.put(store, namespace="owner", key=key, content=content, by=service.BY_AGENT)
        session.commit()


def _drain(worker: EmbeddingWorker) -> list[int]:
    """Rounds until one finds nothing: each round's count."""
    rounds = []
    while (done := worker.run_once()) != 0:
        rounds.append(done)
        assert len(rounds) < 100, "the queue never emptied"
    return rounds


def _vectors(sessions: sessionmaker[Session]) -> dict[str, tuple[str, bool]]:
    """Each live entry's key: (its vector's model, whether the vector is of its latest change)."""
    with sessions() as session:
        rows = session.execute(
            select(
                MemoryEntry.key, MemoryVector.model, MemoryVector.entry_cursor, MemoryEntry.cursor
            )
            .join(MemoryVector, MemoryVector.entry_id == MemoryEntry.id)
            .where(MemoryEntry.deleted_at.is_(None))
        )
        return {key: (model, made == now) for key, model, made, now in rows}


class OtherModel(SynonymEmbedder):
    name = "test-synonyms-v2"


def test_p5_the_queue_is_the_database_a_new_worker_embeds_everything_due(
    engine: Engine,
) -> None:
    sessions = make_sessions(engine)
    alice, bob = _published(sessions, "alice"), _published(sessions, "bob")
    for n in range(3):
        _put(sessions, alice, f"a{n}", f"a puppy number {n}")
    _put(sessions, bob, "b0", "a car")
    first = SynonymEmbedder()
    assert sorted(_drain(EmbeddingWorker(sessions, first))) == [1, 3]  # a batch per agent
    assert _vectors(sessions) == dict.fromkeys(("a0", "a1", "a2", "b0"), (first.name, True))

    # Written while no worker ran (a restart): a new worker finds it, and only it.
    _put(sessions, alice, "a3", "a holiday")
    again = SynonymEmbedder()
    assert _drain(EmbeddingWorker(sessions, again)) == [1]
    assert again.calls == [["a3\n\na holiday"]]

    # Another model: every note is due again, each agent's in one batch.
    other = OtherModel()
    assert sorted(_drain(EmbeddingWorker(sessions, other))) == [1, 4]
    assert _vectors(sessions) == dict.fromkeys(("a0", "a1", "a2", "a3", "b0"), (other.name, True))


def test_p5_a_worker_sees_writes_of_other_processes_without_being_woken(engine: Engine) -> None:
    sessions = make_sessions(engine)
    agent = _published(sessions)
    embedder = SynonymEmbedder()
    worker = EmbeddingWorker(sessions, embedder)
    _put(sessions, agent, "pets", "a puppy")
    assert _drain(worker) == [1]
    assert _drain(worker) == []  # nothing changed: nothing read but the feeds
    _put(sessions, agent, "pets", "a dog and a car")  # an overwrite, as another process's
    _put(sessions, agent, "cars", "a sedan")
    assert _drain(worker) == [2]
    assert embedder.calls == [["pets\n\na puppy"], ["pets\n\na dog and a car", "cars\n\na sedan"]]
    assert _vectors(sessions) == {"pets": (embedder.name, True), "cars": (embedder.name, True)}


def test_p5_the_workers_idle_look_takes_no_write_lock(engine: Engine) -> None:
    """A writer holds its transaction open (on SQLite, the write lock): the worker's look
    neither waits for it (it would wait out the 30 s busy timeout) nor sees its write."""
    sessions = make_sessions(engine)
    agent = _published(sessions)
    worker = EmbeddingWorker(sessions, SynonymEmbedder())
    with sessions() as writer:
        store = MemoryStore.for_agent(writer, agent.scope)
        service.put(store, namespace="owner", key="pets", content="a puppy", by=service.BY_AGENT)
        writer.flush()
        found: list[int] = []
        look = threading.Thread(target=lambda: found.append(worker.run_once()), daemon=True)
        look.start()
        look.join(timeout=15)
        assert not look.is_alive(), "the worker's look waited for the writer's lock"
        assert found == [0]
        writer.commit()
    assert _drain(worker) == [1]


def test_p5_a_note_changed_while_it_is_embedded_is_embedded_again(engine: Engine) -> None:
    sessions = make_sessions(engine)
    agent = _published(sessions)
    _put(sessions, agent, "pets", "a puppy")
    _put(sessions, agent, "cars", "a car")

    class ChangingMeanwhile(SynonymEmbedder):
        def embed(self, texts: Sequence[str]) -> list[list[float]]:
            if len(self.calls) == 0:
                _put(sessions, agent, "pets", "a hound")  # committed while embedding
            return super().embed(texts)

    embedder = ChangingMeanwhile()
    assert _drain(EmbeddingWorker(sessions, embedder)) == [2, 1]
    assert embedder.calls == [["pets\n\na puppy", "cars\n\na car"], ["pets\n\na hound"]]
    assert _vectors(sessions) == {"pets": (embedder.name, True), "cars": (embedder.name, True)}


class Wakes:
    """A stand-in worker: what the database showed at each wake."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self.sessions = sessions
        self.seen: list[list[str]] = []

    def wake(self) -> None:
        with self.sessions() as session:
            self.seen.append(sorted(session.scalars(select(MemoryEntry.key))))


def test_p5_a_write_wakes_the_worker_once_it_is_committed_and_a_refused_one_does_not(
    engine: Engine, fresh_database_url: str
) -> None:
    sessions = make_sessions(engine)
    agent = _published(sessions)
    app = create_app(
        PortalSettings(database_url=fresh_database_url),
        engine=engine,
        embedder=SynonymEmbedder(),
        embedding_worker=False,
    )
    wakes = Wakes(sessions)
    with TestClient(app) as api:
        app.state.embedding_worker = wakes
        body = {"namespace": "owner", "key": "pets", "content": "a puppy"}
        assert api.put(URL, headers=agent.headers, json=body).status_code == 200
        assert wakes.seen == [["pets"]]  # woken after the commit: the note was there
        stale = {**body, "key": "cars", "content": "a car", "content_sha256": "0" * 64}
        assert api.put(URL, headers=agent.headers, json=stale).status_code == 409
        lines = {"namespace": "owner", "lines": [{"op": "put", "key": "cars", "content": "a car"}]}
        pushed = api.post(URL, headers=agent.headers, params={"action": "sync"}, json=lines)
        assert pushed.status_code == 200, pushed.text
    assert wakes.seen == [["pets"], ["cars", "pets"]]
    assert uuid.UUID(str(agent.scope.agent_id))  # the agent the writes were for


class Rounds(EmbeddingWorker):
    """The real worker, counting its rounds (so a test knows its first look is over)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.rounds: list[int] = []
        self.looked = threading.Event()

    def run_once(self) -> int:
        done = super().run_once()
        self.rounds.append(done)
        self.looked.set()
        return done


def test_p5_a_burst_of_writes_is_embedded_in_one_batch_after_the_wakes_settle(
    engine: Engine,
) -> None:
    """Woken, the worker waits for the burst to settle (here: for `enough` wakes; the settle
    time is out of reach) and embeds the notes together, not one model run per write."""
    sessions = make_sessions(engine)
    agent = _published(sessions)
    embedder = SynonymEmbedder()
    worker = Rounds(sessions, embedder, idle=3600, settle=3600, enough=3)
    worker.start()
    try:
        assert worker.looked.wait(15), "the worker's first look never ran"
        assert worker.rounds == [0]
        for key, content in (("pets", "a puppy"), ("cars", "a sedan"), ("home", "a house")):
            _put(sessions, agent, key, content)
            worker.wake()
        for _ in range(300):  # bounded: the third wake ends the wait at once
            if embedder.calls:
                break
            threading.Event().wait(0.05)
        assert embedder.calls == [["pets\n\na puppy", "cars\n\na sedan", "home\n\na house"]]
    finally:
        worker.stop()
    assert not worker._thread.is_alive()
    assert _vectors(sessions) == dict.fromkeys(("pets", "cars", "home"), (embedder.name, True))


def test_p5_a_worker_stopped_while_writes_settle_leaves_them_due(engine: Engine) -> None:
    """Nothing waits in memory: the notes a stopped worker had not embedded yet are still
    due in the database, and the next worker (a restart) embeds them."""
    sessions = make_sessions(engine)
    agent = _published(sessions)
    worker = Rounds(sessions, SynonymEmbedder(), idle=3600, settle=3600, enough=100)
    worker.start()
    assert worker.looked.wait(15), "the worker's first look never ran"
    _put(sessions, agent, "pets", "a puppy")
    worker.wake()
    worker.stop()  # during the settle wait: it ends it
    assert not worker._thread.is_alive()
    assert worker.rounds == [0]
    later = SynonymEmbedder()
    assert _drain(EmbeddingWorker(sessions, later)) == [1]
    assert _vectors(sessions) == {"pets": (later.name, True)}


def _several_workers_need_postgresql(engine: Engine) -> None:
    if engine.dialect.name != "postgresql":
        pytest.skip("several embedding workers need PostgreSQL (SQLite: one process works it)")


class Holding(SynonymEmbedder):
    """An embedder whose first call waits until `release` is set: a worker holding a batch."""

    def __init__(self) -> None:
        super().__init__()
        self.holding = threading.Event()
        self.release = threading.Event()

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not self.calls:
            self.holding.set()
            assert self.release.wait(30), "the test never released the held batch"
        return super().embed(texts)


def test_p5_workers_on_postgresql_embed_disjoint_batches_and_each_note_once(
    engine: Engine,
) -> None:
    """Two workers at once (as two `webagents portal worker` processes): while one holds a
    batch, the other takes the next entries, not the same ones; in the end every note was
    embedded once, by one of them."""
    _several_workers_need_postgresql(engine)
    sessions = make_sessions(engine)
    agent = _published(sessions)
    for n in range(40):
        _put(sessions, agent, f"n{n:02}", f"a puppy number {n}")
    held, other = Holding(), SynonymEmbedder()
    first = threading.Thread(target=EmbeddingWorker(sessions, held).run_once, daemon=True)
    first.start()
    try:
        assert held.holding.wait(30), "the first worker never took a batch"
        second = EmbeddingWorker(sessions, other)
        assert second.run_once() == 8  # the 8 entries the first one's batch of 32 left
        assert _drain(second) == []  # the held 32 are not its to take
    finally:
        held.release.set()
        first.join(timeout=30)
    assert not first.is_alive()
    texts = [text for call in held.calls + other.calls for text in call]
    assert sorted(texts) == sorted(f"n{n:02}\n\na puppy number {n}" for n in range(40))
    assert [len(call) for call in held.calls] == [32]
    assert _vectors(sessions) == {f"n{n:02}": (held.name, True) for n in range(40)}


class Failing(Holding):
    """A held batch that then fails (the model endpoint down, or the worker's process dies)."""

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        super().embed(texts)
        raise RuntimeError("the model endpoint is down")


def test_p5_a_batch_whose_worker_fails_is_left_due_for_another_worker(engine: Engine) -> None:
    """The other worker skipped the held entries; once the holder failed, it embeds them
    (its cursor stopped before them, so it looks again)."""
    _several_workers_need_postgresql(engine)
    sessions = make_sessions(engine)
    agent = _published(sessions)
    for n in range(40):
        _put(sessions, agent, f"n{n:02}", f"a car number {n}")
    failing, other = Failing(), SynonymEmbedder()
    errors: list[BaseException] = []

    def hold_then_fail() -> None:
        try:
            EmbeddingWorker(sessions, failing).run_once()
        except RuntimeError as exc:
            errors.append(exc)

    first = threading.Thread(target=hold_then_fail, daemon=True)
    first.start()
    second = EmbeddingWorker(sessions, other)
    try:
        assert failing.holding.wait(30), "the first worker never took a batch"
        assert _drain(second) == [8]
    finally:
        failing.release.set()
        first.join(timeout=30)
    assert [str(e) for e in errors] == ["the model endpoint is down"]
    assert _drain(second) == [32]  # the failed batch, due again
    assert _vectors(sessions) == {f"n{n:02}": (other.name, True) for n in range(40)}
