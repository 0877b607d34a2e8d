"""Portal Connect, the agent's side (SPEC A4, P12): a published agent served by `webagents
serve` or `webagents daemon` keeps a WebSocket open to `<portal>/ws`, authenticated with its
key, and answers the requests the portal relays over it (server/relay.py) with this server's
own app. The wire contract is in docs/portal.md ("Portal Connect").

A dropped connection is opened again with jittered exponential backoff, capped; the log says
so once per outage, not per try. A portal that refuses the key is told about once, with what
to do, and asked again only rarely (a new key may be put in place meanwhile).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

import orjson
from pydantic import ValidationError
from starlette.types import ASGIApp
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus, WebSocketException

from ..home import agent_key_file, is_agent_id
from ..portal_wire.connect import Cancel, ErrorFrame, Hello, MemoryChanged
from ..server.hosting import AgentHost, ServedAgent
from ..server.relay import Frame, RelayedRequest, SendFrame
from ..skills.auth import AuthSkill
from .errors import first_problem
from .login import AGENT_TOKEN_ENV, agent_key, load_login, portal_url
from .memory_sync.sync import PortalSync

log = logging.getLogger("webagents.connect")

FIRST_BACKOFF_SECONDS = 0.5
MAX_BACKOFF_SECONDS = 30.0
REFUSED_RETRY_SECONDS = 300.0
"""How long after a refusal of the key (or a portal without Connect) it is asked again."""
HELLO_TIMEOUT_SECONDS = 10.0
KEY_REFUSED_CLOSE = 4401
STEADY_SECONDS = 10.0
"""A connection up this long that drops starts a new outage (backoff from the start again);
one that drops sooner goes on backing off, so a flapping portal is not asked in a tight loop."""
SYNC_SECONDS = 2.0
"""How often the daemon's connections are matched to the agents it serves right now."""


class _Refused(Exception):
    """The portal will not take this connection as it is: retrying soon cannot help."""


def backoff(attempt: int) -> float:
    """Seconds before try `attempt` (1, 2, ...) of an outage: doubling from
    FIRST_BACKOFF_SECONDS up to MAX_BACKOFF_SECONDS, each drawn from its upper half so that
    many agents cut off at once do not all come back at the same moment."""
    ceiling = min(MAX_BACKOFF_SECONDS, FIRST_BACKOFF_SECONDS * 2 ** min(attempt - 1, 30))
    return random.uniform(ceiling / 2, ceiling)


async def _pause(seconds: float) -> None:
    """The wait between two tries to connect (one place, so that tests can count them)."""
    await asyncio.sleep(seconds)


def websocket_url(portal: str) -> str:
    """`<portal>/ws` with the WebSocket scheme (wss:// for an https:// portal)."""
    scheme, _, rest = portal.rstrip("/").partition("://")
    return f"{'wss' if scheme == 'https' else 'ws'}://{rest}/ws"


@dataclass(frozen=True)
class Target:
    """Where one served agent connects: its portal, and its id there (None: the portal's
    hello names it, for an agent connected with WEBAGENTS_AGENT_TOKEN and no link)."""

    agent: str
    portal: str
    agent_id: str | None


class AgentConnection:
    """One served agent's connection to its portal, opened again whenever it drops."""

    def __init__(
        self, app: ASGIApp, host: AgentHost, target: Target, *, profile: str | None = None
    ) -> None:
        self.app = app
        self.host = host
        self.target = target
        self.profile = profile
        self.public_url: str | None = None
        self._running: dict[str, RelayedRequest] = {}
        self._up_since: float | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def _say(self, level: int, message: str, *args: Any) -> None:
        log.log(level, "agent %r: " + message, self.target.agent, *args)

    async def run(self) -> None:
        try:
            await self._run()
        finally:
            # Stopped: its relays and its fetch of the keys end with it, before the agent's
            # verifier is closed (a fetch left running would open a client nobody closes).
            tasks = list(self._tasks)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _run(self) -> None:
        tries = 0  # failed tries of the outage going on; 0: none
        refused = False
        keyless = False
        while True:
            key = agent_key(self.target.agent_id, self.profile)
            if key is None:
                if not keyless:
                    self._say(
                        logging.ERROR,
                        "Portal Connect has no key for it on this machine (no %s, and %s is "
                        "not set): run webagents publish again, or set %s; serving locally "
                        "only (the key is looked for again every %g s)",
                        agent_key_file(self.target.agent_id, self.profile)
                        if self.target.agent_id
                        else "published key",
                        AGENT_TOKEN_ENV,
                        AGENT_TOKEN_ENV,
                        REFUSED_RETRY_SECONDS,
                    )
                keyless = True
                await _pause(REFUSED_RETRY_SECONDS)
                continue
            keyless = False
            self._up_since = None
            try:
                await self._connect(key, tries)
                reason = "the portal closed it"
            except _Refused as exc:
                if not refused:
                    self._say(
                        logging.ERROR, "%s (asked again every %g s)", exc, REFUSED_RETRY_SECONDS
                    )
                refused, tries = True, 0
                await _pause(REFUSED_RETRY_SECONDS)
                continue
            except (OSError, WebSocketException, TimeoutError) as exc:
                reason = _reason(exc)
            except Exception as exc:  # not a network failure: a fault here, said with its trace
                log.error("agent %r: Portal Connect failed", self.target.agent, exc_info=exc)
                reason = _reason(exc)
            refused = False
            up_since = self._up_since
            if (
                up_since is not None
                and asyncio.get_running_loop().time() - up_since >= STEADY_SECONDS
            ):
                tries = 0  # it was up a while: this is a new outage, and said once
            if tries == 0 and up_since is not None:
                self._say(
                    logging.WARNING,
                    "lost the connection to the portal %s (%s); reconnecting in the background "
                    "with backoff up to %g s",
                    self.target.portal,
                    reason,
                    MAX_BACKOFF_SECONDS,
                )
            elif tries == 0:
                self._say(
                    logging.WARNING,
                    "cannot connect to the portal %s for Portal Connect (%s); retrying in the "
                    "background with backoff up to %g s",
                    self.target.portal,
                    reason,
                    MAX_BACKOFF_SECONDS,
                )
            tries += 1
            await _pause(backoff(tries))

    async def _connect(self, key: str, tries: int) -> None:
        """One connection, served until it closes; `_Refused` when the portal will not take it."""
        try:
            async with connect(
                websocket_url(self.target.portal),
                additional_headers={"Authorization": f"Bearer {key}"},
                open_timeout=HELLO_TIMEOUT_SECONDS,
                max_size=64 * 1024 * 1024,
                compression=None,  # small frames, and the latency counts
            ) as ws:
                try:
                    await self._hello(ws, tries)
                    await self._serve(ws)
                except asyncio.CancelledError:
                    await ws.close(1001, "the agent is stopping")  # not an error of either side
                    raise
                finally:
                    for request in self._running.values():
                        request.cancel()  # nobody is left to read their replies
        except InvalidStatus as exc:
            raise self._refusal(exc.response.status_code) from None
        except ConnectionClosed as exc:
            if exc.rcvd is not None and exc.rcvd.code == KEY_REFUSED_CLOSE:
                raise self._refusal(401, exc.rcvd.reason) from None
            raise

    def _refusal(self, status: int, reason: str = "") -> Exception:
        said = f": {reason}" if reason else ""
        if status == 401:
            return _Refused(
                f"the portal {self.target.portal} refused this agent's key{said}: run webagents "
                f"publish again (or set {AGENT_TOKEN_ENV} to the agent's current key)"
            )
        if status in (403, 404):  # what an app without the WebSocket route answers
            return _Refused(
                f"the portal {self.target.portal} has no Portal Connect endpoint (/ws answered "
                f"{status}): update the portal, or serve with --no-connect"
            )
        return OSError(f"the portal answered HTTP {status} at /ws")

    async def _hello(self, ws: ClientConnection, tries: int) -> None:
        # asyncio.timeout, not wait_for: on Python 3.11 a stop that came as the hello arrived
        # was swallowed by wait_for (it returned the hello), and the stopped connection went
        # on serving, so `webagents serve` waited for it forever.
        async with asyncio.timeout(HELLO_TIMEOUT_SECONDS):
            text = await ws.recv()
        try:
            hello = Hello.model_validate_json(text, strict=True)
        except ValidationError as exc:
            field, said = first_problem(exc)
            where = f"`{field}`" if field else "the frame"
            raise OSError(f"the portal did not start with hello ({where}: {said})") from None
        agent_id = hello.agent_id
        if self.target.agent_id is not None and agent_id != self.target.agent_id:
            raise _Refused(
                f"the portal {self.target.portal} knows this key as agent {agent_id!r}, not as "
                f"{self.target.agent_id} (the folder's link): run webagents publish again"
            )
        served = self.host.get(self.target.agent)
        named = agent_id if is_agent_id(agent_id) else None
        if served is not None and served.verifier.relay is None and named is not None:
            # Connected with WEBAGENTS_AGENT_TOKEN and no link: the portal named the agent.
            served.verifier.relay = AuthSkill.for_connect(self.target.portal, named)
        if served is not None and served.verifier.relay is not None:
            self._start_task(served.verifier.relay.warm(), "connect-keys")
        self.public_url = hello.public_url
        self._up_since = asyncio.get_running_loop().time()
        self._memory_changed(None)  # notices may have been missed while it was not connected
        again = f" again after {tries} tries" if tries else ""
        self._say(
            logging.INFO,
            "connected%s to the portal %s (Portal Connect): callers reach it at %s",
            again,
            self.target.portal,
            self.public_url,
        )

    async def _serve(self, ws: ClientConnection) -> None:
        async def send(frame: Frame) -> None:
            with contextlib.suppress(ConnectionClosed):  # the portal fails the caller itself
                await ws.send(orjson.dumps(frame).decode())

        async for message in ws:
            try:
                await self._take(message, send)
            except Exception as exc:
                # One frame must never end the connection (any caller the owner allows can
                # make the portal relay anything): it is logged, answered when it asked for
                # an answer, and the next frame is read.
                log.error("Portal Connect: a frame could not be handled", exc_info=exc)
                await self._failed(message, send)

    async def _take(self, message: str | bytes, send: SendFrame) -> None:
        try:
            frame = orjson.loads(message)
        except orjson.JSONDecodeError:
            log.warning("Portal Connect: a frame that is not JSON was ignored")
            return
        kind = frame.get("type") if isinstance(frame, dict) else None
        if kind == "request":
            self._start(RelayedRequest(self.app, self.target.agent, frame, send))
        elif kind == "cancel":
            running = self._running.get(Cancel.model_validate(frame, strict=True).id)
            if running is not None:
                running.cancel()
        elif kind == "ping":
            await send({"type": "pong"})
        elif kind == "memory_changed":
            self._memory_changed(MemoryChanged.model_validate(frame, strict=True).cursor)

    def _memory_changed(self, cursor: str | None) -> None:
        """The agent's memory changed in the portal (another process of it wrote, or its
        owner): the served agent's portal sync pulls at once (`memory: {portal: true}`)."""
        served = self.host.get(self.target.agent)
        memory = served.agent.skill("memory") if served is not None else None
        sync = getattr(memory, "sync", None)
        if isinstance(sync, PortalSync):
            sync.changed_in_portal(cursor)

    @staticmethod
    async def _failed(message: str | bytes, send: SendFrame) -> None:
        """The error answer of a request frame that could not be taken (none for others)."""
        # Best effort: the frame itself may be what failed, and nothing here may end the loop.
        with contextlib.suppress(Exception):
            frame = orjson.loads(message)
            if isinstance(frame, dict) and frame.get("type") == "request":
                failed = ErrorFrame(
                    id=str(frame.get("id")),
                    status=500,
                    message="the agent could not take this request",
                    code="agent_error",
                )
                await send(failed.model_dump())

    def _start(self, request: RelayedRequest) -> None:
        self._running[request.id] = request

        async def answer() -> None:
            try:
                await request.run()
            finally:
                if self._running.get(request.id) is request:
                    del self._running[request.id]

        self._start_task(answer(), f"relay-{request.id}")

    def _start_task(self, work: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.create_task(work, name=name)
        self._tasks.add(task)  # kept until done: the loop holds tasks only weakly
        task.add_done_callback(self._tasks.discard)


def _reason(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


def target_of(served: ServedAgent, forced: bool) -> Target | None:
    """Where `served` connects: the portal whose keys verify its relayed requests (a published
    agent's); with --connect, an agent not published connects with WEBAGENTS_AGENT_TOKEN to
    the portal of the login or ROBUTLER_API_URL."""
    relay = served.verifier.relay
    if relay is not None and relay.portal is not None:
        return Target(served.name, relay.portal, relay.agent_id)
    if not forced:
        return None
    kept = load_login(served.agent.info.profile)
    return Target(served.name, portal_url(None, kept.portal if kept else None), None)


class Connector:
    """The connections of every agent a host serves that connects (the daemon's agents come
    and go: matched to the host every SYNC_SECONDS)."""

    def __init__(self, host: AgentHost, *, forced: bool, profile: str | None) -> None:
        self.host = host
        self.forced = forced
        self.profile = profile
        self.connections: dict[Target, tuple[AgentConnection, asyncio.Task[None]]] = {}

    def targets(self) -> list[Target]:
        return [t for served in self.host.all() if (t := target_of(served, self.forced))]

    async def run(self, app: ASGIApp) -> None:
        try:
            while True:
                self._reap()
                wanted = set(self.targets())
                for target in set(self.connections) - wanted:
                    self.connections.pop(target)[1].cancel()
                for target in wanted - set(self.connections):
                    connection = AgentConnection(app, self.host, target, profile=self.profile)
                    task = asyncio.create_task(connection.run(), name=f"connect-{target.agent}")
                    self.connections[target] = (connection, task)
                await asyncio.sleep(SYNC_SECONDS)
        finally:
            tasks = [task for _, task in self.connections.values()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def _reap(self) -> None:
        """The supervisor: a connection task that ended (it never should while its agent is
        served) is logged and dropped, and opened again below as any wanted target."""
        for target, (_, task) in list(self.connections.items()):
            if not task.done():
                continue
            del self.connections[target]
            failure = None if task.cancelled() else task.exception()
            log.error(
                "agent %r: the Portal Connect connection ended (%s); opening it again",
                target.agent,
                _reason(failure) if failure is not None else "it stopped",
                exc_info=failure,
            )
