"""`webagents login`, `whoami`, `logout` as real processes against a served portal (P3), on
PostgreSQL (SQLite with --db sqlite): by API key, by the browser flow (an HTTP client plays the
browser that approves on /cli/auth), by the device grant; a wrong state at the callback is
refused; logout revokes the token at the portal."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from .account_helpers import new_user_key
from .conftest import PASSWORD, csrf_of
from .login_helpers import _login_file, webagents
from .processes import Child, Served

# On PostgreSQL alone under --db both (tests/portal/whole_system.py): what these tests prove, the
# CLI signing in by key, browser flow and device grant, does not depend on the database beyond what
# the repository and app tests prove on both; test_publish_cli keeps this seam's run on SQLite.
pytestmark = [pytest.mark.e2e, pytest.mark.whole_system]  # runs the installed webagents command


def login_process(tmp_path: Path, *args: str) -> Child:
    """A `webagents login` waiting for its answer."""
    return Child(tmp_path, "login", *args)


def _user_and_key(tmp_path: Path, database: str) -> str:
    return new_user_key(database, "alice")


@contextmanager
def _browser(url: str) -> Iterator[httpx.Client]:
    """A signed-in browser: cookies kept, redirects looked at one by one."""
    with httpx.Client(base_url=url) as browser:
        token = csrf_of(browser.get("/signin").text)
        signed = browser.post(
            "/signin", data={"csrf_token": token, "username": "alice", "password": PASSWORD}
        )
        assert signed.status_code == 303
        yield browser


def test_p3_login_with_an_api_key_whoami_then_logout_revokes(
    tmp_path: Path, fresh_database_url: str, served: Served
) -> None:
    key = _user_and_key(tmp_path, fresh_database_url)
    done = webagents(tmp_path, "login", "--portal", served.url, "--token", key)
    assert (done.returncode, done.stdout) == (
        0,
        f"webagents: signed in to {served.url} as alice\n",
    ), done.stderr
    kept = json.loads(_login_file(tmp_path).read_text())
    assert sorted(kept) == ["access_token", "portal", "user_id", "username"]
    assert (kept["portal"], kept["username"]) == (served.url, "alice")
    assert stat.S_IMODE(os.stat(_login_file(tmp_path)).st_mode) == 0o600

    who = webagents(tmp_path, "whoami")
    assert who.stdout == f"alice ({kept['user_id']}) at {served.url}\n"

    out = webagents(tmp_path, "logout")
    assert out.stdout == f"webagents: signed out of {served.url} (revoked on the portal)\n"
    assert not _login_file(tmp_path).exists()
    me = httpx.get(
        f"{served.url}/api/users/me", headers={"Authorization": f"Bearer {kept['access_token']}"}
    )
    assert me.status_code == 401
    after = webagents(tmp_path, "whoami")
    assert (after.returncode, after.stderr) == (
        2,
        "error: not signed in to a portal: run webagents login\n",
    )


def test_p3_a_revoked_sign_in_says_run_webagents_login(
    tmp_path: Path, fresh_database_url: str, served: Served
) -> None:
    key = _user_and_key(tmp_path, fresh_database_url)
    assert webagents(tmp_path, "login", "--portal", served.url, "--token", key).returncode == 0
    token = json.loads(_login_file(tmp_path).read_text())["access_token"]
    httpx.post(
        f"{served.url}/api/auth/cli/logout", headers={"Authorization": f"Bearer {token}"}, json={}
    )
    who = webagents(tmp_path, "whoami")
    assert (who.returncode, who.stderr) == (
        2,
        "error: this sign-in was ended (webagents logout, or its API key was revoked): "
        "run webagents login\n",
    )


def test_p3_login_with_a_refused_api_key_says_how_to_sign_in_instead(
    tmp_path: Path, fresh_database_url: str, served: Served
) -> None:
    """Not the command just run (the same key is refused again): where to make a new key,
    and the browser's sign-in; nothing is kept."""
    _user_and_key(tmp_path, fresh_database_url)
    for key in ("rok_bogus", "rok_" + "x" * 43):
        wrong = webagents(tmp_path, "login", "--portal", served.url, "--token", key)
        assert (wrong.returncode, wrong.stdout, wrong.stderr) == (
            2,
            "",
            f"error: the portal at {served.url} refused this API key (it is unknown there, or "
            f"was revoked): make a new one on the portal's API keys page, {served.url}/keys, "
            f"and sign in with it (webagents login --portal {served.url} --token rok_...), or "
            f"sign in in the browser: webagents login --portal {served.url}\n",
        )
    assert not _login_file(tmp_path).exists()


def test_p3_login_by_the_browser_refuses_a_wrong_state_and_takes_the_approval(
    tmp_path: Path, fresh_database_url: str, served: Served
) -> None:
    _user_and_key(tmp_path, fresh_database_url)
    login = login_process(tmp_path, "--portal", served.url, "--no-browser")
    try:
        link = login.wait_for(r"(http://127\.0\.0\.1:\d+/cli/auth\?port=(\d+)&state=([\w-]+))")
        page, port, state = link.group(1), link.group(2), link.group(3)
        forged = httpx.get(
            f"http://127.0.0.1:{port}/callback",
            params={"token": "stolen", "username": "mallory", "state": "not-" + state},
        )
        assert forged.status_code == 400
        with _browser(served.url) as browser:
            shown = browser.get(page.removeprefix(served.url))
            assert shown.status_code == 200
            approved = browser.post(
                "/cli/auth",
                data={
                    "csrf_token": csrf_of(shown.text),
                    "port": port,
                    "state": state,
                    "decision": "approve",
                },
            )
            assert approved.status_code == 303
            callback = httpx.get(approved.headers["location"])
            assert callback.status_code == 200
        assert login.finish() == 0
    finally:
        if login.popen.poll() is None:
            login.finish()
    assert login.output.endswith(f"webagents: signed in to {served.url} as alice\n")
    assert webagents(tmp_path, "whoami").stdout.startswith("alice (")


def test_p3_login_denied_in_the_browser_fails(
    tmp_path: Path, fresh_database_url: str, served: Served
) -> None:
    _user_and_key(tmp_path, fresh_database_url)
    login = login_process(tmp_path, "--portal", served.url, "--no-browser")
    link = login.wait_for(r"/cli/auth\?port=(\d+)&state=([\w-]+)")
    with _browser(served.url) as browser:
        shown = browser.get(link.group(0))
        denied = browser.post(
            "/cli/auth",
            data={
                "csrf_token": csrf_of(shown.text),
                "port": link.group(1),
                "state": link.group(2),
                "decision": "deny",
            },
        )
        httpx.get(denied.headers["location"])
    assert login.finish() == 2
    assert login.output.endswith(
        "error: the sign-in was refused in the browser (access_denied): nothing was kept; to "
        "sign in, choose Approve on the portal's sign-in page\n"
    )
    assert not _login_file(tmp_path).exists()


def test_p3_login_by_device_code_approved_in_the_browser(
    tmp_path: Path, fresh_database_url: str, served: Served
) -> None:
    _user_and_key(tmp_path, fresh_database_url)
    login = login_process(tmp_path, "--portal", served.url, "--device")
    code = login.wait_for(r"enter the code ([A-Z]{4}-[A-Z]{4})").group(1)
    with _browser(served.url) as browser:
        shown = browser.get(f"/device?user_code={code}")
        approved = browser.post(
            "/device",
            data={"csrf_token": csrf_of(shown.text), "user_code": code, "decision": "approve"},
        )
        assert "Approved" in approved.text
    assert login.finish() == 0
    assert login.output.endswith(f"webagents: signed in to {served.url} as alice\n")
    assert webagents(tmp_path, "whoami").stdout.startswith("alice (")
