"""The databases every portal test runs on: SQLite and PostgreSQL, one suite for both.

`--db sqlite|postgresql|both` (default both) chooses. PostgreSQL comes from
WEBAGENTS_TEST_POSTGRES_URL (a server where the tests may create databases), else from a
throwaway cluster made with the machine's initdb/pg_ctl (as the `postgres` user when running
as root), listening on a unix socket only; else its tests are skipped with the reason,
unless WEBAGENTS_REQUIRE_POSTGRES=1, which makes them fail (CI sets it).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

POSTGRES_URL_ENV = "WEBAGENTS_TEST_POSTGRES_URL"
REQUIRE_POSTGRES_ENV = "WEBAGENTS_REQUIRE_POSTGRES"
KINDS = ("sqlite", "postgresql")
PGVECTOR = "pgvector"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--db",
        choices=[*KINDS, PGVECTOR, "both"],
        default="both",
        help="the database(s) the portal tests run on (default: both; and pgvector where a "
        "module is marked so: tests/portal/pgvector.py)",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "database_kind" in metafunc.fixturenames:
        chosen = metafunc.config.getoption("--db")
        kinds = list(KINDS) if chosen == "both" else [chosen]
        kinds = with_pgvector(metafunc, chosen, kinds)
        metafunc.parametrize("database_kind", kinds, scope="session")


def with_pgvector(metafunc: pytest.Metafunc, chosen: str, kinds: list[str]) -> list[str]:
    """The kinds, and PostgreSQL with pgvector for a test marked `pytest.mark.pgvector`
    (by default, or alone with --db pgvector; `pgvector(only=True)`: on it alone); --db
    pgvector runs no unmarked test."""
    marker = metafunc.definition.get_closest_marker(PGVECTOR)
    if marker is None:
        return [] if chosen == PGVECTOR else kinds
    if chosen == PGVECTOR or marker.kwargs.get("only"):
        return [PGVECTOR] if chosen in (PGVECTOR, "both") else []
    return [*kinds, PGVECTOR] if chosen == "both" else kinds


class PostgresServer:
    """A PostgreSQL server the tests may make databases on."""

    def __init__(self, admin_url: str) -> None:
        from sqlalchemy.engine import make_url

        self.admin_url = make_url(admin_url).set(drivername="postgresql+psycopg")
        self._made: list[str] = []

    def new_database(self, template: str | None = None) -> str:
        """A new database's URL: empty, or a copy of the database at the URL `template` (which
        nothing may be connected to)."""
        import psycopg
        from sqlalchemy.engine import make_url

        name = f"webagents_test_{uuid.uuid4().hex[:12]}"
        copied = f' TEMPLATE "{make_url(template).database}"' if template else ""
        with psycopg.connect(self._libpq(self.admin_url), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"{copied}')  # type: ignore[arg-type]
        self._made.append(name)
        return self.admin_url.set(database=name).render_as_string(hide_password=False)

    def drop_all(self) -> None:
        import psycopg

        with psycopg.connect(self._libpq(self.admin_url), autocommit=True) as conn:
            for name in self._made:
                with contextlib.suppress(psycopg.Error):
                    conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')  # type: ignore[arg-type]

    @staticmethod
    def _libpq(url: object) -> str:
        from sqlalchemy.engine import URL

        assert isinstance(url, URL)
        return url.set(drivername="postgresql").render_as_string(hide_password=False)


class _Cluster:
    """A throwaway cluster: initdb in a private folder, a unix socket beside it; `settings`:
    more of the server's settings (the benchmarks' shared_buffers)."""

    def __init__(self, settings: dict[str, str] | None = None) -> None:
        self.settings = dict(settings or {})
        self.root = Path(tempfile.mkdtemp(prefix="wa-pg-"))
        self.data = self.root / "data"
        self.as_user: list[str] = []
        if os.geteuid() == 0:  # initdb refuses to run as root
            runuser = shutil.which("runuser")
            if runuser is None:
                raise RuntimeError(
                    "running as root, and runuser is missing to run initdb as postgres"
                )
            try:
                account = pwd.getpwnam("postgres")
            except KeyError:
                raise RuntimeError(
                    "running as root, and there is no postgres user for initdb"
                ) from None
            os.chown(self.root, account.pw_uid, account.pw_gid)
            self.as_user = [runuser, "-u", "postgres", "--"]
        os.chmod(self.root, 0o700)

    def _run(self, *args: str) -> None:
        done = subprocess.run(
            [*self.as_user, *args], capture_output=True, text=True, timeout=120, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(args[:1])} failed:\n{done.stdout}\n{done.stderr}")

    def start(self) -> str:
        self._run(
            "initdb",
            "-D",
            str(self.data),
            "-U",
            "postgres",
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
        )
        self.resume()
        return f"postgresql+psycopg://postgres@/postgres?host={self.root}"

    def resume(self) -> None:
        """Start the server (again, after `halt`)."""
        options = (
            f"-k {self.root} -c listen_addresses='' -c fsync=off -c synchronous_commit=off "
            "-c full_page_writes=off -c max_connections=200"
        ) + "".join(f" -c {name}={value}" for name, value in self.settings.items())
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-l",
            str(self.root / "log"),
            "-o",
            options,
            "-w",
            "-t",
            "60",
            "start",
        )

    def halt(self) -> None:
        """Stop the server, its data kept, as an administrator's restart does (fast mode:
        open sessions are ended)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def stop(self) -> None:
        with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)


def _unavailable(reason: str) -> None:
    if os.environ.get(REQUIRE_POSTGRES_ENV) == "1":
        pytest.fail(f"PostgreSQL is required ({REQUIRE_POSTGRES_ENV}=1) but {reason}")
    pytest.skip(f"PostgreSQL tests skipped: {reason}")


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    given = os.environ.get(POSTGRES_URL_ENV)
    if given:
        server = PostgresServer(given)
        yield server
        server.drop_all()
        return
    if shutil.which("initdb") is None or shutil.which("pg_ctl") is None:
        _unavailable(f"{POSTGRES_URL_ENV} is not set and initdb/pg_ctl are not on PATH")
    cluster = _Cluster()
    try:
        url = cluster.start()
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        cluster.stop()
        _unavailable(f"a throwaway cluster could not be made: {exc}")
        raise  # unreachable: _unavailable skips or fails
    try:
        yield PostgresServer(url)
    finally:
        cluster.stop()
