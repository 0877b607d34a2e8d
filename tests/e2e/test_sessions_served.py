"""S5-S7 end to end: `webagents serve` with the session skill, called by the official client."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.openai_callers import caller
from webagents.model import ModelRequest
from webagents.sessions import read_session
from webagents.sessions.store import agent_folder_name, caller_hash
from webagents.testing import FunctionModel, Reply, ScriptedServer, call

from .conftest import child_env, webagents_command
from .serving import Process, running, write

pytestmark = pytest.mark.e2e

KEYS = {"ALICE_KEY": "alice-key-123", "BOB_KEY": "bob-key-123", "OWNER_KEY": "owner-key-123"}
ALICE_FOLDER = f"callers/{caller_hash('caller:alice@example.com')}"
BOB_FOLDER = f"callers/{caller_hash('caller:bob@example.com')}"


def _driver(request: ModelRequest) -> Any:
    """`PROMPT` answers with the system prompt, `CALL tool {json}` calls a tool; anything
    else is answered with every user message the model heard."""
    if request.messages[-1]["role"] == "tool":
        return Reply("RESULT " + request.messages[-1]["content"])
    said = [m["content"] for m in request.messages if m["role"] == "user"]
    if said[-1].startswith("CALL "):
        _, tool, arguments = said[-1].split(" ", 2)
        return call(tool, json.loads(arguments))
    if said[-1] == "PROMPT":
        return Reply(request.messages[0]["content"])
    return Reply("heard: " + " | ".join(said))


@pytest.fixture
def model_server() -> Iterator[ScriptedServer]:
    with ScriptedServer(FunctionModel(_driver)) as server:
        yield server


class Served:
    def __init__(self, process: Process, folder: Path, env: dict[str, str]) -> None:
        self.process = process
        self.folder = folder
        self.env = env
        self.root = Path(env["WEBAGENTS_HOME"]) / "sessions" / agent_folder_name(folder) / "keeper"

    def say(
        self,
        key: str | None,
        text: str,
        session: str | None = None,
        history: list[dict[str, str]] | None = None,
    ) -> str:
        client = caller(f"{self.process.url}/v1", key or "anonymous", max_retries=0)
        reply = client.chat.completions.create(
            model="keeper",
            messages=[*(history or []), {"role": "user", "content": text}],  # type: ignore[list-item]
            metadata={"session_id": session} if session else None,  # type: ignore[arg-type]
        )
        return reply.choices[0].message.content or ""

    def kept(self) -> list[str]:
        if not self.root.exists():
            return []
        return sorted(str(p.relative_to(self.root)) for p in self.root.rglob("*.json"))

    def session(self, relative: str) -> dict[str, Any]:
        found = read_session(self.root / relative)  # the file with its journal applied
        assert found is not None
        return dict(found[0])


def _serve(root: Path, model_server: ScriptedServer, *, umask: int = -1) -> Iterator[Served]:
    folder = root / "keeper"
    write(
        folder / "AGENT.md",
        """---
name: keeper
model: openai/m
skills:
  - memory
  - session
access:
  owner: env:OWNER_KEY
  keys:
    alice@example.com: env:ALICE_KEY
    bob@example.com: env:BOB_KEY
---
Keep each caller's conversations.
""",
    )
    env = child_env(root, OPENAI_BASE_URL=model_server.base_url, **KEYS)
    with running(["serve", str(folder)], env, umask=umask) as process:
        yield Served(process, folder, env)


@pytest.fixture
def served(tmp_path: Path, model_server: ScriptedServer) -> Iterator[Served]:
    yield from _serve(tmp_path, model_server)


def test_s5_s7_each_caller_has_its_own_conversation_under_one_id(
    served: Served, model_server: ScriptedServer
) -> None:
    assert served.say(KEYS["ALICE_KEY"], "alice's plan", "plan") == "heard: alice's plan"
    # Bob names the same session: he gets a conversation of his own, none of alice's.
    assert served.say(KEYS["BOB_KEY"], "bob's plan", "plan") == "heard: bob's plan"
    assert [m["content"] for m in model_server.bodies[-1]["messages"][1:]] == ["bob's plan"]
    assert served.say(KEYS["OWNER_KEY"], "the owner's plan", "plan") == "heard: the owner's plan"

    assert served.kept() == sorted(
        [f"{ALICE_FOLDER}/plan.json", f"{BOB_FOLDER}/plan.json", "plan.json"]
    )
    assert served.session(f"{ALICE_FOLDER}/plan.json")["messages"] == [
        {"role": "user", "content": "alice's plan"},
        {"role": "assistant", "content": "heard: alice's plan"},
    ]
    assert served.session(f"{BOB_FOLDER}/plan.json")["messages"][0] == {
        "role": "user",
        "content": "bob's plan",
    }


def test_s5_anonymous_callers_and_requests_without_an_id_keep_nothing(served: Served) -> None:
    assert served.say(None, "hello", "plan") == "heard: hello"
    assert served.say(KEYS["ALICE_KEY"], "no id") == "heard: no id"
    assert served.kept() == []
    assert not (Path(served.env["WEBAGENTS_HOME"]) / "sessions").exists()


def test_s6_what_is_kept_is_the_request_plus_the_reply(served: Served) -> None:
    key = KEYS["ALICE_KEY"]
    served.say(key, "one", "plan")
    served.say(
        key,
        "two",
        "plan",
        [{"role": "user", "content": "one"}, {"role": "assistant", "content": "heard: one"}],
    )
    edited = [{"role": "user", "content": "one, edited"}, {"role": "assistant", "content": "ok"}]
    assert served.say(key, "three", "plan", edited) == "heard: one, edited | three"
    assert served.session(f"{ALICE_FOLDER}/plan.json")["messages"] == [
        *edited,
        {"role": "user", "content": "three"},
        {"role": "assistant", "content": "heard: one, edited | three"},
    ]


@pytest.mark.parametrize("session_id", ["../x", "a/b", "..", "x" * 129, "sp ace", "é", ""])
def test_s7_an_invalid_session_id_is_400_and_creates_nothing(
    served: Served, session_id: str
) -> None:
    response = httpx.post(
        f"{served.process.url}/v1/chat/completions",
        headers={"Authorization": f"Bearer {KEYS['ALICE_KEY']}"},
        json={
            "model": "keeper",
            "messages": [{"role": "user", "content": "hi"}],
            "metadata": {"session_id": session_id},
        },
    )
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request_error"
    assert "metadata.session_id must be 1-128 characters" in response.json()["error"]["message"]
    assert served.kept() == []


def test_s7_files_are_private_under_a_server_started_with_umask_0(
    tmp_path: Path, model_server: ScriptedServer
) -> None:
    for served in _serve(tmp_path, model_server, umask=0):
        served.say(KEYS["ALICE_KEY"], "hi", "plan")
        path = served.root / ALICE_FOLDER / "plan.json"
        assert path.stat().st_mode & 0o777 == 0o600
        folder = path.parent
        while folder != Path(served.env["WEBAGENTS_HOME"]).parent:
            assert folder.stat().st_mode & 0o777 == 0o700, folder
            folder = folder.parent


def test_s7_a_damaged_session_file_is_409_and_left_as_it_is(served: Served) -> None:
    served.say(KEYS["ALICE_KEY"], "hi", "plan")
    path = served.root / ALICE_FOLDER / "plan.json"
    path.write_bytes(b'{"format": 1, "id": "pl\xff')
    client = caller(f"{served.process.url}/v1", KEYS["ALICE_KEY"])
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(
            model="keeper",
            messages=[{"role": "user", "content": "again"}],
            metadata={"session_id": "plan"},
        )
    assert caught.value.status_code == 409
    assert caught.value.body == {
        "message": "this session's kept conversation cannot be read or replaced (its file is "
        "damaged); continue under a new metadata.session_id",
        "type": "invalid_request_error",
        "param": None,
        "code": "session_unreadable",
    }
    served.process.wait_until(lambda: f"{path} is not a session file" in served.process.output)
    assert path.read_bytes() == b'{"format": 1, "id": "pl\xff'
    assert served.say(KEYS["ALICE_KEY"], "fresh", "plan-2") == "heard: fresh"


def test_s6_concurrent_requests_on_one_session_never_tear_its_file(served: Served) -> None:
    key = KEYS["ALICE_KEY"]

    def one(n: int) -> str:
        return served.say(key, f"message {n}", "busy")

    with ThreadPoolExecutor(8) as pool:
        replies = list(pool.map(one, range(16)))
    assert replies == [f"heard: message {n}" for n in range(16)]
    kept = served.session(f"{ALICE_FOLDER}/busy.json")  # whole JSON: never torn
    (user, answer) = kept["messages"]
    n = int(user["content"].removeprefix("message "))
    assert answer == {"role": "assistant", "content": f"heard: message {n}"}
    assert list((served.root / ALICE_FOLDER).glob("*.tmp*")) == []


def test_m6_the_memory_block_is_fixed_for_a_served_session(served: Served) -> None:
    key = KEYS["ALICE_KEY"]
    before = served.say(key, "PROMPT", "plan")
    # A note written in another conversation meanwhile shows in new conversations only.
    note = {"key": "tea", "content": "Alice drinks tea.", "description": "what alice drinks"}
    assert served.say(key, "CALL memory_write " + json.dumps(note)).startswith("RESULT ")
    history = [{"role": "user", "content": "PROMPT"}, {"role": "assistant", "content": before}]
    assert served.say(key, "PROMPT", "plan", history) == before
    assert "tea" not in before
    assert served.session(f"{ALICE_FOLDER}/plan.json")["system_prompt"] == before
    assert "- tea: what alice drinks" in served.say(key, "PROMPT", "next")


def test_s5_the_owners_served_conversations_are_in_the_chats_resume(
    served: Served, model_server: ScriptedServer
) -> None:
    served.say(KEYS["OWNER_KEY"], "served by the owner", "from-http")
    chat = subprocess.run(
        [webagents_command(), "chat", str(served.folder), "--resume"],
        input="1\nand in the terminal\n",
        env=served.env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert chat.returncode == 0, chat.stderr
    assert "1. served by the owner" in chat.stdout
    assert "from-http" in chat.stdout
    assert "heard: served by the owner | and in the terminal" in chat.stdout
    assert served.session("from-http.json")["messages"][-1] == {
        "role": "assistant",
        "content": "heard: served by the owner | and in the terminal",
    }


def test_s6_text_that_cannot_be_sent_on_or_kept_is_refused_first(served: Served) -> None:
    body = (
        '{"model": "keeper", "metadata": {"session_id": "odd"}, "messages": ['
        '{"role": "user", "content": "hi \\ud800"}]}'
    )
    response = httpx.post(
        f"{served.process.url}/v1/chat/completions",
        headers={
            "Authorization": f"Bearer {KEYS['ALICE_KEY']}",
            "Content-Type": "application/json",
        },
        content=body.encode(),
    )
    assert response.status_code == 400
    assert response.json()["error"]["message"] == (
        "the request body is not valid JSON: no low surrogate in string: line 1 column 101 "
        "(char 100)"
    )
    assert served.kept() == []


def test_c2_a_served_session_sends_its_summary_and_summarises_once(
    tmp_path: Path, model_server: ScriptedServer
) -> None:
    from webagents.compaction import SUMMARISER, SUMMARY_FRAME

    def driver(request: ModelRequest) -> Any:
        if str(request.messages[0]["content"]).startswith(SUMMARISER):
            return Reply("SUMMARY of the early talk")
        return Reply(f"ok {len(request.messages)}")

    model_server.model = FunctionModel(driver)
    folder = tmp_path / "keeper"
    write(
        folder / "AGENT.md",
        "---\nname: keeper\nmodel: openai/m\nskills:\n  - session\n"
        "compaction: {threshold: 400, keep: 2}\naccess:\n  keys:\n"
        "    alice@example.com: env:ALICE_KEY\n---\nBe brief.\n",
    )
    env = child_env(tmp_path, OPENAI_BASE_URL=model_server.base_url, **KEYS)
    with running(["serve", str(folder)], env) as process:
        served = Served(process, folder, env)
        history: list[dict[str, str]] = []

        def summaries() -> list[dict[str, Any]]:
            return [
                b for b in model_server.bodies if b["messages"][0]["content"].startswith(SUMMARISER)
            ]

        def turn(n: int) -> None:
            text = f"turn {n} " + "padding " * 20
            answer = served.say(KEYS["ALICE_KEY"], text, "long", history)
            history.extend(
                [{"role": "user", "content": text}, {"role": "assistant", "content": answer}]
            )

        n = 0
        while not summaries():  # until the conversation outgrows the threshold
            turn(n)
            n += 1
        assert n > 2
        turn(n)  # the next request: its summary is reused, not made again
    assert len(summaries()) == 1
    last = model_server.bodies[-1]["messages"]
    assert last[1]["content"] == SUMMARY_FRAME + json.dumps(
        {"summary": "SUMMARY of the early talk"}
    )
    assert "turn 0 " not in json.dumps(last)
    assert served.session(f"{ALICE_FOLDER}/long.json")["compaction"]["text"] == (
        "SUMMARY of the early talk"
    )
