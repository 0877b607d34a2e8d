"""The browser of the portal's page tests: Debian's `chromium`, driven by Playwright through
`executable_path` (Playwright's own browser download needs the internet). Without chromium
or Playwright the browser tests are skipped with the reason, unless
WEBAGENTS_REQUIRE_BROWSER=1, which makes them fail (CI sets it)."""

from __future__ import annotations

import inspect
import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

REQUIRE_BROWSER_ENV = "WEBAGENTS_REQUIRE_BROWSER"
CANDIDATES = ("chromium", "chromium-browser")


def _unavailable(reason: str) -> None:
    if os.environ.get(REQUIRE_BROWSER_ENV) == "1":
        pytest.fail(f"a browser is required ({REQUIRE_BROWSER_ENV}=1) but {reason}")
    pytest.skip(f"browser tests skipped: {reason}")


@pytest.fixture(scope="module")
def chromium(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A launched Chromium (Playwright's Browser), one for each test module (and so for each
    xdist worker that runs its tests): starting Playwright's driver and the browser costs more
    than a test's own pages. Not for the whole session: Playwright's sync API keeps an event
    loop running while it is open, which async tests cannot share; a module of browser tests
    has no async test."""
    asynchronous = [
        name
        for name, value in vars(request.module).items()
        if name.startswith("test") and inspect.iscoroutinefunction(value)
    ]
    if asynchronous:
        pytest.fail(
            f"{request.module.__name__} has browser tests and async ones"
            f" ({', '.join(asynchronous)}): the browser's event loop stays open for the module,"
            " so move the async tests to a module of their own"
        )
    executable = next((found for name in CANDIDATES if (found := shutil.which(name))), None)
    if executable is None:
        _unavailable("chromium is not installed (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("Playwright is not installed (pip install playwright)")
        raise  # unreachable: _unavailable skips or fails
    with sync_playwright() as playwright:
        # Chromium's sandbox refuses to run as root (CI's user): without it there.
        args = ["--no-sandbox"] if os.geteuid() == 0 else []
        browser = playwright.chromium.launch(executable_path=executable, args=args)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def page(chromium: Any) -> Iterator[Any]:
    """A fresh browser context (its own cookies) and page for one test."""
    context = chromium.new_context()
    try:
        yield context.new_page()
    finally:
        context.close()
