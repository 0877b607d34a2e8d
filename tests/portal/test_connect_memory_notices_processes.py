"""Memory notices between portal processes (SPEC P12, issue 23), real `webagents portal serve`
processes on PostgreSQL: an agent's memory written through one portal process is told to the
agent's connection held by another (the directory names the holder; the notice goes over
LISTEN/NOTIFY), with the feed's cursor, and each further change is told too."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from .connect_agent import ConnectAgent
from .connect_world import make_world
from .processes import Served

pytestmark = pytest.mark.e2e  # runs the installed webagents command


def test_p12_a_write_through_one_portal_process_is_told_to_a_connection_held_by_another(
    tmp_path: Path, database_kind: str, fresh_database_url: str, served: Served
) -> None:
    if database_kind != "postgresql":
        pytest.skip("several portal processes need PostgreSQL (SQLite: one process)")
    world = make_world(served.url, fresh_database_url)
    holder = ConnectAgent(world.url, world.agent_key)  # held by the first process
    other = Served(tmp_path, "--database", fresh_database_url)
    url = f"{other.url}/api/storage/memory-scoped"
    headers = {"Authorization": f"Bearer {world.agent_key}"}
    entry = {"namespace": "owner", "key": "plan", "content": "Friday", "description": ""}
    try:
        holder.wait_for("hellos")
        put = httpx.put(url, json=entry, headers=headers)
        assert put.status_code == 200, put.text
        holder.wait_for("memory")
        forgot = httpx.delete(url, params={"namespace": "owner", "key": "plan"}, headers=headers)
        assert (forgot.status_code, forgot.json()) == (200, {"forgotten": True})
        holder.wait_for("memory", 2)
        assert holder.seen.memory == [
            {"type": "memory_changed", "cursor": "1"},
            {"type": "memory_changed", "cursor": "2"},
        ]
    finally:
        holder.stop()
        other.stop()
