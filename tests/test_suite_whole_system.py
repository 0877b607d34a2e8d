"""The suite's own rule for whole-system tests (tests/portal/whole_system.py): a test marked
`whole_system` runs on PostgreSQL alone under `--db both` where PostgreSQL can be had, on both
databases where it cannot (the PostgreSQL run then skips with its reason, as every portal
test's does), and on the one chosen by `--db sqlite` or `--db postgresql`; a test not marked
keeps both runs. Each case is a small pytest collection of its own (nothing is started)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO_ROOT

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


def _collected(tmp_path: Path, *options: str, postgres: bool) -> list[str]:
    """The tests a run would make, by name. `postgres`: a server URL is given (the collection
    never connects to it); else PostgreSQL cannot be had (no URL, no initdb on PATH)."""
    (tmp_path / "test_cases.py").write_text(CASES, encoding="utf-8")
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("WEBAGENTS_", "PYTEST_"))
    }
    env.update(PATH=str(Path(sys.executable).parent), PYTHONPATH=str(REPO_ROOT))
    if postgres:
        env["WEBAGENTS_TEST_POSTGRES_URL"] = "postgresql://postgres@/postgres?host=/nowhere"
    done = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"),
            *("-p", "tests.portal.databases", "-p", "tests.portal.whole_system"),
            *("-o", "markers=whole_system: on one database"),
            *("--rootdir", str(tmp_path), "-c", os.devnull, *options, "test_cases.py"),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return sorted(line.split("::", 1)[1] for line in done.stdout.splitlines() if "::" in line)


def test_suite_whole_system_tests_run_on_postgresql_alone_where_it_can_be_had(
    tmp_path: Path,
) -> None:
    assert _collected(tmp_path, postgres=True) == [
        "test_seam[postgresql]",
        "test_store[postgresql]",
        "test_store[sqlite]",
    ]


def test_suite_whole_system_tests_keep_both_runs_where_postgresql_cannot_be_had(
    tmp_path: Path,
) -> None:
    assert _collected(tmp_path, postgres=False) == BOTH


def test_suite_whole_system_tests_run_on_the_database_chosen(tmp_path: Path) -> None:
    assert _collected(tmp_path, "--db", "sqlite", postgres=True) == [
        "test_seam[sqlite]",
        "test_store[sqlite]",
    ]
    assert _collected(tmp_path, "--db", "postgresql", postgres=True) == [
        "test_seam[postgresql]",
        "test_store[postgresql]",
    ]
