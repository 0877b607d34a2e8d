"""Portal Connect end to end (SPEC A4, P12), all real processes: `webagents portal serve`, and
`webagents serve` of an agent published with the real CLI (`login --token`, `publish`). The
official `openai` client calls the portal's endpoint for the agent: another portal user is
served as `caller:<user>` (its own notes, its own sessions), the owner as the owner; the
portal restarted, the agent reconnects and serves again; the agent killed mid-reply, the
caller gets an error, not a hang. On PostgreSQL (SQLite with --db sqlite)."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.e2e.conftest import child_env
from tests.e2e.serving import Process, running
from webagents.model import ModelRequest
from webagents.sessions.store import agent_folder_name, caller_hash
from webagents.testing import FunctionModel, Reply, ScriptedServer

from .connect_served_helpers import _allow_others, _client, _key, _published, _ready
from .processes import Served

# On PostgreSQL alone under --db both (tests/portal/whole_system.py): what these tests prove, the
# portal, the agent and the openai client over Portal Connect, does not depend on the database
# beyond what the repository and app tests prove on both; test_connect_portal_side keeps this
# seam's run on SQLite.
pytestmark = [pytest.mark.e2e, pytest.mark.whole_system]  # runs the installed webagents command


def _say(served: Served, key: str, text: str, session: str | None = None) -> str:
    with _client(served, key) as client:
        reply = client.chat.completions.create(
            model="helper",
            messages=[{"role": "user", "content": text}],
            metadata={"session_id": session} if session else None,  # type: ignore[arg-type]
        )
    return reply.choices[0].message.content or ""


def test_p12_through_the_portal_a_user_is_a_caller_and_the_owner_the_owner(
    tmp_path: Path, fresh_database_url: str, served: Served
) -> None:
    folder, alice = _published(
        tmp_path, served, fresh_database_url, "name: helper\nskills:\n  - memory\n  - session"
    )
    bob = _key(tmp_path, fresh_database_url, "bob")
    env = child_env(tmp_path)
    with running(["serve", str(folder), "--offline"], env) as agent:
        _ready(agent, served)
        with pytest.raises(openai.PermissionDeniedError):  # not allowed yet: 403
            _say(served, bob, "remember that bob likes tea")
        _allow_others(served, alice, folder)
        _say(served, bob, "remember that bob likes tea", session="plan")
        _say(served, alice, "remember that the launch is Friday", session="plan")
        with _client(served, bob) as client:
            streamed = client.chat.completions.create(
                model="helper",
                messages=[{"role": "user", "content": "what do you remember"}],
                stream=True,
            )
            recalled = "".join(c.choices[0].delta.content or "" for c in streamed if c.choices)
    assert "bob likes tea" in recalled and "launch" not in recalled, recalled
    memory = folder / ".webagents" / "memory"
    owners = [p.read_text() for p in (memory / "owner").glob("*.md")]
    assert len(owners) == 1 and "the launch is Friday" in owners[0]
    callers = list((memory / "callers").rglob("*.md"))
    assert len(callers) == 1 and "bob likes tea" in callers[0].read_text()
    assert (callers[0].parent / ".namespace").read_text() == "caller:bob"
    sessions = Path(env["WEBAGENTS_HOME"]) / "sessions" / agent_folder_name(folder) / "helper"
    owner_plan = json.loads((sessions / "plan.json").read_text())
    bob_plan = json.loads(
        (sessions / "callers" / caller_hash("caller:bob") / "plan.json").read_text()
    )
    assert [m["content"] for m in owner_plan["messages"] if m["role"] == "user"] == [
        "remember that the launch is Friday"
    ]
    assert [m["content"] for m in bob_plan["messages"] if m["role"] == "user"] == [
        "remember that bob likes tea"
    ]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_p12_the_portal_restarted_the_agent_reconnects_and_serves_again(
    tmp_path: Path, fresh_database_url: str
) -> None:
    port = _free_port()
    first = Served(tmp_path, "--database", fresh_database_url, "--port", str(port), "--access-log")
    try:
        folder, alice = _published(tmp_path, first, fresh_database_url, "name: helper")
        with running(["serve", str(folder), "--offline"], child_env(tmp_path)) as agent:
            _ready(agent, first)
            before = _say(first, alice, "hello")
            first.stop()
            agent.wait_until(lambda: "lost the connection to the portal" in agent.output)
            second = Served(tmp_path, "--database", fresh_database_url, "--port", str(port))
            try:
                agent.wait_until(lambda: "connected again after" in agent.output, timeout=90)
                after = _say(second, alice, "hello")
            finally:
                second.stop()
    finally:
        first.stop()
    assert before and after
    assert agent.output.count("lost the connection to the portal") == 1, agent.output


@contextmanager
def _hanging_model() -> Iterator[tuple[str, threading.Event]]:
    """A model endpoint whose every reply waits forever; the event says a request came."""
    asked = threading.Event()

    async def hang(request: ModelRequest) -> Any:
        asked.set()
        await asyncio.sleep(3600)
        return Reply("never")

    with ScriptedServer(FunctionModel(hang)) as server:
        yield server.base_url, asked


@pytest.mark.parametrize("stream", [True, False])
def test_p12_the_agent_killed_mid_reply_the_caller_gets_an_error_not_a_hang(
    tmp_path: Path, fresh_database_url: str, served: Served, stream: bool
) -> None:
    folder, alice = _published(
        tmp_path, served, fresh_database_url, "name: helper\nmodel: openai/scripted"
    )
    with _hanging_model() as (model_url, asked):
        env = child_env(tmp_path, OPENAI_BASE_URL=model_url)
        agent = Process(["serve", str(folder), "--port", "0"], env)
        try:
            _ready(agent, served)
            outcome: list[BaseException | str] = []

            def call() -> None:
                try:
                    with _client(served, alice) as client:
                        reply = client.chat.completions.create(
                            model="helper",
                            messages=[{"role": "user", "content": "hi"}],
                            stream=stream,
                        )
                        if stream:
                            outcome.append("".join(str(chunk) for chunk in reply))  # type: ignore[union-attr]
                        else:
                            outcome.append(str(reply))
                except BaseException as exc:  # whatever it is, it is the outcome
                    outcome.append(exc)

            caller = threading.Thread(target=call)
            caller.start()
            assert asked.wait(60), agent.output
            agent.popen.send_signal(signal.SIGKILL)
            caller.join(90)
            assert not caller.is_alive(), "the caller still waits for the killed agent"
        finally:
            agent.stop()
    assert len(outcome) == 1 and isinstance(outcome[0], openai.APIError), outcome


def _nested(depth: int) -> str:
    """A chat completions request with a field nested `depth` arrays deep."""
    return '{"messages":[{"role":"user","content":"Hi"}],"extra":' + "[" * depth + "]" * depth + "}"


def test_p12_a_body_the_agent_cannot_take_is_answered_an_error_and_the_connection_serves_on(
    tmp_path: Path, fresh_database_url: str, served: Served
) -> None:
    folder, alice = _published(tmp_path, served, fresh_database_url, "name: helper")
    url = f"{served.url}/agents/helper/chat/completions"
    headers = {"Authorization": f"Bearer {alice}", "content-type": "application/json"}
    with running(["serve", str(folder), "--offline"], child_env(tmp_path)) as agent:
        _ready(agent, served)
        # 300 deep: the portal relays it; the agent cannot re-encode it (orjson stops at 255).
        deep = httpx.post(url, content=_nested(300), headers=headers, timeout=60)
        # 1,100 deep: past what the portal reads (Python's parser gives up near 1,000).
        deeper = httpx.post(url, content=_nested(1100), headers=headers, timeout=60)
        after = _say(served, alice, "hello")
    assert (deep.status_code, deep.json()) == (
        400,
        {
            "error": {
                "message": "the request body is nested deeper than the agent takes (255 levels "
                "of JSON arrays and objects): send a flatter body",
                "type": "invalid_request_error",
                "param": None,
                "code": "body_too_deep",
            }
        },
    )
    assert (deeper.status_code, deeper.json()) == (
        400,
        {
            "error": {
                "message": "the request body nests JSON arrays and objects more than 512 deep, "
                "more than the portal reads: send a flatter body",
                "type": "invalid_request_error",
                "param": None,
                "code": "bad_json",
            }
        },
    )
    assert after
    assert "lost the connection" not in agent.output, agent.output
