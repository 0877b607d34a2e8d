"""`session: {backend: robutler}` against the real portal app (P10, S3, S4), on SQLite and
PostgreSQL: the owner's turns recorded as their chat through the durable outbox, within the
limits per call; nothing recorded twice when an answer is lost or the portal was away; what
is missing said with its fix; the portal's chats listed with this machine's and loaded."""

from __future__ import annotations

import json
import os
import stat
import uuid
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from webagents import Agent
from webagents.caller import Caller
from webagents.portal.accounts import service as accounts
from webagents.portal_link.chat_outbox import ChatOutbox
from webagents.portal_link.chats import PortalChats, link_of, merged
from webagents.portal_link.client import PortalClient
from webagents.portal_link.errors import AgentNotPublished, PortalUnreachable
from webagents.portal_link.login import Login, save_login
from webagents.sessions import SessionSummary
from webagents.skills.session import SessionSkill
from webagents.testing import ScriptedModel

from .conftest import make_account

PORTAL = "http://testserver"


class InProcess(PortalClient):
    """The portal client, its requests answered by the app on the test's transaction."""

    def __init__(self, browser: TestClient, bearer: str) -> None:
        self.base_url = PORTAL
        self._http = browser
        self._bearer = bearer
        self.calls: list[list[dict[str, Any]]] = []

    def _send(self, method: str, path: str, **kwargs: Any) -> Any:
        kwargs["headers"] = {"Authorization": f"Bearer {self._bearer}"}
        if method == "POST":
            self.calls.append(kwargs["json"]["messages"])
        return self._http.request(method, path, **kwargs)

    def close(self) -> None:
        pass  # the test's browser outlives each use


class Portal:
    """A signed-in owner with a published agent in a folder, and the portal's own view."""

    def __init__(
        self, tmp_path: Path, db: Session, client: TestClient, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        scope = make_account(db, "alice")
        self.key = accounts.create_key(db, scope, "cli").key
        self.client = client
        made = client.post("/api/agents", headers=self.headers, json={"name": "helper"})
        assert made.status_code == 201, made.text
        self.agent_id: str = made.json()["agent"]["id"]
        save_login(None, Login(PORTAL, "alice", str(scope.user_id), self.key))
        self.folder = tmp_path / "helper"
        (self.folder / ".webagents").mkdir(parents=True)
        link = {"agentId": self.agent_id, "agentName": "helper", "portal": PORTAL}
        (self.folder / ".webagents" / "config.json").write_text(json.dumps({"link": link}))
        self.down = 0
        """How many of the next clients find the portal not answering."""
        self.lose_answer = False
        """The next call is recorded, but its answer never arrives."""
        self.clients: list[InProcess] = []
        portal = self

        def client_of(chats: PortalChats) -> PortalClient:
            assert chats.link is not None
            made = InProcess(client, chats.link.login.access_token)
            portal.clients.append(made)
            if portal.down:
                portal.down -= 1
                made._send = _unreachable  # type: ignore[method-assign]
            elif portal.lose_answer:
                portal.lose_answer = False
                real = made._send

                def lost(method: str, path: str, **kwargs: Any) -> Any:
                    real(method, path, **kwargs)
                    raise PortalUnreachable("the answer was lost")

                made._send = lost  # type: ignore[method-assign]
            return made

        monkeypatch.setattr(PortalChats, "_client", client_of)

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    def chats(self) -> list[dict[str, Any]]:
        answer = self.client.get(f"/api/agents/{self.agent_id}/conversations", headers=self.headers)
        assert answer.status_code == 200, answer.text
        found: list[dict[str, Any]] = answer.json()["conversations"]
        return found

    def messages(self, chat_id: str) -> list[dict[str, Any]]:
        answer = self.client.get(
            f"/api/agents/{self.agent_id}/conversations/{chat_id}", headers=self.headers
        )
        assert answer.status_code == 200, answer.text
        found: list[dict[str, Any]] = answer.json()["messages"]
        return found

    def shown(self, chat_id: str) -> list[tuple[str, str]]:
        return [(m["role"], m["content"]) for m in self.messages(chat_id)]


def _unreachable(method: str, path: str, **kwargs: Any) -> Any:
    raise PortalUnreachable("connection refused")


@pytest.fixture
def portal(
    tmp_path: Path, db: Session, client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> Portal:
    return Portal(tmp_path, db, client, monkeypatch)


def _turns(n: int, long_at: int | None = None) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for i in range(n):
        role = "user" if i % 2 == 0 else "assistant"
        content = "x" * 250_000 if i == long_at else f"{role} message {i}"
        messages.append({"role": role, "content": content})
    return messages


def test_p10_a_120_message_conversation_and_a_250000_character_message_are_recorded_whole(
    portal: Portal,
) -> None:
    chats = PortalChats(portal.folder, None)
    messages = _turns(120, long_at=7)
    chats.record("conv-1", messages)
    assert chats.take_notes() == []
    [chat] = portal.chats()
    assert (chat["sessionId"], chat["messageCount"]) == ("conv-1", 120)
    assert portal.shown(chat["chatId"]) == [(m["role"], m["content"]) for m in messages]
    calls = portal.clients[-1].calls  # the 250,000 characters went as 3 parts: 122 in all
    assert [len(call) for call in calls] == [50, 50, 22]
    assert max(len(m["content"]) for call in calls for m in call) == 100_000
    assert ChatOutbox(portal.agent_id).waiting() == 0


def test_p10_turns_wait_while_the_portal_does_not_answer_and_are_recorded_once_in_order(
    portal: Portal, tmp_path: Path
) -> None:
    chats = PortalChats(portal.folder, None)
    chats.record("conv-1", _turns(2))
    portal.down = 2
    chats.record("conv-1", _turns(4))
    chats.record("conv-1", _turns(6))
    assert chats.take_notes() == [
        f"the portal at {PORTAL} does not answer: this conversation is kept on this machine "
        "and recorded there once it answers"
    ]
    outbox = ChatOutbox(portal.agent_id)
    assert outbox.waiting() == 2
    folder = tmp_path / "home" / ".webagents" / "chat-outbox" / portal.agent_id
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(folder / "conv-1.json").st_mode) == 0o600
    [chat] = portal.chats()
    assert chat["messageCount"] == 2

    later = PortalChats(portal.folder, None)  # the chat started again, the portal back
    assert later.flush() == 2
    assert later.take_notes() == []
    assert portal.shown(chat["chatId"]) == [(m["role"], m["content"]) for m in _turns(6)]
    assert outbox.waiting() == 0


def test_p10_a_call_resent_after_its_answer_was_lost_records_nothing_twice(
    portal: Portal,
) -> None:
    chats = PortalChats(portal.folder, None)
    portal.lose_answer = True
    chats.record("conv-1", _turns(4))
    assert ChatOutbox(portal.agent_id).waiting() == 1  # recorded, but not known to be
    assert chats.flush() == 1
    [chat] = portal.chats()
    assert portal.shown(chat["chatId"]) == [(m["role"], m["content"]) for m in _turns(4)]
    assert chats.take_notes() == [
        f"the portal at {PORTAL} does not answer: this conversation is kept on this machine "
        "and recorded there once it answers",
        "the portal answers again: the waiting turns are recorded there",
    ]


def test_p10_an_ended_sign_in_keeps_the_turns_and_says_to_run_webagents_login(
    portal: Portal,
) -> None:
    save_login(None, Login(PORTAL, "alice", str(uuid.uuid4()), "rok_" + "0" * 40))
    chats = PortalChats(portal.folder, None)
    chats.record("conv-1", _turns(2))
    [note] = chats.take_notes()
    assert note.startswith("not recorded on the portal (kept on this machine): ")
    assert note.endswith("run webagents login")
    assert ChatOutbox(portal.agent_id).waiting() == 1
    assert portal.chats() == []


def test_p10_an_agent_the_portal_does_not_know_as_the_users_is_said_apart(
    portal: Portal,
) -> None:
    other = str(uuid.uuid4())
    link = {"agentId": other, "agentName": "helper", "portal": PORTAL}
    (portal.folder / ".webagents" / "config.json").write_text(json.dumps({"link": link}))
    chats = PortalChats(portal.folder, None)
    chats.record("conv-1", _turns(2))
    assert chats.take_notes() == [
        f"not recorded on the portal (kept on this machine): the portal at {PORTAL} does "
        f"not know agent {other} as yours: publish it as the signed-in user (webagents "
        "publish), or sign in as its owner (webagents login)"
    ]
    with pytest.raises(AgentNotPublished), InProcess(portal.client, portal.key) as client:
        client.list_chats(other)


def test_s4_what_is_missing_is_said_with_the_command_that_fixes_it(tmp_path: Path) -> None:
    folder = tmp_path / "helper"
    folder.mkdir()
    stays = "conversations are kept on this machine only"
    assert link_of(folder, None) == (
        None,
        f"{stays}: not signed in to a portal (backend: robutler needs it): run webagents "
        "login, then webagents publish",
    )
    save_login(None, Login(PORTAL, "alice", str(uuid.uuid4()), "token"))
    assert link_of(folder, None) == (
        None,
        f"{stays}: this agent is not published on {PORTAL} (backend: robutler needs it): "
        "run webagents publish",
    )
    agent_id = str(uuid.uuid4())
    (folder / ".webagents").mkdir()
    link = {"agentId": agent_id, "agentName": "helper", "portal": "http://elsewhere:8700"}
    (folder / ".webagents" / "config.json").write_text(json.dumps({"link": link}))
    assert link_of(folder, None) == (
        None,
        f"{stays}: this agent is published on http://elsewhere:8700, but you are signed in "
        f"to {PORTAL}: run webagents login --portal http://elsewhere:8700, or webagents publish",
    )


def test_p10_the_portals_chats_are_listed_with_this_machines_and_continued(
    portal: Portal,
) -> None:
    chats = PortalChats(portal.folder, None)
    chats.record("kept-both", _turns(2))
    other = _post_as_web(portal, "web-only", _turns(4))
    listed = chats.chats()
    assert listed is not None
    here = [SessionSummary("kept-both", "hello", "2020-01-01T00:00:00+00:00", 1)]
    both, web = sorted(merged(here, listed), key=lambda s: s.id)
    assert (both.where, web.where) == ("both", "portal")
    assert (web.id, web.chat_id, web.message_count, web.title) == (
        "web-only",
        other,
        4,
        "user message 0",
    )
    assert chats.load(web) == _turns(4)
    chats.record("web-only", [*_turns(4), {"role": "user", "content": "from here"}])
    assert portal.shown(other)[-2:] == [("assistant", "assistant message 3"), ("user", "from here")]
    assert len(portal.messages(other)) == 5


def _post_as_web(portal: Portal, session_id: str, messages: list[dict[str, Any]]) -> str:
    answer = portal.client.post(
        f"/api/agents/{portal.agent_id}/conversations",
        headers=portal.headers,
        json={"sessionId": session_id, "messages": messages},
    )
    assert answer.status_code == 200, answer.text
    chat_id: str = answer.json()["chatId"]
    return chat_id


async def test_s3_only_the_owners_terminal_conversations_are_recorded(portal: Portal) -> None:
    model = ScriptedModel(["one", "two", "three"])
    skill = SessionSkill(backend="robutler")
    agent = Agent(name="helper", model=model, skills=[skill], directory=portal.folder)
    served = await agent.start(caller=Caller.owner(), conversation_id="served-owner")
    await served.send("before the chat asked")
    assert skill.record_owner_chats() is skill.portal is not None
    caller = await agent.start(caller=Caller.verified("bob"), conversation_id="theirs")
    await caller.send("a caller's turn")
    owner = await agent.start(caller=Caller.owner(), conversation_id="owners")
    await owner.send("the owner's turn")
    [chat] = portal.chats()
    assert chat["sessionId"] == "owners"
    assert portal.shown(chat["chatId"]) == [("user", "the owner's turn"), ("assistant", "three")]
    assert model.remaining == 0


def test_p10_a_damaged_outbox_file_is_reported_and_never_overwritten(
    portal: Portal, tmp_path: Path
) -> None:
    folder = tmp_path / "home" / ".webagents" / "chat-outbox" / portal.agent_id
    folder.mkdir(parents=True)
    damaged = folder / "conv-1.json"
    damaged.write_text("not json")
    chats = PortalChats(portal.folder, None)
    chats.record("conv-1", _turns(2))
    chats.record("conv-2", _turns(2))
    assert chats.take_notes() == [
        "this turn is kept on this machine but cannot be queued for the portal: "
        f"{damaged} is not an outbox file of webagents (Expecting value: line 1 column 1 "
        "(char 0)); it was left as it is: remove it to forget the turns it held",
        f"skipped: {damaged} is not an outbox file of webagents (Expecting value: line 1 "
        "column 1 (char 0)); it was left as it is: remove it to forget the turns it held",
    ]
    assert damaged.read_text() == "not json"
    [chat] = portal.chats()  # the other conversation is recorded all the same
    assert chat["sessionId"] == "conv-2"
