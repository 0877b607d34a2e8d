"""`session: {backend: robutler}` in a real pseudo-terminal against a real `webagents portal
serve` (S3, S4, P10), on PostgreSQL (SQLite with --db sqlite): profile A's turns become the
owner's chat on the portal with the model asked once a turn; profile B, which never had the
conversation, lists it with /resume and continues it with every earlier turn, the ones added on
the web too; what is missing (sign-in, publish) is said with its fix; a portal stopped mid-
conversation gets the waiting turns once it is back, none twice; an ended sign-in says to run
webagents login."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import write_agent
from webagents.testing import FunctionModel, ScriptedServer

from .conftest import PASSWORD
from .processes import Served
from .robutler_terminal_helpers import (
    AGENT,
    PROMPT,
    Machine,
    _account,
    _answer,
    _chats,
    _leave,
    _messages,
    _published,
    _say,
)

# On PostgreSQL alone under --db both (tests/portal/whole_system.py): what these tests prove, a
# terminal's turns kept as the owner's chat, resumed elsewhere, does not depend on the database
# beyond what the repository and app tests prove on both; test_chats_served keeps this seam's run
# on SQLite.
pytestmark = [pytest.mark.e2e, pytest.mark.whole_system]


@pytest.fixture
def model() -> Iterator[ScriptedServer]:
    with ScriptedServer(FunctionModel(_answer)) as running:
        yield running


def test_p10_a_terminal_conversation_is_the_owners_chat_and_continues_on_another_machine(
    tmp_path: Path, fresh_database_url: str, served: Served, model: ScriptedServer, chromium: Any
) -> None:
    key = _account(tmp_path, served, fresh_database_url)
    a, b = Machine(tmp_path, "a", model), Machine(tmp_path, "b", model)
    folder, agent_id = _published(tmp_path, served, key, a)

    chat = a.chat(folder)
    chat.expect(PROMPT)
    _say(chat, "the door is blue", "Reply number 1 to the door is blue.")
    _say(chat, "and the roof is red", "Reply number 2 to and the roof is red.")
    _leave(chat)
    assert len(model.bodies) == 2  # recording the turns made no answer
    [listed] = _chats(served, key, agent_id)
    first = [
        ("user", "the door is blue"),
        ("assistant", "Reply number 1 to the door is blue."),
        ("user", "and the roof is red"),
        ("assistant", "Reply number 2 to and the roof is red."),
    ]
    assert (listed["messageCount"], listed["preview"]) == (4, "the door is blue")
    assert _messages(served, key, agent_id, listed["chatId"]) == first
    _seen_in_chromium(chromium, served, agent_id, listed["chatId"], first)

    web = [("user", "added on the web"), ("assistant", "an answer on the web")]
    added = httpx.post(
        f"{served.url}/api/agents/{agent_id}/conversations",
        headers={"Authorization": f"Bearer {key}"},
        json={
            "sessionId": listed["sessionId"],
            "chatId": listed["chatId"],
            "messages": [{"role": role, "content": text} for role, text in web],
        },
    )
    assert added.status_code == 200, added.text

    b.run("login", "--portal", served.url, "--token", key)
    chat = b.chat(folder)
    chat.expect(PROMPT)
    chat.child.sendline("/resume")
    chat.expect("1. the door is blue · ")
    chat.expect(f"6 messages · {listed['sessionId']} · portal")
    chat.expect("resume which?")
    chat.child.sendline("1")
    chat.expect("resumed the door is blue · 3 turns")
    chat.expect("last reply: an answer on the web")
    chat.expect(PROMPT)
    _say(chat, "what colour is the door?", "Reply number 4 to what colour is the door?.")
    _leave(chat)
    assert len(model.bodies) == 3
    sent = [(m["role"], m["content"]) for m in model.bodies[-1]["messages"][1:]]
    assert sent == [*first, *web, ("user", "what colour is the door?")]
    whole = [*first, *web, ("user", "what colour is the door?")]
    whole.append(("assistant", "Reply number 4 to what colour is the door?."))
    assert _messages(served, key, agent_id, listed["chatId"]) == whole
    assert [c["chatId"] for c in _chats(served, key, agent_id)] == [listed["chatId"]]

    chat = a.chat(folder)  # A has it too, and the portal has turns A lacks
    chat.expect(PROMPT)
    _say(chat, "something else", "Reply number 1 to something else.")
    chat.child.sendline("/resume")
    chat.expect("1. something else · ")
    chat.expect(" · 1 turn · ")
    chat.expect(" · both")  # kept here, and recorded as it was said
    chat.expect("2. the door is blue · ")
    chat.expect(f"2 turns · {listed['sessionId']} · both")
    chat.expect("resume which?")
    chat.child.sendline("2")
    chat.expect("resumed the door is blue · 4 turns")
    chat.expect(PROMPT)
    _leave(chat)


def _seen_in_chromium(
    chromium: Any, served: Served, agent_id: str, chat_id: str, said: list[tuple[str, str]]
) -> None:
    """The owner's chat list and chat in the browser: the terminal's turns as they were said."""
    browser = chromium.new_context()
    try:
        page = browser.new_page()
        page.goto(f"{served.url}/signin")
        page.fill("#username", "alice")
        page.fill("#password", PASSWORD)
        page.click("main button[type=submit]")
        page.wait_for_url(f"{served.url}/")
        page.goto(f"{served.url}/chats")  # every agent's chats: the agent, then the preview
        assert page.locator("#chats tr td:nth-child(2)").all_inner_texts() == [said[0][1]]
        page.goto(f"{served.url}/agents/{agent_id}/chats")
        assert page.inner_text("#chats td:nth-child(1)") == said[0][1]
        assert page.inner_text("#chats td:nth-child(2)") == str(len(said))
        page.click("#chats td a")
        page.wait_for_url(f"{served.url}/agents/{agent_id}/chats/{chat_id}")
        assert page.locator("#messages .content").all_inner_texts() == [text for _, text in said]
    finally:
        browser.close()


def test_s4_not_signed_in_or_not_published_keeps_the_chat_here_and_says_what_to_run(
    tmp_path: Path, fresh_database_url: str, served: Served, model: ScriptedServer
) -> None:
    key = _account(tmp_path, served, fresh_database_url)
    folder = write_agent(tmp_path / "helper", AGENT)
    nobody = Machine(tmp_path, "nobody", model)
    chat = nobody.chat(folder)
    chat.expect(
        "conversations are kept on this machine only: not signed in to a portal (backend: "
        "robutler needs it): run webagents login, then webagents publish"
    )
    chat.expect(PROMPT)
    _say(chat, "hello", "Reply number 1 to hello.")
    _leave(chat)
    assert len(list((nobody.home / "sessions").rglob("*.json"))) == 1

    signed = Machine(tmp_path, "signed", model)
    signed.run("login", "--portal", served.url, "--token", key)
    chat = signed.chat(folder)
    chat.expect(
        f"conversations are kept on this machine only: this agent is not published on "
        f"{served.url} (backend: robutler needs it): run webagents publish"
    )
    chat.expect(PROMPT)
    _say(chat, "hello", "Reply number 1 to hello.")
    chat.child.sendline("/resume")
    chat.expect("1. hello · ")
    chat.expect(" · 1 turn · ")
    chat.expect(" · here\r\nresume which?")
    chat.child.sendline("")
    chat.expect(PROMPT)
    _leave(chat)
    assert len(list((signed.home / "sessions").rglob("*.json"))) == 1
    assert not (signed.home / "chat-outbox").exists()


def test_p10_a_portal_stopped_mid_conversation_gets_the_turns_once_it_is_back(
    tmp_path: Path, fresh_database_url: str, served: Served, model: ScriptedServer
) -> None:
    key = _account(tmp_path, served, fresh_database_url)
    a = Machine(tmp_path, "a", model)
    folder, agent_id = _published(tmp_path, served, key, a)
    chat = a.chat(folder)
    chat.expect(PROMPT)
    _say(chat, "one", "Reply number 1 to one.")
    served.stop()
    chat.child.sendline("two")
    chat.expect("Reply number 2 to two.")
    chat.expect(
        f"the portal at {served.url} does not answer: this conversation is kept on this "
        "machine and recorded there once it answers"
    )
    chat.expect(PROMPT)
    _say(chat, "three", "Reply number 3 to three.")
    port = served.url.rsplit(":", 1)[1]
    again = Served(tmp_path, "--database", fresh_database_url, "--port", port)
    try:
        assert again.url == served.url
        chat.child.sendline("four")
        chat.expect("Reply number 4 to four.")
        chat.expect("the portal answers again: the waiting turns are recorded there")
        chat.expect(PROMPT)
        _leave(chat)
        [listed] = _chats(again, key, agent_id)
        words = ["one", "two", "three", "four"]
        assert _messages(again, key, agent_id, listed["chatId"]) == [
            pair
            for n, word in enumerate(words, 1)
            for pair in (("user", word), ("assistant", f"Reply number {n} to {word}."))
        ]
        assert len(model.bodies) == 4

        token = a.token()  # the sign-in ends (as webagents logout elsewhere would)
        ended = httpx.post(
            f"{again.url}/api/auth/cli/logout",
            headers={"Authorization": f"Bearer {token}"},
            json={},
        )
        assert ended.status_code == 200, ended.text
        chat = a.chat(folder, "-c")
        chat.expect(PROMPT)
        chat.child.sendline("five")
        chat.expect("Reply number 5 to five.")
        chat.expect("not recorded on the portal (kept on this machine): this sign-in was ended")
        chat.expect("run webagents login")
        chat.expect(PROMPT)
        _leave(chat)
        assert len(_messages(again, key, agent_id, listed["chatId"])) == 8
    finally:
        again.stop()
