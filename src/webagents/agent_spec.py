"""The agent file's data: what AGENT.md says, as plain values (no live skill, no model).

Below everything that reads it: the loader (`agent_file`) builds an `AgentSpec`, the access
verifiers take an `AccessSpec`, and the memory skill's legacy setting takes a
`CompactionSpec`; none of them is imported here, so the data never pulls the runtime in.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .caller import RESERVED_PREFIXES, issuer_is_nameable

MODEL_NAME = re.compile(r"^openai/\S+$")
"""How an agent file names a model."""

_SECRET = re.compile(r"^(env:[A-Za-z_][A-Za-z0-9_]*|sha256:[0-9a-f]{64})$")


def check_secret(value: str, *, what: str = "") -> str:
    """A5: secrets are `env:NAME` or `sha256:<hex>`, never the secret itself."""
    if not _SECRET.fullmatch(value):
        raise ValueError(
            f"{what + ' ' if what else ''}must be env:NAME (read from the environment) or "
            "sha256:<64 hex digits> "
            "(the key's SHA-256 digest); a plaintext secret does not belong in AGENT.md"
        )
    return value


class JwtIssuer(BaseModel):
    model_config = ConfigDict(extra="forbid")

    issuer: str
    jwks: str
    audience: str
    identity: list[str] = Field(default_factory=lambda: ["sub"], min_length=1)
    algorithms: list[str] = Field(default_factory=lambda: ["RS256", "ES256", "EdDSA"])
    plain_identity: bool = False
    """True: this issuer's tokens name the same callers as API keys with that identity.
    False (the default): its callers' namespaces carry the issuer, `jwt:<issuer>#<identity>`,
    so no other issuer and no API key can reach them by naming the same `sub` or email."""

    @field_validator("issuer")
    @classmethod
    def _issuer(cls, value: str) -> str:
        if not issuer_is_nameable(value):
            raise ValueError(
                "the issuer names its callers' namespaces (jwt:<issuer>#<identity>): it must "
                "be non-empty, with no '#', comma or control character"
            )
        return value

    @field_validator("algorithms")
    @classmethod
    def _no_none(cls, value: list[str]) -> list[str]:
        if any(alg.lower() == "none" or alg.upper().startswith("HS") for alg in value):
            raise ValueError("only asymmetric algorithms (RS*, PS*, ES*, EdDSA) are accepted")
        return value


class AccessSpec(BaseModel):
    """The `access:` block (A6): who the agent can verify over HTTP."""

    model_config = ConfigDict(extra="forbid")

    owner: str | None = None
    keys: dict[str, str] = Field(default_factory=dict)
    jwt: list[JwtIssuer] = Field(default_factory=list)
    channels: dict[str, str] = Field(default_factory=dict)

    @field_validator("owner")
    @classmethod
    def _owner(cls, value: str | None) -> str | None:
        return None if value is None else check_secret(value)

    @field_validator("keys")
    @classmethod
    def _keys(cls, value: dict[str, str]) -> dict[str, str]:
        for identity, secret in value.items():
            for prefix, kept_for in RESERVED_PREFIXES.items():
                if identity.startswith(prefix):
                    raise ValueError(
                        f"the identity {identity!r} starts with {prefix!r}, which is kept for "
                        f"{kept_for}: name the key's caller without it"
                    )
            check_secret(secret, what=f"the key of {identity!r}")
        return value

    @field_validator("jwt")
    @classmethod
    def _one_entry_per_issuer(cls, value: list[JwtIssuer]) -> list[JwtIssuer]:
        seen: set[str] = set()
        for entry in value:
            if entry.issuer in seen:
                raise ValueError(
                    f"the issuer {entry.issuer} is listed twice: give each issuer one entry"
                )
            seen.add(entry.issuer)
        return value

    @field_validator("channels")
    @classmethod
    def _channels(cls, value: dict[str, str]) -> dict[str, str]:
        for channel, secret in value.items():
            if not re.fullmatch(r"[a-z0-9][a-z0-9_-]{0,31}", channel):
                raise ValueError(f"channel type {channel!r} must be a short slug like telegram")
            check_secret(secret, what=f"the bridge key of {channel!r}")
        return value


class CompactionSpec(BaseModel):
    """The `compaction:` block (C1): when a long conversation is summarised.

    Plain data below the agent file that reads it, so that a skill (the memory skill's
    legacy setting) can take the same form without importing the loader."""

    model_config = ConfigDict(extra="forbid")

    threshold: int = Field(gt=0, description="prompt tokens that trigger a summary")
    keep: int | str = Field(
        default=6, description="recent conversation kept verbatim: N (messages) or 'N tokens'"
    )
    model: str | None = None
    instructions: str | None = None

    @field_validator("keep")
    @classmethod
    def _keep(cls, value: int | str) -> int | str:
        if isinstance(value, int):
            if value < 0:
                raise ValueError("keep must be 0 or more messages")
            return value
        if not re.fullmatch(r"\d+ (messages|tokens)", value.strip()):
            raise ValueError("keep must be a number of messages, or 'N messages' or 'N tokens'")
        return value.strip()

    @field_validator("model")
    @classmethod
    def _model(cls, value: str | None) -> str | None:
        if value is not None and not MODEL_NAME.fullmatch(value):
            raise ValueError("model must be openai/<model>")
        return value


@dataclass(frozen=True, slots=True)
class SkillEntry:
    """A skill as the agent file names it: `load_agent` builds the live skill from it."""

    name: str
    settings: Any
    """As written: a mapping ({} when none is given); the skill checks it when built."""
    line: int | None = None
    """Where the file names it, for the errors of its settings."""


@dataclass(frozen=True, slots=True)
class AgentSpec:
    path: Path
    name: str
    instructions: str
    description: str = ""
    model: str | None = None
    skills: tuple[SkillEntry, ...] = ()
    access: AccessSpec | None = None
    compaction: CompactionSpec | None = None

    @property
    def directory(self) -> Path:
        return self.path.parent
