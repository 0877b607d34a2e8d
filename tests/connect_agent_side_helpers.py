"""An agent served behind a fake portal, for the agent side of Portal Connect's tests."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.conftest import write_agent
from tests.connect_portal import FakePortal
from webagents.home import agent_key_file
from webagents.model import ModelRequest
from webagents.offline import offline_reply
from webagents.portal_link.connect import Connector
from webagents.server import AgentHost, ServedAgent, create_app
from webagents.testing import FunctionModel

KEY = "rak_test-agent-key"


FRIDAY = {
    "model": "helper",
    "messages": [{"role": "user", "content": "remember that it is Friday"}],
}


@dataclass
class Served:
    portal: FakePortal
    folder: Path
    app: Any
    hanging: asyncio.Event
    stopped: asyncio.Event

    def notes(self) -> dict[str, list[str]]:
        """The notes kept, by namespace (as its .namespace file names it)."""
        memory = self.folder / ".webagents" / "memory"
        found: dict[str, list[str]] = {}
        for note in sorted(memory.rglob("*.md")):
            marker = note.parent / ".namespace"
            space = marker.read_text() if marker.exists() else note.parent.name
            found.setdefault(space, []).append(note.read_text())
        return found


def _model(hanging: asyncio.Event, stopped: asyncio.Event) -> FunctionModel:
    """The offline model, except that "hang" waits until the run is stopped."""

    async def answer(request: ModelRequest) -> Any:
        if request.messages and request.messages[-1].get("content") == "hang":
            hanging.set()
            try:
                await asyncio.Event().wait()
            finally:
                stopped.set()
        return offline_reply(request)

    return FunctionModel(answer)


@asynccontextmanager
async def served_agent(
    tmp_path: Path,
    skills: str = "  - memory\n  - session",
    *,
    key: str = KEY,
    refuse: str | None = None,
    hello_agent_id: str | None = None,
    trust_as_issuer: bool = False,
) -> AsyncIterator[Served]:
    """The agent served with its Portal Connect, and the fake portal it connects to (which
    `refuse`s the key, or says hello as `hello_agent_id`, from the first try on)."""
    agent_id = str(uuid.uuid4())
    portal = FakePortal(agent_id, KEY if refuse != "close" else key)
    portal.refuse, portal.hello_agent_id = refuse, hello_agent_id
    await portal.start()
    trusted = (
        f"\naccess:\n  jwt:\n    - issuer: {portal.url}\n      jwks: {portal.url}/.well-known/"
        "jwks.json\n      audience: agent-test"
        if trust_as_issuer
        else ""
    )
    folder = write_agent(tmp_path / "helper", f"name: helper\nskills:\n{skills}{trusted}")
    (folder / ".webagents").mkdir()
    link = {"agentId": agent_id, "agentName": "helper", "portal": portal.url}
    (folder / ".webagents" / "config.json").write_text(json.dumps({"link": link}))
    keyfile = agent_key_file(agent_id)
    keyfile.parent.mkdir(parents=True, exist_ok=True)
    keyfile.write_text(key + "\n")
    hanging, stopped = asyncio.Event(), asyncio.Event()
    host = AgentHost([ServedAgent.load(folder, model=_model(hanging, stopped))])
    app = create_app(host, connect=Connector(host, forced=False, profile=None).run)
    try:
        async with app.router.lifespan_context(app):
            yield Served(portal, folder, app, hanging, stopped)
    finally:
        await portal.stop()


async def _connected(portal: FakePortal) -> None:
    await asyncio.wait_for(portal.connected.wait(), 30)
