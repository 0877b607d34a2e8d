"""The HTTP server of `webagents serve` and `webagents daemon`."""

from .app import create_app
from .hosting import AgentHost, ServedAgent

__all__ = ["AgentHost", "ServedAgent", "create_app"]
