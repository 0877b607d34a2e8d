"""Our client keeps the sync cursor as the portal gave it (SPEC P5, P7;
portal_link/memory_sync/pull.py, files.kept_cursor): an opaque string is kept and sent back
unchanged (characters a query must escape included), an older portal's integer works, a
cursor the portal no longer knows (400 `bad_cursor`) restarts the pull from the start, and a
page without a cursor never makes the pull ask for the same page forever. Against the
portal's stand-in (`memory_portal_double`); the real portal's side is
tests/portal/test_memory_sync_cursor.py."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.memory_helpers import memory_agent
from tests.memory_portal_double import KEY, OPAQUE, MemoryDouble
from webagents.portal_link.memory_sync.sync import PortalSync
from webagents.skills.memory import MemorySkill


@pytest.fixture
def double(monkeypatch: pytest.MonkeyPatch) -> MemoryDouble:
    monkeypatch.setenv("WEBAGENTS_AGENT_TOKEN", KEY)
    monkeypatch.setattr(PortalSync, "start", lambda self: None)  # rounds are run by the test
    return MemoryDouble()


def synced(folder: Path, double: MemoryDouble) -> tuple[MemorySkill, PortalSync]:
    _, skill = memory_agent(folder, portal=True)
    assert skill.sync is not None
    skill.sync.connect = double.client
    return skill, skill.sync


def kept_cursors(folder: Path) -> Any:
    return json.loads((folder / ".webagents" / "portal-sync" / "state.json").read_text())["cursors"]


def notes(folder: Path) -> list[str]:
    return sorted(p.stem for p in (folder / ".webagents" / "memory" / "owner").glob("*.md"))


def edits(double: MemoryDouble, *keys: str) -> None:
    for n, key in enumerate(keys):
        double.edit("owner", key, f"{key}.", f"2026-01-01T00:00:0{n}+00:00")


def test_p7_an_opaque_cursor_is_kept_and_sent_back_exactly_as_it_came(
    tmp_path: Path, double: MemoryDouble
) -> None:
    double.cursors, double.page = "opaque", 2
    edits(double, "one", "two", "three")
    _, sync = synced(tmp_path / "a", double)
    assert sync.sync_round() is True
    assert double.sinces == [None, f"{OPAQUE}2"]
    assert kept_cursors(tmp_path / "a") == {"*": f"{OPAQUE}3"}
    edits(double, "four")
    assert sync.sync_round() is True
    assert double.sinces[2:] == [f"{OPAQUE}3"]
    assert notes(tmp_path / "a") == ["four", "one", "three", "two"]


def test_p7_an_older_portals_integer_cursor_is_kept_as_its_string(
    tmp_path: Path, double: MemoryDouble
) -> None:
    double.cursors = "number"
    edits(double, "one", "two")
    _, sync = synced(tmp_path / "a", double)
    assert sync.sync_round() is True
    assert kept_cursors(tmp_path / "a") == {"*": "2"}
    assert sync.sync_round() is True
    assert double.sinces == [None, "2"]


def test_p7_a_cursor_the_portal_no_longer_knows_restarts_the_pull_from_the_start(
    tmp_path: Path, double: MemoryDouble, caplog: pytest.LogCaptureFixture
) -> None:
    edits(double, "one", "two")
    folder = tmp_path / "a"
    _, sync = synced(folder, double)
    assert sync.sync_round() is True
    double.cursors = "opaque"  # another portal now answers at that address
    edits(double, "three")
    with caplog.at_level(logging.WARNING, "webagents.memory"):
        assert sync.sync_round() is True
    assert double.sinces == [None, "2", None]
    assert kept_cursors(folder) == {"*": f"{OPAQUE}3"}
    assert notes(folder) == ["one", "three", "two"]
    assert [r.getMessage() for r in caplog.records] == [
        "memory: since is not a cursor of mine; the pull of * starts again from the start"
    ]


def test_p7_a_page_without_a_cursor_is_not_asked_for_again_and_again(
    tmp_path: Path, double: MemoryDouble, caplog: pytest.LogCaptureFixture
) -> None:
    double.page = 1
    edits(double, "one", "two", "three")
    handle = double.handle

    def without_cursor(request: httpx.Request) -> httpx.Response:
        answer = handle(request)
        if request.method == "GET" and request.url.params.get("action") == "sync":
            body = answer.json()
            return httpx.Response(200, json={**body, "cursor": None})
        return answer

    double.handle = without_cursor  # type: ignore[method-assign]
    _, sync = synced(tmp_path / "a", double)
    with caplog.at_level(logging.WARNING, "webagents.memory"):
        assert sync.sync_round() is True
    assert double.sinces == [None]
    assert notes(tmp_path / "a") == ["one"]
    assert [r.getMessage() for r in caplog.records] == [
        "memory: the portal answered the pull of * without a cursor (None): it is pulled "
        "again from the last cursor kept at the next round"
    ]
