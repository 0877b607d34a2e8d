"""The one client of the portal's HTTP API: sign-in (login, whoami, logout, the device
grant), agents (publish), chats (the sessions' record and /resume) and the memory store (the
memory skill's `portal: true` and its sync). Portal Connect's WebSocket is `connect.py`.

Answers are read into the wire's models (portal_wire), strictly: an answer of another shape is
a BadAnswer naming the field, never a KeyError deep inside a caller. Errors say what to run
(errors.py).
"""

from __future__ import annotations

import functools
import ssl
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from ..errors import WebAgentsError
from ..portal_wire.accounts import CliToken, Revoked, SignedIn, SignedInUser
from ..portal_wire.chats import ChatMessages, ConversationOut, Conversations, Recorded
from ..portal_wire.memory import (
    EntriesAnswer,
    EntryAnswer,
    EntryOut,
    Forgotten,
    SearchAnswer,
    SyncAnswer,
)
from .errors import (
    AgentNotPublished,
    BadAnswer,
    BadCursor,
    PortalUnreachable,
    Refused,
    SignInError,
    StaleEntry,
    first_problem,
)
from .login import PORTAL_URL_ENV

DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"
MEMORY_PATH = "/api/storage/memory-scoped"

Answer = TypeVar("Answer", bound=BaseModel)


@functools.cache
def _tls() -> ssl.SSLContext:
    """One TLS context for every client of the process, made as httpx makes its own (its CA
    bundle, or SSL_CERT_FILE / SSL_CERT_DIR): making one costs 100-200 ms of CPU on a busy
    machine, and the memory sync makes a client at every round and every read-through."""
    return httpx.create_ssl_context()


@dataclass(frozen=True)
class DeviceAnswer:
    """A poll of the device grant: a token, or what RFC 8628 says to do (`error`)."""

    token: dict[str, Any] | None
    error: str | None


class PortalClient:
    def __init__(self, base_url: str, bearer: str | None = None, timeout: float = 30) -> None:
        self.base_url = base_url.rstrip("/")
        headers = {"Authorization": f"Bearer {bearer}"} if bearer else {}
        self._http = httpx.Client(
            base_url=self.base_url, headers=headers, timeout=timeout, verify=_tls()
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> PortalClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            return self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise PortalUnreachable(
                f"cannot reach the portal at {self.base_url} ({exc}): check its address "
                f"(webagents login --portal URL, or {PORTAL_URL_ENV}) and that the portal runs "
                "there (webagents portal serve)"
            ) from None

    def _not_portal(self, answer: httpx.Response) -> PortalUnreachable:
        return PortalUnreachable(
            f"{self.base_url} answered {answer.status_code} without the portal's JSON: "
            "is this the portal's address? Sign in to the portal's own address with "
            "webagents login --portal URL"
        )

    def _json(self, answer: httpx.Response) -> dict[str, Any]:
        try:
            body = answer.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):
            raise self._not_portal(answer)
        return body

    def _error(self, answer: httpx.Response) -> tuple[str | None, str | None]:
        """The portal's `{error: {message, code}}` of a refusal (None where it says none)."""
        error = self._json(answer).get("error")
        if not isinstance(error, dict):
            return None, None
        message, code = error.get("message"), error.get("code")
        return (
            message if isinstance(message, str) else None,
            code if isinstance(code, str) else None,
        )

    def _refusal(self, answer: httpx.Response) -> None:
        """A refusal raised as what it means; nothing for a success."""
        if answer.status_code == 401:
            message = self._error(answer)[0] or "the portal refused the sign-in"
            raise SignInError(
                f"{message}" if "webagents login" in message else f"{message}: run webagents login"
            )
        if answer.status_code >= 400:
            message = self._error(answer)[0] or f"status {answer.status_code}"
            if 400 <= answer.status_code < 500:
                raise Refused(message, status=answer.status_code)
            raise WebAgentsError(f"the portal failed: {message}")

    def _checked(self, answer: httpx.Response, model: type[Answer]) -> Answer:
        """A success read as the wire's `model`."""
        self._refusal(answer)
        return self._parsed(answer, model)

    def _body(self, answer: httpx.Response) -> dict[str, Any]:
        """A success whose JSON object its caller checks itself (the agents API: publish)."""
        self._refusal(answer)
        return self._json(answer)

    def _parsed(self, answer: httpx.Response, model: type[Answer]) -> Answer:
        try:
            return model.model_validate_json(answer.content, strict=True)
        except ValidationError as exc:
            problem = exc.errors()[0]
            if problem["type"] == "json_invalid" or (
                problem["type"] == "model_type" and not problem["loc"]
            ):
                raise self._not_portal(answer) from None
            field, said = first_problem(exc)
            request = answer.request
            raise BadAnswer(
                f"the portal at {self.base_url} answered {request.method} {request.url.path} "
                f"with `{field}` not as this webagents reads it ({said}): run a "
                "portal of this webagents' version there (webagents portal serve)"
            ) from None

    # -- sign-in (P3) -----------------------------------------------------------------------

    def me(self) -> SignedInUser:
        return self._checked(self._send("GET", "/api/users/me"), SignedIn).user

    def exchange_key(self) -> CliToken:
        """This client's bearer is an API key: an access token for it."""
        return self._checked(self._send("POST", "/api/auth/cli/token", json={}), CliToken)

    def logout(self) -> bool:
        return self._checked(self._send("POST", "/api/auth/cli/logout", json={}), Revoked).revoked

    def device_code(self) -> dict[str, Any]:
        return self._body(self._send("POST", "/api/auth/device/code"))

    def device_token(self, device_code: str) -> DeviceAnswer:
        answer = self._send(
            "POST",
            "/api/auth/device/token",
            data={"grant_type": DEVICE_GRANT, "device_code": device_code},
        )
        body = self._json(answer)
        if answer.status_code == 200:
            return DeviceAnswer(token=body, error=None)
        return DeviceAnswer(token=None, error=str(body.get("error", "invalid_grant")))

    # -- agents (P4) --------------------------------------------------------------------------

    def create_agent(self, agent: dict[str, Any]) -> dict[str, Any]:
        return self._body(self._send("POST", "/api/agents", json=agent))

    def update_agent(self, agent_id: str, agent: dict[str, Any]) -> dict[str, Any]:
        return self._body(self._send("PATCH", f"/api/agents/{agent_id}", json=agent))

    def add_agent_key(self, agent_id: str, name: str) -> dict[str, Any]:
        """A new key for one more machine: `{key: {id, name, ...}, rawApiKey}`."""
        path = f"/api/agents/{agent_id}/keys"
        return self._agent_call(agent_id, "POST", path, json={"name": name})

    def list_agents(self) -> list[dict[str, Any]]:
        agents: list[dict[str, Any]] = self._body(self._send("GET", "/api/agents"))["agents"]
        return agents

    def _agent_call(self, agent_id: str, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        return self._body(self._agent_send(agent_id, method, path, **kwargs))

    def _agent_send(self, agent_id: str, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """An agent's API, its 404 said as an agent this user did not publish."""
        answer = self._send(method, path, **kwargs)
        if answer.status_code == 404:
            self._json(answer)  # not the portal's JSON: said as such, not as an agent
            raise AgentNotPublished(
                f"the portal at {self.base_url} does not know agent {agent_id} as yours: "
                "publish it as the signed-in user (webagents publish), or sign in as its "
                "owner (webagents login)"
            )
        return answer

    # -- chats (P9): the owner's conversations with an agent, recorded without an answer -----

    def record_chat(
        self,
        agent_id: str,
        session_id: str,
        messages: list[dict[str, Any]],
        *,
        chat_id: str | None = None,
    ) -> str:
        """Append turns (at most MAX_MESSAGES_PER_CALL a call) to the chat `chat_id`, else to
        the chat of `session_id`; the chat's id. A message carries an `id` so that a resent
        one is skipped, and one longer than MAX_CONTENT_CHARS goes in parts (docs/portal.md)."""
        body: dict[str, Any] = {"sessionId": session_id, "messages": messages}
        if chat_id is not None:
            body["chatId"] = chat_id
        path = f"/api/agents/{agent_id}/conversations"
        answer = self._agent_send(agent_id, "POST", path, json=body)
        return self._checked(answer, Recorded).chatId

    def list_chats(self, agent_id: str, limit: int = 20) -> list[ConversationOut]:
        """The user's chats with the agent, newest first."""
        path = f"/api/agents/{agent_id}/conversations"
        answer = self._agent_send(agent_id, "GET", path, params={"limit": limit})
        return self._checked(answer, Conversations).conversations

    def read_chat(self, agent_id: str, chat_id: str) -> list[dict[str, Any]]:
        """One chat's messages, in order."""
        path = f"/api/agents/{agent_id}/conversations/{chat_id}"
        return self._checked(self._agent_send(agent_id, "GET", path), ChatMessages).messages

    # -- the agent's memory store (P5), with the agent's key as this client's bearer --------

    def _memory(
        self, model: type[Answer], method: str, query: list[tuple[str, str]], **kwargs: Any
    ) -> Answer:
        answer = self._send(method, MEMORY_PATH, params=query, **kwargs)
        if answer.status_code in (401, 409):
            message = self._error(answer)[0] or "the entry changed meanwhile"
            if answer.status_code == 401:  # the agent's key, not a sign-in: say the portal's
                raise SignInError(message)
            raise StaleEntry(message)
        if answer.status_code == 400:
            said, code = self._error(answer)
            if code == "bad_cursor":
                raise BadCursor(str(said), status=400)
        return self._checked(answer, model)

    def memory_get(self, namespace: str, key: str) -> EntryOut | None:
        query = [("action", "get"), ("namespace", namespace), ("key", key)]
        return self._memory(EntryAnswer, "GET", query).entry

    def memory_list(
        self,
        namespaces: list[str],
        *,
        limit: int = 100,
        prefix: str | None = None,
        exclude_source: str | None = None,
    ) -> list[EntryOut]:
        query = [("action", "list"), *(("namespace", ns) for ns in namespaces)]
        query.append(("limit", str(limit)))
        if prefix is not None:
            query.append(("prefix", prefix))
        if exclude_source is not None:
            query.append(("excludeSource", exclude_source))
        return self._memory(EntriesAnswer, "GET", query).entries

    def memory_search(self, q: str, namespaces: list[str], *, limit: int = 10) -> SearchAnswer:
        """The hits, and whether semantic search took part (the portal may say it is off)."""
        query = [("action", "search"), ("q", q), *(("namespace", ns) for ns in namespaces)]
        query.append(("limit", str(limit)))
        return self._memory(SearchAnswer, "GET", query)

    def memory_put(
        self,
        entry: dict[str, Any],
        *,
        content_sha256: str | None = None,
    ) -> EntryOut:
        """PUT `{namespace, key, content, description, source, at}`; with `content_sha256`
        (the hash of the content this client last saw in the portal) a StaleEntry when the
        portal's entry is no longer that."""
        body = dict(entry)
        if content_sha256 is not None:
            body["content_sha256"] = content_sha256
        stored = self._memory(EntryAnswer, "PUT", [], json=body).entry
        if stored is None:
            raise BadAnswer(
                f"the portal at {self.base_url} answered a PUT of {MEMORY_PATH} without the "
                "entry stored: run a portal of this webagents' version there (webagents "
                "portal serve)"
            )
        return stored

    def memory_delete(self, namespace: str, key: str, *, content_sha256: str | None = None) -> bool:
        query = [("namespace", namespace), ("key", key)]
        if content_sha256 is not None:
            query.append(("content_sha256", content_sha256))
        return self._memory(Forgotten, "DELETE", query).forgotten

    def memory_sync_pull(
        self, namespace: str | None, since: str | None, limit: int | None = None
    ) -> SyncAnswer:
        """The changes of a namespace (None: of all the agent's) after the cursor `since`, at
        most `limit` (None: the portal's default). The cursor is opaque (SPEC P5): `since` is
        sent exactly as an earlier answer gave it."""
        query = [("action", "sync")]
        if limit is not None:
            query.append(("limit", str(limit)))
        if namespace is not None:
            query.append(("namespace", namespace))
        if since is not None:
            query.append(("since", since))
        return self._memory(SyncAnswer, "GET", query)
