"""`webagents publish` never lets a portal's answer or a hand-edited link name a path: an
agent id is a UUID, or nothing is kept (issue 12, from a security review). A fake portal that
answers `{"agent": {"id": "../../victim/server"}}` must not write outside the profile nor
change any folder's mode."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from webagents.cli.publish import default_key_name
from webagents.testing import AppServer

from .conftest import write_agent
from .e2e.conftest import child_env, webagents_command

UUID = "5f0e4c52-8f55-4d7e-9a41-6f2d8c1b9e10"


def _portal(agent_id: str) -> Starlette:
    async def create(request: Request) -> JSONResponse:
        return JSONResponse(
            {"agent": {"id": agent_id, "name": "helper"}, "rawApiKey": "echo OWNED"}
        )

    async def update(request: Request) -> JSONResponse:
        return JSONResponse({"agent": {"id": request.path_params["id"], "name": "helper"}})

    async def listed(request: Request) -> JSONResponse:
        return JSONResponse({"agents": []})  # none of that name: publish creates it

    async def new_key(request: Request) -> JSONResponse:
        return JSONResponse({"key": {"name": "laptop"}, "rawApiKey": "rok_machine"})

    return Starlette(
        routes=[
            Route("/api/agents", listed, methods=["GET"]),
            Route("/api/agents", create, methods=["POST"]),
            Route("/api/agents/{id}", update, methods=["PATCH"]),
            Route("/api/agents/{id}/keys", new_key, methods=["POST"]),
        ]
    )


def _publish(tmp_path: Path, portal: str, folder: Path) -> subprocess.CompletedProcess[str]:
    home = tmp_path / "home" / ".webagents"
    home.mkdir(parents=True, exist_ok=True)
    login = {"portal": portal, "username": "alice", "user_id": "1", "access_token": "t"}
    (home / "login.json").write_text(json.dumps(login))
    return subprocess.run(
        [webagents_command(), "publish", str(folder)],
        env=child_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.e2e  # runs the installed webagents command
def test_p4_an_agent_id_from_the_portal_never_names_a_path(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    victim.chmod(0o755)
    folder = write_agent(tmp_path / "helper", "name: helper")
    with AppServer(_portal("../../../victim/server")) as fake:
        done = _publish(tmp_path, fake.url, folder)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        f"error: the portal at {fake.url} answered an agent id that is not a UUID "
        "('../../../victim/server'): nothing was kept; is that address really a webagents "
        "portal? Sign in to yours with webagents login --portal URL\n"
    )
    assert list(victim.iterdir()) == []
    assert stat.S_IMODE(victim.stat().st_mode) == 0o755
    assert not (folder / ".webagents" / "config.json").exists()
    assert not (tmp_path / "home" / ".webagents" / "agents").exists()


@pytest.mark.e2e  # runs the installed webagents command
def test_p4_a_linked_agent_id_that_is_not_a_uuid_is_refused(tmp_path: Path) -> None:
    folder = write_agent(tmp_path / "helper", "name: helper")
    config = folder / ".webagents" / "config.json"
    config.parent.mkdir(parents=True)
    config.write_text(json.dumps({"link": {"agentId": f"../../api/agents/{UUID}"}}))
    with AppServer(_portal(UUID)) as fake:
        refused = _publish(tmp_path, fake.url, folder)
        config.write_text(json.dumps({"link": {"agentId": UUID}}))
        updated = _publish(tmp_path, fake.url, folder)
    assert (refused.returncode, refused.stderr) == (
        2,
        f"error: {config}: link.agentId '../../api/agents/{UUID}' is not an agent id (a UUID): "
        'fix it, or remove "link" to publish the agent anew\n',
    )
    assert (updated.returncode, updated.stdout) == (
        0,
        f"webagents: linked to your existing agent 'helper' on {fake.url} (agent {UUID}); "
        f"this machine has its own key ({default_key_name()!r})\n",
    )
    assert os.listdir(folder / ".webagents") == ["config.json"]


def test_a_the_auth_skill_refuses_a_link_whose_agent_id_is_not_a_uuid(tmp_path: Path) -> None:
    import pytest

    from webagents.context import AgentInfo
    from webagents.errors import ConfigError
    from webagents.skills.auth import AuthSkill

    config = tmp_path / ".webagents" / "config.json"
    config.parent.mkdir(parents=True)
    config.write_text(json.dumps({"link": {"agentId": "x/../y", "portal": "http://p"}}))
    with pytest.raises(ConfigError) as refused:
        AuthSkill().bind(AgentInfo(name="helper", directory=tmp_path))
    assert str(refused.value) == (
        f"{tmp_path}/.webagents/config.json: link.agentId 'x/../y' is not an agent id (a "
        "UUID): run webagents publish again, or fix the link"
    )
