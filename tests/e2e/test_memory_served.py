"""M2-M6 end to end: `webagents serve` with the memory skill, called by the official client."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from webagents.testing import FunctionModel, ScriptedServer

from .conftest import child_env
from .memory_served_helpers import _driver, index_lines, say, tool
from .serving import Process, running, write

pytestmark = pytest.mark.e2e

KEYS = {"ALICE_KEY": "alice-key-123", "BOB_KEY": "bob-key-123", "OWNER_KEY": "owner-key-123"}


@pytest.fixture(scope="module")
def model_server() -> Iterator[ScriptedServer]:
    with ScriptedServer(FunctionModel(_driver)) as server:
        yield server


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory, model_server: ScriptedServer
) -> Iterator[Process]:
    root = tmp_path_factory.mktemp("memory")
    write(
        root / "keeper" / "AGENT.md",
        """---
name: keeper
model: openai/m
skills:
  - memory: {notes_budget: 120}
access:
  owner: env:OWNER_KEY
  keys:
    alice@example.com: env:ALICE_KEY
    bob@example.com: env:BOB_KEY
---
Keep notes for each caller.
""",
    )
    env = child_env(root, OPENAI_BASE_URL=model_server.base_url, **KEYS)
    with running(["serve", str(root / "keeper")], env) as process:
        yield process


ALICE, BOB, NOBODY = KEYS["ALICE_KEY"], KEYS["BOB_KEY"], "anonymous"


def test_m2_alices_note_is_invisible_to_bob_and_to_anonymous(served: Process) -> None:
    saved = tool(
        served,
        ALICE,
        "memory_write",
        key="plan",
        content="Alice's plan: Lisbon.",
        description="Alice's trip",
    )
    assert (saved["saved"], saved["namespace"]) == ("plan", "caller:alice@example.com")
    assert tool(served, ALICE, "memory_read", key="plan")["content"] == "Alice's plan: Lisbon."

    for key in (BOB, NOBODY):
        assert tool(served, key, "memory_list") == {"notes": []}
        assert tool(served, key, "memory_search", query="Lisbon plan") == []
        assert tool(served, key, "memory_read", key="plan") == (
            "Error: there is no note 'plan'; memory_list shows the keys"
        )
        assert "Lisbon" not in say(served, key, "PROMPT")
        assert "plan" not in say(served, key, "PROMPT")
    assert tool(served, BOB, "memory_read", key="plan", namespace="caller:alice@example.com") == (
        "Error: invalid arguments: namespace: this tool takes no such argument"
    )
    assert tool(served, NOBODY, "memory_write", key="x", content="y") == (
        "Error: there is no tool named 'memory_write'; the tools are: memory_list, "
        "memory_read, memory_search"
    )
    # The owner reads it, by naming the namespace.
    owner = tool(
        served, KEYS["OWNER_KEY"], "memory_read", key="plan", namespace="caller:alice@example.com"
    )
    assert owner["content"] == "Alice's plan: Lisbon."


def test_m6_the_block_is_fixed_for_a_session_and_new_notes_show_in_the_next(
    served: Process, model_server: ScriptedServer
) -> None:
    first = say(served, BOB, "PROMPT", session="chat-1")
    assert index_lines(first) == ["Your notes (caller:bob@example.com): none yet."]
    history = [{"role": "user", "content": "PROMPT"}, {"role": "assistant", "content": first}]
    written = say(
        served,
        BOB,
        'CALL memory_write {"key": "tea", "content": "Green tea."}',
        session="chat-1",
        history=history,
    )
    assert written.startswith("RESULT ")
    history += [{"role": "user", "content": "x"}, {"role": "assistant", "content": written}]
    again = say(served, BOB, "PROMPT", session="chat-1", history=history)
    assert again == first  # byte for byte, although a note was written in between
    # ... and it is found at once by the tools, and shows in the next conversation's block.
    assert [h["key"] for h in tool(served, BOB, "memory_search", query="green")] == ["tea"]
    assert index_lines(say(served, BOB, "PROMPT", session="chat-2")) == [
        "Your notes (caller:bob@example.com):",
        "- tea: Green tea.",
    ]
    # What the model received: one system prompt for every request of chat-1.
    chat_1 = [
        b["messages"][0]["content"]
        for b in model_server.bodies
        if b["messages"][1:2] == [{"role": "user", "content": "PROMPT"}] and len(b["messages"]) > 2
    ]
    assert chat_1 and set(chat_1) == {first}


def test_m5_the_budget_line_counts_exactly(served: Process) -> None:
    owner = KEYS["OWNER_KEY"]
    for n in range(6):
        tool(
            served,
            owner,
            "memory_write",
            key=f"n{n}",
            content=f"Note {n}",
            description=f"Description {n}",
        )
    block = say(served, owner, "PROMPT").splitlines()
    shown = [line for line in block if line.startswith("- ")]
    # notes_budget 120: lines of 19 characters and a newline each fit six times.
    assert shown == [f"- n{n}: Description {n}" for n in (5, 4, 3, 2, 1, 0)]
    assert all(not line.startswith("(") for line in block)
    tool(served, owner, "memory_write", key="n6", content="Note 6", description="Description 6")
    block = say(served, owner, "PROMPT").splitlines()
    assert next(line for line in block if line.startswith("- ")) == "- n6: Description 6"
    assert block[-1] == "(1 more note; memory_list shows them all.)"
