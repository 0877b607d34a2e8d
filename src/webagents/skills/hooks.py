"""What a skill's hooks receive of a turn and a conversation, as small protocols.

The agent's `Conversation` and the loop's `TurnResult` satisfy them; skills name these
instead, so that no skill imports the agent or the loop that call it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ..compaction import Summary
    from ..context import Context
    from ..model import Message, Usage


class FinishedTurn(Protocol):
    """A turn that ended with a final answer."""

    @property
    def output(self) -> str: ...

    @property
    def messages(self) -> Sequence[Message]:
        """The assistant and tool messages of the turn, in order (not the user's input)."""
        ...

    @property
    def usage(self) -> Usage:
        """Tokens over every model call of the turn."""
        ...


class ConversationView(Protocol):
    """One caller's conversation, as the skills that keep conversations see it."""

    @property
    def ctx(self) -> Context: ...

    @property
    def system_prompt(self) -> str: ...

    @property
    def messages(self) -> Sequence[Message]:
        """Everything after the system prompt (never compacted)."""
        ...

    @property
    def summary(self) -> Summary | None: ...

    @property
    def replaces_kept(self) -> bool:
        """The caller gave the conversation whole: its next keep replaces what is kept."""
        ...
