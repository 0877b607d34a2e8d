"""Who may be relayed to an agent, and as whom: the owner always (tier owner), another
portal user only where the owner allowed others (tier user); the assertion that says so."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from ..agents.access import tier_of
from ..agents.repository import PublicAgents
from ..chats import service as chats
from ..errors import BadInput, NotFound
from ..scope import AccountScope
from . import assertion

WEB_CHANNEL = "web"  # the owner's chat box on the portal's chat page
MAX_WEB_MESSAGE = 100_000


@dataclass(frozen=True)
class Relayed:
    """A request cleared for relaying: to which agent, and the assertion it carries."""

    agent_id: uuid.UUID
    agent_name: str
    assertion: str


def for_caller(db: Session, scope: AccountScope, name: str, issuer: str) -> Relayed:
    """A caller of the public endpoint (`/agents/<name>/chat/completions` and the rest)."""
    agent = PublicAgents(db).named(name)
    if agent is None:
        raise NotFound(f"there is no agent {name!r} on this portal: check the name in the URL")
    tier = tier_of(agent, scope)  # a 403 where the owner has not allowed others
    signed = assertion.sign(
        db,
        issuer=issuer,
        agent_id=agent.id,
        user_id=scope.user_id,
        username=scope.username,
        tier=tier,
    )
    return Relayed(agent.id, agent.name, signed)


@dataclass(frozen=True)
class WebTurn:
    """The owner's next message in a chat, with everything to relay and record it."""

    relayed: Relayed
    session_id: str
    body: dict[str, Any]


def for_web_chat(
    db: Session, scope: AccountScope, agent_id: str, chat_id: str, message: str, issuer: str
) -> WebTurn:
    """The chat so far and the new message as one streamed request, for the chat's owner
    (another user's agent or chat is a 404, as on the chat page)."""
    text = message.strip()
    if not text:
        raise BadInput("write a message before sending it", code="empty_message")
    if len(text) > MAX_WEB_MESSAGE:
        raise BadInput(
            f"a message is at most {MAX_WEB_MESSAGE} characters: send a shorter one",
            code="message_too_long",
        )
    agent, chat, history = chats.chat_of(db, scope, agent_id, chat_id)
    messages = [_for_model(message) for message in history]
    messages.append({"role": "user", "content": text})
    signed = assertion.sign(
        db,
        issuer=issuer,
        agent_id=agent.id,
        user_id=scope.user_id,
        username=scope.username,
        tier="owner",
        channel=WEB_CHANNEL,
    )
    return WebTurn(
        Relayed(agent.id, agent.name, signed),
        chat.session_id,
        {"messages": messages, "stream": True},
    )


def _for_model(message: dict[str, Any]) -> dict[str, Any]:
    """A recorded message as a chat completions message (the sender's id is the portal's)."""
    return {key: value for key, value in message.items() if key != "id"}
