"""The `webagents serve` banner of a published agent (SPEC A3, A4), real processes on
PostgreSQL (SQLite with --db sqlite): an agent that connects to the portal says that the
callers the portal relays arrive verified, also when it has no access: block of its own (then
it verifies no one who calls it directly); served with --no-connect, it says that every caller
is anonymous."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import write_agent
from tests.e2e.conftest import child_env
from tests.e2e.serving import running

from .processes import Served
from .publish_helpers import _signed_in, webagents

# On PostgreSQL alone under --db both (tests/portal/whole_system.py): what these tests prove, the
# banner a served agent prints about Portal Connect, does not depend on the database beyond what
# the repository and app tests prove on both; test_connect_portal_side keeps this seam's run on
# SQLite.
pytestmark = [pytest.mark.e2e, pytest.mark.whole_system]  # runs the installed webagents command

CONNECTED = "callers reach it at"


def _published(tmp_path: Path, served: Served, database: str, front: str) -> Path:
    _signed_in(tmp_path, served, database, "alice", "home")
    folder = write_agent(tmp_path / "helper", front)
    done = webagents(tmp_path, "publish", str(folder))
    assert done.returncode == 0, done.stderr
    return folder


def _access_lines(output: str) -> list[str]:
    return [line.strip() for line in output.splitlines() if line.startswith("  agent 'helper'")]


def test_a4_serve_banner_of_a_connected_agent_says_relayed_callers_arrive_verified(
    tmp_path: Path, fresh_database_url: str, served: Served
) -> None:
    folder = _published(
        tmp_path, served, fresh_database_url, "name: helper\nskills:\n  - memory\n  - session"
    )
    with running(["serve", str(folder), "--offline"], child_env(tmp_path)) as agent:
        agent.wait_until(lambda: CONNECTED in agent.output)
        output = agent.output
    assert _access_lines(output) == [
        f"agent 'helper': callers relayed by the portal {served.url} arrive verified (its user "
        "who owns the agent as the owner, other users as caller:<user>), with their notes and "
        "conversations kept; it verifies no one who calls it here (it has no access: block): "
        "they are anonymous, read shared notes, write nothing, and none of their "
        "conversations is kept"
    ]


def test_a4_serve_banner_of_a_connected_agent_with_access_keys_names_both(
    tmp_path: Path, fresh_database_url: str, served: Served
) -> None:
    folder = _published(
        tmp_path,
        served,
        fresh_database_url,
        "name: helper\nskills:\n  - memory\naccess:\n  owner: env:OWNER_KEY",
    )
    env = child_env(tmp_path, OWNER_KEY="owner-key-123")
    with running(["serve", str(folder), "--offline"], env) as agent:
        agent.wait_until(lambda: CONNECTED in agent.output)
        output = agent.output
    assert _access_lines(output) == [
        "agent 'helper' verifies callers by the owner key; callers relayed by the portal "
        f"{served.url} arrive verified (its user who owns the agent as the owner, other users "
        "as caller:<user>), with their notes and conversations kept"
    ]


def test_a3_serve_banner_of_a_published_agent_not_connecting_says_callers_are_anonymous(
    tmp_path: Path, fresh_database_url: str, served: Served
) -> None:
    folder = _published(
        tmp_path, served, fresh_database_url, "name: helper\nskills:\n  - memory\n  - session"
    )
    with running(["serve", str(folder), "--offline", "--no-connect"], child_env(tmp_path)) as agent:
        output = agent.output
    assert _access_lines(output) == [
        "agent 'helper' verifies no one (it has no access: block): every caller is anonymous, "
        "reads shared notes, writes nothing, and no conversation is kept"
    ]
    assert "Portal Connect" not in output


RELAYED = (
    "callers relayed by the portal {url} arrive verified (its user who owns the agent as the "
    "owner, other users as caller:<user>), with their notes and conversations kept; it "
    "verifies no one who calls it here (it has no access: block): they are anonymous, read "
    "shared notes, write nothing, and none of their conversations is kept"
)


def _reloaded_lines(output: str) -> list[str]:
    """The daemon's log line for each load of agent 'helper' after it started, from `agent`."""
    return [
        line[line.index(": agent 'helper'") + 2 :].strip()
        for line in output.splitlines()
        if "reloaded agent 'helper' from" in line
    ]


def _edit(folder: Path) -> None:
    """A change the daemon reloads the agent for."""
    agent_file = folder / "AGENT.md"
    agent_file.write_text(agent_file.read_text(encoding="utf-8") + "Be kind.\n", encoding="utf-8")


def test_a4_daemon_line_of_a_connected_agent_says_relayed_callers_arrive_verified(
    tmp_path: Path, fresh_database_url: str, served: Served
) -> None:
    folder = _published(
        tmp_path, served, fresh_database_url, "name: helper\nskills:\n  - memory\n  - session"
    )
    with running(["daemon", str(folder.parent), "--offline"], child_env(tmp_path)) as agent:
        agent.wait_until(lambda: CONNECTED in agent.output)
        _edit(folder)
        agent.wait_until(lambda: _reloaded_lines(agent.output))
        output = agent.output
    assert _access_lines(output) == [f"agent 'helper': {RELAYED.format(url=served.url)}"]
    assert _reloaded_lines(output) == [f"agent 'helper': {RELAYED.format(url=served.url)}"]


def test_a3_daemon_line_of_a_published_agent_not_connecting_says_callers_are_anonymous(
    tmp_path: Path, fresh_database_url: str, served: Served
) -> None:
    folder = _published(
        tmp_path, served, fresh_database_url, "name: helper\nskills:\n  - memory\n  - session"
    )
    command = ["daemon", str(folder.parent), "--offline", "--no-connect"]
    with running(command, child_env(tmp_path)) as agent:
        _edit(folder)
        agent.wait_until(lambda: _reloaded_lines(agent.output))
        output = agent.output
    anonymous = (
        "agent 'helper' verifies no one (it has no access: block): every caller is anonymous, "
        "reads shared notes, writes nothing, and no conversation is kept"
    )
    assert _access_lines(output) == [anonymous]
    assert _reloaded_lines(output) == [anonymous]
