"""Whole-system tests on one database: `@pytest.mark.whole_system` on a test that drives real
processes (the portal, the agent, the CLI, a browser) and proves what happens between them
(HTTP, Portal Connect, files on two machines), which does not depend on the database beyond
what the repository and app tests prove on both. Under `--db both` (the default) such a test
runs on PostgreSQL alone, the production database; its SQLite run is deselected. Where no
PostgreSQL can be had (no WEBAGENTS_TEST_POSTGRES_URL, no initdb) both runs stay, as for
every portal test (the PostgreSQL one skipped with its reason): the seam is never left
untested. `--db sqlite` or `--db postgresql` runs it on that one.

Each kind of seam keeps a file that still runs on both (test_publish_cli for the CLI,
test_connect_portal_side for Connect, test_memory_sync_oneshot for the sync,
test_accounts_browser for the pages, test_chats_served for recorded chats, test_token_binding
for tokens), and the tests whose result does depend on the database (kill -9 durability, load
and its gate, locks, outages, migrations, full-text search) are not marked."""

from __future__ import annotations

import os
import shutil

import pytest

from .databases import POSTGRES_URL_ENV

MARKER = "whole_system"


def _postgres_available() -> bool:
    """Whether the PostgreSQL runs can happen (the postgres_server fixture's own condition;
    a cluster that then fails to start fails or skips those tests as before)."""
    if os.environ.get(POSTGRES_URL_ENV):
        return True
    return shutil.which("initdb") is not None and shutil.which("pg_ctl") is not None


def _sqlite_run(item: pytest.Item) -> bool:
    callspec = getattr(item, "callspec", None)
    if callspec is None or item.get_closest_marker(MARKER) is None:
        return False
    return bool(callspec.params.get("database_kind") == "sqlite")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--db") != "both" or not _postgres_available():
        return
    deselected = [item for item in items if _sqlite_run(item)]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if not _sqlite_run(item)]
