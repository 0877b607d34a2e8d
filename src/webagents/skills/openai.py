"""The `openai` skill: any OpenAI-compatible Chat Completions endpoint as the agent's model.

`OPENAI_API_KEY` and `OPENAI_BASE_URL` are honoured, so OpenAI, vLLM, Ollama, llama.cpp's
server and LiteLLM all work; the skill's settings may name them per agent instead.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import AsyncIterator
from typing import Any

import openai
from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..errors import ConfigError, ModelError
from ..model import Model, ModelRequest, ModelResponse, TextDelta, ToolCall, Usage
from .base import Skill

NO_ENDPOINT = (
    "no model endpoint is configured: set OPENAI_API_KEY (for OpenAI) or OPENAI_BASE_URL "
    "(for a compatible server such as vLLM, Ollama or llama.cpp)"
)


def _resolve_env(value: str | None, what: str) -> str | None:
    if value is None:
        return None
    name = value.removeprefix("env:")
    resolved = os.environ.get(name)
    if not resolved:
        raise ConfigError(f"{what} names the environment variable {name}, which is not set")
    return resolved


class OpenAIModel(Model):
    """Chat Completions over the official `openai` client."""

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
        if base_url is None:
            # The environment's key goes only to the environment's endpoint: an endpoint named
            # in code or in an agent file gets the key it is given, or none.
            base_url = os.environ.get("OPENAI_BASE_URL") or None
            api_key = api_key or os.environ.get("OPENAI_API_KEY") or None
            if api_key is None and base_url is None:
                raise ConfigError(NO_ENDPOINT)
        self.name = model
        self.base_url = base_url or "https://api.openai.com/v1"
        self._options: dict[str, Any] = {}
        if temperature is not None:
            self._options["temperature"] = temperature
        if max_tokens is not None:
            self._options["max_tokens"] = max_tokens
        # A local server often needs no key, but the client insists on one.
        self._client_options: dict[str, Any] = {
            "api_key": api_key or "unused",
            "base_url": self.base_url,
            "timeout": timeout,
            "max_retries": max_retries,
        }
        self._clients: dict[asyncio.AbstractEventLoop, openai.AsyncOpenAI] = {}

    @property
    def _client(self) -> openai.AsyncOpenAI:
        """The client of the running event loop: its connections belong to that loop, so an
        agent used from several `asyncio.run` calls (run_sync) gets one client each."""
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            for old in [other for other in self._clients if other.is_closed()]:
                del self._clients[old]
            client = self._clients[loop] = openai.AsyncOpenAI(**self._client_options)
        return client

    def _body(self, request: ModelRequest, *, stream: bool) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.name, "messages": request.messages, **self._options}
        if request.tools:
            body["tools"] = request.tools
        if stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        return body

    # The client's own `chat.completions.create` rebuilds every message through its typed
    # parameters and every reply through pydantic models, which costs more than the HTTP call
    # to a local model (2 ms a call, 7 ms a stream, measured by bench/serve.py). The messages
    # are already in the wire format, so they are posted as they are and the replies read as
    # JSON; the client still does the connection, retries, errors and SSE.

    async def complete(self, request: ModelRequest) -> ModelResponse:
        try:
            body = await self._client.post(
                "/chat/completions", cast_to=object, body=self._body(request, stream=False)
            )
        except openai.APIError as exc:
            raise self._explain(exc) from exc
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
        try:
            chunks = await self._client.post(
                "/chat/completions",
                cast_to=object,
                body=self._body(request, stream=True),
                stream=True,
                stream_cls=openai.AsyncStream[object],
            )
            async for chunk in chunks:
                if not isinstance(chunk, dict):
                    continue
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
        except openai.APIError as exc:
            raise self._explain(exc) from exc
        yield ModelResponse(
            content="".join(text) or None,
            tool_calls=tuple(
                ToolCall(slot["id"], slot["name"], slot["args"])
                for _, slot in sorted(calls.items())
            ),
            usage=usage,
            finish_reason=finish_reason,
        )

    def _explain(self, exc: openai.APIError) -> ModelError:
        if isinstance(exc, openai.APIConnectionError):
            return ModelError(
                f"cannot reach the model endpoint at {self.base_url}: check OPENAI_BASE_URL "
                "and that the server is running"
            )
        if isinstance(exc, openai.AuthenticationError):
            return ModelError(
                f"the model endpoint at {self.base_url} refused the API key: check OPENAI_API_KEY"
            )
        if isinstance(exc, openai.NotFoundError):
            return ModelError(
                f"the model endpoint at {self.base_url} does not know model {self.name!r}: "
                "check model: in AGENT.md"
            )
        if isinstance(exc, openai.APIStatusError):
            return ModelError(
                f"the model endpoint at {self.base_url} answered {exc.status_code}: {exc.message}"
            )
        return ModelError(f"the model endpoint at {self.base_url} failed: {exc.message}")

    async def aclose(self) -> None:
        client = self._clients.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.close()


def _usage(reported: Any) -> Usage | None:
    if not isinstance(reported, dict):
        return None
    return Usage(
        int(reported.get("prompt_tokens") or 0), int(reported.get("completion_tokens") or 0)
    )


class OpenAISettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str | None = Field(default=None, description="the model's name at the endpoint")
    base_url: str | None = None
    api_key: str | None = Field(default=None, description="env:NAME; defaults to OPENAI_API_KEY")
    temperature: float | None = Field(default=None, ge=0, le=2)
    max_tokens: int | None = Field(default=None, gt=0)

    @field_validator("api_key")
    @classmethod
    def _env_only(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"env:[A-Za-z_][A-Za-z0-9_]*", value):
            raise ValueError(
                "api_key must be env:NAME (the variable that holds the key); "
                "a key itself does not belong in AGENT.md"
            )
        return value

    @field_validator("model")
    @classmethod
    def _bare_name(cls, value: str | None) -> str | None:
        return value.removeprefix("openai/") if value else value


class OpenAISkill(Skill[OpenAISettings]):
    """Provides the agent's model from an OpenAI-compatible endpoint."""

    name = "openai"
    Settings = OpenAISettings

    def model_for(self, model: str | None) -> Model | None:
        wanted = model.removeprefix("openai/") if model else None
        if model is not None and not model.startswith("openai/"):
            return None
        chosen = self.settings.model
        if wanted and chosen and wanted != chosen:
            raise ConfigError(
                f"the agent's model is openai/{wanted} but the openai skill's model setting is "
                f"{chosen}: keep one of them"
            )
        name = chosen or wanted
        if name is None:
            raise ConfigError(
                "no model is named: add `model: openai/<model>` to AGENT.md, "
                "or the openai skill's model setting"
            )
        return OpenAIModel(
            name,
            api_key=_resolve_env(self.settings.api_key, "the openai skill's api_key"),
            base_url=self.settings.base_url,
            temperature=self.settings.temperature,
            max_tokens=self.settings.max_tokens,
        )
