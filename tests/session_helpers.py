"""What the session skill's tests share: two verified callers, an agent keeping its
conversations with a model that echoes how many messages it saw, where they are kept, and the
agent served over HTTP with Alice's key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from starlette.testclient import TestClient

from webagents import Agent, Caller
from webagents.access import AccessVerifier
from webagents.agent_spec import AccessSpec
from webagents.home import sessions_dir
from webagents.model import ModelRequest
from webagents.server import AgentHost, ServedAgent, create_app
from webagents.sessions.store import agent_folder_name
from webagents.skills.session import SessionSkill
from webagents.testing import FunctionModel

ALICE = Caller.verified("alice@example.com")
BOB = Caller.verified("bob@example.com")


def echo(request: ModelRequest) -> str:
    return f"seen {len(request.messages)}"


def session_agent(folder: Path, model: FunctionModel | None = None, **settings: Any) -> Agent:
    folder.mkdir(parents=True, exist_ok=True)
    skill = SessionSkill(agent_dir=folder, **settings)
    return Agent("helper", "Be brief.", skills=[skill], model=model or FunctionModel(echo))


def sessions_root(folder: Path) -> Path:
    return sessions_dir() / agent_folder_name(folder) / "helper"


def plain_files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def served_client(agent: Agent) -> TestClient:
    verifier = AccessVerifier(
        AccessSpec(keys={"alice@example.com": "env:ALICE"}), environ={"ALICE": "alice-key"}
    )
    return TestClient(create_app(AgentHost([ServedAgent(agent, verifier)])))


def post_turn(client: TestClient, session_id: str, *, stream: bool = False) -> Any:
    return client.post(
        "/v1/chat/completions",
        headers={"Authorization": "Bearer alice-key"},
        json={
            "model": "helper",
            "messages": [{"role": "user", "content": "hi"}],
            "metadata": {"session_id": session_id},
            "stream": stream,
        },
    )
