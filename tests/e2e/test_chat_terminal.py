"""The chat in a real pseudo-terminal: `webagents chat` as a user runs it."""

from __future__ import annotations

import asyncio
import json
import stat
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pexpect
import pytest

from webagents.model import ModelRequest
from webagents.testing import FunctionModel, ScriptedServer

from ..conftest import write_agent
from .conftest import REPO, Terminal, child_env, webagents_command

pytestmark = pytest.mark.e2e

PROMPT = "\n>"  # prompt_toolkit draws "> " as ">" and a cursor move


async def _answer(request: ModelRequest) -> str:
    text = request.messages[-1]["content"]
    if text == "take your time":
        await asyncio.sleep(60)  # long enough to be interrupted
    users = sum(1 for m in request.messages if m["role"] == "user")
    return f"Reply number {users} to {text}, streamed in pieces."


def wait_for(condition: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("the condition never came true")
        time.sleep(0.05)


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer(FunctionModel(_answer)) as running:
        yield running


def spawn(args: list[str], env: dict[str, str], cwd: Path) -> Terminal:
    child = pexpect.spawn(
        webagents_command(), args, env=env, cwd=str(cwd), encoding="utf-8", dimensions=(40, 120)
    )
    return Terminal(child)


def test_chat_in_a_terminal_message_new_ctrl_c_and_ctrl_d(
    tmp_path: Path, server: ScriptedServer
) -> None:
    folder = write_agent(tmp_path / "helper", "name: helper\nmodel: openai/test-model")
    env = child_env(tmp_path, OPENAI_BASE_URL=server.base_url)
    child = spawn(["chat", str(folder)], env, tmp_path)

    child.expect("helper · test-model · /help for commands")
    child.expect(PROMPT)
    child.child.sendline("hello there")
    child.expect("Reply number 1 to hello there, streamed in pieces.")
    child.expect(PROMPT)
    child.child.sendline("and again")
    child.expect("Reply number 2 to and again")  # the same conversation goes on
    child.expect(PROMPT)

    child.child.sendline("/new")
    child.expect("new conversation")
    child.expect(PROMPT)
    child.child.sendline("after new")
    child.expect("Reply number 1 to after new")  # a fresh conversation
    child.expect(PROMPT)

    child.child.send("half-typed line")
    child.child.sendintr()  # Ctrl-C at the prompt drops the line, as a shell does
    child.expect(PROMPT)
    child.child.sendline("take your time")
    wait_for(lambda: any(b["messages"][-1]["content"] == "take your time" for b in server.bodies))
    child.child.sendintr()  # Ctrl-C during a reply stops it
    child.expect("stopped")
    child.expect(PROMPT)
    child.child.sendline("still here")
    child.expect("Reply number 2 to still here")  # the stopped turn left nothing behind
    child.expect(PROMPT)

    child.child.sendeof()  # Ctrl-D leaves
    assert child.finish() == 0
    bodies = [b["messages"][-1]["content"] for b in server.bodies]
    assert "half-typed line" not in bodies
    history = Path(env["WEBAGENTS_HOME"]) / "chat-history"
    assert stat.S_IMODE(history.stat().st_mode) == 0o600
    assert "hello there" in history.read_text()


def test_chat_exit_ends_the_chat_with_status_0(tmp_path: Path, server: ScriptedServer) -> None:
    folder = write_agent(tmp_path / "helper", "model: openai/test-model")
    child = spawn([str(folder)], child_env(tmp_path, OPENAI_BASE_URL=server.base_url), tmp_path)
    child.expect(PROMPT)
    child.child.sendline("/exit")
    assert child.finish() == 0


def test_chat_without_an_endpoint_says_what_to_set(tmp_path: Path) -> None:
    folder = write_agent(tmp_path / "helper", "model: openai/gpt-4o-mini")
    done = subprocess.run(
        [webagents_command(), "chat", str(folder)],
        env=child_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2
    assert done.stderr == (
        "error: no model endpoint is configured: set OPENAI_API_KEY (for OpenAI) or "
        "OPENAI_BASE_URL (for a compatible server such as vLLM, Ollama or llama.cpp); "
        "or try the chat with the offline scripted model: --offline\n"
    )


def test_r1_a_broken_agent_file_is_reported_with_its_line(tmp_path: Path) -> None:
    folder = write_agent(tmp_path / "helper", "model: openai/m\nskils: [openai]")
    done = subprocess.run(
        [webagents_command(), str(folder), "--offline"],
        env=child_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2
    assert done.stderr == (
        f"error: {folder.resolve() / 'AGENT.md'}:3: unknown key 'skils'; "
        "the keys are: name, description, model, skills, access, compaction\n"
    )


def test_piped_input_works_without_a_terminal(tmp_path: Path) -> None:
    done = subprocess.run(
        [webagents_command(), "chat", str(REPO / "examples" / "assistant"), "--offline"],
        env=child_env(tmp_path),
        input="hi there\n/exit\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "offline: replies come from the scripted model" in done.stdout
    assert "(offline scripted model, turn 1) You said: 'hi there'." in done.stdout


def test_make_demo_runs_the_example_offline_and_says_so(tmp_path: Path) -> None:
    """The README's first command, with no key set."""
    child = Terminal(
        pexpect.spawn(
            "make",
            ["--no-print-directory", "demo"],
            env=child_env(tmp_path),
            cwd=str(REPO),
            encoding="utf-8",
            dimensions=(40, 120),
        )
    )
    child.expect(
        "No OPENAI_API_KEY or OPENAI_BASE_URL is set: chatting with the offline scripted model.",
        timeout=300,  # make demo may set up the venv first
    )
    child.expect("assistant · offline-scripted")
    child.expect("offline: replies come from the scripted model in webagents.offline")
    child.expect('memory works offline too: say "remember that <something>", then "what do')
    child.expect(PROMPT)
    child.child.sendline("hello")
    child.expect("(offline scripted model, turn 1) You said: 'hello'.")
    child.expect(PROMPT)
    child.child.sendeof()
    assert child.finish() == 0


def test_s2_a_conversation_is_resumed_after_a_restart_and_profiles_keep_apart(
    tmp_path: Path, server: ScriptedServer
) -> None:
    folder = write_agent(tmp_path / "helper", "name: helper\nmodel: openai/test-model")
    env = child_env(tmp_path, OPENAI_BASE_URL=server.base_url)

    child = spawn(["chat", str(folder)], env, tmp_path)
    child.expect(PROMPT)
    child.child.sendline("the door is blue")
    child.expect("Reply number 1 to the door is blue")
    child.expect(PROMPT)
    child.child.sendeof()
    assert child.finish() == 0

    child = spawn(["chat", str(folder)], env, tmp_path)  # started again
    child.expect(PROMPT)
    child.child.sendline("/resume")
    child.expect("1. the door is blue")
    child.expect("1 turn")
    child.expect("resume which?")
    child.child.sendline("1")
    child.expect("resumed the door is blue · 1 turn")
    child.expect(PROMPT)
    child.child.sendline("what colour?")
    child.expect("Reply number 2 to what colour?")  # the model heard the earlier turn
    child.expect(PROMPT)
    child.child.sendeof()
    assert child.finish() == 0
    assert [m["content"] for m in server.bodies[-1]["messages"][1:]] == [
        "the door is blue",
        "Reply number 1 to the door is blue, streamed in pieces.",
        "what colour?",
    ]

    child = spawn(["chat", str(folder), "-c"], env, tmp_path)  # continue the latest
    child.expect("resumed the door is blue · 2 turns")
    child.expect(PROMPT)
    child.child.sendeof()
    assert child.finish() == 0

    child = spawn(["--profile", "work", "chat", str(folder)], env, tmp_path)
    child.expect(PROMPT)
    child.child.sendline("/resume")
    child.expect("no kept conversations yet")  # the work profile keeps its own
    child.expect(PROMPT)
    child.child.sendline("work things")
    child.expect("Reply number 1 to work things")
    child.expect(PROMPT)
    child.child.sendeof()
    assert child.finish() == 0

    home = Path(env["WEBAGENTS_HOME"])
    default = sorted(p.name for p in (home / "sessions").rglob("*.json"))
    work = [
        json.loads(p.read_text())["title"]
        for p in (home.with_name(home.name + "-work") / "sessions").rglob("*.json")
    ]
    assert len(default) == 1
    assert work == ["work things"]


def test_s2_resume_options_on_the_command_line(tmp_path: Path, server: ScriptedServer) -> None:
    folder = write_agent(tmp_path / "helper", "name: helper\nmodel: openai/test-model")
    env = child_env(tmp_path, OPENAI_BASE_URL=server.base_url)

    def chat(*args: str, typed: str = "") -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [webagents_command(), *args],
            env=env,
            input=typed,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    assert chat("chat", str(folder), typed="first words\n").returncode == 0
    (kept,) = (Path(env["WEBAGENTS_HOME"]) / "sessions").rglob("*.json")

    by_id = chat("chat", str(folder), "--resume", kept.stem, typed="more words\n")
    assert "resumed first words · 1 turn" in by_id.stdout
    assert "Reply number 2 to more words" in by_id.stdout

    # `--resume FOLDER`: the folder is taken as the agent's, and the list is shown.
    listed = chat("chat", "--resume", str(folder), typed="\n")
    assert "1. first words · " in listed.stdout
    assert listed.stdout.count("resumed") == 0

    unknown = chat("chat", str(folder), "--resume", "no-such-id", typed="")
    assert "no kept conversation no-such-id; /resume lists them" in unknown.stdout
    assert unknown.returncode == 1  # no new conversation started in its place
    assert unknown.stderr == (
        "error: no kept conversation 'no-such-id' to resume: `webagents chat PATH --resume` "
        "lists them\n"
    )

    both = chat("chat", str(folder), "--resume", kept.stem, "-c")
    assert both.returncode == 2
    assert "give --resume or -c, not both" in both.stderr
