"""`webagents publish` as a real process (P4), on SQLite and PostgreSQL: the first publish
creates the agent and links the folder, the second updates it; the agent's key is kept 0600
under the profile, never in the folder; another user's link answers 404 and changes
nothing."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import httpx
import pytest

from tests.conftest import write_agent

from .processes import Served
from .publish_helpers import _signed_in, webagents

pytestmark = pytest.mark.e2e  # runs the installed webagents command


def test_p4_publish_creates_then_updates_and_keeps_the_key_outside_the_folder(
    tmp_path: Path, fresh_database_url: str, served: Served
) -> None:
    key = _signed_in(tmp_path, served, fresh_database_url, "alice", "home")
    folder = write_agent(
        tmp_path / "helper", "name: helper\ndescription: Answers briefly.\nskills:\n  - memory"
    )
    first = webagents(tmp_path, "publish", str(folder))
    assert first.returncode == 0, first.stderr
    config = json.loads((folder / ".webagents" / "config.json").read_text())
    agent_id = config["link"]["agentId"]
    assert config == {"link": {"agentId": agent_id, "agentName": "helper", "portal": served.url}}
    assert first.stdout == f"webagents: published helper on {served.url} (agent {agent_id})\n"
    key_file = tmp_path / "home" / ".webagents" / "agents" / f"{agent_id}.key"
    assert stat.S_IMODE(os.stat(key_file).st_mode) == 0o600
    agent_key = key_file.read_text().strip()
    assert agent_key.startswith("rok_")
    in_folder = [p.read_text() for p in folder.rglob("*") if p.is_file()]
    assert not any(agent_key in text for text in in_folder)

    (folder / "AGENT.md").write_text(
        "---\nname: helper\ndescription: Answers kindly.\n---\nBe kind.\n", encoding="utf-8"
    )
    second = webagents(tmp_path, "publish", str(folder))
    assert second.stdout == f"webagents: updated helper on {served.url} (agent {agent_id})\n"
    agents = httpx.get(
        f"{served.url}/api/agents", headers={"Authorization": f"Bearer {key}"}
    ).json()["agents"]
    assert [(a["id"], a["description"], a["instructions"], a["skills"]) for a in agents] == [
        (agent_id, "Answers kindly.", "Be kind.", [])
    ]
    assert sorted(p.name for p in key_file.parent.iterdir()) == [f"{agent_id}.key"]


def test_p4_publish_of_a_folder_linked_to_another_users_agent_is_refused(
    tmp_path: Path, fresh_database_url: str, served: Served
) -> None:
    _signed_in(tmp_path, served, fresh_database_url, "alice", "home")
    folder = write_agent(tmp_path / "helper", "name: helper")
    assert webagents(tmp_path, "publish", str(folder)).returncode == 0
    _signed_in(tmp_path, served, fresh_database_url, "bob", "bob-home")
    refused = webagents(tmp_path, "publish", str(folder), home="bob-home")
    agent_id = json.loads((folder / ".webagents" / "config.json").read_text())["link"]["agentId"]
    assert (refused.returncode, refused.stderr) == (
        2,
        f"error: the portal does not know agent {agent_id} as yours (bob at {served.url}): "
        "sign in as its owner (webagents login), or remove "
        f'"link" from {folder.resolve()}/.webagents/config.json '
        "to publish it anew\n",
    )
    not_signed_in = webagents(tmp_path, "publish", str(folder), home="nobody")
    assert (not_signed_in.returncode, not_signed_in.stderr) == (
        2,
        "error: not signed in to a portal: run webagents login\n",
    )
