"""The `mcp` skill's settings: which MCP servers an agent uses, and how each is reached.

```yaml
skills:
  - mcp:
      servers:
        files: {command: [npx, -y, "@modelcontextprotocol/server-filesystem", /srv/docs]}
        tickets:
          url: https://tickets.example.com/mcp
          headers: {Authorization: env:TICKETS_TOKEN}
          callers: true
          timeout_seconds: 120     # one call may take this long (default 60)
```

A value of `env` or `headers` written `env:NAME` is read from the environment when the agent
is loaded, so a secret never has to be written in AGENT.md (as in `access:`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ...errors import ConfigError

SERVER_NAME = re.compile(r"^[A-Za-z0-9-]+(_[A-Za-z0-9-]+)*$")
"""A server's name prefixes its tools' (`NAME__tool`): no `__` inside it, so the first `__`
of a tool's name always ends the server's."""
_ENV_REFERENCE = re.compile(r"^env:([A-Za-z_][A-Za-z0-9_]*)$")
DEFAULT_TIMEOUT_SECONDS = 60.0
"""A server's `timeout_seconds` when its settings give none."""


class ServerSettings(BaseModel):
    """One MCP server: a command run on stdio, or a streamable HTTP URL."""

    model_config = ConfigDict(extra="forbid")

    command: list[str] | None = Field(default=None, min_length=1)
    env: dict[str, str] = Field(default_factory=dict)
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    callers: bool = False
    """Offer the server's tools to verified callers too, not only to the owner (rights.py)."""
    timeout_seconds: float = Field(default=DEFAULT_TIMEOUT_SECONDS, gt=0, le=86400)
    """How long one request to the server (a tool call, the list of its tools) may take: past
    it the call is a tool error and the server is stopped, to be started again for the next."""

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("url must be an http:// or https:// address of an MCP endpoint")
        return value

    @model_validator(mode="after")
    def _one_transport(self) -> ServerSettings:
        if (self.command is None) == (self.url is None):
            raise ValueError("give either command: [program, args...] or url: (not both)")
        if self.env and self.command is None:
            raise ValueError("env: is for a command's server; a url's takes headers:")
        if self.headers and self.url is None:
            raise ValueError("headers: are for a url's server; a command's takes env:")
        return self

    @property
    def where(self) -> str:
        """The server as its owner would recognise it in an error message."""
        return self.url if self.url is not None else " ".join(self.command or ())


class McpSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    servers: dict[str, ServerSettings] = Field(min_length=1)

    @field_validator("servers")
    @classmethod
    def _names(cls, servers: dict[str, ServerSettings]) -> dict[str, ServerSettings]:
        for name in servers:
            if not SERVER_NAME.fullmatch(name):
                raise ValueError(
                    f"server name {name!r}: letters, digits, - and single _ only (it prefixes "
                    "the server's tools as NAME__tool)"
                )
        return servers


def resolved(server: str, what: str, values: Mapping[str, str]) -> dict[str, str]:
    """`values` with every `env:NAME` read from the environment; a variable not set is a
    ConfigError that names the server, the setting and the variable."""
    out: dict[str, str] = {}
    for key, value in values.items():
        reference = _ENV_REFERENCE.fullmatch(value)
        if reference is None:
            out[key] = value
            continue
        found = os.environ.get(reference.group(1))
        if not found:
            raise ConfigError(
                f"skill 'mcp': server {server!r}: {what} {key} is {value}, but the environment "
                f"variable {reference.group(1)} is not set"
            )
        out[key] = found
    return out
