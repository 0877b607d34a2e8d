"""Portal Connect on the owner's pages: the chat box that continues a chat on the web (P11)
and the agent's setting that lets other users call it (P12).

The chat box posts the next message (with the page's CSRF token) and reads the answer as a
stream of small events of the portal's own: `{"delta": text}` while the agent answers, then
`{"done": true, "html": the answer's Markdown rendered and sanitized}` once both messages are
recorded in the chat, or `{"error": message}`. The
agent's reply comes over the same relay as every other caller's (tier owner, channel web)."""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response, StreamingResponse
from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool

from ...portal_wire.chats import MAX_CONTENT_CHARS
from ..accounts.dependencies import SignedIn
from ..agents import service as agents
from ..agents.schemas import AgentPatch
from ..chats import service as chats
from ..chats.markdown import to_html
from ..chats.schemas import MAX_MESSAGE_CHARS, MessageIn, Part, RecordIn
from ..db.requests import Db
from ..errors import PortalError
from ..scope import AccountScope
from ..tokens.service import issuer_of
from ..web import FormSecrets, check_csrf, flash
from . import service
from .live import RelayError, Reply
from .relay import Relay

router = APIRouter(dependencies=[FormSecrets])

_SCRIPT = Path(__file__).with_name("chat.js")


@router.get("/connect/chat.js")
def chat_script() -> Response:
    return Response(
        _SCRIPT.read_text("utf-8"),
        media_type="text/javascript",
        headers={"Cache-Control": "no-cache"},
    )


@router.post("/agents/{agent_id}/connect")
async def set_allow_others(request: Request, user: SignedIn, db: Db, agent_id: str) -> Response:
    """The agent's page toggle: may other portal users call it at its public endpoint."""
    form = await request.form()
    check_csrf(request, str(form.get("csrf_token", "")))
    allowed = form.get("allow_others") == "on"
    await run_in_threadpool(
        agents.update_agent, db, user, agent_id, AgentPatch(allowOthers=allowed)
    )
    target = RedirectResponse(f"/agents/{agent_id}/chats", status_code=303)
    return flash(request, target, "access-saved")


@router.post("/agents/{agent_id}/chats/{chat_id}/continue")
async def continue_chat(
    request: Request, user: SignedIn, db: Db, agent_id: str, chat_id: str
) -> Response:
    form = await request.form()
    check_csrf(request, str(form.get("csrf_token", "")))
    relay: Relay = request.app.state.relay
    issuer = issuer_of(request.app.state.settings)
    message = str(form.get("message", ""))
    try:
        turn = await run_in_threadpool(
            service.for_web_chat, db, user, agent_id, chat_id, message, issuer
        )
        relayed = turn.relayed
        # The request's session ends before the agent is awaited: on SQLite it holds the
        # write lock, which no relay may keep (the turn is recorded in a short one after).
        await run_in_threadpool(db.commit)
        reply = await relay.send(relayed.agent_id, relayed.agent_name, relayed.assertion, turn.body)
    except PortalError as exc:
        return _events(iter([{"error": exc.message}]), exc.status)
    recorder = _Recorder(request.app.state.sessions, user, agent_id, chat_id, turn.session_id)
    return StreamingResponse(
        _relayed(reply, relay, recorder, message.strip()),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store"},
    )


def _event(data: dict[str, Any]) -> str:
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n"


def _events(events: Iterator[dict[str, Any]], status: int) -> Response:
    return Response(
        "".join(_event(event) for event in events),
        status_code=status,
        media_type="text/event-stream",
    )


class _Recorder:
    """Records the turn in the chat (the chats service, one short session)."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        user: AccountScope,
        agent_id: str,
        chat_id: str,
        session_id: str,
    ) -> None:
        self._sessions = sessions
        self._user = user
        self._agent_id = agent_id
        self._chat_id = chat_id
        self._session_id = session_id

    def record(self, question: str, answer: str | None) -> None:
        """The question and the answer (a long one in parts, one id); the question alone
        when there is no answer or the chat refuses it (the refusal is raised then)."""
        turn = uuid.uuid4().hex
        asked = MessageIn(role="user", content=question, id=f"web-{turn}-user")
        if answer is not None:
            try:
                self._record([asked, *_answer_parts(answer, f"web-{turn}-assistant")])
                return
            except PortalError:
                self._record([asked])
                raise
        self._record([asked])

    def _record(self, messages: list[MessageIn]) -> None:
        given = RecordIn(sessionId=self._session_id, chatId=self._chat_id, messages=messages)
        with self._sessions.begin() as db:
            chats.record(db, self._user, self._agent_id, given)


def _answer_parts(answer: str, message_id: str) -> list[MessageIn]:
    """The answer as one message, or in parts of at most MAX_CONTENT_CHARS (one id)."""
    if len(answer) <= MAX_CONTENT_CHARS:
        return [MessageIn(role="assistant", content=answer, id=message_id)]
    pieces = [answer[i : i + MAX_CONTENT_CHARS] for i in range(0, len(answer), MAX_CONTENT_CHARS)]
    return [
        MessageIn(
            role="assistant", content=piece, id=message_id, part=Part(index=n, of=len(pieces))
        )
        for n, piece in enumerate(pieces)
    ]


async def _relayed(
    reply: Reply, relay: Relay, recorder: _Recorder, question: str
) -> AsyncIterator[str]:
    answer: list[str] = []
    size = 0
    try:
        status, _headers = await reply.start(relay.first_frame_timeout)
        if status != 200:
            body = await reply.whole(relay.idle_timeout)
            yield _event({"error": f"the agent answered {status}: {_message_of(body)}"})
            return
        pending = ""
        async for chunk in reply.chunks(relay.idle_timeout):
            pending += chunk
            while "\n\n" in pending:
                event, pending = pending.split("\n\n", 1)
                for kind, text in _sse_parts(event):
                    if kind == "error":
                        yield _event({"error": text})
                        await run_in_threadpool(recorder.record, question, None)
                        return
                    size += len(text)
                    if size > MAX_MESSAGE_CHARS:
                        await run_in_threadpool(recorder.record, question, None)
                        yield _event(
                            {
                                "error": f"the answer passed the {MAX_MESSAGE_CHARS:,} "
                                "characters a chat message may hold: only the question "
                                "was recorded"
                            }
                        )
                        return
                    answer.append(text)
                    yield _event({"delta": text})
        whole = "".join(answer)
        await run_in_threadpool(recorder.record, question, whole)
        # The page shows the streamed text as text, then this: rendered and sanitized here.
        yield _event({"done": True, "html": to_html(whole)})
    except RelayError as exc:
        with contextlib.suppress(PortalError):  # the question is kept, the answer failed
            await run_in_threadpool(recorder.record, question, None)
        yield _event({"error": exc.message})
    except PortalError as exc:  # the chat could not take the turn
        yield _event({"error": f"the reply came but was not recorded: {exc.message}"})
    finally:
        reply.cancel()


def _sse_parts(event: str) -> Iterator[tuple[str, str]]:
    """The content deltas (and errors) of one SSE event of a chat completions stream."""
    for line in event.splitlines():
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            continue
        try:
            chunk = json.loads(data)
        except ValueError:
            continue
        if not isinstance(chunk, dict):
            continue
        if "error" in chunk:
            yield "error", _message_of(data)
            continue
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") if isinstance(choice, dict) else None
            content = delta.get("content") if isinstance(delta, dict) else None
            if isinstance(content, str) and content:
                yield "delta", content


def _message_of(body: str) -> str:
    try:
        error = json.loads(body).get("error")
        return str(error.get("message")) if isinstance(error, dict) else body[:500]
    except (ValueError, AttributeError):
        return body[:500]
