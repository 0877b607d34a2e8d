"""A client of the memory store's API in tests."""

from __future__ import annotations

from collections.abc import Iterator

from fastapi.testclient import TestClient
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from webagents.portal.app import create_app
from webagents.portal.db.requests import read_request_session, request_session
from webagents.portal.settings import PortalSettings

URL = "/api/storage/memory-scoped"


def store_client(
    settings: PortalSettings, engine: Engine, db: Session, embedder: object
) -> TestClient:
    """The app on the test's session, with `embedder` and no worker thread (the tests work
    the embedding queue themselves)."""
    app = create_app(settings, engine=engine, embedder=embedder, embedding_worker=False)

    def test_session() -> Iterator[Session]:
        try:
            yield db
        except BaseException:
            db.rollback()
            raise
        db.commit()

    app.dependency_overrides[request_session] = test_session
    app.dependency_overrides[read_request_session] = test_session
    return TestClient(app)
