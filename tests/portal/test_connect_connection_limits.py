"""Portal Connect's WebSocket beside the portal's connection limits (server/connection_limits.py)
against a real `webagents portal serve`: a connection upgraded to a WebSocket is the WebSocket
protocol's, so the HTTP request body's timeout never fires on it (it did, and raised in the
event loop: the upgraded request had no request cycle)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import websockets

from .connect_world import make_world
from .processes import Served

# On PostgreSQL alone under --db both (tests/portal/whole_system.py): a WebSocket connection
# outliving the HTTP timers does not depend on the database beyond what the repository and app
# tests prove on both.
pytestmark = [pytest.mark.e2e, pytest.mark.whole_system]  # the installed command

BODY_TIMEOUT_S = 1


def test_p12_an_upgraded_connect_connection_outlives_the_body_timeout_without_an_error(
    tmp_path: Path, fresh_database_url: str
) -> None:
    served = Served(
        tmp_path, "--database", fresh_database_url, "--body-timeout", str(BODY_TIMEOUT_S)
    )
    try:
        world = make_world(served.url, fresh_database_url)
        ws_url = served.url.replace("http", "ws") + "/ws"

        async def scenario() -> list[dict[str, object]]:
            headers = {"Authorization": f"Bearer {world.agent_key}"}
            async with websockets.connect(ws_url, additional_headers=headers) as agent:
                hello = json.loads(await agent.recv())
                # Past the body timeout (what is awaited is the timer's moment: it is the
                # behaviour under test), the connection still answers.
                await asyncio.sleep(BODY_TIMEOUT_S * 2.5)
                await agent.send(json.dumps({"type": "ping"}))
                return [hello, json.loads(await agent.recv())]

        hello, pong = asyncio.run(scenario())
    finally:
        served.stop()
    assert (hello["type"], pong) == ("hello", {"type": "pong"})
    assert "Traceback" not in served.output, served.output
    assert "Exception in callback" not in served.output, served.output
