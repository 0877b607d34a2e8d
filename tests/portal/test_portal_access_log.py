"""`webagents portal serve` logs no line per request unless `--access-log` asks (issue 21:
under many clients the line cost the event loop a good share of its time), real processes
on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import httpx

from .processes import Served

HEALTH_LINE = '"GET /health HTTP/1.1" 200'


def test_p_portal_serve_logs_no_line_per_request_by_default(
    tmp_path: Path, fresh_database_url: str
) -> None:
    served = Served(tmp_path, "--database", fresh_database_url)
    try:
        assert httpx.get(f"{served.url}/health", timeout=30).json() == {"status": "ok"}
    finally:
        served.stop()
    # Stopped: everything it wrote has been read (the reader joined).
    assert HEALTH_LINE not in served.output
    assert "webagents portal: serving at" in served.output


def test_p_portal_serve_access_log_logs_each_request(
    tmp_path: Path, fresh_database_url: str
) -> None:
    served = Served(tmp_path, "--database", fresh_database_url, "--access-log")
    try:
        assert httpx.get(f"{served.url}/health", timeout=30).json() == {"status": "ok"}
        served.wait_for(HEALTH_LINE)
    finally:
        served.stop()
