"""The embedded SQLite database with several processes (or threads) at once: a transaction
that reads, then writes after another writer committed, still succeeds."""

from __future__ import annotations

import threading
from pathlib import Path

from sqlalchemy import select

from webagents.portal.db.engine import make_engine, make_sessions
from webagents.portal.db.migrate import upgrade
from webagents.portal.db.tables import SignInAttempt
from webagents.portal.settings import resolve_settings


def test_p1_sqlite_read_then_write_survives_a_writer_in_between(tmp_path: Path) -> None:
    settings = resolve_settings(f"sqlite:///{tmp_path / 'portal.db'}")
    first, second = make_engine(settings), make_engine(settings)  # as two processes would
    upgrade(first)
    errors: list[BaseException] = []

    def other_writer() -> None:
        try:
            with make_sessions(second)() as session, session.begin():
                session.add(SignInAttempt(username="bob", address="b"))
        except BaseException as exc:
            errors.append(exc)

    try:
        with make_sessions(first)() as session, session.begin():
            assert session.scalars(select(SignInAttempt)).all() == []  # read first
            writer = threading.Thread(target=other_writer)
            writer.start()
            writer.join(timeout=2)  # done at once if it did not have to wait for us
            session.add(SignInAttempt(username="alice", address="a"))  # then write
        writer.join(timeout=60)
        assert errors == []
        with make_sessions(first)() as session:
            names = sorted(a.username for a in session.scalars(select(SignInAttempt)))
        assert names == ["alice", "bob"]
    finally:
        first.dispose()
        second.dispose()
