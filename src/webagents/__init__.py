"""webagents: agents whose memory is kept apart for every caller they serve.

The public names are loaded when first asked for (PEP 562): `from webagents import Agent`
imports the agent runtime then, and a process that needs none of it (the portal, `webagents
portal ...`, `webagents --help`) does not pay for it (about 0.25 s a process).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._loop import ToolCallFinished, ToolCallStarted, TurnResult
    from .agent import Agent, Conversation
    from .agent_file import load_agent
    from .caller import Caller, CallerKind
    from .context import AgentInfo, Context
    from .errors import AgentFileError, ConfigError, ModelError, ToolError, WebAgentsError
    from .model import Model, ModelRequest, ModelResponse, TextDelta, ToolCall, Usage
    from .skills.base import Skill, Tool, tool

__version__ = "0.1.0"

# Each public name and the module (relative to this package) it comes from.
_PUBLIC = {
    "ToolCallFinished": "._loop",
    "ToolCallStarted": "._loop",
    "TurnResult": "._loop",
    "Agent": ".agent",
    "Conversation": ".agent",
    "load_agent": ".agent_file",
    "Caller": ".caller",
    "CallerKind": ".caller",
    "AgentInfo": ".context",
    "Context": ".context",
    "AgentFileError": ".errors",
    "ConfigError": ".errors",
    "ModelError": ".errors",
    "ToolError": ".errors",
    "WebAgentsError": ".errors",
    "Model": ".model",
    "ModelRequest": ".model",
    "ModelResponse": ".model",
    "TextDelta": ".model",
    "ToolCall": ".model",
    "Usage": ".model",
    "Skill": ".skills.base",
    "Tool": ".skills.base",
    "tool": ".skills.base",
}


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # the next look-up does not come here
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_PUBLIC])


__all__ = [
    "Agent",
    "AgentFileError",
    "AgentInfo",
    "Caller",
    "CallerKind",
    "ConfigError",
    "Context",
    "Conversation",
    "Model",
    "ModelError",
    "ModelRequest",
    "ModelResponse",
    "Skill",
    "TextDelta",
    "Tool",
    "ToolCall",
    "ToolCallFinished",
    "ToolCallStarted",
    "ToolError",
    "TurnResult",
    "Usage",
    "WebAgentsError",
    "__version__",
    "load_agent",
    "tool",
]
