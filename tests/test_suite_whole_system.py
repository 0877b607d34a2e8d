"""The suite's own rule for whole-system tests (tests/portal/whole_system.py): a test marked
`whole_system` runs on PostgreSQL alone under `--db both` where PostgreSQL can be had, on both
databases where it cannot (the PostgreSQL run then skips with its reason, as every portal
test's does), and on the one chosen by `--db sqlite` or `--db postgresql`; a test not marked
keeps both runs. Each case is a small pytest collection of its own, in this process."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.portal.databases import POSTGRES_URL_ENV

CASES = """import pytest


@pytest.mark.whole_system
def test_seam(database_kind):
    pass


def test_store(database_kind):
    pass
"""

BOTH = [
    "test_seam[postgresql]",
    "test_seam[sqlite]",
    "test_store[postgresql]",
    "test_store[sqlite]",
]


def _collected(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, *options: str, postgres: bool
) -> list[str]:
    """The tests a run would make, by name (a collection in this process: nothing starts).
    `postgres`: a server URL is given (the collection never connects to it); else PostgreSQL
    cannot be had (no URL, no initdb on PATH)."""
    pytester.makepyfile(test_cases=CASES)
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent))
    if postgres:
        monkeypatch.setenv(POSTGRES_URL_ENV, "postgresql://postgres@/postgres?host=/nowhere")
    else:
        monkeypatch.delenv(POSTGRES_URL_ENV, raising=False)
    done = pytester.runpytest_inprocess(
        *("--collect-only", "-q", "-p", "no:cacheprovider"),
        *("-p", "tests.portal.databases", "-p", "tests.portal.whole_system"),
        *("-o", "markers=whole_system: on one database"),
        *("-o", "asyncio_default_fixture_loop_scope=function", *options),
    )
    assert done.ret == 0, done.stdout.str() + done.stderr.str()
    return sorted(line.split("::", 1)[1] for line in done.outlines if "::" in line)


def test_suite_whole_system_tests_run_on_postgresql_alone_where_it_can_be_had(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _collected(pytester, monkeypatch, postgres=True) == [
        "test_seam[postgresql]",
        "test_store[postgresql]",
        "test_store[sqlite]",
    ]


def test_suite_whole_system_tests_keep_both_runs_where_postgresql_cannot_be_had(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _collected(pytester, monkeypatch, postgres=False) == BOTH


def test_suite_whole_system_tests_run_on_the_database_chosen(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _collected(pytester, monkeypatch, "--db", "sqlite", postgres=True) == [
        "test_seam[sqlite]",
        "test_store[sqlite]",
    ]
    assert _collected(pytester, monkeypatch, "--db", "postgresql", postgres=True) == [
        "test_seam[postgresql]",
        "test_store[postgresql]",
    ]
