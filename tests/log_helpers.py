"""What the tests that say "one log line, no traceback" read from the log."""

from __future__ import annotations

import logging

import pytest


def warnings_logged(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str, bool]]:
    """Every record at WARNING or above: (logger, message, whether it carries a traceback)."""
    return [
        (r.name, r.getMessage(), r.exc_info is not None)
        for r in caplog.records
        if r.levelno >= logging.WARNING
    ]
