"""A small fake portal for Portal Connect's agent side (docs/portal.md, "Portal Connect"): a
websockets server on loopback that takes an agent's connection at /ws (by its key), sends
hello, relays requests with assertions it signs with a test RSA key, and serves that key's
JWKS at /.well-known/jwks.json and the owner's allowOthers at /api/agents/<id>/access over
plain HTTP on the same port."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

KID = "connect-test-key"


def new_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def pem(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


@dataclass
class Reply:
    """What the portal received for one relayed request."""

    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    text: str = ""
    error: dict[str, Any] | None = None

    def json(self) -> Any:
        return json.loads(self.text)


class FakePortal:
    def __init__(self, agent_id: str, key: str, *, name: str = "helper") -> None:
        self.agent_id = agent_id
        self.key = key
        self.name = name
        self.signing = new_key()
        self.port = 0
        self.server: Server | None = None
        self.connections: list[ServerConnection] = []
        self.attempts = 0
        self.jwks_fetches = 0
        self.refuse: str | None = None
        """"status": 401 before the upgrade; "close": 4401 after it; "missing": no /ws (403)."""
        self.hello_agent_id: str | None = None
        self.allow_others = True
        """The owner's choice, as GET /api/agents/<id>/access answers it to the auth skill."""
        self._replies: dict[str, asyncio.Queue[dict[str, Any]]] = {}
        self.connected = asyncio.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def jwks(self) -> dict[str, Any]:
        public = jwt.algorithms.RSAAlgorithm.to_jwk(self.signing.public_key(), as_dict=True)
        return {"keys": [{**public, "kid": KID, "alg": "RS256", "use": "sig"}]}

    def assertion(
        self,
        *,
        key: rsa.RSAPrivateKey | None = None,
        kid: str = KID,
        **claims: Any,
    ) -> str:
        now = int(time.time())
        payload: dict[str, Any] = {
            "iss": self.url,
            "aud": f"agent:{self.agent_id}",
            "sub": str(uuid.uuid4()),
            "username": "bob",
            "tier": "user",
            "jti": uuid.uuid4().hex,
            "iat": now,
            "exp": now + 60,
            "typ": "connect",
        }
        payload.update(claims)
        payload = {k: v for k, v in payload.items() if v is not None}
        return jwt.encode(
            payload, pem(key or self.signing), algorithm="RS256", headers={"kid": kid}
        )

    async def start(self) -> FakePortal:
        self.server = await serve(
            self._handler,
            "127.0.0.1",
            self.port,
            process_request=self._process_request,
            compression=None,
        )
        self.port = next(iter(self.server.sockets)).getsockname()[1]
        return self

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()
            self.server = None
        self.connections.clear()
        self.connected.clear()

    def _process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        if request.path == "/.well-known/jwks.json":
            self.jwks_fetches += 1
            answer = connection.respond(HTTPStatus.OK, json.dumps(self.jwks()))
            answer.headers = Headers({"Content-Type": "application/json"})
            answer.headers["Content-Length"] = str(len(answer.body))
            return answer
        if request.path == f"/api/agents/{self.agent_id}/access":
            body = json.dumps({"allowOthers": self.allow_others})
            answer = connection.respond(HTTPStatus.OK, body)
            answer.headers = Headers({"Content-Type": "application/json"})
            answer.headers["Content-Length"] = str(len(answer.body))
            return answer
        if request.path != "/ws":
            return connection.respond(HTTPStatus.NOT_FOUND, "not found\n")
        self.attempts += 1
        if self.refuse == "missing":  # a portal from before Portal Connect
            return connection.respond(HTTPStatus.FORBIDDEN, "no such endpoint\n")
        sent = request.headers.get("Authorization")
        if self.refuse == "status" or sent != f"Bearer {self.key}":
            return connection.respond(HTTPStatus.UNAUTHORIZED, "the agent key is not valid\n")
        return None

    async def _handler(self, ws: ServerConnection) -> None:
        if self.refuse == "close":
            await ws.close(4401, "the agent key is not valid")
            return
        await ws.send(
            json.dumps(
                {
                    "type": "hello",
                    "agent_id": self.hello_agent_id or self.agent_id,
                    "agent_name": self.name,
                    "public_url": f"{self.url}/agents/{self.name}/chat/completions",
                    "connection_id": uuid.uuid4().hex,
                }
            )
        )
        self.connections.append(ws)
        self.connected.set()
        try:
            async for message in ws:
                frame = json.loads(message)
                queue = self._replies.get(str(frame.get("id")))
                if queue is not None:
                    await queue.put(frame)
        except ConnectionClosed:
            pass  # the agent went away: what the tests look at is on the agent's side
        finally:
            with contextlib.suppress(ValueError):
                self.connections.remove(ws)
            if not self.connections:
                self.connected.clear()

    async def send_request(
        self, body: dict[str, Any] | None, assertion: str | None, **call: str
    ) -> str:
        """Relay a request over the newest connection; its id. Without `call` (method, path,
        query) the frame is a portal's of the version before they were carried; with one, a
        None body is left out, as the portal leaves out a GET's."""
        request_id = uuid.uuid4().hex
        self._replies[request_id] = asyncio.Queue()
        frame: dict[str, Any] = {"type": "request", "id": request_id, **call}
        if body is not None or not call:
            frame["body"] = body
        if assertion is not None:
            frame["assertion"] = assertion
        await self.connections[-1].send(json.dumps(frame))
        return request_id

    async def cancel(self, request_id: str) -> None:
        await self.connections[-1].send(json.dumps({"type": "cancel", "id": request_id}))

    async def next_frame(self, request_id: str) -> dict[str, Any]:
        return await asyncio.wait_for(self._replies[request_id].get(), 30)

    async def reply(self, request_id: str) -> Reply:
        """Every frame of the reply to `request_id`, up to its end (or error)."""
        reply = Reply()
        while True:
            frame = await self.next_frame(request_id)
            if frame["type"] == "start":
                reply.status, reply.headers = frame["status"], frame["headers"]
            elif frame["type"] == "data":
                reply.text += frame["chunk"]
            elif frame["type"] == "error":
                reply.error = frame
                return reply
            elif frame["type"] == "end":
                return reply

    async def relay(self, body: dict[str, Any] | None, assertion: str | None, **call: str) -> Reply:
        return await self.reply(await self.send_request(body, assertion, **call))
