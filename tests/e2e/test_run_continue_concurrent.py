"""S2, S6: `webagents run -c` continues the kept conversation as the Python API does, so two
runs that continue it at the same moment lose no turn: the one that keeps first is kept,
the other is refused with what to do, and doing it works. Real processes, a model server that
answers neither run before both have loaded the conversation."""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from webagents.model import ModelRequest
from webagents.sessions import read_session
from webagents.testing import FunctionModel, ScriptedServer

from ..conftest import write_agent
from .conftest import child_env, webagents_command

pytestmark = pytest.mark.e2e

TOGETHER = 2
"""Runs the model server holds until all have asked (both loaded the conversation by then)."""


class _Gate:
    """Answers each message with a reply naming it; the runs marked `together` are answered
    only once all of them have asked (a bounded wait: a run that never asks fails the test)."""

    def __init__(self) -> None:
        self.waiting = 0
        self.all_asked: asyncio.Event | None = None

    async def answer(self, request: ModelRequest) -> str:
        text = str(request.messages[-1]["content"])
        if text.startswith("together"):
            if self.all_asked is None:
                self.all_asked = asyncio.Event()
            self.waiting += 1
            if self.waiting == TOGETHER:
                self.all_asked.set()
            await asyncio.wait_for(self.all_asked.wait(), 120)
        return f"reply to {text}"


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer(FunctionModel(_Gate().answer)) as running:
        yield running


def _run(folder: Path, env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [webagents_command(), "run", str(folder), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _kept(env: dict[str, str]) -> list[str]:
    """The kept conversation's messages, its journal's turns included."""
    (kept,) = (Path(env["WEBAGENTS_HOME"]) / "sessions").rglob("*.json")
    found = read_session(kept)
    assert found is not None
    return [str(m["content"]) for m in found[0]["messages"]]


def test_s2_two_runs_continuing_one_conversation_at_once_lose_no_turn_and_the_loser_is_told(
    tmp_path: Path, server: ScriptedServer
) -> None:
    folder = write_agent(tmp_path / "helper", "name: helper\nmodel: openai/test-model")
    env = child_env(tmp_path, OPENAI_BASE_URL=server.base_url)
    first = _run(folder, env, "--json", "the door is blue")
    out, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    conversation = json.loads(out)["conversation"]

    runs = {text: _run(folder, env, "-c", text) for text in ("together one", "together two")}
    done = {text: (run.communicate(timeout=120), run.returncode) for text, run in runs.items()}

    (kept_text,) = [text for text, (_, code) in done.items() if code == 0]
    (refused_text,) = [text for text, (_, code) in done.items() if code != 0]
    (kept_out, _), _ = done[kept_text]
    (refused_out, refused_err), refused_code = done[refused_text]
    assert (kept_out, refused_out, refused_code) == (f"reply to {kept_text}\n", "", 1)
    where = str(folder)
    assert refused_err == (
        f"error: the conversation {conversation} was continued by another run or chat after "
        "this one loaded it: this message was not kept and no reply is shown; what the other "
        f"kept is left as it is. See it: webagents sessions {where} show {conversation}; then "
        "send this message again, to go on after it: "
        f'webagents run {where} --resume {conversation} "..."\n'
    )
    assert _kept(env) == [
        "the door is blue",
        "reply to the door is blue",
        kept_text,
        f"reply to {kept_text}",
    ]

    # Told what to do, the refused run's message goes on after the kept one.
    again = _run(folder, env, "--resume", conversation, "and once more")
    out, err = again.communicate(timeout=120)
    assert (again.returncode, out) == (0, "reply to and once more\n"), err
    assert _kept(env) == [
        "the door is blue",
        "reply to the door is blue",
        kept_text,
        f"reply to {kept_text}",
        "and once more",
        "reply to and once more",
    ]
