"""A published agent served with `- auth` (SPEC A, issue 12), all real processes: the portal,
`webagents publish`, `webagents serve`. The owner's portal token is the owner (its notes go to
`owner/`), another portal user's token is `caller:<username>` (its own folder) while the owner
allows others and is refused on both paths when not (issue 21), and a token the portal signed
for another agent is a 401; on PostgreSQL (SQLite with --db sqlite)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.conftest import write_agent
from tests.e2e.conftest import child_env
from tests.e2e.serving import running

from .processes import Served
from .publish_helpers import _signed_in, webagents

# On PostgreSQL alone under --db both (tests/portal/whole_system.py): what these tests prove, the
# portal's tokens verified by a served agent, does not depend on the database beyond what the
# repository and app tests prove on both; test_token_binding keeps this seam's run on SQLite.
pytestmark = [pytest.mark.e2e, pytest.mark.whole_system]  # runs the installed webagents command


def _asked_for_token(portal: Served, key: str, agent: str) -> httpx.Response:
    return httpx.post(
        f"{portal.url}/api/agents/token",
        headers={"Authorization": f"Bearer {key}"},
        json={"agent": agent},
        timeout=30,
    )


def _agent_token(portal: Served, key: str, agent: str) -> str:
    answer = _asked_for_token(portal, key, agent)
    assert answer.status_code == 200, answer.text
    return str(answer.json()["access_token"])


def _allow_others(portal: Served, key: str, agent_id: str, allowed: bool) -> None:
    answer = httpx.patch(
        f"{portal.url}/api/agents/{agent_id}",
        headers={"Authorization": f"Bearer {key}"},
        json={"allowOthers": allowed},
        timeout=30,
    )
    assert (answer.status_code, answer.json()["agent"]["allowOthers"]) == (200, allowed)


def test_a_a_published_agent_served_with_auth_knows_the_owner_and_portal_users(
    tmp_path: Path, fresh_database_url: str, served: Served
) -> None:
    alice = _signed_in(tmp_path, served, fresh_database_url, "alice", "home")
    bob = _signed_in(tmp_path, served, fresh_database_url, "bob", "bobs")
    folder = write_agent(tmp_path / "helper", "name: helper\nskills:\n  - memory\n  - auth")
    other = write_agent(tmp_path / "other", "name: other\nskills:\n  - memory")
    for published in (folder, other):
        done = webagents(tmp_path, "publish", str(published))
        assert done.returncode == 0, done.stderr
    helper_id = json.loads((folder / ".webagents" / "config.json").read_text())["link"]["agentId"]

    env = child_env(tmp_path)
    env["WEBAGENTS_HOME"] = str(tmp_path / "home" / ".webagents")
    with running(["serve", str(folder), "--offline"], env) as agent:
        assert f"verifies callers by tokens of the portal {served.url}" in agent.output

        def remember(token: str, fact: str) -> httpx.Response:
            return httpx.post(
                f"{agent.url}/v1/chat/completions",
                headers={"Authorization": f"Bearer {token}"},
                json={
                    "model": "helper",
                    "messages": [{"role": "user", "content": f"remember that {fact}"}],
                },
                timeout=60,
            )

        refused = _asked_for_token(served, bob, "helper")  # the owner has not allowed others
        owner = remember(_agent_token(served, alice, "helper"), "the launch is Friday")
        _allow_others(served, alice, helper_id, True)
        bobs = _agent_token(served, bob, "helper")
        user = remember(bobs, "bob likes tea")
        _allow_others(served, alice, helper_id, False)
        withdrawn = remember(bobs, "bob likes coffee")  # minted while others were allowed
        misdirected = remember(_agent_token(served, alice, "other"), "nothing")
        forged = remember(_agent_token(served, alice, "helper")[:-4] + "AAAA", "nothing")
    assert (refused.status_code, refused.json()) == (
        403,
        {
            "error": {
                "message": "the owner of 'helper' has not allowed other users to call it: ask "
                "them to allow others on the agent's page in the portal",
                "type": "permission_error",
                "param": None,
                "code": "not_allowed",
            }
        },
    )
    assert (owner.status_code, user.status_code) == (200, 200), (owner.text, user.text)
    assert (withdrawn.status_code, withdrawn.json()["error"]["message"]) == (
        401,
        "the owner of this agent has not allowed other users to call it: ask them to allow "
        "others on the agent's page in the portal",
    )
    assert (misdirected.status_code, misdirected.json()["error"]["message"]) == (
        401,
        "the portal token is for another agent (audience)",
    )
    assert forged.status_code == 401
    memory = folder / ".webagents" / "memory"
    owners = [p.read_text() for p in (memory / "owner").glob("*.md")]
    assert len(owners) == 1 and "the launch is Friday" in owners[0]
    callers = list((memory / "callers").rglob("*.md"))
    assert len(callers) == 1 and "bob likes tea" in callers[0].read_text()
    assert (memory / "callers" / callers[0].parent.name / ".namespace").read_text() == (
        "caller:bob"
    )
    assert not (memory / "shared").exists() or not list((memory / "shared").glob("*.md"))
