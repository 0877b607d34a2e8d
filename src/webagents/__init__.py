"""webagents: agents whose memory is kept apart for every caller they serve."""

from ._loop import ToolCallFinished, ToolCallStarted, TurnResult
from .agent import Agent, Conversation
from .agent_file import load_agent
from .caller import Caller, CallerKind
from .context import AgentInfo, Context
from .errors import AgentFileError, ConfigError, ModelError, ToolError, WebAgentsError
from .model import Model, ModelRequest, ModelResponse, TextDelta, ToolCall, Usage
from .skills.base import Skill, Tool, tool

__version__ = "0.1.0"

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
