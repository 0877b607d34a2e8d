"""Fixtures of the portal tests: a migrated database per kind (once per session), each test
in an outer transaction rolled back at its end, the app on that transaction, and fresh
databases for tests that drive real `webagents portal` processes (copies of a database
migrated once per session: a migration costs a process most of a second) or migrate one
themselves (empty ones)."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from webagents.portal.accounts import service
from webagents.portal.app import create_app
from webagents.portal.db.engine import make_engine
from webagents.portal.db.migrate import upgrade
from webagents.portal.db.requests import read_request_session, request_session
from webagents.portal.scope import AccountScope
from webagents.portal.settings import PortalSettings

from .databases import PGVECTOR, PostgresServer
from .processes import Served

PASSWORD = "correct horse battery staple"


def _new_database(kind: str, folder: Path, request: pytest.FixtureRequest) -> str:
    if kind == "sqlite":
        return f"sqlite+pysqlite:///{folder / 'portal.db'}"
    fixture = "pgvector_server" if kind == PGVECTOR else "postgres_server"
    server: PostgresServer = request.getfixturevalue(fixture)
    return server.new_database()


@pytest.fixture(scope="session")
def migrated_engine(
    database_kind: str, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Engine]:
    """One database per kind, migrated once for the whole session."""
    folder = tmp_path_factory.mktemp(f"portal-{database_kind}")
    engine = make_engine(PortalSettings(database_url=_new_database(database_kind, folder, request)))
    upgrade(engine)
    yield engine
    engine.dispose()


@pytest.fixture
def db(migrated_engine: Engine) -> Iterator[Session]:
    """The test's session, inside an outer transaction that is rolled back at the end: what
    the app commits is only a savepoint released (SQLite's BEGIN is emitted by the engine)."""
    connection = migrated_engine.connect()
    outer = connection.begin()
    session = Session(
        bind=connection, join_transaction_mode="create_savepoint", expire_on_commit=False
    )
    try:
        yield session
    finally:
        session.close()
        outer.rollback()
        connection.close()


@pytest.fixture
def settings(migrated_engine: Engine) -> PortalSettings:
    # The address TestClient requests come to, as `portal serve --public-url` would give it.
    return PortalSettings(
        database_url=migrated_engine.url.render_as_string(hide_password=False),
        public_url="http://testserver",
    )


def make_client(
    settings: PortalSettings, engine: Engine, db: Session, address: str = "testclient"
) -> TestClient:
    """A browser (cookies kept, redirects not followed) on an app that uses the test's session,
    its requests coming from `address`."""
    app = create_app(settings, engine=engine)

    def test_session() -> Iterator[Session]:
        try:
            yield db
        except BaseException:
            db.rollback()
            raise
        db.commit()

    app.dependency_overrides[request_session] = test_session
    app.dependency_overrides[read_request_session] = test_session
    return TestClient(app, follow_redirects=False, client=(address, 50000))


@pytest.fixture
def client(settings: PortalSettings, migrated_engine: Engine, db: Session) -> Iterator[TestClient]:
    with make_client(settings, migrated_engine, db) as browser:
        yield browser


@pytest.fixture
def other_client(
    settings: PortalSettings, migrated_engine: Engine, db: Session
) -> Iterator[TestClient]:
    """A second browser, with cookies of its own."""
    with make_client(settings, migrated_engine, db) as browser:
        yield browser


@pytest.fixture(scope="session")
def migrated_template(
    database_kind: str, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> str:
    """A database of this kind at the newest schema, made once per session (per worker), that
    `fresh_database_url` copies; nothing stays connected to it."""
    folder = tmp_path_factory.mktemp(f"template-{database_kind}")
    url = _new_database(database_kind, folder, request)
    engine = make_engine(PortalSettings(database_url=url))
    try:
        upgrade(engine)
    finally:
        engine.dispose()  # SQLite: the last connection's close checkpoints its WAL into the file
    return url


def copy_of_template(
    database_kind: str, migrated_template: str, folder: Path, request: pytest.FixtureRequest
) -> str:
    """A new database of this kind at the newest schema, with nothing in it: a copy of
    `migrated_template` (SQLite: of its file, in `folder`; PostgreSQL: CREATE DATABASE ...
    TEMPLATE)."""
    if database_kind == "sqlite":
        copy = folder / "portal.db"
        shutil.copyfile(make_url(migrated_template).database or "", copy)
        return f"sqlite+pysqlite:///{copy}"
    fixture = "pgvector_server" if database_kind == PGVECTOR else "postgres_server"
    server: PostgresServer = request.getfixturevalue(fixture)
    return server.new_database(template=migrated_template)


@pytest.fixture
def fresh_database_url(
    database_kind: str, migrated_template: str, tmp_path: Path, request: pytest.FixtureRequest
) -> str:
    """A new database of this kind at the newest schema, with nothing in it, for real
    processes (they commit for real)."""
    folder = tmp_path / "db"
    folder.mkdir()
    return copy_of_template(database_kind, migrated_template, folder, request)


@pytest.fixture
def empty_database_url(database_kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """A new empty database of this kind (no schema), for the tests of the migrations."""
    folder = tmp_path / "empty-db"
    folder.mkdir()
    return _new_database(database_kind, folder, request)


def make_account(db: Session, username: str = "alice", password: str = PASSWORD) -> AccountScope:
    scope = service.add_user(db, username, password)
    db.flush()
    return scope


_CSRF = re.compile(r'name="csrf_token" value="([0-9a-f]{64})"')


def csrf_of(html: str) -> str:
    found = _CSRF.search(html)
    assert found, f"no CSRF token on the page:\n{html}"
    return found.group(1)


def form_token(client: TestClient, path: str = "/signin") -> str:
    page = client.get(path)
    assert page.status_code == 200, page.text
    return csrf_of(page.text)


def sign_in(client: TestClient, username: str = "alice", password: str = PASSWORD) -> None:
    answer = client.post(
        "/signin",
        data={"csrf_token": form_token(client), "username": username, "password": password},
    )
    assert (answer.status_code, answer.headers.get("location")) == (303, "/"), answer.text


@pytest.fixture
def served(tmp_path: Path, fresh_database_url: str) -> Iterator[Served]:
    """A real `portal serve` with its access log on: the Connect tests wait for the agent's
    key fetch in it (test_connect_served._ready)."""
    server = Served(tmp_path, "--database", fresh_database_url, "--access-log")
    try:
        yield server
    finally:
        server.stop()
