"""The README's served example, run as written: its AGENT.md under `webagents serve`, and its
Python code with the official openai client (issue 11: the example keeps its conversation,
and the reply's X-Webagents-Session header says so)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO, child_env
from .serving import running, write

pytestmark = pytest.mark.e2e

README = (REPO / "README.md").read_text(encoding="utf-8")


def _one(pattern: str) -> re.Match[str]:
    found = list(re.finditer(pattern, README, re.DOTALL | re.MULTILINE))
    assert len(found) == 1, f"the README should hold one match of {pattern!r}"
    return found[0]


def test_s5_the_readme_openai_example_keeps_its_conversation_and_says_so(
    tmp_path: Path,
) -> None:
    exported = _one(r"^export (HELPER_OWNER_KEY=\S+ ALICE_KEY=\S+)").group(1)
    keys = dict(pair.split("=", 1) for pair in exported.split())
    write(
        tmp_path / "helper" / "AGENT.md",
        _one(r"cat > /tmp/helper/AGENT.md <<'AGENT'\n(.*?\n)AGENT\n").group(1),
    )
    code = _one(r"```python\n(import os\n[^`]*with_raw_response[^`]*)```").group(1)
    assert code.count("http://127.0.0.1:8000/v1") == 1
    env = child_env(tmp_path, **keys)
    with running(["serve", str(tmp_path / "helper"), "--offline"], env) as process:
        code = code.replace("http://127.0.0.1:8000/v1", f"{process.url}/v1")
        printed = [
            subprocess.run(
                [sys.executable, "-c", source],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
                check=True,
            ).stdout.splitlines()[0]
            for source in (code, code.replace('os.environ["ALICE_KEY"]', '"anonymous"'))
        ]
    assert printed == ["kept; where=local", "not-kept; reason=anonymous"]
    sessions = Path(env["WEBAGENTS_HOME"]) / "sessions"
    kept = [(*p.relative_to(sessions).parts[1:3], p.name) for p in sessions.rglob("*.json")]
    assert kept == [("helper", "callers", "launch-plan.json")]
