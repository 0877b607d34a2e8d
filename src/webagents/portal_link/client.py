"""The one client of the portal's HTTP API: sign-in (login, whoami, logout, the device
grant), agents (publish), chats (the sessions' record and /resume) and the memory store (the
memory skill's `portal: true` and its sync). Portal Connect's WebSocket is the agent's own
(server/).

Errors say what to run: a refused credential is a SignInError ("run webagents login"), a
portal that does not answer says where it was looked for.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import httpx

from ..errors import ConfigError, WebAgentsError

PORTAL_URL_ENV = "ROBUTLER_API_URL"
DEFAULT_PORTAL = "http://127.0.0.1:8700"
DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"
CHAT_MESSAGES_PER_CALL = 50
CHAT_MESSAGE_CHARS = 100_000
"""P9: what one call that records turns may carry; longer conversations take more calls."""


class PortalUnreachable(WebAgentsError):
    """The portal did not answer, or answered something that is not its API."""


class SignInError(ConfigError):
    """The portal refused the credential: the user must sign in (again)."""


class Refused(ConfigError):
    """The portal refused the request (a 4xx other than 401); the message is its own."""

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message)
        self.status = status


class StaleEntry(Refused):
    """A memory entry's `content_sha256` precondition was stale (409): the entry changed in
    the portal since this client last saw it, and nothing was changed."""

    def __init__(self, message: str) -> None:
        super().__init__(message, status=409)


class BadCursor(Refused):
    """The portal does not know the sync cursor sent back (400 `bad_cursor`): one kept by
    another portal, or damaged. Pulling from the start again is safe (a line already here
    changes nothing)."""


MEMORY_PATH = "/api/storage/memory-scoped"
AGENT_TOKEN_ENV = "WEBAGENTS_AGENT_TOKEN"


class AgentNotPublished(ConfigError):
    """The portal does not know the agent as this user's (a 404 of an agent's API)."""


@dataclass(frozen=True)
class DeviceAnswer:
    """A poll of the device grant: a token, or what RFC 8628 says to do (`error`)."""

    token: dict[str, Any] | None
    error: str | None


def portal_url(given: str | None, remembered: str | None = None) -> str:
    """`--portal`, else ROBUTLER_API_URL, else the portal of the last login, else local."""
    url = given or os.environ.get(PORTAL_URL_ENV) or remembered or DEFAULT_PORTAL
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"the portal address must start with http:// or https://, not {url!r}")
    return url.rstrip("/")


class PortalClient:
    def __init__(self, base_url: str, bearer: str | None = None, timeout: float = 30) -> None:
        self.base_url = base_url.rstrip("/")
        headers = {"Authorization": f"Bearer {bearer}"} if bearer else {}
        self._http = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout)

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

    def _json(self, answer: httpx.Response) -> dict[str, Any]:
        try:
            body = answer.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):
            raise PortalUnreachable(
                f"{self.base_url} answered {answer.status_code} without the portal's JSON: "
                "is this the portal's address? Sign in to the portal's own address with "
                "webagents login --portal URL"
            )
        return body

    def _checked(self, answer: httpx.Response) -> dict[str, Any]:
        body = self._json(answer)
        if answer.status_code == 401:
            message = body.get("error", {}).get("message", "the portal refused the sign-in")
            raise SignInError(
                f"{message}" if "webagents login" in message else f"{message}: run webagents login"
            )
        if answer.status_code >= 400:
            message = body.get("error", {}).get("message", f"status {answer.status_code}")
            if 400 <= answer.status_code < 500:
                raise Refused(message, status=answer.status_code)
            raise WebAgentsError(f"the portal failed: {message}")
        return body

    def me(self) -> dict[str, Any]:
        user: dict[str, Any] = self._checked(self._send("GET", "/api/users/me"))["user"]
        return user

    def exchange_key(self) -> dict[str, Any]:
        """This client's bearer is an API key: an access token for it."""
        return self._checked(self._send("POST", "/api/auth/cli/token", json={}))

    def logout(self) -> bool:
        return bool(self._checked(self._send("POST", "/api/auth/cli/logout", json={}))["revoked"])

    def create_agent(self, agent: dict[str, Any]) -> dict[str, Any]:
        return self._checked(self._send("POST", "/api/agents", json=agent))

    def update_agent(self, agent_id: str, agent: dict[str, Any]) -> dict[str, Any]:
        return self._checked(self._send("PATCH", f"/api/agents/{agent_id}", json=agent))

    def add_agent_key(self, agent_id: str, name: str) -> dict[str, Any]:
        """A new key for one more machine: `{key: {id, name, ...}, rawApiKey}`."""
        path = f"/api/agents/{agent_id}/keys"
        return self._agent_call(agent_id, "POST", path, json={"name": name})

    def list_agents(self) -> list[dict[str, Any]]:
        agents: list[dict[str, Any]] = self._checked(self._send("GET", "/api/agents"))["agents"]
        return agents

    # -- chats (P9): the owner's conversations with an agent, recorded without an answer -----

    def record_chat(
        self,
        agent_id: str,
        session_id: str,
        messages: list[dict[str, Any]],
        *,
        chat_id: str | None = None,
    ) -> str:
        """Append turns (at most CHAT_MESSAGES_PER_CALL a call) to the chat `chat_id`, else to
        the chat of `session_id`; the chat's id. A message carries an `id` so that a resent
        one is skipped, and one longer than CHAT_MESSAGE_CHARS goes in parts (docs/portal.md)."""
        body: dict[str, Any] = {"sessionId": session_id, "messages": messages}
        if chat_id is not None:
            body["chatId"] = chat_id
        path = f"/api/agents/{agent_id}/conversations"
        answer = self._agent_call(agent_id, "POST", path, json=body)
        return str(answer["chatId"])

    def list_chats(self, agent_id: str, limit: int = 20) -> list[dict[str, Any]]:
        """The user's chats with the agent, newest first: chatId, sessionId, updatedAt,
        messageCount, preview."""
        path = f"/api/agents/{agent_id}/conversations"
        found = self._agent_call(agent_id, "GET", path, params={"limit": limit})
        chats: list[dict[str, Any]] = found["conversations"]
        return chats

    def read_chat(self, agent_id: str, chat_id: str) -> list[dict[str, Any]]:
        """One chat's messages, in order."""
        path = f"/api/agents/{agent_id}/conversations/{chat_id}"
        messages: list[dict[str, Any]] = self._agent_call(agent_id, "GET", path)["messages"]
        return messages

    def _agent_call(self, agent_id: str, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        try:
            return self._checked(self._send(method, path, **kwargs))
        except Refused as exc:
            if exc.status != 404:
                raise
            raise AgentNotPublished(
                f"the portal at {self.base_url} does not know agent {agent_id} as yours: "
                "publish it as the signed-in user (webagents publish), or sign in as its "
                "owner (webagents login)"
            ) from None

    def device_code(self) -> dict[str, Any]:
        return self._checked(self._send("POST", "/api/auth/device/code"))

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

    # -- the agent's memory store (P5), with the agent's key as this client's bearer --------

    def _memory(self, method: str, query: list[tuple[str, str]], **kwargs: Any) -> dict[str, Any]:
        return self._memory_answer(self._send(method, MEMORY_PATH, params=query, **kwargs))

    def _memory_answer(self, answer: httpx.Response) -> dict[str, Any]:
        if answer.status_code in (401, 409):
            body = self._json(answer)
            message = str(body.get("error", {}).get("message", "the entry changed meanwhile"))
            if answer.status_code == 401:  # the agent's key, not a sign-in: say the portal's
                raise SignInError(message)
            raise StaleEntry(message)
        return self._checked(answer)

    def memory_get(self, namespace: str, key: str) -> dict[str, Any] | None:
        query = [("action", "get"), ("namespace", namespace), ("key", key)]
        entry: dict[str, Any] | None = self._memory("GET", query).get("entry")
        return entry

    def memory_list(
        self,
        namespaces: list[str],
        *,
        limit: int = 100,
        prefix: str | None = None,
        exclude_source: str | None = None,
    ) -> list[dict[str, Any]]:
        query = [("action", "list"), *(("namespace", ns) for ns in namespaces)]
        query.append(("limit", str(limit)))
        if prefix is not None:
            query.append(("prefix", prefix))
        if exclude_source is not None:
            query.append(("excludeSource", exclude_source))
        entries: list[dict[str, Any]] = self._memory("GET", query)["entries"]
        return entries

    def memory_search(self, q: str, namespaces: list[str], *, limit: int = 10) -> dict[str, Any]:
        """`{entries, ...}` as the portal answers (it may say that semantic search is off)."""
        query = [("action", "search"), ("q", q), *(("namespace", ns) for ns in namespaces)]
        query.append(("limit", str(limit)))
        return self._memory("GET", query)

    def memory_put(
        self,
        entry: dict[str, Any],
        *,
        content_sha256: str | None = None,
    ) -> dict[str, Any]:
        """PUT `{namespace, key, content, description, source, at}`; with `content_sha256`
        (the hash of the content this client last saw in the portal) a StaleEntry when the
        portal's entry is no longer that."""
        body = dict(entry)
        if content_sha256 is not None:
            body["content_sha256"] = content_sha256
        stored: dict[str, Any] = self._memory("PUT", [], json=body)["entry"]
        return stored

    def memory_delete(self, namespace: str, key: str, *, content_sha256: str | None = None) -> bool:
        query = [("namespace", namespace), ("key", key)]
        if content_sha256 is not None:
            query.append(("content_sha256", content_sha256))
        return bool(self._memory("DELETE", query)["forgotten"])

    def memory_sync_pull(
        self, namespace: str | None, since: str | None, limit: int | None = None
    ) -> dict[str, Any]:
        """The changes of a namespace (None: of all the agent's) after the cursor `since`, at
        most `limit` (None: the portal's default): `{lines, cursor, more}`. The cursor is
        opaque (SPEC P5): `since` is sent exactly as an earlier answer gave it."""
        query = [("action", "sync")]
        if limit is not None:
            query.append(("limit", str(limit)))
        if namespace is not None:
            query.append(("namespace", namespace))
        if since is not None:
            query.append(("since", since))
        answer = self._send("GET", MEMORY_PATH, params=query)
        if answer.status_code == 400:
            error = self._json(answer).get("error")
            if isinstance(error, dict) and error.get("code") == "bad_cursor":
                raise BadCursor(str(error.get("message")), status=400)
        return self._memory_answer(answer)

    def memory_sync_push(self, namespace: str, lines: list[dict[str, Any]]) -> int:
        body = {"namespace": namespace, "lines": lines}
        return int(self._memory("POST", [("action", "sync")], json=body)["applied"])


@dataclass(frozen=True)
class Login:
    """What `webagents login` keeps per profile (0600): the portal, who, and the token."""

    portal: str
    username: str
    user_id: str
    access_token: str


def load_login(profile: str | None) -> Login | None:
    import json

    from ..home import login_file

    path = login_file(profile)
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return Login(
            portal=str(data["portal"]),
            username=str(data["username"]),
            user_id=str(data["user_id"]),
            access_token=str(data["access_token"]),
        )
    except (ValueError, KeyError, TypeError):
        raise ConfigError(
            f"{path} is damaged (not the sign-in webagents login writes): "
            "run webagents logout, then webagents login"
        ) from None


def save_login(profile: str | None, login: Login) -> None:
    import json
    from dataclasses import asdict

    from .._files import atomic_write
    from ..home import login_file

    atomic_write(login_file(profile), (json.dumps(asdict(login), indent=2) + "\n").encode())


def forget_login(profile: str | None) -> bool:
    from ..home import login_file

    try:
        login_file(profile).unlink()
    except FileNotFoundError:
        return False
    return True
