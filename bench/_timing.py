"""Medians of repeated calls, for the benchmarks (run as scripts: bench/ is on the path)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any


def median_ms(fn: Callable[[], Any], repeat: int) -> float:
    """The median of `repeat` calls of `fn`, in milliseconds."""
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        fn()
        times.append(time.perf_counter() - began)
    return statistics.median(times) * 1000


async def amedian_ms(fn: Callable[[], Awaitable[Any]], repeat: int) -> float:
    """The median of `repeat` awaited calls of `fn`, in milliseconds (in a running loop)."""
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        await fn()
        times.append(time.perf_counter() - began)
    return statistics.median(times) * 1000
