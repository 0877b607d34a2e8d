"""What the agents API takes in and gives out (SPEC P4's shapes, camelCase where it says)."""

from __future__ import annotations

import re
import uuid
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ..errors import BadInput

NAME_RULE = "2-64 characters of a-z 0-9 _ -, starting with a letter or digit"
_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{1,63}$")


def check_agent_name(given: str) -> str:
    if not _NAME.fullmatch(given):
        raise BadInput(
            f"an agent's name on the portal is {NAME_RULE}, not {given!r}: set name: in its "
            "AGENT.md",
            code="bad_agent_name",
        )
    return given


class AgentIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    description: str = Field(default="", max_length=2000)
    instructions: str = Field(default="", max_length=200_000)
    model: str | None = Field(default=None, max_length=200)
    # Either shape of skills_field (a list or a mapping), checked there with its own message.
    skills: Any = Field(default_factory=list)
    # The name of the first machine's key (publish sends the host name); default "first key".
    keyName: str | None = Field(default=None, max_length=100)


class AgentPatch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str | None = None
    description: str | None = Field(default=None, max_length=2000)
    instructions: str | None = Field(default=None, max_length=200_000)
    model: str | None = Field(default=None, max_length=200)
    skills: Any = None  # as AgentIn's; null is refused by the service
    # Portal Connect: may other portal users call the agent at its public endpoint (P12).
    allowOthers: bool | None = None


class AgentOut(BaseModel):
    id: uuid.UUID
    username: str  # the platform's word for the agent's name
    name: str
    description: str
    instructions: str
    model: str | None
    skills: list[Any] | dict[str, Any]  # as it was sent (skills_field)
    allowOthers: bool
    created_at: datetime
    updated_at: datetime


class AgentCreated(BaseModel):
    agent: AgentOut
    rawApiKey: str


class OneAgent(BaseModel):
    agent: AgentOut


class AgentList(BaseModel):
    agents: list[AgentOut]


class KeyIn(BaseModel):
    """A new key for one more machine (`webagents publish` on it)."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(default=None, max_length=100)


class KeyOut(BaseModel):
    id: uuid.UUID
    name: str
    prefix: str
    createdAt: datetime
    lastUsedAt: datetime | None
    revokedAt: datetime | None


class KeyMade(BaseModel):
    key: KeyOut
    rawApiKey: str


class KeyList(BaseModel):
    keys: list[KeyOut]
