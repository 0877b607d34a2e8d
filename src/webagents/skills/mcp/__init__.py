"""The `mcp` skill: MCP servers' tools for an agent (docs/mcp.md)."""

from .settings import McpSettings
from .skill import McpSkill

__all__ = ["McpSettings", "McpSkill"]
