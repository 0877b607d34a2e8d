"""How bench/portal_load.py judges issue 21's load targets (its `shortfalls`): a client count
run more than once, alternated with another, is judged on its levels together, so one noisy
level decides nothing; errors and a p99 of 2 s or more are missed in any level."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[2] / "bench" / "portal_load.py"


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("portal_load", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_alternated_levels_of_one_client_count_are_judged_together() -> None:
    bench = _bench()
    levels = [
        bench.Level(16, ok=2300, took=10.0, p99=0.2, errors=0),
        bench.Level(256, ok=2100, took=10.0, p99=0.7, errors=0),
        bench.Level(16, ok=2000, took=10.0, p99=0.2, errors=0),
        bench.Level(256, ok=2250, took=10.0, p99=0.7, errors=0),
    ]
    # 256's second level is below 16's first, but together 217.5/s is above 215/s.
    assert bench.shortfalls("sqlite", levels) == []


def test_a_lower_rate_over_the_levels_together_is_missed() -> None:
    bench = _bench()
    levels = [
        bench.Level(16, ok=2300, took=10.0, p99=0.2, errors=0),
        bench.Level(256, ok=2100, took=10.0, p99=0.7, errors=0),
        bench.Level(16, ok=2200, took=10.0, p99=0.2, errors=0),
        bench.Level(256, ok=2250, took=10.0, p99=0.7, errors=0),
    ]
    assert bench.shortfalls("postgresql", levels) == ["postgresql at 256: 218/s below 225/s"]


def test_errors_and_a_slow_p99_are_missed_in_any_level() -> None:
    bench = _bench()
    levels = [
        bench.Level(16, ok=100, took=10.0, p99=0.2, errors=0),
        bench.Level(64, ok=100, took=10.0, p99=2.5, errors=3),
    ]
    assert bench.shortfalls("sqlite", levels) == [
        "sqlite at 64: 3 errors",
        "sqlite at 64: p99 2.50 s",
    ]
