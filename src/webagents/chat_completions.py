"""The client of any OpenAI-compatible Chat Completions endpoint: `OpenAIModel`.

Messages are already in the wire format, so a call posts them as they are and reads the
reply as JSON (or as server-sent events when streaming), over one keep-alive httpx client per
event loop. It retries what is worth retrying (connection failures, 408, 409, 429, 5xx) with
a short backoff, and turns every failure into a `ModelError` that says what to check.

Why not the official `openai` client: its typed request building and pydantic replies cost
about 1 ms a call and several a streamed call on top of the HTTP request (bench/README.md),
on the hot path of every turn; the wire format is all this needs.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
from collections.abc import AsyncIterator
from typing import Any, ClassVar, NamedTuple

import httpx

from .errors import ConfigError, ModelError
from .model import (
    Model,
    ModelRequest,
    ModelResponse,
    TextDelta,
    ToolCall,
    Usage,
    json_kind,
)

NO_ENDPOINT = (
    "no model endpoint is configured: set OPENAI_API_KEY (for OpenAI) or OPENAI_BASE_URL "
    "(for a compatible server such as vLLM, Ollama or llama.cpp)"
)
OPENAI_URL = "https://api.openai.com/v1"
RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504})
# httpx writes a request's headers and body separately: without TCP_NODELAY the body can wait
# on a delayed ACK (about 40 ms a call).
_NO_DELAY = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]


class OpenAIModel(Model):
    """Chat Completions at `base_url` (default: `OPENAI_BASE_URL`, else OpenAI's)."""

    max_connections: ClassVar[int] = 100
    """The most connections each client opens to its endpoint at once (more calls wait for
    one): `webagents serve` sets its connection cap, for which it kept a descriptor each."""

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        timeout: float = 120.0,
        max_retries: int = 2,
    ) -> None:
        headers: dict[str, str] = {}
        if base_url is None:
            # The environment's key goes only to the environment's endpoint: an endpoint named
            # in code or in an agent file gets the key it is given, or none.
            base_url = os.environ.get("OPENAI_BASE_URL") or None
            api_key = api_key or os.environ.get("OPENAI_API_KEY") or None
            if api_key is None and base_url is None:
                raise ConfigError(NO_ENDPOINT)
            for variable, header in (
                ("OPENAI_ORG_ID", "OpenAI-Organization"),
                ("OPENAI_PROJECT_ID", "OpenAI-Project"),
            ):
                if os.environ.get(variable):
                    headers[header] = os.environ[variable]
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self.name = model
        self.base_url = (base_url or OPENAI_URL).rstrip("/")
        self._url = f"{self.base_url}/chat/completions"
        self._headers = headers
        self._options: dict[str, Any] = {}
        if temperature is not None:
            self._options["temperature"] = temperature
        if max_tokens is not None:
            self._options["max_tokens"] = max_tokens
        self._timeout = httpx.Timeout(timeout, connect=min(timeout, 10.0))
        self._max_retries = max_retries
        self._clients: dict[asyncio.AbstractEventLoop, httpx.AsyncClient] = {}

    @property
    def _client(self) -> httpx.AsyncClient:
        """The client of the running event loop: its connections belong to that loop, so an
        agent used from several `asyncio.run` calls (run_sync) gets one client each."""
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            for old in [other for other in self._clients if other.is_closed()]:
                del self._clients[old]
            client = self._clients[loop] = httpx.AsyncClient(
                timeout=self._timeout,
                transport=httpx.AsyncHTTPTransport(socket_options=_NO_DELAY),
                limits=httpx.Limits(
                    max_connections=self.max_connections,
                    max_keepalive_connections=min(self.max_connections, 100),
                ),
            )
        return client

    def _body(self, request: ModelRequest, *, stream: bool) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.name, "messages": request.messages, **self._options}
        if request.tools:
            body["tools"] = request.tools
        if stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        return body

    async def _post(self, body: dict[str, Any], *, stream: bool) -> httpx.Response:
        """The endpoint's successful response (unread when streaming), after retries."""
        # "replace": a lone surrogate (from a tool's output, say) must not fail the call.
        content = json.dumps(body, ensure_ascii=False).encode("utf-8", "replace")
        headers = {**self._headers, "Content-Type": "application/json"}
        for attempt in range(self._max_retries + 1):
            last = attempt == self._max_retries
            request = self._client.build_request(
                "POST", self._url, content=content, headers=headers
            )
            try:
                response = await self._client.send(request, stream=stream)
            except httpx.TimeoutException:
                if last:
                    raise ModelError(
                        f"the model endpoint at {self.base_url} did not answer in time"
                    ) from None
            except httpx.TransportError:
                if last:
                    raise ModelError(
                        f"cannot reach the model endpoint at {self.base_url}: check "
                        "OPENAI_BASE_URL and that the server is running"
                    ) from None
            else:
                if response.status_code < 400:
                    return response
                text = (await response.aread()).decode("utf-8", "replace")
                await response.aclose()
                if last or response.status_code not in RETRY_STATUSES:
                    raise self._refused(response.status_code, text)
                await asyncio.sleep(_backoff(attempt, response.headers.get("retry-after")))
                continue
            await asyncio.sleep(_backoff(attempt, None))
        raise AssertionError("unreachable")  # the last attempt returns or raises

    def _refused(self, status: int, text: str) -> ModelError:
        if status == 401:
            return ModelError(
                f"the model endpoint at {self.base_url} refused the API key: check OPENAI_API_KEY"
            )
        if status == 404:
            return ModelError(
                f"the model endpoint at {self.base_url} does not know model {self.name!r}: "
                "check model: in AGENT.md"
            )
        return ModelError(
            f"the model endpoint at {self.base_url} answered {status}: {_error_message(text)}"
        )

    def _too_deep(self) -> str:
        return (
            f"the model endpoint at {self.base_url} answered JSON nested too deeply to read "
            "(thousands of levels of arrays and objects): check the endpoint"
        )

    def _malformed(self, what: str, problem: _Malformed) -> ModelError:
        return ModelError(
            f"the model endpoint at {self.base_url} {what}: {problem}; check that it speaks "
            "the Chat Completions format"
        )

    async def complete(self, request: ModelRequest) -> ModelResponse:
        response = await self._post(self._body(request, stream=False), stream=False)
        try:
            body = response.json()
        except ValueError:
            raise ModelError(f"the model endpoint at {self.base_url} answered no JSON") from None
        except RecursionError:  # json.loads recurses once a level of arrays and objects
            raise ModelError(self._too_deep()) from None
        if not isinstance(body, dict) or not body.get("choices"):
            raise ModelError(f"the model endpoint at {self.base_url} returned no choices")
        try:
            return _completion(body)
        except _Malformed as exc:
            raise self._malformed("answered a malformed completion", exc) from None

    async def stream(self, request: ModelRequest) -> AsyncIterator[TextDelta | ModelResponse]:
        text: list[str] = []
        calls: dict[int, dict[str, str]] = {}
        usage: Usage | None = None
        finish_reason: str | None = None
        response = await self._post(self._body(request, stream=True), stream=True)
        try:
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue  # comments, event names and blank separators
                payload = line[5:].strip()
                if payload == "[DONE]":
                    break
                try:
                    chunk = json.loads(payload)
                except ValueError:
                    raise ModelError(
                        f"the model endpoint at {self.base_url} streamed something not JSON"
                    ) from None
                except RecursionError:
                    raise ModelError(self._too_deep()) from None
                if isinstance(chunk, dict) and "error" in chunk:
                    raise ModelError(
                        f"the model endpoint at {self.base_url} failed while "
                        f"answering: {_error_message(json.dumps(chunk))}"
                    )
                try:
                    read = _chunk(chunk, calls)
                except _Malformed as exc:
                    raise self._malformed("streamed a malformed chunk", exc) from None
                usage = read.usage or usage
                finish_reason = read.finish_reason or finish_reason
                for piece in read.text:
                    text.append(piece)
                    yield TextDelta(piece)
        except httpx.TransportError:
            raise ModelError(
                f"the model endpoint at {self.base_url} broke off its answer"
            ) from None
        finally:
            await response.aclose()
        yield ModelResponse(
            content="".join(text) or None,
            tool_calls=tuple(
                ToolCall(slot["id"], slot["name"], slot["args"])
                for _, slot in sorted(calls.items())
            ),
            usage=usage,
            finish_reason=finish_reason,
        )

    async def aclose(self) -> None:
        client = self._clients.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.aclose()


def _backoff(attempt: int, retry_after: str | None) -> float:
    if retry_after is not None:
        try:
            return min(max(float(retry_after), 0.0), 30.0)
        except ValueError:
            pass
    return min(0.5 * 2.0**attempt, 8.0)


def _error_message(text: str) -> str:
    """The `error.message` of an OpenAI-shaped error body, else the start of the text."""
    try:
        error = json.loads(text).get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])[:300]
    except (ValueError, AttributeError):
        pass
    return text.strip()[:300] or "no details"


# -- reading an answer: its shape checked as it is read ----------------------------------------
# Explicit checks rather than pydantic models: they cost next to nothing on every call and
# every streamed chunk (see the module's docstring), and each names the path to what is wrong.


_TOKENS = "a count of tokens"


class _Malformed(Exception):
    """What is wrong with the shape of an endpoint's answer, the path to it first."""


class _Chunk(NamedTuple):
    """What one streamed chunk adds to the answer (its tool calls go straight to their slots)."""

    text: list[str]
    usage: Usage | None
    finish_reason: str | None


def _completion(body: dict[str, Any]) -> ModelResponse:
    """A whole (not streamed) answer whose `choices` is present and not empty."""
    choice = _object(_list(body["choices"], "choices")[0], "choices[0]")
    message = _fields(choice.get("message"), "choices[0].message")
    calls: list[ToolCall] = []
    for n, item in enumerate(_list(message.get("tool_calls"), "choices[0].message.tool_calls")):
        where = f"choices[0].message.tool_calls[{n}]"
        call = _object(item, where)
        if call.get("function") is None:
            continue  # nothing to call
        function = _object(call["function"], f"{where}.function")
        calls.append(
            ToolCall(
                _string(call.get("id"), f"{where}.id") or "",
                _string(function.get("name"), f"{where}.function.name") or "",
                _arguments(function.get("arguments"), f"{where}.function.arguments"),
            )
        )
    return ModelResponse(
        content=_text(message.get("content"), "choices[0].message.content"),
        tool_calls=tuple(calls),
        usage=_usage(body.get("usage")),
        finish_reason=_string(choice.get("finish_reason"), "choices[0].finish_reason"),
    )


def _chunk(chunk: Any, calls: dict[int, dict[str, str]]) -> _Chunk:
    """One streamed chunk; its pieces of tool calls are added to `calls`, by index."""
    if not isinstance(chunk, dict):
        raise _Malformed(f"the chunk is {json_kind(chunk)}, not an object")
    text: list[str] = []
    finish_reason: str | None = None
    for n, item in enumerate(_list(chunk.get("choices"), "choices")):
        choice = _object(item, f"choices[{n}]")
        delta = _fields(choice.get("delta"), f"choices[{n}].delta")
        if content := _text(delta.get("content"), f"choices[{n}].delta.content"):
            text.append(content)
        for m, part in enumerate(_list(delta.get("tool_calls"), f"choices[{n}].delta.tool_calls")):
            where = f"choices[{n}].delta.tool_calls[{m}]"
            part = _object(part, where)
            slot = calls.setdefault(
                _whole(part.get("index"), f"{where}.index", "a whole number"),  # absent: the first
                {"id": "", "name": "", "args": ""},
            )
            slot["id"] = _string(part.get("id"), f"{where}.id") or slot["id"]
            function = _fields(part.get("function"), f"{where}.function")
            slot["name"] += _string(function.get("name"), f"{where}.function.name") or ""
            slot["args"] += _arguments(function.get("arguments"), f"{where}.function.arguments")
        finish_reason = (
            _string(choice.get("finish_reason"), f"choices[{n}].finish_reason") or finish_reason
        )
    return _Chunk(text, _usage(chunk.get("usage")), finish_reason)


def _usage(reported: Any) -> Usage | None:
    if reported is None:
        return None
    usage = _object(reported, "usage")
    return Usage(
        _whole(usage.get("prompt_tokens"), "usage.prompt_tokens", _TOKENS),
        _whole(usage.get("completion_tokens"), "usage.completion_tokens", _TOKENS),
    )


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _Malformed(f"{where} is {json_kind(value)}, not an object")
    return value


def _fields(value: Any, where: str) -> dict[str, Any]:
    """An object, null (or absent) as an empty one."""
    return {} if value is None else _object(value, where)


def _list(value: Any, where: str) -> list[Any]:
    """A list, null (or absent) as an empty one."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise _Malformed(f"{where} is {json_kind(value)}, not a list")
    return value


def _string(value: Any, where: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise _Malformed(f"{where} is {json_kind(value)}, not a string")
    return value


def _text(value: Any, where: str) -> str | None:
    """A message's text: a string, or a list of text parts as some compatible servers send
    it ([{"type": "text", "text": "..."}]), joined."""
    if value is None or isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise _Malformed(
            f"{where} is {json_kind(value)}, not text (a string or a list of text parts)"
        )
    pieces: list[str] = []
    for n, item in enumerate(value):
        part = _object(item, f"{where}[{n}]")
        if part.get("type") != "text":
            raise _Malformed(f"{where}[{n}] is a part of type {part.get('type')!r}, not text")
        pieces.append(_string(part.get("text"), f"{where}[{n}].text") or "")
    return "".join(pieces)


def _arguments(value: Any, where: str) -> str:
    """A tool call's arguments as their JSON text, as the conversation keeps them: some
    compatible servers send the object itself."""
    if value is None or isinstance(value, str):
        return value or ""
    if not isinstance(value, dict):
        raise _Malformed(f"{where} is {json_kind(value)}, not a JSON object or its text")
    try:
        text = json.dumps(value, ensure_ascii=False)
    except RecursionError:  # as deep as json.loads could read, deeper than dumps can write
        raise _Malformed(f"{where} nests too deeply to write as text") from None
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: escaped, as the endpoint sent it
            text = json.dumps(value)
    return text


def _whole(value: Any, where: str, what: str) -> int:
    """A whole number of at least 0; null (or absent) as 0."""
    if value is None:
        return 0
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    raise _Malformed(f"{where} is {_shown(value)}, not {what}")


def _shown(value: Any) -> str:
    """A number as itself, anything else as what it is."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return repr(value)
    return json_kind(value)
