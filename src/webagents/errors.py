"""The one exception tree of webagents. Every message says how to fix the problem."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pydantic import ValidationError


class WebAgentsError(Exception):
    """Root of every error webagents raises on purpose."""


class ConfigError(WebAgentsError):
    """A setting or the environment is missing or wrong."""


class AgentFileError(WebAgentsError):
    """An AGENT.md cannot be used; carries the file and, where known, the line."""

    def __init__(self, message: str, *, file: Path | str, line: int | None = None) -> None:
        self.file = Path(file)
        self.line = line
        self.reason = message
        where = f"{self.file}:{line}" if line is not None else str(self.file)
        super().__init__(f"{where}: {message}")


class SkillSettingsError(ConfigError):
    """A skill's settings were refused; the message lists the settings it takes."""


class ModelError(WebAgentsError):
    """The model endpoint failed or answered something unusable."""


class TurnLimitError(WebAgentsError):
    """The model kept calling tools past the agent's turn limit."""

    def __init__(self, max_turns: int) -> None:
        self.max_turns = max_turns
        super().__init__(
            f"the agent called the model {max_turns} times in one turn without a final answer; "
            f"raise max_turns (Agent(max_turns=...)) if the task needs more steps"
        )


class ToolError(WebAgentsError):
    """Raised by a tool to send a message back to the model instead of a result.

    The loop turns any exception from a tool into a tool message; raise this one when the
    message is meant for the model to act on ("key must be a slug: ...").
    """


def validation_problems(
    exc: ValidationError,
    *,
    unknown: Callable[[str], str],
    wrong: Callable[[str, str], str],
) -> str:
    """pydantic's errors as one line: `unknown(where)` for an unexpected field, else `wrong`."""
    problems = []
    for err in exc.errors():
        where = ".".join(str(part) for part in err["loc"])
        if err["type"] == "extra_forbidden":
            problems.append(unknown(where))
        else:
            problems.append(wrong(where, err["msg"].removeprefix("Value error, ")))
    return "; ".join(problems)


class CompactionError(WebAgentsError):
    """A conversation could not be summarised (the summary model failed or said nothing)."""
