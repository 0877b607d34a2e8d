"""Test isolation: no model keys, a private webagents home, and no network beyond loopback."""

from __future__ import annotations

import ipaddress
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from webagents.portal.accounts.passwords import CHEAP_FOR_TESTS_ENV

# The portal's databases (SQLite and PostgreSQL, the --db option; whole-system tests on
# PostgreSQL alone) and its browser (Chromium); Hypothesis' budgets; the e2e marker set by what
# a test uses; a line per test file as it ends; pytester, for the tests of these rules.
pytest_plugins = [
    "pytester",
    "tests.portal.databases",
    "tests.portal.pgvector",
    "tests.portal.whole_system",
    "tests.portal.browsers",
    "tests.budgets",
    "tests.selection",
    "tests.progress",
]

# Password hashes at argon2's least cost, here and in the processes the tests start (RFC 9106's
# cost is most of a second a hash on two cores; tests/portal/test_passwords.py shows the
# product's own).
os.environ[CHEAP_FOR_TESTS_ENV] = "1"

_real_connect = socket.socket.connect
_real_connect_ex = socket.socket.connect_ex
_real_getaddrinfo = socket.getaddrinfo


def _is_local(host: Any) -> bool:
    if not isinstance(host, str):
        return True  # AF_UNIX paths and the like
    if host in {"localhost", ""}:
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False


def _guard(address: Any) -> None:
    host = address[0] if isinstance(address, tuple) else address
    if not _is_local(host):
        raise ConnectionRefusedError(f"tests may not reach the network ({host!r})")


def _connect(self: socket.socket, address: Any) -> None:
    _guard(address)
    _real_connect(self, address)


def _connect_ex(self: socket.socket, address: Any) -> int:
    _guard(address)
    return _real_connect_ex(self, address)


def _getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
    if isinstance(host, bytes):
        host = host.decode()
    if host is not None and not _is_local(host):
        raise socket.gaierror(f"tests may not reach the network (resolving {host!r})")
    return _real_getaddrinfo(host, *args, **kwargs)


@pytest.fixture(autouse=True)
def _callers_closed() -> Iterator[None]:
    """The openai clients a test made with tests/openai_callers.caller are closed at its
    end (looked up in sys.modules: a worker whose tests made none never imports openai)."""
    yield
    callers = sys.modules.get("tests.openai_callers")
    if callers is not None:
        callers.close_callers()


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WEBAGENTS_HOME", str(tmp_path / "home" / ".webagents"))
    monkeypatch.setattr(socket.socket, "connect", _connect)
    monkeypatch.setattr(socket.socket, "connect_ex", _connect_ex)
    monkeypatch.setattr(socket, "getaddrinfo", _getaddrinfo)
    yield


REPO_ROOT = Path(__file__).resolve().parents[1]


def write_agent(folder: Path, front_matter: str, body: str = "Be brief.") -> Path:
    """An agent folder with the given AGENT.md front matter (YAML text, no fences)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "AGENT.md").write_text(
        f"---\n{front_matter.strip()}\n---\n{body}\n", encoding="utf-8"
    )
    return folder
