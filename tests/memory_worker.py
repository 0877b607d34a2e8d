"""One process of the memory concurrency test: 20 tasks writing and forgetting notes.

    python -m tests.memory_worker FOLDER PROCESS
Prints, as JSON, the content each task wrote last to its own key.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from webagents import Caller
from webagents.context import AgentInfo, Context

from .memory_helpers import memory_agent

TASKS = 20
ROUNDS = 6


def content(process: str, task: int, round_: int) -> str:
    marker = f"[{process}-{task}-{round_}]"
    return marker * (4000 // len(marker))  # big enough that a torn write would show


async def main(folder: Path, process: str) -> None:
    _, skill = memory_agent(folder)
    alice = Context(agent=AgentInfo("keeper", folder), caller=Caller.verified("alice@example.com"))
    last: dict[str, str] = {}

    async def task(n: int) -> None:
        own = f"p{process}-t{n}"
        for round_ in range(ROUNDS):
            text = content(process, n, round_)
            await skill.write(alice, own, text, f"task {n} round {round_}")
            await skill.write(alice, f"same-{n % 3}", text, "contended")
            if round_ % 2 == 0:
                await skill.forget(alice, own)
                await skill.write(alice, own, text, f"task {n} round {round_} again")
            try:
                await skill.forget(alice, f"same-{(n + 1) % 3}")
            except Exception:  # another task may have forgotten it first
                pass
            last[own] = text

    await asyncio.gather(*(task(n) for n in range(TASKS)))
    print(json.dumps(last))


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), sys.argv[2]))
