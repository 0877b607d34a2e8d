"""Signing in through the browser and a user's key, for the pages' browser tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .account_helpers import new_user_key
from .conftest import PASSWORD


def _user_key(tmp_path: Path, database: str, username: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {new_user_key(database, username)}"}


def _sign_in(page: Any, url: str, username: str) -> None:
    page.goto(f"{url}/signin")
    page.fill("#username", username)
    page.fill("#password", PASSWORD)
    page.click("main button[type=submit]")
    page.wait_for_url(f"{url}/")
