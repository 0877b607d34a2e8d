"""Portal Connect holds no database session while it waits for an agent (DESIGN.md: a short
session per message): on SQLite a session holds the write lock, so a relay in flight that
kept one would hold every other request that writes until the agent answered."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from .connect_agent import WAIT, ConnectAgent
from .connect_world import HI, World, make_world
from .processes import Served

pytestmark = pytest.mark.e2e  # runs the installed webagents command


@pytest.fixture
def world(served: Served, fresh_database_url: str) -> World:
    return make_world(served.url, fresh_database_url)


def test_p12_a_relay_in_flight_holds_no_database_session(world: World) -> None:
    hanging = ConnectAgent(world.url, world.agent_key, mode="hang")
    try:
        hanging.wait_for("hellos")
        with ThreadPoolExecutor(1) as pool:
            # Not streamed: the endpoint itself waits for the agent's whole reply.
            relayed = pool.submit(
                httpx.post,
                world.endpoint(),
                json={"messages": HI},
                headers=world.headers("alice"),
                timeout=WAIT,
            )
            hanging.wait_for("requests")  # the relay is in flight, and stays so

            made = httpx.post(
                f"{world.url}/api/agents",
                json={"name": "written-meanwhile"},
                headers=world.headers("bob"),
                timeout=WAIT,
            )
            keys = httpx.get(f"{world.url}/.well-known/jwks.json", timeout=WAIT)

            assert made.status_code == 201, made.text
            assert made.json()["agent"]["name"] == "written-meanwhile"
            assert keys.status_code == 200
            assert not relayed.done()  # the agent still has not answered
            hanging.stop()
            answer = relayed.result(timeout=WAIT)
        assert answer.status_code == 502
    finally:
        hanging.stop()
