"""The per-conversation context handed to skills, tools and hooks.

Skill instances are shared by every conversation (and, when served, by every caller at once),
so nothing about one caller or one conversation is kept on them: it travels here instead.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .caller import Caller

_CONVERSATION_ID = re.compile(r"^[A-Za-z0-9._-]{1,128}$")


def is_conversation_id(value: str) -> bool:
    """S7: 1-128 characters of A-Z a-z 0-9 . _ -, never `..` nor only dots (a safe file name)."""
    return bool(_CONVERSATION_ID.fullmatch(value)) and ".." not in value and value.strip(".") != ""


@dataclass(frozen=True, slots=True)
class AgentInfo:
    """What a skill may know about the agent it is part of."""

    name: str
    directory: Path | None = None
    """The agent's folder (where AGENT.md is), or None for an agent built in code."""
    profile: str | None = None
    """The `--profile` in force, for skills that keep state under the webagents home."""


@dataclass(slots=True)
class Context:
    """One conversation with one verified caller."""

    agent: AgentInfo
    caller: Caller
    conversation_id: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    """The request's metadata as the client sent it (served requests), else empty."""
    state: dict[str, Any] = field(default_factory=dict)
    """Per-conversation state; a skill keeps its own under its name."""
    kept: bool = False
    """Set (in on_conversation_start) by a skill that keeps this conversation: its messages,
    system prompt and summary. Other skills then keep no snapshots of their own parts of it,
    and what is worth keeping once per conversation (an episode) is kept."""
