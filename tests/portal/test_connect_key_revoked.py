"""Portal Connect (P12) and an agent's keys, one per machine (P4), against a real `webagents
portal serve` on PostgreSQL (SQLite with --db sqlite): a machine whose key is revoked is cut
off at once from the relay too, not only at its next connection (a stolen laptop's open
WebSocket went on receiving the users' requests), while the agent's other machines serve on."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
import websockets
from websockets.exceptions import ConnectionClosed

from webagents.portal.connect.protocol import CLOSE_UNAUTHORIZED

from .connect_world import World, make_world
from .processes import Served

# On PostgreSQL alone under --db both (tests/portal/whole_system.py): what these tests prove, a
# revoked machine's key cut off from Portal Connect, does not depend on the database beyond what
# the repository and app tests prove on both; test_connect_portal_side keeps this seam's run on
# SQLite.
pytestmark = [pytest.mark.e2e, pytest.mark.whole_system]  # runs the installed webagents command

CLOSED_WITHIN = 60.0
"""A bound on the wait for the portal to close the revoked machine's connection (it checks
its live connections' keys at every heartbeat, 5 s); the test ends as soon as it closes."""


def _keys(world: World) -> list[dict[str, object]]:
    listed = httpx.get(
        f"{world.url}/api/agents/{world.agent_id}/keys", headers=world.headers("alice")
    )
    assert listed.status_code == 200, listed.text
    keys: list[dict[str, object]] = listed.json()["keys"]
    return keys


def test_p4_a_revoked_machine_key_ends_its_live_connect_connection_and_the_others_serve_on(
    served: Served, fresh_database_url: str
) -> None:
    world = make_world(served.url, fresh_database_url)
    server = httpx.post(
        f"{world.url}/api/agents/{world.agent_id}/keys",
        json={"name": "server"},
        headers=world.headers("alice"),
    )
    assert server.status_code == 201, server.text
    first = next(k for k in _keys(world) if k["name"] == "first key")
    ws_url = world.url.replace("http", "ws") + "/ws"

    async def scenario() -> tuple[int, str, dict[str, object]]:
        laptop_headers = {"Authorization": f"Bearer {world.agent_key}"}
        server_headers = {"Authorization": f"Bearer {server.json()['rawApiKey']}"}
        async with (
            websockets.connect(ws_url, additional_headers=laptop_headers) as laptop,
            websockets.connect(ws_url, additional_headers=server_headers) as other,
        ):
            for ws in (laptop, other):
                assert json.loads(await ws.recv())["type"] == "hello"
            revoked = await asyncio.to_thread(
                httpx.delete,
                f"{world.url}/api/agents/{world.agent_id}/keys/{first['id']}",
                headers=world.headers("alice"),
            )
            assert (revoked.status_code, revoked.json()) == (200, {"revoked": True})
            try:
                async with asyncio.timeout(CLOSED_WITHIN):
                    async for _ in laptop:
                        pass  # nothing is sent to it: it is waiting for requests
            except ConnectionClosed:
                pass
            assert laptop.close_code is not None, "the revoked machine is still connected"
            await other.send(json.dumps({"type": "ping"}))
            pong = json.loads(await other.recv())
            return laptop.close_code, laptop.close_reason or "", pong

    code, reason, pong = asyncio.run(scenario())
    assert (code, pong) == (CLOSE_UNAUTHORIZED, {"type": "pong"})
    assert reason == "this machine's key was revoked: run webagents publish to get a new one"
