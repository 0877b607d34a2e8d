"""A small agent for the Portal Connect tests: it speaks the wire contract (docs/portal.md,
"Portal Connect") over a real WebSocket with the `websockets` client, in a thread of its own,
and keeps what it was sent. It answers with the caller the assertion names (read without
verifying: the tests verify the assertions themselves, with the portal's JWKS)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import jwt
import websockets

WAIT = 60.0  # bounded waits of the tests (never a timed assertion)


@dataclass
class Seen:
    hellos: list[dict[str, Any]] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    cancels: list[str] = field(default_factory=list)
    memory: list[dict[str, Any]] = field(default_factory=list)  # memory_changed notices


def answer_text(request: dict[str, Any]) -> str:
    claims = jwt.decode(request["assertion"], options={"verify_signature": False})
    last = request["body"]["messages"][-1]["content"]
    return f"{claims['tier']} {claims['username']} said: {last}"


class ConnectAgent:
    """Modes: `echo` answers at once; `hang` starts a reply and waits (for a cancel);
    `drop` starts a reply and closes the connection. Reconnects (`reconnect=True`) after a
    dropped connection, as `webagents serve` does."""

    def __init__(self, portal_url: str, key: str, mode: str = "echo", reconnect: bool = True):
        self.url = portal_url.replace("http", "ws", 1) + "/ws"
        self.key = key
        self.mode = mode
        self.reconnect = reconnect
        self.seen = Seen()
        self._stop = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_until_complete, args=(self._run(),))
        self._thread.daemon = True
        self._thread.start()

    def wait_for(self, what: str, count: int = 1) -> None:
        deadline = time.monotonic() + WAIT
        while len(getattr(self.seen, what)) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"the agent never got {count} {what}: {self.seen}")
            time.sleep(0.02)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=WAIT)
        if not self._thread.is_alive():
            self._loop.close()

    async def _run(self) -> None:
        while not self._stop.is_set():
            try:
                async with websockets.connect(
                    self.url, additional_headers={"Authorization": f"Bearer {self.key}"}
                ) as socket:
                    await self._serve(socket)
            except (OSError, websockets.ConnectionClosed, websockets.InvalidStatus):
                pass
            if not self.reconnect:
                return
            await asyncio.sleep(0.2)

    async def _serve(self, socket: Any) -> None:
        while not self._stop.is_set():
            try:
                text = await asyncio.wait_for(socket.recv(), 0.2)
            except TimeoutError:
                continue
            message = json.loads(text)
            if message["type"] == "hello":
                self.seen.hellos.append(message)
            elif message["type"] == "cancel":
                self.seen.cancels.append(message["id"])
            elif message["type"] == "memory_changed":
                self.seen.memory.append(message)
            elif message["type"] == "request":
                self.seen.requests.append(message)
                if await self._answer(socket, message) == "dropped":
                    return

    async def _answer(self, socket: Any, request: dict[str, Any]) -> str:
        request_id = request["id"]
        if request.get("path", "chat/completions") != "chat/completions":
            return await _echo_call(socket, request)
        stream = request["body"].get("stream") is True
        kind = "text/event-stream" if stream else "application/json"
        await socket.send(
            json.dumps(
                {
                    "type": "start",
                    "id": request_id,
                    "status": 200,
                    "headers": {"content-type": kind, "X-Webagents-Caller": "relayed"},
                }
            )
        )
        text = answer_text(request)
        if self.mode in ("hang", "drop"):
            await socket.send(json.dumps({"type": "data", "id": request_id, "chunk": _sse("…")}))
            if self.mode == "drop":
                await socket.close()
                return "dropped"
            return "hanging"
        if stream:
            for word in text.split(" "):
                chunk = _sse(word + " ")
                await socket.send(json.dumps({"type": "data", "id": request_id, "chunk": chunk}))
            done = "data: [DONE]\n\n"
            await socket.send(json.dumps({"type": "data", "id": request_id, "chunk": done}))
        else:
            body = json.dumps(_completion(text))
            half = len(body) // 2  # in two chunks, as an agent may send it
            for chunk in (body[:half], body[half:]):
                await socket.send(json.dumps({"type": "data", "id": request_id, "chunk": chunk}))
        await socket.send(json.dumps({"type": "end", "id": request_id}))
        return "answered"


@contextmanager
def connected(portal_url: str, key: str) -> Iterator[ConnectAgent]:
    """An echoing agent, once the portal said hello to it; stopped at the end."""
    agent = ConnectAgent(portal_url, key)
    try:
        agent.wait_for("hellos")
        yield agent
    finally:
        agent.stop()


async def _echo_call(socket: Any, request: dict[str, Any]) -> str:
    """A call of another path: answered with what the frame asked (method, path, query,
    body), as JSON."""
    asked = {key: request.get(key) for key in ("method", "path", "query", "body")}
    for frame in (
        {"type": "start", "id": request["id"], "status": 200, "headers": {}},
        {"type": "data", "id": request["id"], "chunk": json.dumps(asked)},
        {"type": "end", "id": request["id"]},
    ):
        await socket.send(json.dumps(frame))
    return "answered"


def _sse(content: str) -> str:
    chunk = {
        "id": "chatcmpl-test",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "scripted",
        "choices": [{"index": 0, "delta": {"content": content}, "finish_reason": None}],
    }
    return f"data: {json.dumps(chunk)}\n\n"


def _completion(text: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 0,
        "model": "scripted",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }
