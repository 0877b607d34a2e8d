"""Helpers for the memory tests: an agent folder with notes of several callers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from webagents import Agent, Caller
from webagents.context import Context
from webagents.errors import ToolError
from webagents.skills.memory import MemorySkill
from webagents.testing import ScriptedModel

ALICE = Caller.verified("alice@example.com")
BOB = Caller.verified("bob@example.com")
CHANNEL = Caller.channel("telegram", "4242")
ANONYMOUS = Caller.anonymous()
COMMA = Caller.verified("carol,evil@example.com")
OWNER = Caller.owner()


def memory_agent(folder: Path, **settings: Any) -> tuple[Agent, MemorySkill]:
    skill = MemorySkill(**settings)
    agent = Agent("keeper", "Keep notes.", skills=[skill], model=ScriptedModel(), directory=folder)
    return agent, skill


async def use(skill: MemorySkill, caller: Caller, tool: str, **arguments: Any) -> Any:
    """Call a memory tool as `caller` through the tool interface the model uses."""
    ctx = Context(agent=skill_agent_info(skill), caller=caller)
    tools = {t.name: t for t in skill.tools(ctx)}
    if tool not in tools:
        raise ToolError(f"not offered: {tool}")
    return json.loads(await tools[tool](ctx, arguments))


def skill_agent_info(skill: MemorySkill) -> Any:
    from webagents.context import AgentInfo

    return AgentInfo("keeper", skill.store.root.parent.parent)


async def seed(skill: MemorySkill) -> None:
    """owner-plan, shared-faq, alice-pref, bob-secret, channel-note."""
    await use(
        skill,
        OWNER,
        "memory_write",
        key="owner-plan",
        content="The owner's launch plan.",
        description="Launch plan",
    )
    await use(
        skill,
        OWNER,
        "memory_write",
        key="shared-faq",
        content="Opening hours are 9-5.",
        description="Opening hours",
        namespace="shared",
    )
    await use(
        skill,
        ALICE,
        "memory_write",
        key="alice-pref",
        content="Alice likes tea.",
        description="Alice's drink",
    )
    await use(
        skill,
        BOB,
        "memory_write",
        key="bob-secret",
        content="Bob's tea is a secret.",
        description="Bob's secret",
    )
    await use(
        skill,
        CHANNEL,
        "memory_write",
        key="channel-note",
        content="Telegram tea.",
        description="From telegram",
    )
