"""Signing in through the browser and a user's key, for the pages' browser tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .conftest import PASSWORD
from .processes import portal


def _user_key(tmp_path: Path, database: str, username: str) -> dict[str, str]:
    added = portal(tmp_path, "adduser", username, "--database", database, stdin=PASSWORD + "\n")
    assert added.returncode == 0, added.stderr
    made = portal(tmp_path, "apikey", username, "--database", database)
    assert made.returncode == 0, made.stderr
    return {"Authorization": f"Bearer {made.stdout.splitlines()[-1]}"}


def _sign_in(page: Any, url: str, username: str) -> None:
    page.goto(f"{url}/signin")
    page.fill("#username", username)
    page.fill("#password", PASSWORD)
    page.click("main button[type=submit]")
    page.wait_for_url(f"{url}/")
