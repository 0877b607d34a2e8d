"""The owner's chat pages (P11, list and view): the user's chats with all their agents and
with one, newest first, and one chat's messages, tool calls and results shown compactly.

Signed-in browsers only (others go to the sign-in page); another user's agent or chat is the
404 page. A message's Markdown is rendered with raw HTML off and then sanitized
(chats/markdown.py): a message cannot add a script, a style or anything from elsewhere."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response
from markupsafe import Markup

from ..accounts.dependencies import SignedIn
from ..agents.service import get_agent
from ..db.requests import Db
from ..web import FormSecrets, allow_own_scripts, render
from . import service
from .markdown import to_html

router = APIRouter(dependencies=[FormSecrets])

PAGE_CHATS = 200
ARGUMENTS_SHOWN = 120  # a tool call's arguments on its one line
RESULT_SHOWN = 200  # a tool result's first characters on its one line


@dataclass(frozen=True)
class ToolCallShown:
    name: str
    line: str  # the arguments on one line, shortened
    arguments: str  # all of them, shown when the line is opened


@dataclass(frozen=True)
class MessageShown:
    role: str
    content: str
    name: str = ""
    result_line: str = ""  # a tool result, shortened; empty for other messages
    tool_calls: list[ToolCallShown] = field(default_factory=list)

    @property
    def html(self) -> Markup:
        """The content's Markdown, rendered and sanitized (chats/markdown.py)."""
        return Markup(to_html(self.content))


def _shorten(text: str, limit: int) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _call_shown(call: Any) -> ToolCallShown:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict):
        raw = json.dumps(call, ensure_ascii=False)
        return ToolCallShown("tool call", _shorten(raw, ARGUMENTS_SHOWN), raw)
    arguments = function.get("arguments", "")
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False)
    return ToolCallShown(
        str(function.get("name", "tool")), _shorten(arguments, ARGUMENTS_SHOWN), arguments
    )


def message_shown(message: dict[str, Any]) -> MessageShown:
    content = message.get("content") or ""
    calls = [_call_shown(call) for call in message.get("tool_calls") or []]
    result = _shorten(content, RESULT_SHOWN) if message["role"] == "tool" else ""
    return MessageShown(message["role"], content, str(message.get("name") or ""), result, calls)


@router.get("/chats", response_class=HTMLResponse)
def all_chats(request: Request, user: SignedIn, db: Db) -> Response:
    listed = service.all_conversations(db, user, PAGE_CHATS)
    return render(request, "chats.html", user=user, agent=None, chats=listed)


@router.get("/agents/{agent_id}/chats", response_class=HTMLResponse)
def agent_chats(request: Request, user: SignedIn, db: Db, agent_id: str) -> Response:
    agent = get_agent(db, user, agent_id)
    listed = [
        service.ChatListed(chat, agent.id, agent.name)
        for chat in service.conversations(db, user, agent_id, PAGE_CHATS)
    ]
    return render(request, "chats.html", user=user, agent=agent, chats=listed)


@router.get("/agents/{agent_id}/chats/{chat_id}", response_class=HTMLResponse)
def one_chat(request: Request, user: SignedIn, db: Db, agent_id: str, chat_id: str) -> Response:
    agent, chat, messages = service.chat_of(db, user, agent_id, chat_id)
    shown = [message_shown(message) for message in messages]
    page = render(request, "chat.html", user=user, agent=agent, chat=chat, messages=shown)
    return allow_own_scripts(page)  # the chat box (connect/chat.js)
