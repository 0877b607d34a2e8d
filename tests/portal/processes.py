"""Real `webagents portal` processes for the portal's end-to-end tests."""

from __future__ import annotations

import re
import subprocess
import threading
import time
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


class Served:
    """A running `webagents portal serve`."""

    def __init__(self, tmp_path: Path, *args: str) -> None:
        self.popen = subprocess.Popen(
            [webagents_command(), "portal", "serve", "--port", "0", *args],
            env=child_env(tmp_path),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()
        self.url = self._wait_for_url()

    def _drain(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            self.lines.append(line)

    def _wait_for_url(self) -> str:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and self.popen.poll() is None:
            found = _SERVING.search("".join(self.lines))
            if found:
                return found.group(1)
            time.sleep(0.05)
        self.stop()
        raise AssertionError("the portal did not start:\n" + "".join(self.lines))

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        self._reader.join(timeout=15)
        if self.popen.stdout is not None:
            self.popen.stdout.close()
