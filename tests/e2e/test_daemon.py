"""`webagents daemon`: every agent folder under a root, reloaded when its files change."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.openai_callers import caller
from webagents.testing import FunctionModel, ScriptedServer

from .conftest import child_env
from .serving import Process, running, write

pytestmark = pytest.mark.e2e


@pytest.fixture
def model_server() -> Iterator[ScriptedServer]:
    with ScriptedServer(FunctionModel(lambda request: request.messages[0]["content"])) as server:
        yield server


def agent_file(name: str, instructions: str, description: str = "") -> str:
    return (
        f"---\nname: {name}\ndescription: '{description}'\nmodel: openai/m\n---\n{instructions}\n"
    )


def models(process: Process) -> dict[str, str]:
    listed = httpx.get(f"{process.url}/v1/models").json()["data"]
    return {m["id"]: m["description"] for m in listed}


def ask(process: Process, agent: str) -> str:
    """The agent's answer, which the model makes its system prompt: its instructions."""
    reply = caller(f"{process.url}/v1", "anonymous").chat.completions.create(
        model=agent, messages=[{"role": "user", "content": "who are you?"}]
    )
    return reply.choices[0].message.content or ""


def test_daemon_adds_reloads_keeps_the_last_good_version_and_removes(
    tmp_path: Path, model_server: ScriptedServer
) -> None:
    root = tmp_path / "agents"
    write(root / "alpha" / "AGENT.md", agent_file("alpha", "I am alpha, version 1.", "one"))
    write(root / "notes.txt", "not an agent")
    write(root / "empty" / "README.md", "no AGENT.md here")
    env = child_env(tmp_path, OPENAI_BASE_URL=model_server.base_url)
    with running(["daemon", str(root)], env) as process:
        assert "webagents daemon: 1 agents under" in process.output
        assert models(process) == {"alpha": "one"}
        assert ask(process, "alpha") == "I am alpha, version 1."

        # A new agent folder is served without a restart, by name and at its own route.
        write(root / "beta" / "AGENT.md", agent_file("beta", "I am beta.", "two"))
        process.wait_until(lambda: models(process) == {"alpha": "one", "beta": "two"})
        assert ask(process, "beta") == "I am beta."

        # An edit is picked up.
        write(root / "alpha" / "AGENT.md", agent_file("alpha", "I am alpha, version 2.", "one+"))
        process.wait_until(lambda: models(process)["alpha"] == "one+")
        assert ask(process, "alpha") == "I am alpha, version 2."

        # A broken edit keeps the last good version, and says so in the log.
        (root / "alpha" / "AGENT.md").write_text("---\nname: alpha\nmodle: x\n---\nbroken\n")
        process.wait_until(
            lambda: "still serving the last good version of agent 'alpha'" in process.output
        )
        assert models(process)["alpha"] == "one+"
        assert ask(process, "alpha") == "I am alpha, version 2."
        assert "unknown key 'modle'" in process.output

        # Fixed again, it is reloaded.
        write(root / "alpha" / "AGENT.md", agent_file("alpha", "I am alpha, version 3.", "one++"))
        process.wait_until(lambda: models(process)["alpha"] == "one++")

        # What an agent writes under .webagents/ does not reload it.
        reloads = process.output.count("reloaded agent 'alpha'")
        write(root / "alpha" / ".webagents" / "memory" / "owner" / "note.md", "a note")
        write(root / "beta" / "AGENT.md", agent_file("beta", "I am beta, again.", "two+"))
        process.wait_until(lambda: models(process)["beta"] == "two+")
        assert process.output.count("reloaded agent 'alpha'") == reloads

        # Front matter that Python cannot even hold does not stop the watching.
        (root / "beta" / "AGENT.md").write_text("---\n? [a]\n: 1\n---\n")
        process.wait_until(lambda: "the front matter cannot be read" in process.output)
        write(root / "gamma" / "AGENT.md", agent_file("gamma", "I am gamma.", "three"))
        process.wait_until(lambda: "gamma" in models(process))

        # A folder whose AGENT.md goes away is no longer served.
        (root / "beta" / "AGENT.md").unlink()
        process.wait_until(lambda: set(models(process)) == {"alpha", "gamma"})
        gone = httpx.post(
            f"{process.url}/agents/beta/chat/completions",
            json={"model": "beta", "messages": [{"role": "user", "content": "hi"}]},
        )
        assert gone.status_code == 404


def test_daemon_refuses_a_second_agent_with_the_same_name(
    tmp_path: Path, model_server: ScriptedServer
) -> None:
    root = tmp_path / "agents"
    write(root / "a" / "AGENT.md", agent_file("same", "First.", "first"))
    write(root / "b" / "AGENT.md", agent_file("same", "Second.", "second"))
    env = child_env(tmp_path, OPENAI_BASE_URL=model_server.base_url)
    with running(["daemon", str(root)], env) as process:
        assert models(process) == {"same": "first"}
        assert "agent name 'same' is already served from" in process.output


def test_daemon_an_unknown_model_is_verified_first_and_lists_only_the_callers_agents(
    tmp_path: Path, model_server: ScriptedServer
) -> None:
    root = tmp_path / "agents"
    write(root / "open" / "AGENT.md", agent_file("open", "Open.", "for all"))
    write(
        root / "private" / "AGENT.md",
        "---\nname: private\ndescription: 'for alice'\nmodel: openai/m\naccess:\n  keys:\n"
        "    alice@example.com: env:ALICE_KEY\n---\nPrivate.\n",
    )
    env = child_env(tmp_path, OPENAI_BASE_URL=model_server.base_url, ALICE_KEY="alice-1")

    def seeds_request(key: str) -> openai.APIStatusError:
        """The seeds' request: a provider's model name, which picks no agent of a daemon."""
        with (
            openai.OpenAI(api_key=key, base_url=f"{process.url}/v1", max_retries=0) as caller,
            pytest.raises(openai.APIStatusError) as caught,
        ):
            caller.chat.completions.create(
                model="openai/gpt-4o-mini",
                messages=[{"role": "user", "content": "hi"}],
                metadata={"session_id": "seed-1"},
            )
        return caught.value

    def listed(key: str) -> list[str]:
        with openai.OpenAI(api_key=key, base_url=f"{process.url}/v1", max_retries=0) as caller:
            return [m.id for m in caller.models.list().data]

    unknown = "no agent named 'openai/gpt-4o-mini' is served here; the agents you may call: "
    pick = " (send one's name as model, or post to /agents/<name>/chat/completions)"
    with running(["daemon", str(root)], env) as process:
        refusals = {key: seeds_request(key) for key in ("anonymous", "alice-1", "wrong")}
        assert {key: (e.status_code, e.body) for key, e in refusals.items()} == {
            "anonymous": (
                404,
                {
                    "message": unknown + "open" + pick,
                    "type": "not_found_error",
                    "param": None,
                    "code": "model_not_found",
                },
            ),
            "alice-1": (
                404,
                {
                    "message": unknown + "private" + pick,
                    "type": "not_found_error",
                    "param": None,
                    "code": "model_not_found",
                },
            ),
            "wrong": (
                401,
                {
                    "message": "the credential is not valid for any agent served here",
                    "type": "authentication_error",
                    "param": None,
                    "code": "invalid_credential",
                },
            ),
        }
        assert isinstance(refusals["wrong"], openai.AuthenticationError)
        assert (listed("anonymous"), listed("alice-1")) == (["open"], ["private"])
        with openai.OpenAI(api_key="alice-1", base_url=f"{process.url}/v1") as alice:
            reply = alice.chat.completions.create(
                model="private", messages=[{"role": "user", "content": "hi"}]
            )
        assert (reply.model, reply.choices[0].message.content) == ("private", "Private.")


SEEDS_REQUEST: dict[str, Any] = {
    "model": "openai/gpt-4o-mini",
    "messages": [{"role": "user", "content": "Plan the launch."}],
    "metadata": {"session_id": "launch-plan"},
}
"""The request body of the seeds (sessions), exactly."""


def test_daemon_sends_the_seeds_request_to_the_one_agent_and_with_several_says_how_to_pick(
    tmp_path: Path, model_server: ScriptedServer
) -> None:
    """SPEC 6: under `daemon`, a `model` that names no agent goes to the one agent when only
    one is served; with several it is a 404 that lists them and names the per-agent route."""
    root = tmp_path / "agents"
    write(root / "alpha" / "AGENT.md", agent_file("alpha", "I am alpha.", "one"))
    env = child_env(tmp_path, OPENAI_BASE_URL=model_server.base_url)
    with running(["daemon", str(root)], env) as process:
        with openai.OpenAI(
            api_key="anonymous", base_url=f"{process.url}/v1", max_retries=0
        ) as caller:
            reply = caller.chat.completions.create(**SEEDS_REQUEST)
            assert (reply.model, reply.choices[0].message.content) == ("alpha", "I am alpha.")
            streamed = caller.chat.completions.create(**SEEDS_REQUEST, stream=True)
            assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == (
                "I am alpha."
            )

            write(root / "beta" / "AGENT.md", agent_file("beta", "I am beta.", "two"))
            process.wait_until(lambda: set(models(process)) == {"alpha", "beta"})
            with pytest.raises(openai.NotFoundError) as refused:
                caller.chat.completions.create(**SEEDS_REQUEST)
        assert refused.value.body == {
            "message": "no agent named 'openai/gpt-4o-mini' is served here; the agents you may "
            "call: alpha, beta (send one's name as model, or post to "
            "/agents/<name>/chat/completions)",
            "type": "not_found_error",
            "param": None,
            "code": "model_not_found",
        }
        for name in ("alpha", "beta"):
            with openai.OpenAI(
                api_key="anonymous", base_url=f"{process.url}/agents/{name}", max_retries=0
            ) as routed:
                answer = routed.chat.completions.create(**SEEDS_REQUEST)
            assert (answer.model, answer.choices[0].message.content) == (name, f"I am {name}.")
