"""The agent's side of the portal (webagents.portal_link) reads the portal's answers into the
wire's models (webagents.portal_wire, which the portal answers with): an answer of another
shape is a BadAnswer that names the field and the command that fixes it, never a KeyError
deep inside a caller (Portal Connect's hello too); and it imports without the portal's
server dependencies (issue 22)."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import httpx
import pytest

from tests.memory_helpers import memory_agent
from tests.memory_portal_double import KEY, MemoryDouble
from webagents.portal_link.client import PortalClient
from webagents.portal_link.connect import AgentConnection, Target
from webagents.portal_link.errors import BadAnswer, PortalUnreachable
from webagents.portal_link.memory_sync.sync import PortalSync
from webagents.portal_wire.chats import ConversationOut
from webagents.portal_wire.memory import EntryOut, SyncAnswer, SyncLine

PORTAL = "http://portal.test"
ENTRY_ID = uuid.uuid5(uuid.NAMESPACE_URL, "agent\nowner\nplan")
ENTRY = {
    "id": str(ENTRY_ID),
    "namespace": "owner",
    "key": "plan",
    "content": "Ship it.",
    "description": "the plan",
    "source": "webagents",
    "created_at": "2026-01-01T00:00:00Z",
    "updated_at": "2026-01-02T00:00:00Z",
    "content_sha256": "0" * 64,
}
MEMORY = "/api/storage/memory-scoped"


def answering(body: Any, status: int = 200) -> PortalClient:
    """A client whose portal answers every request with `body` (JSON, or bytes as given)."""

    def handle(request: httpx.Request) -> httpx.Response:
        if isinstance(body, bytes):
            return httpx.Response(status, content=body)
        return httpx.Response(status, json=body)

    client = PortalClient(PORTAL, KEY)
    client._http = httpx.Client(base_url=PORTAL, transport=httpx.MockTransport(handle))
    return client


def refusal(method: str, path: str, field: str, problem: str) -> str:
    return (
        f"the portal at {PORTAL} answered {method} {path} with `{field}` not as this "
        f"webagents reads it ({problem}): run a portal of this webagents' version there "
        "(webagents portal serve)"
    )


def test_p5_client_reads_an_entry_into_the_wire_model() -> None:
    assert answering({"entry": ENTRY}).memory_get("owner", "plan") == EntryOut(
        id=ENTRY_ID,
        namespace="owner",
        key="plan",
        content="Ship it.",
        description="the plan",
        source="webagents",
        created_at=datetime(2026, 1, 1, tzinfo=UTC),
        updated_at=datetime(2026, 1, 2, tzinfo=UTC),
        content_sha256="0" * 64,
    )


def test_p5_client_reads_the_platforms_entry_which_has_no_content_hash() -> None:
    platform = {k: v for k, v in ENTRY.items() if k != "content_sha256"}
    found = answering({"entry": platform}).memory_get("owner", "plan")
    assert found is not None and found.content_sha256 is None


def test_p5_client_reads_a_sync_page_with_an_older_portals_integer_cursor() -> None:
    line = {
        "op": "delete",
        "id": str(ENTRY_ID),
        "namespace": "owner",
        "key": "plan",
        "content": None,
        "description": None,
        "source": "webagents",
        "at": "2026-01-02T00:00:00Z",
    }
    page = answering({"lines": [line], "cursor": 7, "more": False}).memory_sync_pull(None, None)
    assert page == SyncAnswer(
        lines=[
            SyncLine(
                op="delete",
                id=ENTRY_ID,
                namespace="owner",
                key="plan",
                content=None,
                description=None,
                source="webagents",
                at=datetime(2026, 1, 2, tzinfo=UTC),
            )
        ],
        cursor="7",
        more=False,
    )


@pytest.mark.parametrize(
    ("body", "call", "method", "path", "field", "problem"),
    [
        (
            {"lines": [{**ENTRY, "op": "put", "at": "yesterday"}], "cursor": "1", "more": False},
            lambda c: c.memory_sync_pull(None, None),
            "GET",
            MEMORY,
            "lines.0.at",
            "Input should be a valid datetime, input is too short",
        ),
        (
            {"lines": [], "cursor": "1"},
            lambda c: c.memory_sync_pull(None, None),
            "GET",
            MEMORY,
            "more",
            "Field required",
        ),
        (
            {"entry": {**ENTRY, "content": 5}},
            lambda c: c.memory_get("owner", "plan"),
            "GET",
            MEMORY,
            "entry.content",
            "Input should be a valid string",
        ),
        (
            {"forgotten": "yes"},
            lambda c: c.memory_delete("owner", "plan"),
            "DELETE",
            MEMORY,
            "forgotten",
            "Input should be a valid boolean",
        ),
        (
            {"conversations": [{"chatId": "c", "sessionId": "s", "messageCount": 1}]},
            lambda c: c.list_chats(str(ENTRY_ID)),
            "GET",
            f"/api/agents/{ENTRY_ID}/conversations",
            "conversations.0.updatedAt",
            "Field required",
        ),
        (
            {"username": "alice", "user_id": "u"},
            lambda c: c.exchange_key(),
            "POST",
            "/api/auth/cli/token",
            "access_token",
            "Field required",
        ),
        (
            {"user": {"id": "u-42"}},
            lambda c: c.me(),
            "GET",
            "/api/users/me",
            "user.username",
            "Field required",
        ),
    ],
    ids=["sync-line-time", "sync-page-more", "entry-content", "forgotten", "chats", "token", "me"],
)
def test_p5_p9_p3_a_malformed_answer_is_refused_naming_its_field(
    body: dict[str, Any],
    call: Callable[[PortalClient], object],
    method: str,
    path: str,
    field: str,
    problem: str,
) -> None:
    with pytest.raises(BadAnswer) as refused:
        call(answering(body))
    assert str(refused.value) == refusal(method, path, field, problem)


def test_p3_whoami_reads_what_p3_promises_and_lets_the_rest_be() -> None:
    """Another portal of the platform may name its users by ids that are not UUIDs and add
    fields of its own, or leave out this portal's `created_at`."""
    user = answering({"user": {"id": "u-42", "username": "ann", "plan": "pro"}}).me()
    assert (user.id, user.username) == ("u-42", "ann")


@pytest.mark.parametrize("body", [b"<html>not found</html>", [1, 2]], ids=["html", "list"])
def test_p3_an_answer_that_is_not_the_portals_json_says_to_check_the_address(body: Any) -> None:
    with pytest.raises(PortalUnreachable) as refused:
        answering(body).me()
    assert str(refused.value) == (
        f"{PORTAL} answered 200 without the portal's JSON: is this the portal's address? "
        "Sign in to the portal's own address with webagents login --portal URL"
    )


def test_p9_client_reads_the_chats_list_into_the_wire_model() -> None:
    chat = {
        "chatId": "c1",
        "sessionId": "s1",
        "updatedAt": "2026-01-02T00:00:00Z",
        "messageCount": 2,
        "preview": "hi",
    }
    assert answering({"conversations": [chat]}).list_chats(str(ENTRY_ID)) == [
        ConversationOut(
            chatId="c1",
            sessionId="s1",
            updatedAt=datetime(2026, 1, 2, tzinfo=UTC),
            messageCount=2,
            preview="hi",
        )
    ]


def test_p7_a_malformed_page_fails_the_round_and_memory_says_which_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WEBAGENTS_AGENT_TOKEN", KEY)
    monkeypatch.setattr(PortalSync, "start", lambda self: None)  # rounds are run by the test
    double = MemoryDouble()
    double.edit("owner", "plan", "Ship it.", "2026-01-01T00:00:00+00:00")
    handle = double.handle

    def without_more(request: httpx.Request) -> httpx.Response:
        answer = handle(request)
        if request.method == "GET" and request.url.params.get("action") == "sync":
            body = answer.json()
            del body["more"]
            return httpx.Response(200, json=body)
        return answer

    double.handle = without_more  # type: ignore[method-assign]
    _, skill = memory_agent(tmp_path / "a", portal=True)
    assert skill.sync is not None
    skill.sync.connect = double.client
    assert skill.sync.sync_round() is False
    assert skill.sync.last_error == refusal("GET", MEMORY, "more", "Field required")
    assert not (tmp_path / "a" / ".webagents" / "memory" / "owner" / "plan.md").exists()


BLOCKER = """
import importlib.abc, sys

SERVER = {"sqlalchemy", "alembic", "psycopg", "argon2", "jinja2"}

class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in SERVER:
            raise ImportError(f"{name} is the portal's (blocked: not installed)")
        return None

sys.meta_path.insert(0, Blocker())
import webagents.portal_link.chat_outbox
import webagents.portal_link.chats
import webagents.portal_link.client
import webagents.portal_link.connect
import webagents.portal_link.memory_sync.sync
import webagents.portal_wire.accounts
import webagents.portal_wire.chats
import webagents.portal_wire.connect
import webagents.portal_wire.memory
from webagents.skills.registry import registry

registry()
print(sorted(m for m in sys.modules if m.partition(".")[2].startswith("portal.")))
"""


def test_p7_the_agent_side_of_the_portal_imports_without_the_portal_extra() -> None:
    """An agent installs without `webagents[portal]`: with SQLAlchemy, Alembic, psycopg,
    argon2 and Jinja2 unimportable, every module of the agent's side imports, and none of the
    portal's server package is loaded."""
    ran = subprocess.run(
        [sys.executable, "-c", BLOCKER], capture_output=True, text=True, timeout=120, check=False
    )
    assert (ran.returncode, ran.stdout, ran.stderr) == (0, "[]\n", "")


class _OneFrame:
    """A WebSocket whose portal sends one frame."""

    def __init__(self, text: str) -> None:
        self.text = text

    async def recv(self) -> str:
        return self.text


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('{"type":"welcome"}', "`type`: Input should be 'hello'"),
        ('{"type":"hello","public_url":7}', "`public_url`: Input should be a valid string"),
        ("not json", "the frame: Invalid JSON: expected ident at line 1 column 2"),
    ],
    ids=["type", "public-url", "not-json"],
)
async def test_p12_a_hello_of_another_shape_is_refused_naming_its_field(
    text: str, said: str
) -> None:
    connection = AgentConnection(
        cast(Any, None), cast(Any, None), Target("helper", PORTAL, None), profile=None
    )
    with pytest.raises(OSError) as refused:
        await connection._hello(cast(Any, _OneFrame(text)), 0)
    assert str(refused.value) == f"the portal did not start with hello ({said})"
