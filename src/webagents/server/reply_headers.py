"""What a served reply's headers say about how its request was taken (docs/serving.md).

`X-Webagents-Session`, on every answered request: whether the conversation is kept, and
where, or why not. `X-Webagents-Ignored`: the request's options the agent does not apply.
`X-Webagents-Client-System`: a client's system message was framed as the caller's text.
Nothing a client sends is dropped or reinterpreted without one of these saying so.
"""

from __future__ import annotations

import re

from ..agent import Conversation
from ..caller import CallerKind
from .openai_api import ChatRequest

SESSION = "X-Webagents-Session"
IGNORED = "X-Webagents-Ignored"
CLIENT_SYSTEM = "X-Webagents-Client-System"

KEPT = "kept; where=local"
"""On the serving machine, under its ~/.webagents/sessions (the owner's with the chat's)."""


def session_state(conversation: Conversation, chat: ChatRequest) -> str:
    """`kept; where=local`, or `not-kept; reason=...` with the first reason that applies."""
    if conversation.ctx.kept:
        return KEPT
    if chat.session_id is None:
        reason = "no-session-id"
    elif conversation.agent.skill("session") is None:
        reason = "no-session-skill"
    elif conversation.ctx.caller.kind is CallerKind.ANONYMOUS:
        reason = "anonymous"
    else:
        reason = "identity-names-no-namespace"  # A2: verified, but keeps nothing
    return f"not-kept; reason={reason}"


def ignored_options(chat: ChatRequest) -> list[str]:
    """The request's top-level fields the agent does not apply (temperature, max_tokens, ...).

    The agent's model settings are its owner's (AGENT.md), and one answer may be several
    model calls; a field sent as null asks for nothing and is not listed.
    """
    return sorted(key for key, value in (chat.model_extra or {}).items() if value is not None)


def _listed(names: list[str]) -> str:
    """Names fit for a header: plain ones, at most a few; the rest counted, never echoed
    (a field name is the client's text: it may hold a line break or any character)."""
    plain = [n for n in names if _PLAIN_NAME.fullmatch(n)][:MAX_LISTED]
    rest = len(names) - len(plain)
    return ", ".join(plain + ([f"+{rest} more"] if rest else []))


_PLAIN_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
MAX_LISTED = 16


def reply_headers(conversation: Conversation, chat: ChatRequest) -> dict[str, str]:
    headers = {SESSION: session_state(conversation, chat)}
    ignored = ignored_options(chat)
    if ignored:
        headers[IGNORED] = _listed(ignored)
    if any(message.role in ("system", "developer") for message in chat.messages):
        headers[CLIENT_SYSTEM] = "framed-as-caller"
    return headers
