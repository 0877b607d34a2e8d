"""Helpers for driving the real `webagents` command."""

from __future__ import annotations

import os
import re
import shutil
import sys
import time
from pathlib import Path

import pexpect
import pytest

from webagents.portal.accounts.passwords import CHEAP_FOR_TESTS_ENV

REPO = Path(__file__).resolve().parents[2]


def webagents_command() -> str:
    found = Path(sys.executable).parent / "webagents"
    if found.exists():
        return str(found)
    which = shutil.which("webagents")
    if which is None:
        pytest.fail("the webagents command is not installed: run make test")
    return which


def child_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """A clean environment for a child process: no model keys, a private home, password hashes
    at the tests' least cost."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("OPENAI_", "WEBAGENTS_", "PYTEST_"))
    }
    env.update(
        WEBAGENTS_HOME=str(tmp_path / "home" / ".webagents"),
        TERM="xterm-256color",
        NO_COLOR="1",
        PROMPT_TOOLKIT_NO_CPR="1",
        COLUMNS="120",
        LINES="40",
    )
    env[CHEAP_FOR_TESTS_ENV] = "1"
    env.update(extra)
    return env


_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[()][0-9A-Za-z]|\x1b[=>78]|[\x08\x07]")


class Terminal:
    """A pexpect child whose output is read as text, with terminal control codes removed."""

    def __init__(self, child: pexpect.spawn) -> None:
        self.child = child
        self.raw = ""
        self._seen = 0

    @property
    def text(self) -> str:
        return _ANSI.sub("", self.raw)

    def expect(self, wanted: str, timeout: float = 30) -> None:
        """Wait until `wanted` appears after the last thing expected."""
        deadline = time.monotonic() + timeout
        while True:
            text = self.text
            found = text.find(wanted, self._seen)
            if found >= 0:
                self._seen = found + len(wanted)
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"never saw {wanted!r}; the screen shows:\n{text[-2000:]}")
            try:
                self.raw += self.child.read_nonblocking(4096, timeout=0.5)
            except pexpect.TIMEOUT:
                continue
            except pexpect.EOF:
                raise AssertionError(f"it ended before {wanted!r}:\n{text[-2000:]}") from None

    def finish(self) -> int:
        """Wait for the program to end; its exit status."""
        self.child.expect(pexpect.EOF)
        self.child.close()
        return -1 if self.child.exitstatus is None else int(self.child.exitstatus)
