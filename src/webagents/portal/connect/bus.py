"""Messages between portal processes on PostgreSQL: LISTEN/NOTIFY, one channel per process.

A process listens on `webagents_connect_<its id>` over a connection of its own (psycopg 3,
autocommit; never a pooled session), and sends over a second one, one message at a time, so
that a sender's messages arrive in the order sent (NOTIFYs of one session are delivered in
order). A message over NOTIFY's 8000 bytes goes into relay_payloads and the NOTIFY carries
the row's id; the receiver takes the row. On SQLite there is no bus: one portal process."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg import sql

from ..db import dialect

log = logging.getLogger("webagents.portal.connect")

# NOTIFY's payload must be shorter than 8000 bytes; the rest of the envelope is small.
INLINE_LIMIT = 7000
RETRY_SECONDS = 1.0

Handler = Callable[[dict[str, Any]], None]


def channel_of(process_id: uuid.UUID) -> str:
    return f"webagents_connect_{process_id.hex}"


class Bus:
    def __init__(self, database_url: str, process_id: uuid.UUID, handler: Handler) -> None:
        self._conninfo = dialect.libpq_of(database_url)
        self._channel = channel_of(process_id)
        self._handler = handler
        self._outbox: asyncio.Queue[tuple[uuid.UUID, dict[str, Any]]] = asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []
        self._listening = asyncio.Event()

    async def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._listen(), name="connect-bus-listen"),
            asyncio.create_task(self._send(), name="connect-bus-send"),
        ]
        await asyncio.wait_for(self._listening.wait(), 30)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._sender is not None:
            with contextlib.suppress(Exception):
                await self._sender.close()

    def post(self, process_id: uuid.UUID, message: dict[str, Any]) -> None:
        """Queue a message for the process (sent in order, without waiting here)."""
        self._outbox.put_nowait((process_id, message))

    async def _listen(self) -> None:
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(
                    self._conninfo, autocommit=True
                ) as conn:
                    await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self._channel)))
                    self._listening.set()
                    async for notice in conn.notifies():
                        await self._received(notice.payload)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the database restarted: listen again
                log.warning("connect: listening for relayed requests failed (%s); retrying", exc)
                await asyncio.sleep(RETRY_SECONDS)

    async def _received(self, payload: str) -> None:
        try:
            message = json.loads(payload)
            if isinstance(message, dict) and "ref" in message:
                body = await self._take(uuid.UUID(str(message["ref"])))
                message = json.loads(body) if body is not None else None
        except (ValueError, psycopg.Error) as exc:
            log.warning("connect: a relay message could not be read (%s)", exc)
            return
        if isinstance(message, dict):
            try:
                self._handler(message)
            except Exception:
                log.exception("connect: a relay message failed")

    async def _take(self, ref: uuid.UUID) -> str | None:
        async with await psycopg.AsyncConnection.connect(self._conninfo, autocommit=True) as conn:
            cursor = await conn.execute(
                "DELETE FROM relay_payloads WHERE id = %s RETURNING body", (ref,)
            )
            row = await cursor.fetchone()
        return str(row[0]) if row else None

    async def _send(self) -> None:
        while True:
            process_id, message = await self._outbox.get()
            text = json.dumps(message, separators=(",", ":"), ensure_ascii=False)
            while True:
                try:
                    await self._notify(process_id, text)
                    break
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    log.warning("connect: a relay message could not be sent (%s); retrying", exc)
                    self._sender = None
                    await asyncio.sleep(RETRY_SECONDS)

    _sender: psycopg.AsyncConnection[Any] | None = None

    async def _notify(self, process_id: uuid.UUID, text: str) -> None:
        if self._sender is None or self._sender.closed:
            self._sender = await psycopg.AsyncConnection.connect(self._conninfo, autocommit=True)
        conn = self._sender
        if len(text.encode()) > INLINE_LIMIT:
            ref = uuid.uuid4()
            await conn.execute(
                "INSERT INTO relay_payloads (id, body, created_at) VALUES (%s, %s, %s)",
                (ref, text, datetime.now(UTC)),
            )
            text = json.dumps({"ref": str(ref)})
        await conn.execute("SELECT pg_notify(%s, %s)", (channel_of(process_id), text))
