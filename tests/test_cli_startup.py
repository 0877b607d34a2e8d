"""A server's start with the garbage collector paused (cli/startup.py): paused inside the
block, back on once `serving()` says the start is over, and as it was after the block
whatever happens, a failed start included."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from webagents.cli.startup import paused_collector, serving


@pytest.fixture(autouse=True)
def _collector_as_found() -> Iterator[None]:
    was_enabled = gc.isenabled()
    yield
    gc.unfreeze()  # what a test's serving() froze is collectable again
    if was_enabled:
        gc.enable()


def test_startup_paused_until_serving_then_frozen_and_on() -> None:
    gc.enable()
    with paused_collector():
        assert not gc.isenabled()
        frozen_before = gc.get_freeze_count()
        serving()
        assert gc.isenabled()
        assert gc.get_freeze_count() > frozen_before
    assert gc.isenabled()


def test_startup_a_failed_start_leaves_the_collector_on() -> None:
    gc.enable()
    with pytest.raises(RuntimeError, match="port in use"), paused_collector():
        assert not gc.isenabled()
        raise RuntimeError("port in use")
    assert gc.isenabled()
    assert gc.get_freeze_count() == 0


def test_startup_a_collector_turned_off_by_the_caller_stays_off() -> None:
    gc.disable()
    with paused_collector():
        pass
    assert not gc.isenabled()
    serving()  # outside a pause: changes nothing
    assert not gc.isenabled()
    assert gc.get_freeze_count() == 0
