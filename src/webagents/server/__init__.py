"""The HTTP server of `webagents serve` and `webagents daemon`.

`create_app`, `AgentHost` and `ServedAgent` are loaded when first asked for (PEP 562): the
portal imports `server.api_errors` alone, and would otherwise load the agent's whole server
(its MCP endpoint's SDK included, about 0.5 s a process).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .app import create_app
    from .hosting import AgentHost, ServedAgent

_PUBLIC = {"create_app": ".app", "AgentHost": ".hosting", "ServedAgent": ".hosting"}


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


__all__ = ["AgentHost", "ServedAgent", "create_app"]
