"""P9, the sizes of a recorded chat, on SQLite and PostgreSQL: one message in parts is at
most MAX_MESSAGE_CHARS whole and a chat at most MAX_CHAT_CHARS (each part rewrote the whole
message: 10,000 parts of 100,000 characters had no bound); both refusals are 413s that say
what to do."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from webagents.portal.chats import service as chats_service

from .chats_helpers import _agent, _bearer, _post, _refusal

PART = "x" * 100_000


def _part(index: int) -> dict[str, Any]:
    return {"role": "user", "id": "big", "content": PART, "part": {"index": index, "of": 100}}


def test_p9_a_message_is_at_most_2_mb_whole(client: TestClient, db: Session) -> None:
    alice = _bearer(db, "alice")
    agent_id = _agent(client, alice)
    for call in range(2):
        body = {"sessionId": "s", "messages": [_part(call * 10 + i) for i in range(10)]}
        _post(client, alice, agent_id, body)
    over = client.post(
        f"/api/agents/{agent_id}/conversations",
        headers=alice,
        json={"sessionId": "s", "messages": [_part(20)]},
    )
    assert (over.status_code, over.json()) == _refusal(
        413,
        "message 'big' would be 2,100,000 characters with part 20; a message is at most "
        "2,000,000 characters whole: send the rest as another message",
        "message_too_long",
    )


def test_p9_a_chat_is_at_most_its_cap(
    client: TestClient, db: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(chats_service, "MAX_CHAT_CHARS", 250_000)
    alice = _bearer(db, "alice")
    agent_id = _agent(client, alice)
    message = {"role": "user", "content": PART}
    _post(client, alice, agent_id, {"sessionId": "s", "messages": [message, message]})
    over = client.post(
        f"/api/agents/{agent_id}/conversations",
        headers=alice,
        json={"sessionId": "s", "messages": [message]},
    )
    assert (over.status_code, over.json()) == _refusal(
        413,
        "this chat holds 200,000 characters; with this call's 100,000 it would pass the "
        "250,000 a chat may hold: start a new chat (a new sessionId)",
        "chat_too_long",
    )
    _post(client, alice, agent_id, {"sessionId": "t", "messages": [message]})
