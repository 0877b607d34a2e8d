"""The Python code in README.md and docs/*.md runs as written (R4, issue 20).

Every ```python block runs, in the order of its file, offline: a temporary webagents home
(conftest), no network beyond loopback, and as working folder a temporary one holding a
copy of the repository's `examples/` (so `load_agent("examples/assistant")` works and the
repository is never written). Top-level `await` is allowed, as in the asyncio REPL. A line
`print(...)  # TEXT` must print TEXT: what the docs say comes out is checked.

A block that needs something first says so in an HTML comment on the line before it (the
reader does not see it; the code stays as the reader copies it):

    <!-- snippet: continues -->              run in the names of the file's previous block
    <!-- snippet: setup NAME -->             run SETUPS[NAME] first (see each one's docstring)
    <!-- snippet: continues; setup NAME -->  both
    <!-- snippet: not run: REASON -->        not run; REASON says why and what tests it
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import inspect
import io
import re
import shutil
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from webagents import Agent
from webagents.offline import OfflineModel
from webagents.testing import ScriptedServer

from .conftest import REPO_ROOT

DOCS = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
_BLOCK = re.compile(
    r"(?:^<!-- snippet: (?P<marker>[^\n]*?) -->\n)?^```python\n(?P<code>.*?)^```$",
    re.MULTILINE | re.DOTALL,
)
_PRINTED = re.compile(r"^\s*print\(.*\)\s+# (?P<text>.+)$")


@dataclass(frozen=True)
class Snippet:
    doc: Path
    line: int
    code: str
    continues: bool = False
    setup: str | None = None
    not_run: str | None = None

    @property
    def where(self) -> str:
        return f"{self.doc.relative_to(REPO_ROOT)}:{self.line}"

    def printed(self) -> list[str]:
        """What its `print(...)  # TEXT` lines say they print, in order."""
        return [m["text"].strip() for m in map(_PRINTED.match, self.code.splitlines()) if m]


def snippets(doc: Path) -> list[Snippet]:
    text = doc.read_text(encoding="utf-8")
    found = []
    for match in _BLOCK.finditer(text):
        line = text.count("\n", 0, match.start("code"))  # the ```python line, 1-based
        found.append(_parsed(doc, line, match["code"], match["marker"]))
    return found


def _parsed(doc: Path, line: int, code: str, marker: str | None) -> Snippet:
    if marker is None:
        return Snippet(doc, line, code)
    if marker.startswith("not run: "):
        return Snippet(doc, line, code, not_run=marker.removeprefix("not run: "))
    continues, setup = False, None
    for part in (p.strip() for p in marker.split(";")):
        if part == "continues":
            continues = True
        elif part.startswith("setup ") and part.removeprefix("setup ") in SETUPS:
            setup = part.removeprefix("setup ")
        else:
            raise AssertionError(
                f"{doc}:{line}: unknown snippet marker {part!r}: use continues, setup NAME "
                f"(one of {', '.join(sorted(SETUPS))}) or 'not run: REASON'"
            )
    return Snippet(doc, line, code, continues, setup)


# -- setups ---------------------------------------------------------------------------------------


@dataclass
class Setting:
    """What a setup prepares: the block's names, and what to undo afterwards."""

    names: dict[str, Any]
    tmp_path: Path
    monkeypatch: pytest.MonkeyPatch
    cleanup: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)


def _model(setting: Setting) -> None:
    """`model`: the offline scripted model (webagents.offline.OfflineModel)."""
    setting.names["model"] = OfflineModel()


def _scripted_endpoint(setting: Setting) -> None:
    """An OpenAI-compatible endpoint on loopback answered by the offline scripted model, in
    OPENAI_BASE_URL: agents loaded from their AGENT.md talk to it as to any real one."""
    server = setting.cleanup.enter_context(ScriptedServer(OfflineModel()))
    setting.monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)


def _served_helper(setting: Setting) -> None:
    """The README's "Try it": its helper AGENT.md (from the heredoc) served by `webagents
    serve --offline` with the keys it exports, reached at the address the README gives,
    127.0.0.1:8000 (forwarded to the server's own free port, as a proxy would)."""
    from tests.e2e.conftest import child_env
    from tests.e2e.serving import running

    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    exported = re.search(r"^export (HELPER_OWNER_KEY=\S+ ALICE_KEY=\S+)", readme, re.MULTILINE)
    agent_md = re.search(r"cat > /tmp/helper/AGENT.md <<'AGENT'\n(.*?\n)AGENT\n", readme, re.DOTALL)
    assert exported and agent_md, "the README's 'Try it' lost its keys or its AGENT.md"
    keys = dict(pair.split("=", 1) for pair in exported[1].split())
    folder = setting.tmp_path / "helper"
    folder.mkdir()
    (folder / "AGENT.md").write_text(agent_md[1], encoding="utf-8")
    for name, value in keys.items():
        setting.monkeypatch.setenv(name, value)
    served = setting.cleanup.enter_context(
        running(["serve", str(folder), "--offline"], child_env(setting.tmp_path, **keys))
    )
    port = int(served.url.rsplit(":", 1)[1])
    _forward(setting.monkeypatch, ("127.0.0.1", 8000), ("127.0.0.1", port))


def _forward(
    monkeypatch: pytest.MonkeyPatch, documented: tuple[str, int], actual: tuple[str, int]
) -> None:
    connect = socket.socket.connect  # the test's guard against the network, kept

    def forwarded(self: socket.socket, address: Any) -> None:
        connect(self, actual if tuple(address[:2]) == documented else address)

    monkeypatch.setattr(socket.socket, "connect", forwarded)


SETUPS: dict[str, Callable[[Setting], None]] = {
    "model": _model,
    "scripted-endpoint": _scripted_endpoint,
    "served-helper": _served_helper,
}


# -- running them ---------------------------------------------------------------------------------


class _Session:
    """One file's blocks, as in one asyncio REPL session: one event loop for every block
    with `await`, and at the end every Agent made is closed (the blocks do not show that)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.loop = asyncio.Runner()
        self.agents: list[Agent] = []
        made = Agent.__init__

        def recorded(agent: Agent, *args: Any, **kwargs: Any) -> None:
            made(agent, *args, **kwargs)
            self.agents.append(agent)

        monkeypatch.setattr(Agent, "__init__", recorded)

    def run(self, snippet: Snippet, names: dict[str, Any]) -> str:
        """Run the block in `names`; what it printed."""
        code = compile(
            snippet.code,
            snippet.where,
            "exec",
            flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT,
            dont_inherit=True,
        )
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            if code.co_flags & inspect.CO_COROUTINE:
                self.loop.run(eval(code, names))
            else:
                exec(code, names)
        return out.getvalue()

    def close(self) -> None:
        async def close_agents() -> None:
            for agent in self.agents:
                await agent.aclose()

        with self.loop:
            self.loop.run(close_agents())


@contextlib.contextmanager
def _workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    work = tmp_path / "work"
    shutil.copytree(REPO_ROOT / "examples", work / "examples")
    monkeypatch.chdir(work)
    yield work


def _in_order(expected: list[str], printed: list[str]) -> bool:
    lines = iter(printed)
    return all(any(line.strip() == text for line in lines) for text in expected)


@pytest.mark.parametrize("doc", DOCS, ids=[d.name for d in DOCS])
def test_r4_the_python_in_the_docs_runs_as_written(
    doc: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    found = snippets(doc)
    names: dict[str, Any] = {}
    session = _Session(monkeypatch)
    with _workdir(tmp_path, monkeypatch), contextlib.ExitStack() as undo:
        undo.callback(session.close)
        for snippet in found:
            if snippet.not_run is not None:
                continue
            if not snippet.continues:
                names = {"__name__": "__snippet__"}
            if snippet.setup is not None:
                setting = Setting(names, tmp_path / f"setup-{snippet.line}", monkeypatch)
                setting.tmp_path.mkdir()
                undo.enter_context(setting.cleanup)
                SETUPS[snippet.setup](setting)
            printed = session.run(snippet, names).splitlines()
            assert _in_order(snippet.printed(), printed), (
                f"{snippet.where} says it prints {snippet.printed()}, it printed {printed}"
            )


def test_r4_every_python_block_of_the_docs_is_found_and_each_unrun_one_says_why() -> None:
    """The runner sees the blocks a reader sees (a marker it did not understand fails)."""
    found = {doc.relative_to(REPO_ROOT).as_posix(): snippets(doc) for doc in DOCS}
    counted = {
        doc: len(re.findall(r"^```python$", (REPO_ROOT / doc).read_text(), re.MULTILINE))
        for doc in found
    }
    assert {doc: len(blocks) for doc, blocks in found.items()} == counted
    unrun = [s for blocks in found.values() for s in blocks if s.not_run is not None]
    assert all(s.not_run and s.not_run.strip() for s in unrun)
