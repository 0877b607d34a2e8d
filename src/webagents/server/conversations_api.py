"""Kept responses and conversations read and deleted (OpenAI's `GET`/`DELETE
/v1/responses/{id}`, `.../input_items`, and `/v1/conversations`), over the session skill's
files: every read and write is of the verified caller's own conversations, and another
caller's ids answer 404 exactly like unknown ones. The turn itself is responses_api.py's."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

from fastapi import Request

from ..caller import Caller
from ..context import is_conversation_id
from ..model import Message
from ..rights import rights_of
from ..sessions import LocalSessionStore, SessionFile
from ..sessions.session_file import new_session
from ..skills.session import SessionSkill
from .api_errors import ApiError
from .hosting import ServedAgent
from .kept_responses import Point, latest_id, locate, parse_response_id, previous_id, reply_text
from .openai_api import parse_json
from .responses_request import InputItem
from .responses_wire import ResponseShape, item_list
from .turn_errors import run_turn

T = TypeVar("T")


async def retrieve_response(
    request: Request, served: ServedAgent, caller: Caller, response: str
) -> Any:
    kept = await kept_point(served, caller, response)
    namespace, session, point = kept
    messages = session["messages"]
    shape = ResponseShape(
        id=response,
        model=served.name,
        store=True,
        previous_response_id=previous_id(namespace, session["id"], messages, point),
        conversation_id=session["id"],
        created_at=_epoch(session["created"]),
    )
    return shape.body("completed", reply_text(messages, point))


async def response_input_items(
    request: Request, served: ServedAgent, caller: Caller, response: str
) -> Any:
    _, session, point = await kept_point(served, caller, response)
    shown = session["messages"][point.start : point.input_end]
    return item_list(shown, point.start, **_paging(request))


async def delete_response(
    request: Request, served: ServedAgent, caller: Caller, response: str
) -> Any:
    namespace, session, point = await kept_point(served, caller, response)
    store = _store(served)
    if latest_id(namespace, session["id"], session["messages"]) != response:
        raise _not_latest(namespace, session, response)
    await _stored(_truncate, store, namespace, session["id"], point)
    return {"id": response, "object": "response.deleted", "deleted": True}


async def create_conversation(request: Request, served: ServedAgent, caller: Caller) -> Any:
    data = parse_json(await request.body() or b"{}")
    namespace = _namespace(served, caller)
    items = data.get("items") or []
    if not isinstance(items, list):
        raise ApiError(400, "invalid request: items: a list of message items", "invalid_request")
    try:
        messages = [_item_message(InputItem.model_validate(i)) for i in items]
    except ValueError as exc:
        raise ApiError(400, f"invalid request: items: {exc}", "invalid_request") from None
    session = new_session(f"conv_{secrets.token_hex(16)}", served.name, messages)
    store = _store(served)
    await _stored(store.admit, namespace)
    await _stored(store.save, namespace, session)
    return _conversation(session)


async def get_conversation(
    request: Request, served: ServedAgent, caller: Caller, conversation: str
) -> Any:
    return _conversation(await kept_conversation(served, caller, conversation))


async def delete_conversation(
    request: Request, served: ServedAgent, caller: Caller, conversation: str
) -> Any:
    await kept_conversation(served, caller, conversation)  # 404 alike for unknown and another's
    await _stored(_store(served).remove, _namespace(served, caller), conversation)
    return {"id": conversation, "object": "conversation.deleted", "deleted": True}


async def conversation_items(
    request: Request, served: ServedAgent, caller: Caller, conversation: str
) -> Any:
    session = await kept_conversation(served, caller, conversation)
    return item_list(session["messages"], 0, **_paging(request))


def _store(served: ServedAgent) -> LocalSessionStore:
    skill = served.agent.skill(SessionSkill.name)
    if not isinstance(skill, SessionSkill):
        raise ApiError(
            400,
            f"agent {served.name!r} keeps no conversations (its AGENT.md has no session "
            "skill: add `- session` under skills:)",
            "not_kept",
        )
    return skill.store


def _namespace(served: ServedAgent, caller: Caller) -> str:
    _store(served)  # an agent that keeps nothing says so first
    namespace = rights_of(caller).conversations
    if namespace is None:
        raise ApiError(
            400,
            "conversations are kept only for verified callers, and this request's caller is "
            "anonymous: send the API key the agent's owner gave you (Authorization: Bearer)",
            "not_kept",
        )
    return namespace


async def kept_conversation(served: ServedAgent, caller: Caller, conversation: str) -> SessionFile:
    """The caller's kept conversation, or the same 404 for an unknown one and another's."""
    namespace = rights_of(caller).conversations
    skill = served.agent.skill(SessionSkill.name)
    if namespace is None or not isinstance(skill, SessionSkill):
        raise unknown(conversation, "conversation")
    if not is_conversation_id(conversation):
        raise unknown(conversation, "conversation")
    found = await _stored(skill.store.load, namespace, conversation)
    if found is None:
        raise unknown(conversation, "conversation")
    return found


async def kept_point(
    served: ServedAgent, caller: Caller, response: str
) -> tuple[str, SessionFile, Point]:
    parsed = parse_response_id(response)
    namespace = rights_of(caller).conversations
    if parsed is None or namespace is None:
        raise unknown(response)
    session = await _kept_or_unknown(served, caller, parsed[0].session_id, response)
    point = locate(namespace, response, session["messages"])
    if point is None:
        raise unknown(response)
    return namespace, session, point


async def _kept_or_unknown(
    served: ServedAgent, caller: Caller, session_id: str, response: str
) -> SessionFile:
    try:
        return await kept_conversation(served, caller, session_id)
    except ApiError as exc:
        if exc.status == 404:
            raise unknown(response) from None
        raise


def _not_latest(namespace: str, session: SessionFile, response: str) -> ApiError:
    latest = latest_id(namespace, session["id"], session["messages"])
    return ApiError(
        409,
        f"response {response!r} is not the latest of its conversation: only the latest "
        f"({latest!r}) can be deleted, or the whole conversation "
        f"(DELETE /v1/conversations/{session['id']})",
        "not_latest",
    )


def unknown(what: str, kind: str = "response") -> ApiError:
    return ApiError(
        404,
        f"no {kind} {what!r} is kept for you (ids are each caller's own; an anonymous "
        "caller's are not kept)",
        "not_found",
    )


def _truncate(store: LocalSessionStore, namespace: str, session_id: str, point: Point) -> None:
    found = store.open(namespace, session_id)
    if found is None:
        return
    session, version = found
    session = session.copy()
    session["messages"] = session["messages"][: point.start]
    compaction = session.get("compaction")
    if compaction is not None and compaction.get("covers", 0) > point.start:
        session.pop("compaction")
    store.save(namespace, session, since=version, replace=True)


def _item_message(item: InputItem) -> Message:
    if item.role not in ("user", "assistant"):
        raise ValueError("a conversation starts with user and assistant messages only")
    return {"role": item.role, "content": item.text()}


def _conversation(session: SessionFile) -> dict[str, Any]:
    return {
        "id": session["id"],
        "object": "conversation",
        "created_at": _epoch(session["created"]),
        "metadata": {},
    }


def _epoch(iso: str) -> int:
    try:
        return int(datetime.fromisoformat(iso).timestamp())
    except ValueError:
        return 0


def _paging(request: Request) -> dict[str, Any]:
    query = request.query_params
    order = query.get("order", "desc")
    raw_limit = query.get("limit", "20")
    if order not in ("asc", "desc") or not raw_limit.isdigit() or not 1 <= int(raw_limit) <= 100:
        raise ApiError(
            400,
            "invalid request: order is asc or desc, limit 1-100",
            "invalid_request",
        )
    return {"after": query.get("after"), "limit": int(raw_limit), "order": order}


async def _stored(work: Callable[..., T], *args: Any) -> T:
    """`work(*args)` on the store, off the event loop; its failures told as a turn's are (a
    limit, a full disk, a damaged file), never as a 500 with internals."""
    return await run_turn(asyncio.to_thread(work, *args))
