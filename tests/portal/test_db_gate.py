"""The database gate (portal/db/gate.py): how many requests work on the database at once,
who waits, who is refused at once and what Retry-After they are told (issue 21)."""

from __future__ import annotations

import asyncio
import threading
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


def _measured(monkeypatch: pytest.MonkeyPatch, gap: float) -> tuple[DatabaseGate, list[float]]:
    """A gate whose slots and queue are full (8 and 64), that has measured one request
    finished every `gap` seconds, and its clock (now[0])."""
    now = [1000.0]
    monkeypatch.setattr(gate.time, "monotonic", lambda: now[0])
    made = DatabaseGate(GateLimits(slots=8, waiting=64), one_writer=False)
    made._waiting = 64
    for _ in range(200):  # finished while others wait: the gap's average comes to `gap`
        now[0] += gap
        made._finished()
    return made, now


def test_p_gate_retry_after_is_the_time_the_requests_before_it_take(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Told when there will be room: the 72 requests in the gate and the clients refused
    before it, at the measured rate (8 a second here), rounded up to whole seconds; each
    second's clients are told to come back as many as the gate serves in a second, in the
    order they were refused, and the promises of seconds that have come are forgotten."""
    made, now = _measured(monkeypatch, 0.125)
    told = [made.retry_after() for _ in range(40)]
    # 72 ahead: 9 s; then 8 clients more each second (73 to 80 ahead: 10 s; ...).
    assert told == [9] + [10] * 8 + [11] * 8 + [12] * 8 + [13] * 8 + [14] * 7
    now[0] += 20  # every promise's second has come: only the gate's 72 are ahead again
    assert made.retry_after() == 9


def test_p_gate_retry_after_is_one_to_thirty_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bounded: at least 1 s (a fast gate, or one that measured nothing yet), at most 30 s
    (a slow one with a crowd before it), so that no client is told to wait for ever."""
    fast, _ = _measured(monkeypatch, 0.001)
    assert [fast.retry_after() for _ in range(3)] == [1, 1, 1]
    assert DatabaseGate(GateLimits(), one_writer=False).retry_after() == 1
    slow, _ = _measured(monkeypatch, 0.25)
    told = [slow.retry_after() for _ in range(100)]
    assert (told[0], told[44], told[45], told[-1], max(told)) == (18, 29, 30, 30, 30)


async def test_p_gate_a_threads_turn_among_the_writers_on_sqlite() -> None:
    """The embedding worker's thread takes the writers' turn in line: its block begins after
    the writer before it, and a writer after it waits for the block's end."""
    made = DatabaseGate(GateLimits(slots=4, waiting=4, wait_seconds=30), one_writer=True)
    loop = asyncio.get_running_loop()
    order: list[str] = []
    in_block, leave_block = threading.Event(), threading.Event()

    def thread() -> None:
        with made.thread_turn(loop):
            order.append("thread's block")
            in_block.set()
            leave_block.wait(10)

    async with AsyncExitStack() as writer:
        await _held(writer, made, writes=True)
        running = loop.run_in_executor(None, thread)
        for _ in range(50):  # the thread waits in line behind the writer
            await asyncio.sleep(0.01)
        assert order == []
        order.append("first writer done")
    await loop.run_in_executor(None, in_block.wait, 10)
    second = asyncio.ensure_future(_held(AsyncExitStack(), made, writes=True))
    second.add_done_callback(lambda _: order.append("second writer"))
    for _ in range(50):
        await asyncio.sleep(0.01)
    assert not second.done()  # the thread holds the turn
    leave_block.set()
    await running
    await second
    assert order == ["first writer done", "thread's block", "second writer"]


async def test_p_gate_a_thread_goes_on_without_a_turn_that_does_not_come() -> None:
    """Held past `wait`: the block runs anyway, and the turn, taken later, is given back at
    once (none is kept by a thread that stopped waiting)."""
    made = DatabaseGate(GateLimits(slots=4, waiting=4, wait_seconds=30), one_writer=True)
    loop = asyncio.get_running_loop()
    ran: list[str] = []

    def thread() -> None:
        with made.thread_turn(loop, wait=0.05):
            ran.append("block")

    async with AsyncExitStack() as writer:
        await _held(writer, made, writes=True)
        await loop.run_in_executor(None, thread)
        assert ran == ["block"]
    for _ in range(10):  # the late turn taken and given back
        await asyncio.sleep(0)
    async with asyncio.timeout(5):
        async with made.enter(writes=True):
            pass


def test_p_gate_a_threads_turn_is_no_wait_without_a_writers_line_or_a_loop() -> None:
    """PostgreSQL (no writers' line), no loop yet (the app not serving), or one not running:
    the block runs at once."""
    postgresql = DatabaseGate(GateLimits(), one_writer=False)
    sqlite = DatabaseGate(GateLimits(), one_writer=True)
    stopped = asyncio.new_event_loop()
    try:
        for made, loop in ((postgresql, stopped), (sqlite, None), (sqlite, stopped)):
            with made.thread_turn(loop, wait=30):
                pass
    finally:
        stopped.close()
    assert not sqlite._writer.locked()  # type: ignore[union-attr]
