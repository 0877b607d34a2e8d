"""Signing up in a browser, for the browser tests."""

from __future__ import annotations

from typing import Any

from .conftest import PASSWORD


def _sign_up(page: Any, url: str, username: str) -> None:
    page.goto(f"{url}/signup")
    page.fill("#username", username)
    page.fill("#password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{url}/")
    assert page.inner_text("h1") == f"Signed in as {username}"
