"""Chats at a real `webagents portal serve` (P9), on SQLite and PostgreSQL: calls that arrive
at once for one new session make one chat and lose no message, and each resent call
(an outbox that never saw the answer) records nothing twice."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from .chats_browser_helpers import _user_key
from .processes import Served

pytestmark = pytest.mark.e2e  # runs the installed webagents command

CALLS = 8


def test_p9_concurrent_and_resent_calls_make_one_chat_with_each_message_once(
    tmp_path: Path, fresh_database_url: str, served: Served
) -> None:
    alice = _user_key(tmp_path, fresh_database_url, "alice")
    with httpx.Client(base_url=served.url, headers=alice, timeout=60) as api:
        agent_id = api.post("/api/agents", json={"name": "helper"}).json()["agent"]["id"]
        url = f"/api/agents/{agent_id}/conversations"

        def send(n: int) -> set[str]:
            body = {
                "sessionId": "one",
                "messages": [{"role": "user", "content": f"m{n}", "id": f"m{n}"}],
            }
            answers = [api.post(url, json=body) for _ in range(2)]  # the second: a resend
            assert [a.status_code for a in answers] == [200, 200], [a.text for a in answers]
            return {a.json()["chatId"] for a in answers}

        with ThreadPoolExecutor(CALLS) as pool:
            chat_ids = set().union(*pool.map(send, range(CALLS)))
        assert len(chat_ids) == 1
        chat_id = chat_ids.pop()
        listed = api.get(url).json()["conversations"]
        assert [(c["chatId"], c["messageCount"]) for c in listed] == [(chat_id, CALLS)]
        messages = api.get(f"{url}/{chat_id}").json()["messages"]
        assert sorted(m["content"] for m in messages) == sorted(f"m{n}" for n in range(CALLS))
