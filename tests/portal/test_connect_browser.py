"""The web chat box in Chromium (P11): a real `webagents portal serve`, an agent connected
over a real WebSocket; the owner continues a chat, sees the reply stream in, and the chat
then holds both messages (what /resume in the terminal reads)."""

from __future__ import annotations

from typing import Any

import httpx
import jwt

from .connect_agent import ConnectAgent
from .processes import Served
from .test_chats_browser import _sign_in
from .test_connect import World, make_world


def test_p11_owner_continues_a_chat_on_the_web_in_chromium(
    served: Served, fresh_database_url: str, chromium: Any
) -> None:
    world: World = make_world(served.url, fresh_database_url)
    alice = world.headers("alice")
    first = [
        {"role": "user", "content": "Hello", "id": "m1"},
        {"role": "assistant", "content": "Hi.", "id": "m2"},
    ]
    recorded = httpx.post(
        f"{world.url}/api/agents/{world.agent_id}/conversations",
        json={"sessionId": "s1", "messages": first},
        headers=alice,
    )
    chat_id = recorded.json()["chatId"]
    agent = ConnectAgent(world.url, world.agent_key)
    context = chromium.new_context()
    try:
        agent.wait_for("hellos")
        page = context.new_page()
        _sign_in(page, served.url, "alice")
        page.goto(f"{served.url}/agents/{world.agent_id}/chats/{chat_id}")
        page.fill("#continue-message", "What <b>now</b>?")
        page.click("#continue-form button[type=submit]")
        page.locator("#continue-status", has_text="saved in this chat").wait_for()
        reply = "owner alice said: What <b>now</b>? "
        assert page.locator("#messages .content").all_inner_texts() == [
            "Hello",
            "Hi.",
            "What <b>now</b>?",
            reply,
        ]
        assert page.locator("#messages b").count() == 0
        request = agent.seen.requests[0]
        assert request["body"] == {
            "messages": [
                {"role": "user", "content": "Hello"},
                {"role": "assistant", "content": "Hi."},
                {"role": "user", "content": "What <b>now</b>?"},
            ],
            "stream": True,
        }
        claims = jwt.decode(request["assertion"], options={"verify_signature": False})
        assert (claims["tier"], claims["channel"], claims["username"]) == ("owner", "web", "alice")
        messages = httpx.get(
            f"{world.url}/api/agents/{world.agent_id}/conversations/{chat_id}", headers=alice
        ).json()["messages"]
        assert [(m["role"], m["content"]) for m in messages] == [
            ("user", "Hello"),
            ("assistant", "Hi."),
            ("user", "What <b>now</b>?"),
            ("assistant", reply),
        ]
        page.reload()
        assert page.locator("#messages .content").all_inner_texts() == [
            "Hello",
            "Hi.",
            "What <b>now</b>?",
            reply,
        ]
    finally:
        context.close()
        agent.stop()
