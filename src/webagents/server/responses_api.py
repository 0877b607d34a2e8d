"""OpenAI's Responses API on `serve` and `daemon`, kept in the session skill's conversations.

A conversation id is a session id (the chat's `/resume` lists it like any other); a response
id names one turn of it (kept_responses.py). Every read and write is of the verified caller's
own conversations: another caller's ids answer 404 exactly like unknown ones. An anonymous
caller's responses are not kept: the answer says `store: false` (as it does where the agent
has no session skill), and a conversation cannot be made for them (400). Continuing from a
response that is not its conversation's latest would branch it, which is not offered: 409,
naming the latest response to continue from. Reading and deleting what is kept is
conversations_api.py's.
"""

from __future__ import annotations

import inspect
import re
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from .._loop import TurnResult
from ..agent import Conversation
from ..caller import Caller
from ..model import Message, TextDelta
from ..rights import rights_of
from ..sessions import SessionConflict
from ..skills.session import SessionSkill
from .api_errors import ApiError
from .conversations_api import (
    conversation_items,
    create_conversation,
    delete_conversation,
    delete_response,
    get_conversation,
    kept_conversation,
    kept_point,
    response_input_items,
    retrieve_response,
    unknown,
)
from .hosting import AgentHost, ServedAgent
from .kept_responses import (
    latest_id,
    locate,
    response_id,
    unkept_response_id,
)
from .openai_api import parse_json
from .responses_request import (
    ResponsesRequest,
    input_messages,
    validate_responses_request,
)
from .responses_wire import Events, ResponseShape
from .streaming import ClientGone, EventStream, until_disconnected
from .turn_errors import run_turn, runtime_error
from .verified import agent_named, verify


def install_responses(app: FastAPI, host: AgentHost) -> None:
    """The Responses and Conversations routes, at /v1 and under /agents/<name>/."""
    reads: list[tuple[str, str, Read]] = [
        ("GET", "/responses/{response}", retrieve_response),
        ("DELETE", "/responses/{response}", delete_response),
        ("GET", "/responses/{response}/input_items", response_input_items),
        ("POST", "/conversations", create_conversation),
        ("GET", "/conversations/{conversation}", get_conversation),
        ("DELETE", "/conversations/{conversation}", delete_conversation),
        ("GET", "/conversations/{conversation}/items", conversation_items),
    ]
    for prefix in ("/v1", "/agents/{name}"):
        path = f"{prefix}/responses"
        app.add_api_route(path, _route(host, path, None), methods=["POST"])
        for method, route, read in reads:
            path = prefix + route
            app.add_api_route(path, _route(host, path, read), methods=[method])


Read = Callable[..., Awaitable[Any]]
"""`read(request, served, caller, *the path's ids)`."""


def _route(host: AgentHost, path: str, read: Read | None) -> Any:
    """A FastAPI endpoint that finds the agent and verifies the caller, then runs `read`
    (None: the turn, POST /responses)."""

    async def route(request: Request, **params: str) -> Any:
        name = params.pop("name", None)
        if read is None:
            data = parse_json(await request.body())
            model = data.get("model")
            if name is None and host.sole is None and isinstance(model, str) and model:
                name = model  # several agents: `model` picks one, as for Chat Completions
            served, caller = await _served_for(host, request, name)
            return await _answer(request, served, caller, validate_responses_request(data))
        served, caller = await _served_for(host, request, name)
        return await read(request, served, caller, *params.values())

    # The path's parameters, declared so that the schema (and its fuzzing) names them.
    request = inspect.Parameter("request", inspect.Parameter.KEYWORD_ONLY, annotation=Request)
    params = [
        inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, annotation=str)
        for n in re.findall(r"{(\w+)}", path)
    ]
    route.__signature__ = inspect.Signature([request, *params])  # type: ignore[attr-defined]
    return route


async def _served_for(
    host: AgentHost, request: Request, name: str | None
) -> tuple[ServedAgent, Caller]:
    """The agent the path (or the one served) names, and the caller it verifies."""
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


async def _answer(
    request: Request, served: ServedAgent, caller: Caller, body: ResponsesRequest
) -> Any:
    new = input_messages(body)
    keeps = body.store and _keeps(served, caller)
    continuing = body.previous_response_id is not None or body.conversation is not None
    session_id: str | None = None
    if keeps:
        session_id = body.conversation_id
        if body.previous_response_id is not None:
            session_id = await _response_session(served, caller, body.previous_response_id)
        elif session_id is None:
            session_id = f"conv_{secrets.token_hex(16)}"
        elif body.conversation is not None:
            await kept_conversation(
                served, caller, session_id
            )  # made by POST /v1/conversations first
    elif continuing:
        raise unknown(body.previous_response_id or body.conversation_id or "")
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
    except SessionConflict:  # said here, with where this API reads what went on
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


async def _response_session(served: ServedAgent, caller: Caller, response: str) -> str:
    found = await kept_point(served, caller, response)
    return found[2].session_id


def _check_latest(namespace: str, conversation: Conversation, response: str) -> None:
    messages = conversation.messages
    session_id = conversation.ctx.conversation_id or ""
    if locate(namespace, response, messages) is None:
        raise unknown(response)
    latest = latest_id(namespace, session_id, messages)
    if latest != response:
        raise ApiError(
            409,
            f"response {response!r} is not the latest of its conversation, and branching a "
            f"conversation is not offered: continue from its latest response "
            f"(previous_response_id={latest!r}), or with conversation={session_id!r}",
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
