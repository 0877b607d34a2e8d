"""The database gate (portal/db/gate.py): how many requests work on the database at once,
who waits, who is refused at once and what Retry-After they are told (issue 21)."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack

import pytest

from webagents.portal.db import gate
from webagents.portal.db.gate import Busy, DatabaseGate, GateLimits


async def _held(stack: AsyncExitStack, made: DatabaseGate, *, writes: bool) -> None:
    await stack.enter_async_context(made.enter(writes=writes))


async def test_p_gate_admits_its_slots_queues_the_next_and_refuses_past_the_queue() -> None:
    made = DatabaseGate(GateLimits(slots=2, waiting=1, wait_seconds=30), one_writer=False)
    async with AsyncExitStack() as first:
        await _held(first, made, writes=True)
        async with AsyncExitStack() as second:
            await _held(second, made, writes=False)
            assert made.busy() is None  # the queue has room: a newcomer may wait

            queued = asyncio.ensure_future(_held(AsyncExitStack(), made, writes=True))
            for _ in range(100):  # until it waits (a bounded look, each a turn of the loop)
                if made.busy() is not None:
                    break
                await asyncio.sleep(0)
            refusal = made.busy()
            assert refusal is not None
            assert (refusal.status, refusal.code, refusal.message, refusal.retry_after) == (
                503,
                "server_busy",
                "the portal is busy: 1 requests already wait for the database; try again in 1 s",
                1,
            )
            with pytest.raises(Busy) as refused:
                async with made.enter(writes=False):
                    pass
            assert refused.value.message == refusal.message
            assert not queued.done()
        await queued  # a slot freed: the queued one went in
    assert made.busy() is None


async def test_p_gate_refuses_one_that_waited_past_its_bound() -> None:
    made = DatabaseGate(GateLimits(slots=1, waiting=5, wait_seconds=0.01), one_writer=False)
    async with made.enter(writes=False):
        with pytest.raises(Busy) as refused:
            async with made.enter(writes=False):
                pass
    assert (refused.value.status, refused.value.message) == (
        503,
        "the portal is busy: no request finished with the database within 0.01 s; try again in 1 s",
    )
    async with made.enter(writes=False):  # its place was given back
        pass


async def test_p_gate_on_sqlite_writers_take_turns_and_readers_pass_them() -> None:
    made = DatabaseGate(GateLimits(slots=4, waiting=4, wait_seconds=30), one_writer=True)
    order: list[str] = []
    async with AsyncExitStack() as writer:
        await _held(writer, made, writes=True)
        second_writer = asyncio.ensure_future(_held(AsyncExitStack(), made, writes=True))
        second_writer.add_done_callback(lambda _: order.append("second writer"))
        async with made.enter(writes=False):
            order.append("reader")
        await asyncio.sleep(0)
        order.append("first writer done")
    await second_writer
    assert order == ["reader", "first writer done", "second writer"]


def test_p_gate_retry_after_spreads_while_it_refuses_more_than_it_serves(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Refused clients told one second would all come back at once: the spread doubles each
    second the gate refused more than it served, up to 10 s, and is back at one after a
    quiet second."""
    now = [1000.0]
    monkeypatch.setattr(gate.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(gate.random, "randint", lambda low, high: high)  # the spread itself
    made = DatabaseGate(GateLimits(), one_writer=False)
    told = []
    for second in range(6):
        now[0] = 1000.0 + second
        told.append(made.retry_after())
        made.retry_after()  # two refused, one served: more refused than served
        made._finished()
    assert told == [1, 2, 4, 8, 10, 10]
    now[0] = 1010.0  # seconds with nothing refused nor served
    assert made.retry_after() == 1
