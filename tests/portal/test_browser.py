"""The portal in Chromium (P1, P3), with real processes on PostgreSQL (SQLite with --db
sqlite): sign up, sign out and sign in on the pages; `webagents login` approved on /cli/auth,
the browser carrying the token to the command's callback (which then takes it out of the
address bar and the tab's history); `login --device` approved on /device."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from .browser_helpers import _sign_up
from .conftest import PASSWORD
from .login_helpers import _login_file, webagents
from .processes import Child, Served, portal

# On PostgreSQL alone under --db both (tests/portal/whole_system.py): what these tests prove, sign-
# up, sign-in and the CLI's approvals in Chromium, does not depend on the database beyond what the
# repository and app tests prove on both; test_accounts_browser keeps this seam's run on SQLite.
pytestmark = [pytest.mark.e2e, pytest.mark.whole_system]  # runs the installed webagents command


def test_p1_sign_up_sign_out_and_sign_in_in_chromium(page: Any, served: Served) -> None:
    _sign_up(page, served.url, "alice")
    cookies = {c["name"]: c for c in page.context.cookies()}
    assert (cookies["webagents_session"]["httpOnly"], cookies["webagents_session"]["sameSite"]) == (
        True,
        "Lax",
    )
    page.click("nav button")  # sign out
    page.wait_for_url(f"{served.url}/signin")
    page.goto(f"{served.url}/keys")
    page.wait_for_url(f"{served.url}/signin?next=%2Fkeys")
    page.fill("#username", "alice")
    page.fill("#password", "wrong password!")
    page.click("main button[type=submit]")
    assert page.inner_text("p.error") == "wrong username or password"
    page.fill("#password", PASSWORD)
    page.click("main button[type=submit]")
    page.wait_for_url(f"{served.url}/keys")
    page.fill("#name", "laptop")
    page.click("main form button")
    assert page.inner_text("#new-key").startswith("rok_")


def test_p3_login_by_the_browser_in_chromium_leaves_no_token_in_the_address_bar_or_history(
    tmp_path: Path, page: Any, served: Served
) -> None:
    _sign_up(page, served.url, "alice")
    login = Child(tmp_path, "login", "--portal", served.url, "--no-browser")
    try:
        found = login.wait_for(r"http://127\.0\.0\.1:\d+/cli/auth\?port=(\d+)&state=[\w-]+")
        link, port = found.group(0), found.group(1)
        page.goto(link)
        assert "asks to act as alice" in page.inner_text("main")
        page.click("#approve")
        page.locator("body", has_text="Signed in").wait_for()
        assert login.finish() == 0
    finally:
        if login.popen.poll() is None:
            login.stop()
    assert login.output.endswith(f"webagents: signed in to {served.url} as alice\n")
    token = json.loads(_login_file(tmp_path).read_text())["access_token"]
    # The callback's URL is replaced once its page shows: the address bar...
    page.wait_for_function("() => location.search === ''")
    assert page.url == f"http://127.0.0.1:{port}/callback"
    # ...and every entry of the tab's history (what Back and Forward would show).
    history = page.context.new_cdp_session(page).send("Page.getNavigationHistory")
    urls = [entry["url"] for entry in history["entries"]]
    assert urls[-2:] == [link, f"http://127.0.0.1:{port}/callback"]
    assert [url for url in urls if token in url or re.search(r"[?&]token=", url)] == []
    assert webagents(tmp_path, "whoami").stdout.startswith("alice (")


def test_p3_login_by_device_approved_in_chromium(
    tmp_path: Path, fresh_database_url: str, page: Any, served: Served
) -> None:
    assert (
        portal(
            tmp_path, "adduser", "bob", "--database", fresh_database_url, stdin=PASSWORD
        ).returncode
        == 0
    )
    login = Child(tmp_path, "login", "--portal", served.url, "--device")
    try:
        complete = login.wait_for(r"\(or open (\S+)\)").group(1)
        page.goto(complete)
        page.wait_for_url(f"{served.url}/signin?next=*")
        page.fill("#username", "bob")
        page.fill("#password", PASSWORD)
        page.click("main button[type=submit]")
        page.wait_for_url(f"{served.url}/device?user_code=*")
        page.click("#approve")
        assert page.inner_text("#result").startswith("Approved: the device is signed in as bob")
        assert login.finish() == 0
    finally:
        if login.popen.poll() is None:
            login.stop()
    assert webagents(tmp_path, "whoami").stdout.startswith("bob (")
