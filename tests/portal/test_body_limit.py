"""P5 and every route: the portal's cap on a request body (body_limit.py, an ASGI
middleware, before any route parses JSON or checks a credential), on SQLite and PostgreSQL: a
declared Content-Length over the cap answers 413 at once, a chunked body is cut at the cap
with the same 413, and a body under it reaches the route (which refuses the anonymous caller
401 as before)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from webagents.portal.body_limit import too_large_message
from webagents.portal.settings import PortalSettings

from .conftest import make_client

URL = "/api/storage/memory-scoped"
CAP = 10 * 1024 * 1024


def _too_large(cap: int) -> dict[str, object]:
    return {
        "error": {
            "message": too_large_message(cap),
            "type": "invalid_request_error",
            "param": None,
            "code": "body_too_large",
        }
    }


def _body(size: int) -> bytes:
    head, tail = b'{"namespace":"owner","key":"k","content":"', b'"}'
    return head + b"a" * (size - len(head) - len(tail)) + tail


def test_p5_an_anonymous_put_over_the_default_body_cap_is_refused_413(
    settings: PortalSettings, migrated_engine: Engine, db: Session
) -> None:
    assert settings.max_body_bytes == CAP
    with make_client(settings, migrated_engine, db) as client:
        answer = client.put(
            URL, content=_body(CAP + 1), headers={"content-type": "application/json"}
        )
        assert answer.status_code == 413
        assert answer.json() == _too_large(CAP)


def test_body_limit_a_body_without_content_length_is_cut_at_the_cap(
    settings: PortalSettings, migrated_engine: Engine, db: Session
) -> None:
    small = dataclasses.replace(settings, max_body_bytes=1000)

    def chunks() -> Iterator[bytes]:
        for _ in range(50):
            yield b"a" * 300

    with make_client(small, migrated_engine, db) as client:
        for path in (URL, "/api/agents/x/conversations"):
            answer = client.post(
                path, content=chunks(), headers={"content-type": "application/json"}
            )
            assert answer.status_code == 413
            assert answer.json() == _too_large(1000)


def test_body_limit_a_body_under_the_cap_reaches_the_route(
    settings: PortalSettings, migrated_engine: Engine, db: Session
) -> None:
    small = dataclasses.replace(settings, max_body_bytes=1000)
    with make_client(small, migrated_engine, db) as client:
        declared = client.put(
            URL, content=_body(1001), headers={"content-type": "application/json"}
        )
        assert (declared.status_code, declared.json()["error"]["code"]) == (413, "body_too_large")
        under = client.put(URL, content=_body(1000), headers={"content-type": "application/json"})
        assert under.status_code == 401
        assert under.json()["error"]["code"] == "unauthorized"
