"""`webagents portal serve` against idle, slow and surplus connections (issue 21, "Slow
clients"): the same bounds as `webagents serve`, through the same guard
(server/connection_limits.py): connections that send no complete request head in time are closed,
those beyond the cap make room, /health keeps answering, and the log says so in a line each
instead of a flood."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest

from tests.e2e.connections_helpers import (
    CAP,
    EVICTING,
    FILE_LIMIT,
    LIMITED,
    SUMMARY,
    TIMED_OUT,
    _closed_by_server,
    _connect,
    _server_lines,
    _trickling,
)

from .processes import Served

pytestmark = pytest.mark.e2e


def _health(served: Served) -> tuple[int, object]:
    answer = httpx.get(f"{served.url}/health", timeout=30)
    return answer.status_code, answer.json()


def test_p_portal_serve_closes_idle_and_slow_connections_and_keeps_answering(
    tmp_path: Path, fresh_database_url: str
) -> None:
    """More idle connections than the process has files, and some that trickle a request
    head: /health is still answered, the portal closes every idle and slow connection, and
    the log says so in a line each (then a count a minute at most)."""
    idle_count = FILE_LIMIT + 72
    served = Served(
        tmp_path, "--database", fresh_database_url, "--header-timeout", "1", wrapper=LIMITED
    )
    try:
        assert (
            f"  connections: at most {CAP} open (ulimit -n {FILE_LIMIT} allows fewer than "
            "--max-connections 1000); a request head within 1 s, its body within 30 s more; "
            "idle ones closed after 5 s\n"
        ) in served.output
        with ExitStack() as stack:
            idle = [_connect(served) for _ in range(idle_count)]
            for sock in idle:
                stack.callback(sock.close)
            slow = stack.enter_context(_trickling(served, 8))

            assert _health(served) == (200, {"status": "ok"})

            assert [_closed_by_server(sock) for sock in idle] == [True] * idle_count
            assert [_closed_by_server(sock) for sock in slow] == [True] * 8
            assert _health(served) == (200, {"status": "ok"})
    finally:
        served.stop()
    output = served.output
    assert "Traceback" not in output
    lines = _server_lines(output)
    assert [line for line in lines if not SUMMARY.fullmatch(line)] == [EVICTING, TIMED_OUT]
    assert len(lines) <= 6  # a summary a minute at most, should the test run that long
