"""The memory pages and retention against a real `webagents portal serve` (SPEC P8, P6), on
PostgreSQL (SQLite with --db sqlite): the owner edits an entry in Chromium and the agent's API
then answers the new text; the owner forgets an entry in Chromium (a page asks first) and
restores it from the namespace's forgotten entries; the portal's own background sweeper removes
an expired entry, and the agent's sync sees the removal."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import child_env

from . import processes
from .conftest import PASSWORD, csrf_of
from .memory_served_helpers import MEMORY, _agent, _put
from .processes import Served

# On PostgreSQL alone under --db both (tests/portal/whole_system.py): what these tests prove, the
# memory pages in Chromium and an agent's sync against a served portal, does not depend on the
# database beyond what the repository and app tests prove on both; test_memory_sync_oneshot keeps
# this seam's run on SQLite.
pytestmark = [pytest.mark.e2e, pytest.mark.whole_system]  # runs the installed webagents command


def _get(url: str, agent: dict[str, str], namespace: str, key: str) -> Any:
    params = {"action": "get", "namespace": namespace, "key": key}
    answer = httpx.get(f"{url}{MEMORY}", headers=agent, params=params)
    assert answer.status_code == 200, answer.text
    return answer.json()["entry"]


def test_p8_the_owner_edits_an_entry_in_chromium_and_the_api_answers_the_new_text(
    tmp_path: Path, fresh_database_url: str, served: Served, page: Any
) -> None:
    agent_id, agent = _agent(tmp_path, served.url, fresh_database_url)
    _put(
        served.url,
        agent,
        namespace="caller:bob",
        key="prefs",
        content="tea",
        description="what bob likes",
        source="agent",
        at=None,
    )
    page.goto(f"{served.url}/signin")
    page.fill("#username", "alice")
    page.fill("#password", PASSWORD)
    page.click("main button[type=submit]")
    page.wait_for_url(f"{served.url}/")
    page.click(f'a[href="/agents/{agent_id}/memory"]')
    page.wait_for_url(f"{served.url}/agents/{agent_id}/memory")
    page.click("#namespaces a")
    page.click("#entries a")
    assert page.input_value("#content") == "tea"
    page.fill("#content", "tea, no sugar\nand biscuits")
    page.fill("#description", "what bob likes now")
    with page.expect_navigation():
        page.click("#save")  # saved, then sent back to the entry's page (303)
    assert (
        page.url == f"{served.url}/agents/{agent_id}/memory/entry?namespace=caller%3Abob&key=prefs"
    )
    assert page.input_value("#content") == "tea, no sugar\nand biscuits"
    entry = _get(served.url, agent, "caller:bob", "prefs")
    assert (entry["content"], entry["description"], entry["source"]) == (
        "tea, no sugar\nand biscuits",
        "what bob likes now",
        "portal",
    )


def test_p8_the_owner_forgets_after_a_confirmation_and_restores_from_forgotten_in_chromium(
    tmp_path: Path, fresh_database_url: str, served: Served, page: Any
) -> None:
    agent_id, agent = _agent(tmp_path, served.url, fresh_database_url)
    _put(served.url, agent, namespace="owner", key="plan", content="launch in March", at=None)
    base = f"{served.url}/agents/{agent_id}/memory"
    page.goto(f"{served.url}/signin")
    page.fill("#username", "alice")
    page.fill("#password", PASSWORD)
    page.click("main button[type=submit]")
    page.wait_for_url(f"{served.url}/")
    page.goto(f"{base}/entry?namespace=owner&key=plan")
    page.click("#forget-link")
    page.wait_for_url(f"{base}/forget?namespace=owner&key=plan")
    assert page.inner_text("h1") == "Forget plan?"
    assert _get(served.url, agent, "owner", "plan")["content"] == "launch in March"
    page.click("#confirm-forget")
    page.wait_for_url(f"{base}/namespace?namespace=owner")
    assert _get(served.url, agent, "owner", "plan") is None
    page.click("#forgotten-link")
    page.wait_for_url(f"{base}/forgotten?namespace=owner")
    assert page.locator("#forgotten td pre").all_inner_texts() == ["launch in March"]
    page.click("#forgotten button")
    page.wait_for_url(f"{base}/entry?namespace=owner&key=plan")
    assert page.input_value("#content") == "launch in March"
    assert _get(served.url, agent, "owner", "plan")["content"] == "launch in March"


def test_p6_portal_serve_sweeps_expired_entries_and_sync_tells_the_agent(
    tmp_path: Path, fresh_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def quick(tmp: Path, **extra: str) -> dict[str, str]:
        return child_env(tmp, WEBAGENTS_PORTAL_RETENTION_SWEEP_SECONDS="0.2", **extra)

    monkeypatch.setattr(processes, "child_env", quick)
    served = Served(tmp_path, "--database", fresh_database_url)
    try:
        agent_id, agent = _agent(tmp_path, served.url, fresh_database_url)
        old = (datetime.now(UTC) - timedelta(days=10)).isoformat()
        _put(served.url, agent, namespace="caller:bob", key="old", content="x", at=old)
        _put(served.url, agent, namespace="caller:bob", key="fresh", content="y", at=None)
        since = httpx.get(
            f"{served.url}{MEMORY}",
            headers=agent,
            params={"action": "sync", "namespace": "caller:bob", "since": 0},
        ).json()["cursor"]
        with httpx.Client(base_url=served.url) as browser:
            signin = csrf_of(browser.get("/signin").text)
            signed = browser.post(
                "/signin",
                data={"csrf_token": signin, "username": "alice", "password": PASSWORD},
            )
            assert signed.status_code == 303
            base = f"/agents/{agent_id}/memory"
            token = csrf_of(browser.get(base).text)
            answer = browser.post(
                f"{base}/retention",
                data={"csrf_token": token, "namespace": "caller:*", "days": "7"},
            )
            assert answer.status_code == 303
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and _get(served.url, agent, "caller:bob", "old"):
            time.sleep(0.1)
        assert _get(served.url, agent, "caller:bob", "old") is None
        assert _get(served.url, agent, "caller:bob", "fresh")["content"] == "y"
        sync = httpx.get(
            f"{served.url}{MEMORY}",
            headers=agent,
            params={"action": "sync", "namespace": "caller:bob", "since": since},
        ).json()
        assert [(line["op"], line["key"]) for line in sync["lines"]] == [("delete", "old")]
    finally:
        served.stop()
