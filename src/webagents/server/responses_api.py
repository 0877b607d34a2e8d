"""OpenAI's Responses API on `serve` and `daemon`, kept in the session skill's conversations.

A conversation id is a session id (the chat's `/resume` lists it like any other); a response
id names one turn of it (kept_responses.py). Every read and write is of the verified caller's
own conversations: another caller's ids answer 404 exactly like unknown ones. An anonymous
caller's responses are not kept: the answer says `store: false` (as it does where the agent
has no session skill), and a conversation cannot be made for them (400). Continuing from a
response that is not its conversation's latest would branch it, which is not offered: 409,
naming the latest response to continue from.
"""

from __future__ import annotations

import asyncio
import inspect
import re
import secrets
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from .._loop import TurnResult
from ..agent import Conversation
from ..caller import Caller
from ..context import is_conversation_id
from ..model import Message, TextDelta
from ..rights import rights_of
from ..skills.session import LocalSessionStore, SessionConflict, SessionFile, SessionSkill
from ..skills.session.session_file import new_session
from .api_errors import ApiError
from .hosting import AgentHost, ServedAgent
from .kept_responses import (
    Point,
    latest_id,
    locate,
    parse_response_id,
    previous_id,
    reply_text,
    response_id,
    unkept_response_id,
)
from .openai_api import parse_json
from .responses_request import (
    InputItem,
    ResponsesRequest,
    input_messages,
    validate_responses_request,
)
from .responses_wire import Events, ResponseShape, item_list
from .streaming import ClientGone, EventStream, until_disconnected
from .turn_errors import run_turn, runtime_error
from .verified import agent_named, verify


def install_responses(app: FastAPI, host: AgentHost) -> None:
    """The Responses and Conversations routes, at /v1 and under /agents/<name>/."""

    async def served_for(request: Request, name: str | None) -> tuple[ServedAgent, Caller]:
        if name is not None:
            served = await agent_named(host, request, name)
        elif host.sole is not None:
            served = host.sole
        else:
            raise ApiError(
                400,
                "several agents are served here: send this request under /agents/<name>/ "
                "(as the client's base_url)",
                "agent_required",
            )
        return served, await verify(served, request)

    async def create(request: Request, name: str | None) -> Any:
        data = parse_json(await request.body())
        model = data.get("model")
        if name is None and host.sole is None and isinstance(model, str) and model:
            name = model  # several agents: `model` picks one, as for Chat Completions
        served, caller = await served_for(request, name)
        return await _answer(request, served, caller, validate_responses_request(data))

    async def retrieve(request: Request, name: str | None, response: str) -> Any:
        served, caller = await served_for(request, name)
        kept = await _kept_point(served, caller, response)
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

    async def input_items(request: Request, name: str | None, response: str) -> Any:
        served, caller = await served_for(request, name)
        _, session, point = await _kept_point(served, caller, response)
        shown = session["messages"][point.start : point.input_end]
        return item_list(shown, point.start, **_paging(request))

    async def delete_response(request: Request, name: str | None, response: str) -> Any:
        served, caller = await served_for(request, name)
        namespace, session, point = await _kept_point(served, caller, response)
        store = _store(served)
        if latest_id(namespace, session["id"], session["messages"]) != response:
            raise _not_latest(namespace, session, response)
        await asyncio.to_thread(_truncate, store, namespace, session["id"], point)
        return {"id": response, "object": "response.deleted", "deleted": True}

    async def create_conversation(request: Request, name: str | None) -> Any:
        served, caller = await served_for(request, name)
        data = parse_json(await request.body() or b"{}")
        namespace = _namespace(served, caller)
        items = data.get("items") or []
        if not isinstance(items, list):
            raise ApiError(
                400, "invalid request: items: a list of message items", "invalid_request"
            )
        try:
            messages = [_item_message(InputItem.model_validate(i)) for i in items]
        except ValueError as exc:
            raise ApiError(400, f"invalid request: items: {exc}", "invalid_request") from None
        session = new_session(f"conv_{secrets.token_hex(16)}", served.name, messages)
        store = _store(served)
        await asyncio.to_thread(store.admit, namespace)
        await asyncio.to_thread(store.save, namespace, session)
        return _conversation(session)

    async def get_conversation(request: Request, name: str | None, conversation: str) -> Any:
        served, caller = await served_for(request, name)
        return _conversation(await _kept(served, caller, conversation))

    async def delete_conversation(request: Request, name: str | None, conversation: str) -> Any:
        served, caller = await served_for(request, name)
        await _kept(served, caller, conversation)  # 404 alike for unknown and another's
        await asyncio.to_thread(_store(served).remove, _namespace(served, caller), conversation)
        return {"id": conversation, "object": "conversation.deleted", "deleted": True}

    async def conversation_items(request: Request, name: str | None, conversation: str) -> Any:
        served, caller = await served_for(request, name)
        session = await _kept(served, caller, conversation)
        return item_list(session["messages"], 0, **_paging(request))

    routes = [
        ("POST", "/responses", create),
        ("GET", "/responses/{response}", retrieve),
        ("DELETE", "/responses/{response}", delete_response),
        ("GET", "/responses/{response}/input_items", input_items),
        ("POST", "/conversations", create_conversation),
        ("GET", "/conversations/{conversation}", get_conversation),
        ("DELETE", "/conversations/{conversation}", delete_conversation),
        ("GET", "/conversations/{conversation}/items", conversation_items),
    ]
    for prefix in ("/v1", "/agents/{name}"):
        for method, path, handler in routes:
            app.add_api_route(prefix + path, _route(handler, prefix + path), methods=[method])


def _route(handler: Any, path: str) -> Any:
    """`handler(request, agent name or None, *the path's ids)` as a FastAPI endpoint."""

    async def route(request: Request, **params: str) -> Any:
        name = params.pop("name", None)
        return await handler(request, name, *params.values())

    # The path's parameters, declared so that the schema (and its fuzzing) names them.
    request = inspect.Parameter("request", inspect.Parameter.KEYWORD_ONLY, annotation=Request)
    params = [
        inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, annotation=str)
        for n in re.findall(r"{(\w+)}", path)
    ]
    route.__signature__ = inspect.Signature([request, *params])  # type: ignore[attr-defined]
    return route


async def _answer(
    request: Request, served: ServedAgent, caller: Caller, body: ResponsesRequest
) -> Any:
    new = input_messages(body)
    keeps = body.store and _keeps(served, caller)
    continuing = body.previous_response_id is not None or body.conversation is not None
    if continuing and not body.store:
        raise ApiError(
            400,
            "store: false cannot continue a kept conversation (what it added would not be "
            "kept); send store: true, or the whole conversation as input without an id",
            "invalid_request",
        )
    session_id: str | None = None
    if keeps:
        session_id = body.conversation_id
        if body.previous_response_id is not None:
            session_id = await _response_session(served, caller, body.previous_response_id)
        elif session_id is None:
            session_id = f"conv_{secrets.token_hex(16)}"
        elif body.conversation is not None:
            await _kept(served, caller, session_id)  # made by POST /v1/conversations first
    elif continuing:
        raise _unknown(body.previous_response_id or body.conversation_id or "")
    conversation = await run_turn(
        served.agent.start(caller=caller, conversation_id=session_id, metadata=body.metadata or {})
    )
    namespace = rights_of(caller).conversations or ""
    if body.previous_response_id is not None:
        _check_latest(namespace, conversation, body.previous_response_id)
    conversation.messages.extend(new[:-1])
    kept = keeps and conversation.ctx.kept and session_id is not None
    shape = ResponseShape(
        id=(
            response_id(namespace, session_id, [*conversation.messages, new[-1]], len(new))
            if kept and session_id is not None
            else unkept_response_id()
        ),
        model=served.name,
        store=kept,
        previous_response_id=body.previous_response_id,
        conversation_id=session_id if kept else None,
        instructions=body.instructions,
        metadata=body.metadata or {},
    )
    if body.stream:
        return EventStream(_events(conversation, new[-1], Events(shape)))
    try:
        result = await until_disconnected(request, run_turn(_send(conversation, new[-1])))
    except ClientGone:
        return JSONResponse({}, status_code=499)  # nobody is listening any more
    return shape.body("completed", result.output, result.usage)


async def _send(conversation: Conversation, message: Message) -> TurnResult:
    try:
        return await conversation.send(message)
    except SessionConflict:  # said here: the shared errors call it a damaged file
        raise _went_on(conversation.ctx.conversation_id or "") from None


async def _events(
    conversation: Conversation, message: Message, events: Events
) -> AsyncIterator[bytes]:
    for opening in events.opening():
        yield opening
    try:
        result: TurnResult | None = None
        async for event in conversation.stream(message):
            if isinstance(event, TextDelta):
                yield events.delta(event.text)
            elif isinstance(event, TurnResult):
                result = event
        assert result is not None  # the loop ends with a TurnResult or raises
        for closing in events.closing(result.output, result.usage):
            yield closing
    except SessionConflict:
        yield events.failed(_went_on(conversation.ctx.conversation_id or ""))
    except Exception as exc:
        yield events.failed(runtime_error(exc))


def _keeps(served: ServedAgent, caller: Caller) -> bool:
    return served.agent.skill(SessionSkill.name) is not None and (
        rights_of(caller).conversations is not None
    )


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


async def _kept(served: ServedAgent, caller: Caller, conversation: str) -> SessionFile:
    """The caller's kept conversation, or the same 404 for an unknown one and another's."""
    namespace = rights_of(caller).conversations
    skill = served.agent.skill(SessionSkill.name)
    if namespace is None or not isinstance(skill, SessionSkill):
        raise _unknown(conversation, "conversation")
    if not is_conversation_id(conversation):
        raise _unknown(conversation, "conversation")
    try:
        found = await asyncio.to_thread(skill.store.load, namespace, conversation)
    except Exception as exc:
        raise runtime_error(exc) from exc
    if found is None:
        raise _unknown(conversation, "conversation")
    return found


async def _response_session(served: ServedAgent, caller: Caller, response: str) -> str:
    found = await _kept_point(served, caller, response)
    return found[2].session_id


async def _kept_point(
    served: ServedAgent, caller: Caller, response: str
) -> tuple[str, SessionFile, Point]:
    parsed = parse_response_id(response)
    namespace = rights_of(caller).conversations
    if parsed is None or namespace is None:
        raise _unknown(response)
    session = await _kept_or_unknown(served, caller, parsed[0].session_id, response)
    point = locate(namespace, response, session["messages"])
    if point is None:
        raise _unknown(response)
    return namespace, session, point


async def _kept_or_unknown(
    served: ServedAgent, caller: Caller, session_id: str, response: str
) -> SessionFile:
    try:
        return await _kept(served, caller, session_id)
    except ApiError as exc:
        if exc.status == 404:
            raise _unknown(response) from None
        raise


def _check_latest(namespace: str, conversation: Conversation, response: str) -> None:
    messages = conversation.messages
    session_id = conversation.ctx.conversation_id or ""
    if locate(namespace, response, messages) is None:
        raise _unknown(response)
    latest = latest_id(namespace, session_id, messages)
    if latest != response:
        raise ApiError(
            409,
            f"response {response!r} is not the latest of its conversation, and branching a "
            f"conversation is not offered: continue from its latest response "
            f"(previous_response_id={latest!r}), or with conversation={session_id!r}",
            "not_latest",
        )


def _not_latest(namespace: str, session: SessionFile, response: str) -> ApiError:
    latest = latest_id(namespace, session["id"], session["messages"])
    return ApiError(
        409,
        f"response {response!r} is not the latest of its conversation: only the latest "
        f"({latest!r}) can be deleted, or the whole conversation "
        f"(DELETE /v1/conversations/{session['id']})",
        "not_latest",
    )


def _went_on(session_id: str) -> ApiError:
    return ApiError(
        409,
        f"the conversation {session_id!r} went on meanwhile (another request added a turn), "
        "so this turn was not kept: continue from its latest response "
        f"(GET /v1/conversations/{session_id}/items shows it)",
        "conversation_changed",
    )


def _unknown(what: str, kind: str = "response") -> ApiError:
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
