"""Issue 21's administrator commands as real processes against a served portal, on SQLite and
PostgreSQL: `webagents portal passwd USER` (the new password from standard input; every
session and command-line sign-in of the user ends), `webagents portal invite` for a portal
served with `--sign-up invite`, and `--sign-up` refusing what it does not know."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from .conftest import PASSWORD, csrf_of
from .processes import Served, portal

pytestmark = pytest.mark.e2e  # runs the installed webagents command

NEW_PASSWORD = "a quieter horse, stapled"


def _sign_in(http: httpx.Client, username: str, password: str) -> int:
    token = csrf_of(http.get("/signin").text)
    answer = http.post(
        "/signin", data={"csrf_token": token, "username": username, "password": password}
    )
    return answer.status_code


def test_p1_portal_passwd_sets_the_password_and_ends_every_sign_in(
    tmp_path: Path, fresh_database_url: str, served: Served
) -> None:
    database = ("--database", fresh_database_url)
    assert portal(tmp_path, "adduser", "alice", *database, stdin=PASSWORD).returncode == 0
    key = portal(tmp_path, "apikey", "alice", *database).stdout.splitlines()[-1]
    with (
        httpx.Client(base_url=served.url, timeout=60) as browser,
        httpx.Client(base_url=served.url, timeout=60) as cli,
    ):
        assert _sign_in(browser, "alice", PASSWORD) == 303
        token = cli.post(
            "/api/auth/cli/token", headers={"Authorization": f"Bearer {key}"}, json={}
        ).json()["access_token"]
        weak = portal(tmp_path, "passwd", "alice", *database, stdin="alice12345\n")
        done = portal(tmp_path, "passwd", "alice", *database, stdin=NEW_PASSWORD + "\n")
        nobody = portal(tmp_path, "passwd", "nobody", *database, stdin=NEW_PASSWORD + "\n")
        me = cli.get("/api/users/me", headers={"Authorization": f"Bearer {token}"})
        home = browser.get("/")
    assert (weak.returncode, weak.stderr) == (
        2,
        "error: this password contains the username: choose a password of at least 10 "
        "characters with at least 5 different ones, not a common password, not a pattern, "
        "and not containing your username\n",
    )
    assert (done.returncode, done.stdout) == (
        0,
        "webagents portal: new password for alice; every session and command-line sign-in "
        "of the user was ended\n",
    )
    assert (nobody.returncode, nobody.stderr) == (
        2,
        "error: no user 'nobody': add one with webagents portal adduser nobody\n",
    )
    assert (me.status_code, me.json()["error"]["code"]) == (401, "token_revoked")
    assert home.headers["location"] == "/signin?next=%2F"
    with httpx.Client(base_url=served.url, timeout=60) as http:
        assert _sign_in(http, "alice", PASSWORD) == 401
        assert _sign_in(http, "alice", NEW_PASSWORD) == 303


def test_p1_portal_invite_makes_a_code_for_a_portal_served_with_sign_up_invite(
    tmp_path: Path, fresh_database_url: str
) -> None:
    database = ("--database", fresh_database_url)
    made = portal(tmp_path, "invite", "--days", "2", *database)
    assert made.returncode == 0, made.stderr
    first, code = made.stdout.splitlines()
    assert re.fullmatch(
        r"webagents portal: an invitation for one account, good until \S+ \(enter it on the "
        r"sign-up page, or open /signup\?invite=CODE; shown once\):",
        first,
    )
    assert re.fullmatch(r"inv_[A-Za-z0-9_-]{24}", code)
    served = Served(tmp_path, *database, "--sign-up", "invite")
    try:
        assert "  sign-up: by invitation (make one with webagents portal invite)" in served.output
        with httpx.Client(base_url=served.url, timeout=60) as http:
            page = http.get(f"/signup?invite={code}").text
            without = http.post(
                "/signup",
                data={"csrf_token": csrf_of(page), "username": "carol", "password": PASSWORD},
            )
            invited = http.post(
                "/signup",
                data={
                    "csrf_token": csrf_of(page),
                    "username": "carol",
                    "password": PASSWORD,
                    "invite": code,
                },
            )
            assert "<h1>Signed in as carol</h1>" in http.get("/").text
    finally:
        served.stop()
    assert without.status_code == 403
    assert (invited.status_code, invited.headers["location"]) == (303, "/")


def test_p1_portal_serve_refuses_an_unknown_sign_up_mode(
    tmp_path: Path, fresh_database_url: str
) -> None:
    refused = portal(tmp_path, "serve", "--sign-up", "sometimes", "--database", fresh_database_url)
    assert (refused.returncode, refused.stderr) == (
        2,
        "error: --sign-up (or WEBAGENTS_PORTAL_SIGN_UP) is open, invite or closed, not "
        "'sometimes'\n",
    )
