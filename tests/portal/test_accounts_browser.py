"""Issue 21's sessions page in Chromium, with a real portal on SQLite and PostgreSQL: the
page lists this browser and a command line's sign-in, ending the sign-in refuses its token at
once, and "Sign out everywhere" signs this browser out too."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from .browser_helpers import _sign_up
from .processes import Served

pytestmark = pytest.mark.e2e  # runs the installed webagents command


def test_p1_the_sessions_page_ends_a_command_line_and_signs_out_everywhere_in_chromium(
    page: Any, served: Served
) -> None:
    _sign_up(page, served.url, "alice")
    page.goto(f"{served.url}/keys")
    page.fill("#name", "laptop")
    page.click("main form button")
    key = page.inner_text("#new-key")
    with httpx.Client(base_url=served.url, timeout=60) as http:
        token = http.post(
            "/api/auth/cli/token", headers={"Authorization": f"Bearer {key}"}, json={}
        ).json()["access_token"]
        page.goto(f"{served.url}/sessions")
        cells = page.locator("#sessions tr td:first-child").all_inner_texts()
        assert cells == ["browser (this browser)", "webagents login --token (API key)"]
        page.click("form[action^='/sessions/cli/'] button")
        page.wait_for_url(f"{served.url}/sessions")
        cells = page.locator("#sessions tr td:first-child").all_inner_texts()
        me = http.get("/api/users/me", headers={"Authorization": f"Bearer {token}"})
    assert cells == ["browser (this browser)"]
    assert (me.status_code, me.json()["error"]["code"]) == (401, "token_revoked")
    page.click("#end-all")
    page.wait_for_url(f"{served.url}/signin")
    page.goto(f"{served.url}/sessions")
    page.wait_for_url(f"{served.url}/signin?next=%2Fsessions")
