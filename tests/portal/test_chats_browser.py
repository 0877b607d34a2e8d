"""The chat pages in Chromium (P9, P11), with a real `webagents portal serve` on PostgreSQL (SQLite
with --db sqlite): turns recorded over HTTP with an API key appear in the owner's chat list and
chat; a tool call is one line that opens to its arguments; HTML in a message stays text
(no script runs); another user gets the 404 page."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from .chats_browser_helpers import _sign_in, _user_key
from .processes import Served

# On PostgreSQL alone under --db both (tests/portal/whole_system.py): what these tests prove, the
# chat pages in Chromium against a served portal, does not depend on the database beyond what the
# repository and app tests prove on both; test_accounts_browser keeps this seam's run on SQLite.
pytestmark = [pytest.mark.e2e, pytest.mark.whole_system]  # runs the installed webagents command

INJECTED = '<img src=x onerror="document.title=1"><script>alert(1)</script>'


def test_p11_recorded_chat_in_the_owners_pages_in_chromium(
    tmp_path: Path, fresh_database_url: str, served: Served, chromium: Any
) -> None:
    alice = _user_key(tmp_path, fresh_database_url, "alice")
    _user_key(tmp_path, fresh_database_url, "bob")
    call = {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": '{"q": 1}'}}
    turns = [
        {"role": "user", "content": f"Hello {INJECTED}", "id": "m1"},
        {"role": "assistant", "content": None, "tool_calls": [call], "id": "m2"},
        {"role": "tool", "content": "found it", "tool_call_id": "c1", "name": "lookup", "id": "m3"},
        {"role": "assistant", "content": "Hi, Alice.", "id": "m4"},
    ]
    with httpx.Client(base_url=served.url, headers=alice) as api:
        agent_id = api.post("/api/agents", json={"name": "helper"}).json()["agent"]["id"]
        recorded = api.post(
            f"/api/agents/{agent_id}/conversations", json={"sessionId": "s1", "messages": turns}
        )
        assert recorded.status_code == 200, recorded.text
        chat_id = recorded.json()["chatId"]

    owner = chromium.new_context()
    dialogs: list[str] = []
    try:
        page = owner.new_page()
        page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
        _sign_in(page, served.url, "alice")
        page.click("#agents a[href$='/chats']")  # the agent's chats, from the agent list
        page.wait_for_url(f"{served.url}/agents/{agent_id}/chats")
        assert page.inner_text("h1") == "Chats with helper"
        assert page.inner_text("#chats td:nth-child(1)") == f"Hello {INJECTED}"
        assert page.inner_text("#chats td:nth-child(2)") == "4"
        page.click("#chats td a")
        page.wait_for_url(f"{served.url}/agents/{agent_id}/chats/{chat_id}")
        assert page.locator("#messages .content").all_inner_texts() == [
            f"Hello {INJECTED}",
            "Hi, Alice.",
        ]
        call_line = page.locator("details.tool-call")
        assert call_line.locator("summary").inner_text() == 'lookup({"q": 1})'
        assert not call_line.locator("pre").is_visible()
        call_line.locator("summary").click()
        assert call_line.locator("pre").inner_text() == '{"q": 1}'
        assert page.locator("details.tool-result summary").inner_text() == "result: found it"
        assert page.locator("#messages img").count() == 0
        assert page.title().startswith("Hello ")
        assert dialogs == []
        assert page.locator("#continue-chat").count() == 1
    finally:
        owner.close()

    other = chromium.new_context()
    try:
        page = other.new_page()
        _sign_in(page, served.url, "bob")
        answer = page.goto(f"{served.url}/agents/{agent_id}/chats/{chat_id}")
        assert answer.status == 404
        assert "Hello" not in page.inner_text("body")
        page.goto(f"{served.url}/chats")
        assert page.locator("#chats").count() == 0
    finally:
        other.close()
