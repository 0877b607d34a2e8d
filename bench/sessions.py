"""The session skill beside the OpenAI Agents SDK's `SQLiteSession` (file-backed), and beside
the floor (a bare atomic fsync'd JSON write of the same conversation), in one process, one run.

    .venv/bin/pip install openai-agents     # the peer (not a project dependency)
    .venv/bin/python bench/sessions.py [--sizes 10 100 1000] [--repeat 200]

"Keep a turn": a conversation of N messages gains a user message and a reply, and the store
keeps it. The session skill rewrites the conversation's file (a served request carries the
whole conversation, and the file is replaced: S6), through its `keep` hook as a turn does;
SQLiteSession appends the two new items to its database (`add_items`). "Load": the whole
conversation back (`store.load` beside `get_items`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
from _timing import amedian_ms, median_ms

from webagents import Agent, Caller
from webagents._files import atomic_write
from webagents._loop import TurnResult
from webagents.skills.session import SessionSkill
from webagents.testing import ScriptedModel


def conversation(size: int, rng: random.Random) -> list[dict[str, Any]]:
    """`size` messages as a real conversation has them: user and assistant turns of a few
    hundred characters, and every fifth exchange a tool call with its result."""
    words = "plan launch venue budget guests date menu music travel press".split()
    messages: list[dict[str, Any]] = []
    while len(messages) < size:
        n = len(messages)
        if n % 10 == 4:
            messages.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": f"call_{n}",
                            "type": "function",
                            "function": {"name": "memory_search", "arguments": '{"query":"venue"}'},
                        }
                    ],
                }
            )
            messages.append(
                {"role": "tool", "tool_call_id": f"call_{n}", "content": text(rng, words, 60)}
            )
            continue
        role = "user" if n % 2 == 0 else "assistant"
        messages.append({"role": role, "content": text(rng, words, 20 if role == "user" else 60)})
    return messages[:size]


def text(rng: random.Random, words: list[str], count: int) -> str:
    return " ".join(rng.choices(words, k=count)) + "."


async def run_size(size: int, repeat: int, work: Path) -> list[tuple[str, str, float]]:
    from agents import SQLiteSession

    rng = random.Random(size)
    messages = conversation(size, rng)
    turn = [
        {"role": "user", "content": "And the budget?"},
        {"role": "assistant", "content": text(rng, ["budget", "fine"], 40)},
    ]
    rows: list[tuple[str, str, float]] = []

    # webagents: the session skill's keep hook, as a finished turn calls it.
    folder = work / f"agent-{size}"
    folder.mkdir()
    skill = SessionSkill(agent_dir=folder)
    agent = Agent("bench", "Be brief.", skills=[skill], model=ScriptedModel())
    ongoing = await agent.start(caller=Caller.owner(), conversation_id="bench", messages=messages)
    result = TurnResult(output="")
    await ongoing.keep(result)

    async def keep_a_turn() -> None:
        del ongoing.messages[size:]  # the same size every time: N messages plus this turn
        ongoing.messages.extend(turn)
        await ongoing.keep(result)

    rows.append(("keep a turn", "webagents", await amedian_ms(keep_a_turn, repeat)))

    def load() -> Any:
        return skill.store.load("owner", "bench")

    rows.append(("load the conversation", "webagents", median_ms(load, repeat)))

    # The floors: the same conversation written atomically with fsync, no lock, no checks.
    whole = {"messages": [*messages, *turn]}
    floor = work / f"floor-{size}.json"
    rows.append(
        (
            "keep a turn",
            "floor: atomic fsync'd write, json",
            median_ms(lambda: atomic_write(floor, json.dumps(whole).encode()), repeat),
        )
    )
    rows.append(
        (
            "keep a turn",
            "floor: atomic fsync'd write, orjson",
            median_ms(lambda: atomic_write(floor, orjson.dumps(whole)), repeat),
        )
    )
    rows.append(
        (
            "load the conversation",
            "floor: read + orjson",
            median_ms(lambda: orjson.loads(floor.read_bytes()), repeat),
        )
    )

    # The peer: SQLiteSession in a file, the conversation added first.
    session = SQLiteSession("bench", work / f"agents-{size}.sqlite")
    await session.add_items(messages)  # type: ignore[arg-type]
    rows.append(
        (
            "keep a turn",
            "openai-agents SQLiteSession.add_items",
            await amedian_ms(lambda: session.add_items(turn), repeat),  # type: ignore[arg-type]
        )
    )
    loaded = await session.get_items()
    assert len(loaded) == size + 2 * repeat
    small = SQLiteSession("bench-load", work / f"agents-load-{size}.sqlite")
    await small.add_items([*messages, *turn])  # type: ignore[arg-type]
    rows.append(
        (
            "load the conversation",
            "openai-agents SQLiteSession.get_items",
            await amedian_ms(small.get_items, repeat),
        )
    )
    session.close()
    small.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--repeat", type=int, default=200)
    options = parser.parse_args()
    print(
        f"{time.strftime('%Y-%m-%d')}, {platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}; median of {options.repeat} (ms)\n"
    )
    print("| messages | operation | who | median ms |")
    print("|---:|---|---|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["WEBAGENTS_HOME"] = str(Path(tmp) / "home")
        for size in options.sizes:
            work = Path(tmp) / str(size)
            work.mkdir()
            for operation, who, ms in asyncio.run(run_size(size, options.repeat, work)):
                print(f"| {size} | {operation} | {who} | {ms:.3f} |", flush=True)


if __name__ == "__main__":
    main()
