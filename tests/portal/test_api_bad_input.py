"""Bad input to the portal's API is a 400 that says what to send, never a 500, and nothing of it
is kept (issue 21's findings, on SQLite and PostgreSQL): every JSON body is read at most 512
arrays and objects deep and without NaN or Infinity (json_body); an agent's text fields hold
no NUL, a chat's tool_calls no JSON nested over 64 deep (storable; skills are checked with
their shape, by skills_field); a name no agent can have finds no agent; a chat stored deep
before the bound still reads."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from webagents.portal.accounts import service as accounts
from webagents.portal.app import create_app
from webagents.portal.db.engine import make_engine
from webagents.portal.db.migrate import upgrade
from webagents.portal.db.tables import Agent, Chat, ChatMessage
from webagents.portal.settings import PortalSettings

from .conftest import make_account

NUL = (
    "holds a NUL character (U+0000), which the portal cannot keep: remove it or replace it "
    "(with U+FFFD, say) and send the call again"
)
TOO_DEEP_STORED = "nests JSON arrays and objects more than 64 deep, more than the portal keeps: send a flatter value"  # noqa: E501
TOO_DEEP = (
    "the request body nests JSON arrays and objects more than 512 deep, more than the portal "
    "reads: send a flatter body"
)
NOT_A_NUMBER = (
    "the request body holds NaN, Infinity or a number past a double's range, which the portal "
    "cannot keep: send a finite number, or null for none"
)


def _error(message: str, code: str) -> dict[str, Any]:
    return {
        "error": {
            "message": message,
            "type": "invalid_request_error",
            "param": None,
            "code": code,
        }
    }


def _bearer(db: Session, username: str = "alice") -> dict[str, str]:
    scope = make_account(db, username)
    key = accounts.create_key(db, scope, "cli").key
    db.commit()  # a savepoint released: a refused request's rollback keeps the key
    return {"Authorization": f"Bearer {key}", "content-type": "application/json"}


@contextmanager
def _committed(url: str) -> Iterator[tuple[TestClient, dict[str, str]]]:
    """The app on a database of its own, alice's key committed: the public endpoint reads it
    in sessions of its own, not in the test's transaction."""
    settings = PortalSettings(database_url=url)
    engine = make_engine(settings)
    upgrade(engine)
    try:
        with Session(engine) as db:
            headers = _bearer(db)
        with TestClient(create_app(settings, engine=engine, embedder=None)) as client:
            yield client, headers
    finally:
        engine.dispose()


def _nested(depth: int, inner: str = "1") -> str:
    return "[" * depth + inner + "]" * depth


def _rows(db: Session) -> tuple[int, int, int]:
    return tuple(  # type: ignore[return-value]
        db.scalar(select(func.count()).select_from(table)) for table in (Agent, Chat, ChatMessage)
    )


def test_p4_agent_text_a_database_cannot_keep_is_refused_400_and_not_kept(
    client: TestClient, db: Session
) -> None:
    alice = _bearer(db)
    cases = [
        ('"description":"a\\u0000b"', "description", NUL),
        ('"instructions":"be\\u0000brief"', "instructions", NUL),
        ('"model":"openai/\\u0000"', "model", NUL),
    ]
    before = _rows(db)
    for field, where, what in cases:
        made = client.post("/api/agents", headers=alice, content=f'{{"name":"helper",{field}}}')
        assert (made.status_code, made.json()) == (
            400,
            _error(f"{where} {what}", "unstorable_text"),
        ), field
    assert _rows(db) == before
    made = client.post("/api/agents", headers=alice, json={"name": "helper"})
    agent_id = made.json()["agent"]["id"]
    for field, where, what in cases:
        patched = client.patch(f"/api/agents/{agent_id}", headers=alice, content=f"{{{field}}}")
        assert (patched.status_code, patched.json()) == (
            400,
            _error(f"{where} {what}", "unstorable_text"),
        ), field
    kept = client.get(f"/api/agents/{agent_id}", headers=alice).json()["agent"]
    assert (kept["description"], kept["instructions"], kept["model"], kept["skills"]) == (
        "",
        "",
        None,
        [],
    )


def test_p4_nan_and_infinity_in_any_body_are_refused_400(client: TestClient, db: Session) -> None:
    alice = _bearer(db)
    before = _rows(db)
    for body in [
        '{"name":"helper","skills":[NaN]}',
        '{"name":"helper","skills":[{"memory":{"budget":Infinity}}]}',
        '{"name":"helper","skills":[-Infinity]}',
        '{"name":"helper","skills":[{"memory":{"budget":1e400}}]}',  # Python reads inf
    ]:
        made = client.post("/api/agents", headers=alice, content=body)
        assert (made.status_code, made.json()) == (400, _error(NOT_A_NUMBER, "bad_json")), body
    made = client.post("/api/agents", headers=alice, json={"name": "helper"})
    agent_id = made.json()["agent"]["id"]
    chat = (
        '{"sessionId":"s","messages":[{"role":"assistant","tool_calls":[{"id":"c","type":'
        '"function","function":{"name":"f","arguments":"{}"},"score":NaN}]}]}'
    )
    recorded = client.post(f"/api/agents/{agent_id}/conversations", headers=alice, content=chat)
    assert (recorded.status_code, recorded.json()) == (400, _error(NOT_A_NUMBER, "bad_json"))
    # The word inside a string is text, not a number: taken.
    named = client.patch(f"/api/agents/{agent_id}", headers=alice, json={"description": "NaN"})
    assert (named.status_code, named.json()["agent"]["description"]) == (200, "NaN")
    assert _rows(db) == (before[0] + 1, before[1], before[2])


def test_p12_a_body_nested_past_the_portals_depth_is_refused_400_before_any_route(
    fresh_database_url: str,
) -> None:
    with _committed(fresh_database_url) as (client, alice):
        _nested_past_the_depth(client, alice)


def _nested_past_the_depth(client: TestClient, alice: dict[str, str]) -> None:
    for url in ["/agents/helper/chat/completions", "/api/agents", "/api/agents/token"]:
        for depth in (513, 1100, 5000):
            answer = client.post(url, headers=alice, content=_nested(depth))
            assert (answer.status_code, answer.json()) == (400, _error(TOO_DEEP, "bad_json")), (
                url,
                depth,
            )
    # Whatever the content type says, the public endpoint reads JSON: checked all the same.
    plain = client.post(
        "/agents/helper/chat/completions",
        headers={**alice, "content-type": "text/plain"},
        content=_nested(5000),
    )
    assert (plain.status_code, plain.json()) == (400, _error(TOO_DEEP, "bad_json"))


def test_p12_the_public_endpoint_checks_a_body_sent_as_a_form_as_the_json_it_reads(
    fresh_database_url: str,
) -> None:
    """The public endpoint reads its body as JSON whatever the content type says, a form's
    too: the body check must see it as well (a form's type let it pass, and 5,000 levels
    were a RecursionError: a 500)."""
    with _committed(fresh_database_url) as (client, alice):
        for kind in ("application/x-www-form-urlencoded", "multipart/form-data; boundary=x"):
            answer = client.post(
                "/agents/helper/chat/completions",
                headers={**alice, "content-type": kind},
                content=_nested(5000),
            )
            assert (answer.status_code, answer.json()) == (400, _error(TOO_DEEP, "bad_json"))


def test_p12_a_name_no_agent_can_have_finds_no_agent(fresh_database_url: str) -> None:
    with _committed(fresh_database_url) as (client, alice):
        _no_agent_named(client, alice)


def _no_agent_named(client: TestClient, alice: dict[str, str]) -> None:
    token = client.post("/api/agents/token", headers=alice, content='{"agent":"\\u0000"}')
    assert (token.status_code, token.json()) == (
        404,
        {
            "error": {
                "message": "there is no agent '\\x00' on this portal",
                "type": "not_found_error",
                "param": None,
                "code": "not_found",
            }
        },
    )
    for name, shown in [("%00", "'\\x00'"), ("a%00b", "'a\\x00b'")]:
        relayed = client.post(
            f"/agents/{name}/chat/completions",
            headers=alice,
            json={"messages": [{"role": "user", "content": "Hi"}]},
        )
        assert (relayed.status_code, relayed.json()) == (
            404,
            {
                "error": {
                    "message": f"there is no agent {shown} on this portal: check the name in "
                    "the URL",
                    "type": "not_found_error",
                    "param": None,
                    "code": "not_found",
                }
            },
        ), name


def _tool_calls(depth: int) -> list[dict[str, Any]]:
    deep: Any = "x"
    for _ in range(depth):
        deep = [deep]
    return [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}, "x": deep}
    ]


def test_p9_tool_calls_nested_too_deep_to_keep_are_refused_and_a_stored_one_still_reads(
    client: TestClient, db: Session
) -> None:
    alice = _bearer(db)
    agent_id = client.post("/api/agents", headers=alice, json={"name": "helper"}).json()["agent"][
        "id"
    ]
    url = f"/api/agents/{agent_id}/conversations"
    before = _rows(db)
    for depth in (70, 260, 500):
        recorded = client.post(
            url,
            headers=alice,
            json={
                "sessionId": "s",
                "messages": [{"role": "assistant", "tool_calls": _tool_calls(depth)}],
            },
        )
        assert (recorded.status_code, recorded.json()) == (
            400,
            _error(f"messages[0].tool_calls {TOO_DEEP_STORED}", "unstorable_text"),
        ), depth
    assert _rows(db) == before
    # One kept before the check (the row written as it was then): its chat still reads.
    chat_id = client.post(
        url, headers=alice, json={"sessionId": "s", "messages": [{"role": "user", "content": "Hi"}]}
    ).json()["chatId"]
    db.add(
        ChatMessage(
            chat_id=uuid.UUID(chat_id),
            position=1,
            role="assistant",
            content=None,
            extra={"tool_calls": _tool_calls(400)},
        )
    )
    db.flush()
    read = client.get(f"{url}/{chat_id}", headers=alice)
    assert read.status_code == 200, read.text
    assert read.json() == {
        "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": None}]
    }
