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
from typing import Any, ClassVar

import httpx

from .errors import ConfigError, ModelError
from .model import Model, ModelRequest, ModelResponse, TextDelta, ToolCall, Usage

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
        choice = body["choices"][0]
        message = choice.get("message") or {}
        calls = tuple(
            ToolCall(call.get("id", ""), function.get("name", ""), function.get("arguments") or "")
            for call in message.get("tool_calls") or ()
            if (function := call.get("function")) is not None
        )
        return ModelResponse(
            content=message.get("content"),
            tool_calls=calls,
            usage=_usage(body.get("usage")),
            finish_reason=choice.get("finish_reason"),
        )

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
                if not isinstance(chunk, dict):
                    continue
                if "error" in chunk:
                    raise ModelError(
                        f"the model endpoint at {self.base_url} failed while "
                        f"answering: {_error_message(json.dumps(chunk))}"
                    )
                usage = _usage(chunk.get("usage")) or usage
                for choice in chunk.get("choices") or ():
                    delta = choice.get("delta") or {}
                    if delta.get("content"):
                        text.append(delta["content"])
                        yield TextDelta(delta["content"])
                    for part in delta.get("tool_calls") or ():
                        slot = calls.setdefault(
                            part.get("index", 0), {"id": "", "name": "", "args": ""}
                        )
                        slot["id"] = part.get("id") or slot["id"]
                        function = part.get("function") or {}
                        slot["name"] += function.get("name") or ""
                        slot["args"] += function.get("arguments") or ""
                    finish_reason = choice.get("finish_reason") or finish_reason
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


def _usage(reported: Any) -> Usage | None:
    if not isinstance(reported, dict):
        return None
    prompt, completion = reported.get("prompt_tokens"), reported.get("completion_tokens")
    return Usage(int(prompt or 0), int(completion or 0))
