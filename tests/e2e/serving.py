"""Start `webagents serve` / `webagents daemon` as real processes for end-to-end tests."""

from __future__ import annotations

import re
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import httpx

from .conftest import webagents_command

_SERVING = re.compile(r"webagents: serving at (http://127\.0\.0\.1:\d+)/v1")


class Process:
    """A running `webagents` server; `output` is everything it printed so far."""

    def __init__(
        self, args: list[str], env: dict[str, str], *, umask: int = -1, wrapper: Sequence[str] = ()
    ) -> None:
        self.popen = subprocess.Popen(
            [*wrapper, webagents_command(), *args],
            env=env,
            umask=umask,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self._lines: list[str] = []
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()
        self.url = self._wait_for_url()

    def _drain(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            self._lines.append(line)

    @property
    def output(self) -> str:
        return "".join(self._lines)

    def _wait_for_url(self) -> str:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            found = _SERVING.search(self.output)
            if found:
                url = found.group(1)
                self.wait_until(lambda u=url: httpx.get(f"{u}/health").status_code == 200)
                return url
            if self.popen.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        raise AssertionError(f"the server did not start:\n{self.output}")

    def wait_until(self, condition: object, timeout: float = 30) -> None:
        """Poll `condition()` (connection errors count as not yet) until it is true."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if condition():  # type: ignore[operator]
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"the condition never came true; the server said:\n{self.output}")

    def stop(self) -> int:
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        self._reader.join(timeout=5)
        if self.popen.stdout is not None:
            self.popen.stdout.close()
        return self.popen.returncode


@contextmanager
def running(
    args: list[str], env: dict[str, str], *, umask: int = -1, wrapper: Sequence[str] = ()
) -> Iterator[Process]:
    """`wrapper`: a command that runs the rest of the command line (as with `env`)."""
    process = Process([*args, "--port", "0"], env, umask=umask, wrapper=wrapper)
    try:
        yield process
    finally:
        process.stop()


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
