"""P5, P9: what the databases can store (storable.py), on SQLite and PostgreSQL: text
neither database can keep (a NUL, half of a surrogate pair) is refused 400 `unstorable_text`
by the memory store (P5) and inside a chat message's tool_calls (P9), never a 500 and never a
chat that cannot be read again; a `since` beyond int64 and an `at` outside the years a
datetime can convert are 400s too."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from webagents.portal.accounts import service as accounts
from webagents.portal.settings import PortalSettings

from .conftest import make_account, make_client
from .memory_helpers import publish

URL = "/api/storage/memory-scoped"
NUL = "holds a NUL character (U+0000), which the portal cannot keep: remove it or replace it (with U+FFFD, say) and send the call again"  # noqa: E501
HALF = "holds half of a UTF-16 surrogate pair, which is not text: send valid Unicode"


def _unstorable(where: str, what: str) -> dict[str, Any]:
    return {
        "error": {
            "message": f"{where} {what}",
            "type": "invalid_request_error",
            "param": None,
            "code": "unstorable_text",
        }
    }


@pytest.fixture
def api(settings: PortalSettings, migrated_engine: Engine, db: Session) -> Iterator[TestClient]:
    with make_client(settings, migrated_engine, db) as client:
        yield client


def test_p5_nul_and_lone_surrogates_in_a_note_are_refused_400(api: TestClient, db: Session) -> None:
    agent = publish(db)
    headers = {**agent.headers, "content-type": "application/json"}
    cases = [
        (b'{"namespace":"owner","key":"k","content":"a\\u0000b"}', "content", NUL),
        (b'{"namespace":"owner","key":"k","content":"x\\ud800"}', "content", HALF),
        (
            b'{"namespace":"owner","key":"k","content":"ab","description":"d\\u0000"}',
            "description",
            NUL,
        ),
        (
            b'{"namespace":"owner","key":"k","content":"ab","description":"\\udfff"}',
            "description",
            HALF,
        ),
        (b'{"namespace":"owner","key":"k","content":"ab","source":"s\\u0000"}', "source", NUL),
    ]
    for body, where, what in cases:
        answer = api.put(URL, content=body, headers=headers)
        assert (answer.status_code, answer.json()) == (400, _unstorable(where, what)), body
    synced = api.post(
        URL + "?action=sync",
        content=b'{"namespace":"owner","lines":[{"op":"put","key":"k","content":"\\u0000"}]}',
        headers=headers,
    )
    assert (synced.status_code, synced.json()) == (400, _unstorable("content", NUL))
    for name, value, what in [
        ("prefix", "a\x00", NUL),
        ("excludeSource", "\x00", NUL),
        ("q", "word\x00", NUL),
    ]:
        action = "search" if name == "q" else "list"
        answer = api.get(
            URL, params={"action": action, "namespace": "owner", name: value}, headers=headers
        )
        assert (answer.status_code, answer.json()) == (400, _unstorable(name, what)), name
    listed = api.get(URL, params={"action": "list", "namespace": "owner"}, headers=headers)
    assert listed.json() == {"entries": []}


def test_p5_since_beyond_int64_and_at_outside_the_years_are_400(
    api: TestClient, db: Session
) -> None:
    agent = publish(db)
    since = api.get(URL, params={"action": "sync", "since": 2**63}, headers=agent.headers)
    assert (since.status_code, since.json()["error"]["code"]) == (400, "bad_cursor")
    for at in ("9999-12-31T23:59:59-14:00", "0001-01-01T00:00:00+14:00"):
        body = {"namespace": "owner", "key": "k", "content": "c", "at": at}
        answer = api.put(URL, json=body, headers=agent.headers)
        year = at[:4].lstrip("0")
        assert (answer.status_code, answer.json()) == (
            400,
            {
                "error": {
                    "message": f"at is in the year {year}: give a time between the years 1900 "
                    "and 9000 (for example 2026-01-31T12:00:00Z), or null for the portal's time",
                    "type": "invalid_request_error",
                    "param": None,
                    "code": "bad_time",
                }
            },
        )
    fine = api.put(
        URL,
        json={"namespace": "owner", "key": "k", "content": "c", "at": "2026-01-31T12:00:00Z"},
        headers=agent.headers,
    )
    assert fine.status_code == 200, fine.text


def test_p9_unstorable_text_inside_tool_calls_is_refused_400(api: TestClient, db: Session) -> None:
    scope = make_account(db, "alice")
    headers = {
        "Authorization": f"Bearer {accounts.create_key(db, scope, 'cli').key}",
        "content-type": "application/json",
    }
    agent_id = api.post("/api/agents", headers=headers, json={"name": "helper"}).json()["agent"][
        "id"
    ]
    where = "messages[1].tool_calls[0].function"
    cases = [
        (b'"arguments":"\\ud800"', f"{where}.arguments", HALF),
        (b'"arguments":"{}","x\\u0000":1', f"{where} (a key)", NUL),
        (b'"arguments":"a\\u0000"', f"{where}.arguments", NUL),
    ]
    for inside, path, what in cases:
        body = (
            b'{"sessionId":"s1","messages":[{"role":"user","content":"hi"},{"role":"assistant",'
            b'"tool_calls":[{"id":"c1","type":"function","function":{"name":"x",'
            + inside
            + b"}}]}]}"
        )
        answer = api.post(f"/api/agents/{agent_id}/conversations", content=body, headers=headers)
        assert (answer.status_code, answer.json()) == (400, _unstorable(path, what)), inside
    listed = api.get(f"/api/agents/{agent_id}/conversations", headers=headers)
    assert listed.json() == {"conversations": []}
