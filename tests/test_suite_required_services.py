"""The suite's own rules under parallel workers (pytest-xdist, as `make test` runs): a service
the tests need (PostgreSQL, Chromium) that is missing skips its tests with the reason, unless
it is required (WEBAGENTS_REQUIRE_POSTGRES / WEBAGENTS_REQUIRE_BROWSER=1, as CI sets), when
the run fails and says why. Each case is a small pytest run on two workers of its own, with
both services taken off PATH."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO_ROOT

NEEDS_BOTH = "def test_a(chromium): pass\n\ndef test_b(postgres_server): pass\n"
NO_BROWSER = "chromium is not installed (apt-get install chromium)"
NO_POSTGRES = "WEBAGENTS_TEST_POSTGRES_URL is not set and initdb/pg_ctl are not on PATH"


def _summary_without_services(tmp_path: Path, required: bool) -> tuple[int, list[str], str]:
    """The exit status, the short summary's lines (sorted: the workers finish in any order)
    and the closing line, its time left out."""
    (tmp_path / "test_needs_both.py").write_text(NEEDS_BOTH, encoding="utf-8")
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("WEBAGENTS_", "PYTEST_"))
    }
    # Only the virtual environment's programs (no chromium, initdb or pg_ctl), and lines wide
    # enough that the summary is not cut.
    env.update(PATH=str(Path(sys.executable).parent), PYTHONPATH=str(REPO_ROOT), COLUMNS="400")
    if required:
        env.update(WEBAGENTS_REQUIRE_BROWSER="1", WEBAGENTS_REQUIRE_POSTGRES="1")
    done = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "-n", "2", "-q", "-ra", "-p", "no:cacheprovider"),
            *("-p", "tests.portal.browsers", "-p", "tests.portal.databases"),
            *("--rootdir", str(tmp_path), "-c", os.devnull, "test_needs_both.py"),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    lines = done.stdout.splitlines()
    assert any("short test summary info" in line for line in lines), done.stdout + done.stderr
    start = next(n for n, line in enumerate(lines) if "short test summary info" in line)
    closing = re.sub(r" in [0-9.]+s.*$", "", lines[-1])
    return done.returncode, sorted(lines[start + 1 : -1]), closing


def test_a_missing_service_skips_its_tests_with_the_reason(tmp_path: Path) -> None:
    assert _summary_without_services(tmp_path, required=False) == (
        0,
        [
            f"SKIPPED [1] test_needs_both.py:1: browser tests skipped: {NO_BROWSER}",
            f"SKIPPED [1] test_needs_both.py:3: PostgreSQL tests skipped: {NO_POSTGRES}",
        ],
        "2 skipped",
    )


def test_a_missing_required_service_fails_the_run_and_says_why(tmp_path: Path) -> None:
    assert _summary_without_services(tmp_path, required=True) == (
        1,
        [
            "ERROR test_needs_both.py::test_a - Failed: a browser is required"
            f" (WEBAGENTS_REQUIRE_BROWSER=1) but {NO_BROWSER}",
            "ERROR test_needs_both.py::test_b - Failed: PostgreSQL is required"
            f" (WEBAGENTS_REQUIRE_POSTGRES=1) but {NO_POSTGRES}",
        ],
        "2 errors",
    )
