"""Chats over the API (SPEC P9), for the user's access token (`webagents login`) or API key:
`POST/GET /api/agents/{id}/conversations`, `GET /api/agents/{id}/conversations/{chatId}`."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from ...portal_wire.chats import ChatMessages, Conversations, Recorded
from ..accounts.dependencies import ApiCaller
from ..db.requests import Db
from . import service
from .schemas import (
    LIST_LIMIT_DEFAULT,
    LIST_LIMIT_MAX,
    RecordIn,
)

router = APIRouter(prefix="/api/agents/{agent_id}/conversations")


@router.post("")
def record(scope: ApiCaller, db: Db, agent_id: str, body: RecordIn) -> Recorded:
    """Records turns as given: the agent is not asked to answer, and no one is notified."""
    return Recorded(chatId=service.record(db, scope, agent_id, body))


@router.get("")
def conversations(
    scope: ApiCaller,
    db: Db,
    agent_id: str,
    limit: Annotated[int, Query(ge=1, le=LIST_LIMIT_MAX)] = LIST_LIMIT_DEFAULT,
) -> Conversations:
    return Conversations(conversations=service.conversations(db, scope, agent_id, limit))


@router.get("/{chat_id}")
def messages(scope: ApiCaller, db: Db, agent_id: str, chat_id: str) -> ChatMessages:
    return ChatMessages(messages=service.messages(db, scope, agent_id, chat_id))
