"""The same agent on a second machine (P4, issue 20), with real processes on PostgreSQL (SQLite
with --db sqlite): one `webagents portal serve`, two homes (two machines) signed in as the same
user. Machine B's `webagents publish` links the user's existing agent and gets its own key;
both keys work; the agent's page lists both with their last use; revoking B's key on the
page refuses B (with the command that fixes it) while A goes on; B's publish gives it a new
key. The page's revoke form needs its CSRF token, and another user gets 404 and revokes
nothing. Another user's agent of that name is still taken."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import httpx
import pytest

from tests.conftest import write_agent
from webagents.portal_link.client import PortalClient
from webagents.portal_link.errors import SignInError

from .conftest import PASSWORD, csrf_of
from .processes import Served
from .publish_helpers import _signed_in, webagents

# On PostgreSQL alone under --db both (tests/portal/whole_system.py): what these tests prove, an
# agent's keys on two machines through the CLI and the page, does not depend on the database beyond
# what the repository and app tests prove on both; test_publish_cli keeps this seam's run on
# SQLite.
pytestmark = [pytest.mark.e2e, pytest.mark.whole_system]  # runs the installed webagents command

_ROW = re.compile(r"<tr>\s*<td>(.*?)</td>\s*<td><code>(.*?)…</code></td>.*?</tr>", re.S)
_LAST_USE = re.compile(r"<td>(never|\d{4}-\d\d-\d\d \d\d:\d\d)</td>\s*<td>", re.S)


def _key_of(tmp_path: Path, home: str, agent_id: str) -> str:
    return (tmp_path / home / ".webagents" / "agents" / f"{agent_id}.key").read_text().strip()


def _put(portal: str, key: str, note: str) -> str:
    with PortalClient(portal, key) as client:
        entry = {"namespace": "owner", "key": note, "content": note, "description": ""}
        stored = client.memory_put({**entry, "source": "test", "at": None})
    return stored.key


def _browser(portal: str, username: str) -> httpx.Client:
    browser = httpx.Client(base_url=portal)
    token = csrf_of(browser.get("/signin").text)
    signed = browser.post(
        "/signin", data={"csrf_token": token, "username": username, "password": PASSWORD}
    )
    assert (signed.status_code, signed.headers.get("location")) == (303, "/"), signed.text
    return browser


def _keys_shown(page: str) -> list[tuple[str, str, str, str]]:
    """The agent page's keys: (machine, key prefix, last use or "never", revoke or revoked)."""
    rows = []
    for row in re.findall(r"<tr>\s*<td>.*?</tr>", page, re.S):
        found = _ROW.search(row)
        used = _LAST_USE.search(row)
        assert found and used, row
        state = "revoke" if 'action="' in row and "Revoke" in row else "revoked"
        last = "never" if used.group(1) == "never" else "a time"
        rows.append((found.group(1), found.group(2)[:4], last, state))
    return rows


def test_p4_publish_on_a_second_machine_links_the_agent_with_a_key_per_machine(
    tmp_path: Path, fresh_database_url: str, served: Served
) -> None:
    user_key = _signed_in(tmp_path, served, fresh_database_url, "alice", "home")
    a = write_agent(tmp_path / "a" / "keeper", "name: keeper\ndescription: Keeps notes.")
    first = webagents(tmp_path, "publish", str(a), "--key-name", "laptop")
    assert first.returncode == 0, first.stderr
    agent_id = json.loads((a / ".webagents" / "config.json").read_text())["link"]["agentId"]

    # Machine B: the same user, a copy of the folder without its link (found by its name).
    login = webagents(tmp_path, "login", "--portal", served.url, "--token", user_key, home="homeb")
    assert login.returncode == 0, login.stderr
    b = tmp_path / "b" / "keeper"
    b.mkdir(parents=True)
    shutil.copy(a / "AGENT.md", b / "AGENT.md")
    linked = webagents(tmp_path, "publish", str(b), "--key-name", "server", home="homeb")
    assert (linked.returncode, linked.stdout, linked.stderr) == (
        0,
        f"webagents: linked to your existing agent 'keeper' on {served.url} (agent "
        f"{agent_id}); this machine has its own key ('server')\n",
        "",
    )
    assert json.loads((b / ".webagents" / "config.json").read_text()) == {
        "link": {"agentId": agent_id, "agentName": "keeper", "portal": served.url}
    }
    key_a, key_b = _key_of(tmp_path, "home", agent_id), _key_of(tmp_path, "homeb", agent_id)
    assert key_a != key_b
    assert (_put(served.url, key_a, "from-a"), _put(served.url, key_b, "from-b")) == (
        "from-a",
        "from-b",
    )
    again = webagents(tmp_path, "publish", str(b), home="homeb")  # a usable key: no new one
    assert again.stdout == f"webagents: updated keeper on {served.url} (agent {agent_id})\n"

    alice = _browser(served.url, "alice")
    page = alice.get(f"/agents/{agent_id}")
    assert page.status_code == 200
    assert _keys_shown(page.text) == [
        ("laptop", "rok_", "a time", "revoke"),
        ("server", "rok_", "a time", "revoke"),
    ]
    listed = httpx.get(
        f"{served.url}/api/agents/{agent_id}/keys",
        headers={"Authorization": f"Bearer {_login_token(tmp_path, 'home')}"},
    ).json()["keys"]
    assert [(k["name"], k["lastUsedAt"] is not None, k["revokedAt"]) for k in listed] == [
        ("laptop", True, None),
        ("server", True, None),
    ]
    server_key = listed[1]["id"]
    revoke = f"/agents/{agent_id}/keys/{server_key}/revoke"

    # Refusals first: no CSRF token, and another user (who sees a 404 and revokes nothing).
    assert alice.post(revoke, data={}).status_code == 403
    _signed_in(tmp_path, served, fresh_database_url, "bob", "bobhome")
    bob = _browser(served.url, "bob")
    assert bob.get(f"/agents/{agent_id}").status_code == 404
    bob_token = csrf_of(bob.get("/").text)
    assert bob.post(revoke, data={"csrf_token": bob_token}).status_code == 404
    assert _put(served.url, key_b, "still-b") == "still-b"

    done = alice.post(revoke, data={"csrf_token": csrf_of(page.text)})
    assert (done.status_code, done.headers["location"]) == (303, f"/agents/{agent_id}")
    refused = httpx.get(
        f"{served.url}/api/storage/memory-scoped",
        params={"action": "get", "namespace": "owner", "key": "from-b"},
        headers={"Authorization": f"Bearer {key_b}"},
    )
    message = (
        "this machine's key for the agent 'keeper' ('server') was revoked on the portal: run "
        "webagents publish in the agent's folder to give this machine a new key"
    )
    assert (refused.status_code, refused.json()["error"]["message"]) == (401, message)
    with pytest.raises(SignInError) as caught:
        _put(served.url, key_b, "after-revoke")
    assert str(caught.value) == message
    assert _put(served.url, key_a, "a-goes-on") == "a-goes-on"
    assert _keys_shown(alice.get(f"/agents/{agent_id}").text) == [
        ("laptop", "rok_", "a time", "revoke"),
        ("server", "rok_", "a time", "revoked"),
    ]

    renewed = webagents(tmp_path, "publish", str(b), "--key-name", "server", home="homeb")
    assert renewed.stdout == (
        f"webagents: updated keeper on {served.url} (agent {agent_id}); this machine's key "
        "was revoked, so it has a new one ('server')\n"
    )
    assert _put(served.url, _key_of(tmp_path, "homeb", agent_id), "b-again") == "b-again"

    alice.close()
    bob.close()

    # Another user's agent of that name is still taken, and says what to do.
    c = write_agent(tmp_path / "c" / "keeper", "name: keeper")
    taken = webagents(tmp_path, "publish", str(c), home="bobhome")
    assert (taken.returncode, taken.stderr) == (
        2,
        "error: the agent name 'keeper' is taken on this portal (by another account's agent, "
        "or kept for the account that gave it up lately): choose another name: in its "
        "AGENT.md\n",
    )


def _login_token(tmp_path: Path, home: str) -> str:
    kept = json.loads((tmp_path / home / ".webagents" / "login.json").read_text())
    return str(kept["access_token"])
