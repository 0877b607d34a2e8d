"""Issue 15's end to end (SPEC A4, P11): all real processes, on PostgreSQL (SQLite with --db
sqlite). A `webagents portal serve`; an agent with `session: {backend: robutler}` published
with the real CLI and served by `webagents serve` (a scripted model over real HTTP), connected
over Portal Connect; a first turn in a pseudo-terminal recorded as the owner's chat. The owner
continues that chat on its page in Chromium: the agent is asked with the whole chat, as the
owner, and the page shows the reply while it streams (held after its first piece until the page
shows that piece alone), then whole; the turn is in the chat; `/resume` in the pseudo-terminal
lists the chat, and the next turn sends the model every message, the web turn's too."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.serving import running
from webagents.model import ModelRequest, ModelResponse, TextDelta
from webagents.testing import FunctionModel, ScriptedServer, call

from .chats_browser_helpers import _sign_in
from .connect_served_helpers import _key, _ready
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
# chat carried between the terminal and the web over Connect, does not depend on the database
# beyond what the repository and app tests prove on both; test_connect_portal_side keeps this
# seam's run on SQLite.
pytestmark = [pytest.mark.e2e, pytest.mark.whole_system]

WAIT = 60.0  # bounded waits (never a timed assertion)
PROBED = AGENT + "\n  - webagents.testing:ProbeSkill"
ON_THE_WEB = "who asks, on the web?"
FIRST_PIECE = "Streamed "
"""The web reply's first piece: the model sends it, then waits until the page showed it."""


def _web_reply(request: ModelRequest) -> Any:
    """The web message makes the agent ask the probe who calls, and the reply says it, in
    pieces; any other message is answered as in the terminal tests."""
    last = request.messages[-1]
    if last["role"] == "tool":
        seen = json.loads(str(last["content"]))
        return f"{FIRST_PIECE}to the {seen['kind']} ({seen['namespace']}) in pieces."
    if last["content"] == ON_THE_WEB:
        return call("whoami")
    return _answer(request)


class HeldModel(FunctionModel):
    """Streams a reply that starts with FIRST_PIECE in two pieces, waiting between them
    until `release` is set (`held` says it waits); other replies stream as usual."""

    def __init__(self, fn: Callable[[ModelRequest], Any]) -> None:
        super().__init__(fn)
        self.held = threading.Event()
        self.release = threading.Event()

    async def stream(self, request: ModelRequest) -> AsyncIterator[TextDelta | ModelResponse]:
        response = await self.complete(request)
        text = response.content or ""
        if text.startswith(FIRST_PIECE):
            yield TextDelta(FIRST_PIECE)
            self.held.set()
            await asyncio.to_thread(self.release.wait, WAIT)
            text = text.removeprefix(FIRST_PIECE)
        for piece in re.findall(r"\S+\s*", text):
            yield TextDelta(piece)
        yield response


@pytest.fixture
def held() -> Iterator[tuple[ScriptedServer, HeldModel]]:
    model = HeldModel(_web_reply)
    try:
        with ScriptedServer(model) as server:
            yield server, model
    finally:
        model.release.set()  # a failed test leaves no reply waiting


def _until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"never came true: {what}")
        time.sleep(0.05)


def test_a4_p11_owner_continues_on_the_web_in_chromium_and_resumes_in_the_terminal(
    tmp_path: Path,
    fresh_database_url: str,
    served: Served,
    held: tuple[ScriptedServer, HeldModel],
    chromium: Any,
) -> None:
    server, model = held
    key = _account(tmp_path, served, fresh_database_url)
    laptop = Machine(tmp_path, "laptop", server)
    folder, agent_id = _published(tmp_path, served, key, laptop, PROBED)
    serve = ["--profile", laptop.profile, "serve", str(folder)]
    with running(serve, laptop.env) as agent:
        _ready(agent, served)

        chat = laptop.chat(folder)  # the first turn, in the terminal: the owner's chat
        chat.expect(PROMPT)
        _say(chat, "the door is blue", "Reply number 1 to the door is blue.")
        _leave(chat)
        [listed] = _chats(served, key, agent_id)
        first = [("user", "the door is blue"), ("assistant", "Reply number 1 to the door is blue.")]
        assert _messages(served, key, agent_id, listed["chatId"]) == first
        asked_before = len(server.bodies)

        reply = f"{FIRST_PIECE}to the owner (owner) in pieces."
        chat_page = f"{served.url}/agents/{agent_id}/chats/{listed['chatId']}"
        browser = chromium.new_context()
        try:
            page = browser.new_page()
            _sign_in(page, served.url, "alice")
            page.goto(chat_page)
            contents = page.locator("#messages .content")
            assert contents.all_inner_texts() == [text for _, text in first]
            page.fill("#continue-message", ON_THE_WEB)
            page.click("#continue-form button[type=submit]")
            assert model.held.wait(WAIT), agent.output
            # The model holds the rest back: the page shows the first piece alone.
            _until(
                lambda: contents.nth(3).text_content() == FIRST_PIECE,
                "the page shows the reply's first piece",
            )
            assert page.inner_text("#continue-status") == "the agent is answering…"
            # The kept messages as rendered (Markdown: their text without its paragraphs'
            # line ends), the streamed piece as it came, its trailing space included.
            kept, streamed = contents.all_inner_texts()[:3], contents.nth(3).text_content()
            assert [*kept, streamed] == [*(t for _, t in first), ON_THE_WEB, FIRST_PIECE]
            model.release.set()
            page.locator("#continue-status", has_text="saved in this chat").wait_for()
            shown = [*(t for _, t in first), ON_THE_WEB, reply]
            assert contents.all_inner_texts() == shown
            page.reload()  # what the chat now holds, as its page shows it
            assert contents.all_inner_texts() == shown
        finally:
            browser.close()

        # The agent was asked with the whole chat, as the owner (the probe said so, and the
        # reply the page showed is made of what it said).
        whoami, answered = server.bodies[asked_before:]
        assert [(m["role"], m["content"]) for m in whoami["messages"][1:]] == [
            *first,
            ("user", ON_THE_WEB),
        ]
        seen = json.loads(answered["messages"][-1]["content"])
        assert (seen["kind"], seen["identity"], seen["namespace"]) == ("owner", None, "owner")
        web = [("user", ON_THE_WEB), ("assistant", reply)]
        assert _messages(served, key, agent_id, listed["chatId"]) == [*first, *web]
        _refused_to_another_user(tmp_path, fresh_database_url, served, chromium, chat_page)
        assert len(server.bodies) == asked_before + 2  # bob's message never reached it
        assert _messages(served, key, agent_id, listed["chatId"]) == [*first, *web]

        chat = laptop.chat(folder)  # the terminal continues from the web turn
        chat.expect(PROMPT)
        chat.child.sendline("/resume")
        chat.expect("1. the door is blue · ")
        chat.expect(f" · {listed['sessionId']} · both")
        chat.expect("resume which?")
        chat.child.sendline("1")
        chat.expect("resumed the door is blue · 2 turns")
        chat.expect(f"last reply: {reply}")
        chat.expect(PROMPT)
        _say(chat, "what colour is the door?", "Reply number 3 to what colour is the door?.")
        _leave(chat)
    sent = [(m["role"], m["content"]) for m in server.bodies[-1]["messages"][1:]]
    assert sent == [*first, *web, ("user", "what colour is the door?")]
    assert _messages(served, key, agent_id, listed["chatId"]) == [
        *first,
        *web,
        ("user", "what colour is the door?"),
        ("assistant", "Reply number 3 to what colour is the door?."),
    ]
    assert [c["chatId"] for c in _chats(served, key, agent_id)] == [listed["chatId"]]
    assert server.errors == []


def _refused_to_another_user(
    tmp_path: Path, database: str, served: Served, chromium: Any, chat_page: str
) -> None:
    """Another portal user, signed in in Chromium: the owner's chat is the 404 page, and a
    message posted to its chat box (with bob's own form token) is refused the same way."""
    _key(tmp_path, database, "bob")
    browser = chromium.new_context()
    try:
        page = browser.new_page()
        _sign_in(page, served.url, "bob")
        token = page.locator("input[name=csrf_token]").first.get_attribute("value")
        assert page.goto(chat_page).status == 404
        posted = page.request.post(
            f"{chat_page}/continue", form={"message": "let me in", "csrf_token": token}
        )
        assert posted.status == 404, posted.text()
    finally:
        browser.close()
