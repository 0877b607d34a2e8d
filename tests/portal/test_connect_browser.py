"""The web chat box in Chromium (P11): a real `webagents portal serve`, an agent connected
over a real WebSocket; the owner continues a chat, sees the reply stream in, and the chat
then holds both messages (what /resume in the terminal reads); when the message cannot be
answered, the typed text stays in the box and the error shows in place of the reply."""

from __future__ import annotations

from typing import Any

import httpx
import jwt
import pytest

from webagents.portal.connect.relay import offline
from webagents.portal.connect.service import MAX_WEB_MESSAGE

from .chats_browser_helpers import _sign_in
from .connect_agent import ConnectAgent
from .connect_world import World, make_world
from .processes import Served

# On PostgreSQL alone under --db both (tests/portal/whole_system.py): what these tests prove, the
# web chat box in Chromium over Portal Connect, does not depend on the database beyond what the
# repository and app tests prove on both; test_connect_portal_side keeps this seam's run on SQLite.
pytestmark = [pytest.mark.e2e, pytest.mark.whole_system]  # runs the installed webagents command


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
        # Shown as the portal renders its Markdown (a paragraph: no trailing space), as text.
        assert page.locator("#messages .content").all_inner_texts() == [
            "Hello",
            "Hi.",
            "What <b>now</b>?",
            reply.rstrip(),
        ]
        assert page.locator("#messages b").count() == 0
        # The streamed text becomes the markup of the chat page's messages once saved.
        assert page.locator("#messages li.assistant .content").last.inner_html() == (
            "<p>owner alice said: What &lt;b&gt;now&lt;/b&gt;?</p>\n"
        )
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
            reply.rstrip(),
        ]
    finally:
        context.close()
        agent.stop()


def _chat_page(served: Served, fresh_database_url: str, page: Any) -> tuple[World, str]:
    """alice's chat "Hello" / "Hi." with her agent, open in the page (no agent connected)."""
    world = make_world(served.url, fresh_database_url)
    first = [
        {"role": "user", "content": "Hello", "id": "m1"},
        {"role": "assistant", "content": "Hi.", "id": "m2"},
    ]
    recorded = httpx.post(
        f"{world.url}/api/agents/{world.agent_id}/conversations",
        json={"sessionId": "s1", "messages": first},
        headers=world.headers("alice"),
    )
    chat_id = recorded.json()["chatId"]
    _sign_in(page, served.url, "alice")
    page.goto(f"{served.url}/agents/{world.agent_id}/chats/{chat_id}")
    return world, f"{served.url}/agents/{world.agent_id}/chats/{chat_id}/continue"


def _send_and_see_the_error(page: Any, text: str) -> str:
    """Sends `text`; once the error shows: the chat as shown, the box, the error."""
    page.fill("#continue-message", text)
    page.click("#continue-form button[type=submit]")
    page.locator("#continue-form button[type=submit]:enabled").wait_for()
    error = page.locator("#messages .error[role=alert]")
    assert error.count() == 1
    assert page.input_value("#continue-message") == text
    return str(error.inner_text())


def test_p11_web_chat_keeps_the_text_and_shows_each_error_in_place_in_chromium(
    served: Served, fresh_database_url: str, page: Any
) -> None:
    world, continue_url = _chat_page(served, fresh_database_url, page)
    shown = "#messages .message .content"
    # The agent is not connected: nothing was sent, nothing is shown but the error.
    assert _send_and_see_the_error(page, "Are you there?") == offline("helper").message
    assert page.locator(shown).all_inner_texts() == ["Hello", "Hi."]
    # Too large for a message of the web chat.
    too_long = "x" * (MAX_WEB_MESSAGE + 1)
    assert _send_and_see_the_error(page, too_long) == (
        f"a message is at most {MAX_WEB_MESSAGE} characters: send a shorter one"
    )
    assert page.locator(shown).all_inner_texts() == ["Hello", "Hi."]
    # The agent is busy (the portal's answer as the relay gives it).
    busy = 'data: {"error": "the agent \'helper\' has 64 requests waiting: try again later"}\n\n'
    page.route(
        continue_url,
        lambda route: route.fulfill(status=503, content_type="text/event-stream", body=busy),
    )
    assert _send_and_see_the_error(page, "Busy?") == (
        "the agent 'helper' has 64 requests waiting: try again later"
    )
    page.unroute(continue_url)
    # The portal cannot be reached.
    page.route(continue_url, lambda route: route.abort("connectionrefused"))
    assert _send_and_see_the_error(page, "Anyone?") == (
        "the portal could not be reached: the message was not sent; send it again"
    )
    page.unroute(continue_url)
    assert page.locator(shown).all_inner_texts() == ["Hello", "Hi."]
    # The agent starts a reply and its connection drops: what came stays, the error after it.
    dropping = ConnectAgent(world.url, world.agent_key, mode="drop", reconnect=False)
    try:
        dropping.wait_for("hellos")
        error = _send_and_see_the_error(page, "And then?")
        assert page.locator(shown).all_inner_texts() == ["Hello", "Hi.", "And then?", "…"]
        assert error == (
            "the agent's connection to the portal dropped before its reply was complete: "
            "send the request again (the agent reconnects by itself)"
        )
    finally:
        dropping.stop()
    # Answered: the error goes, the box is emptied.
    agent = ConnectAgent(world.url, world.agent_key)
    try:
        agent.wait_for("hellos")
        page.fill("#continue-message", "Now?")
        page.click("#continue-form button[type=submit]")
        page.locator("#continue-status", has_text="saved in this chat").wait_for()
        assert page.locator("#messages .error").count() == 0
        assert page.input_value("#continue-message") == ""
        assert page.locator(shown).all_inner_texts()[-2:] == ["Now?", "owner alice said: Now?"]
    finally:
        agent.stop()
    # Signed out meanwhile (the session cookie gone): the portal sends the post to sign in.
    page.context.clear_cookies()
    assert _send_and_see_the_error(page, "Still there?") == (
        "you were signed out: copy your message, sign in again and send it"
    )
