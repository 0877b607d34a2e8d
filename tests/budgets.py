"""Hypothesis budgets by profile: `quick` by default (the edit loop and `make test`), `ci` (the
thorough one, Hypothesis' own 100 examples a test) where HYPOTHESIS_PROFILE=ci, as `.ci/run`
sets it. Neither has a deadline: a test's time says nothing about its answer, and on a
loaded machine a deadline fails good code.

A test that asks for more examples than the default says so with `examples(n)`: `n` under
`ci`, scaled down with the profile otherwise."""

from __future__ import annotations

import os

from hypothesis import settings

PROFILE_ENV = "HYPOTHESIS_PROFILE"
THOROUGH = 100  # the ci profile's examples a test: Hypothesis' default

settings.register_profile("ci", max_examples=THOROUGH, deadline=None)
settings.register_profile("quick", max_examples=THOROUGH // 5, deadline=None)
settings.load_profile(os.environ.get(PROFILE_ENV, "quick"))


def examples(thorough: int) -> int:
    """The examples for a test that runs `thorough` of them under the ci profile: the same share
    of it as the profile loaded gives every other test (never fewer than 10)."""
    return max(10, thorough * settings.default.max_examples // THOROUGH)
