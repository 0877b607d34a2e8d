"""Real `webagents portal` processes for the portal's end-to-end tests."""

from __future__ import annotations

import re
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from tests.e2e.conftest import child_env, webagents_command

_SERVING = re.compile(r"webagents portal: serving at (http://127\.0\.0\.1:\d+) ")


def portal(
    tmp_path: Path, *args: str, stdin: str = "", umask: int = -1
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [webagents_command(), "portal", *args],
        input=stdin,
        env=child_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
        umask=umask,
        check=False,
    )


class Child:
    """A running `webagents ...` whose output (stdout and stderr) is read as it comes."""

    def __init__(
        self,
        tmp_path: Path,
        *args: str,
        wrapper: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
    ) -> None:
        """`wrapper`: a command that runs the rest of the command line (as `env` does);
        `env`: variables set for it beside child_env's."""
        self.popen = subprocess.Popen(
            [*wrapper, webagents_command(), *args],
            env=child_env(tmp_path, **(env or {})),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            self.lines.append(line)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def wait_for(self, pattern: str) -> re.Match[str]:
        """The first match of `pattern` in the output, once it is printed (60 s at most)."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            found = re.search(pattern, self.output)
            if found:
                return found
            if self.popen.poll() is not None:
                break
            time.sleep(0.05)
        found = re.search(pattern, self.output)
        if found:
            return found
        raise AssertionError(f"never printed {pattern!r}:\n{self.output}")

    def finish(self, timeout: float = 60) -> int:
        """Wait for the exit (killed after `timeout`); the exit status."""
        try:
            self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()
        return self._closed()

    def stop(self) -> int:
        if self.popen.poll() is None:
            self.popen.terminate()
        return self.finish(timeout=15)

    def _closed(self) -> int:
        self._reader.join(timeout=15)
        if self.popen.stdout is not None:
            self.popen.stdout.close()
        return self.popen.returncode


class Served(Child):
    """A running `webagents portal serve` on a free port; `url` is where."""

    def __init__(
        self,
        tmp_path: Path,
        *args: str,
        wrapper: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
    ) -> None:
        # No embedding model unless a test asks for one: most tests need none, and loading
        # one in every portal process would only cost time.
        chosen = () if "--embeddings" in args else ("--embeddings", "none")
        super().__init__(
            tmp_path, "portal", "serve", "--port", "0", *chosen, *args, wrapper=wrapper, env=env
        )
        try:
            self.url = self.wait_for(_SERVING.pattern).group(1)
        except AssertionError:
            self.stop()
            raise
