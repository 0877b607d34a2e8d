"""`webagents portal serve|migrate|adduser|apikey` as real processes (P1), on SQLite and on
PostgreSQL: a user added and a key made at the command line work against a served portal,
where a browser signs up and in over real HTTP; the embedded database is kept private."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import httpx
import jwt
import pytest

from webagents.portal.db.migrate import head_revision

from .conftest import PASSWORD, csrf_of
from .processes import Served, portal

pytestmark = pytest.mark.e2e  # runs the installed webagents command


def test_p1_adduser_and_apikey_work_against_a_served_portal(
    tmp_path: Path, fresh_database_url: str, served: Served
) -> None:
    added = portal(
        tmp_path, "adduser", "alice", "--database", fresh_database_url, stdin=PASSWORD + "\n"
    )
    assert added.returncode == 0, added.stderr
    assert re.fullmatch(r"webagents portal: added user alice \([0-9a-f-]{36}\)\n", added.stdout)
    made = portal(tmp_path, "apikey", "alice", "--name", "ci", "--database", fresh_database_url)
    assert made.returncode == 0, made.stderr
    lines = made.stdout.splitlines()
    assert lines[:-1] == ["webagents portal: new API key 'ci' for alice (shown once):"]
    key = lines[-1]
    assert re.fullmatch(r"rok_[A-Za-z0-9_-]{43}", key)

    with httpx.Client(base_url=served.url) as http:
        me = http.get("/api/users/me", headers={"Authorization": f"Bearer {key}"})
        assert (me.status_code, me.json()["user"]["username"]) == (200, "alice")
        # The user added at the command line signs in on the pages.
        token = csrf_of(http.get("/signin").text)
        signed = http.post(
            "/signin", data={"csrf_token": token, "username": "alice", "password": PASSWORD}
        )
        assert (signed.status_code, signed.headers["location"]) == (303, "/")
        assert "<h1>Signed in as alice</h1>" in http.get("/").text


def test_p1_sign_up_sign_in_and_sign_out_over_real_http(served: Served) -> None:
    with httpx.Client(base_url=served.url) as http:
        token = csrf_of(http.get("/signup").text)
        up = http.post(
            "/signup", data={"csrf_token": token, "username": "bob", "password": PASSWORD}
        )
        assert (up.status_code, up.headers["location"]) == (303, "/")
        home = http.get("/")
        assert "<h1>Signed in as bob</h1>" in home.text
        out = http.post("/signout", data={"csrf_token": csrf_of(home.text)})
        assert (out.status_code, out.headers["location"]) == (303, "/signin")
        assert http.get("/").headers["location"] == "/signin?next=%2F"
        token = csrf_of(http.get("/signin").text)
        wrong = http.post(
            "/signin", data={"csrf_token": token, "username": "bob", "password": "nope"}
        )
        assert wrong.status_code == 401
        right = http.post(
            "/signin", data={"csrf_token": token, "username": "bob", "password": PASSWORD}
        )
        assert right.status_code == 303
        assert "<h1>Signed in as bob</h1>" in http.get("/").text


def test_p1_portal_commands_refuse_with_what_to_do(tmp_path: Path, fresh_database_url: str) -> None:
    unknown = portal(tmp_path, "apikey", "nobody", "--database", fresh_database_url)
    assert (unknown.returncode, unknown.stdout, unknown.stderr) == (
        2,
        "",
        "error: no user 'nobody': add one with webagents portal adduser nobody\n",
    )
    short = portal(tmp_path, "adduser", "carol", "--database", fresh_database_url, stdin="short\n")
    assert (short.returncode, short.stderr) == (
        2,
        "error: this password has 5 characters: choose a password of at least 10 characters "
        "with at least 5 different ones, not a common password, not a pattern, and not "
        "containing your username\n",
    )
    twice = [
        portal(tmp_path, "adduser", "dave", "--database", fresh_database_url, stdin=PASSWORD)
        for _ in range(2)
    ]
    assert [t.returncode for t in twice] == [0, 2]
    assert twice[1].stderr == "error: the username 'dave' is taken: choose another\n"
    bad = portal(tmp_path, "migrate", "--database", "mysql://u@h/db")
    assert (bad.returncode, bad.stderr) == (
        2,
        "error: the portal keeps its data in SQLite or PostgreSQL, not 'mysql' (--database or "
        "WEBAGENTS_PORTAL_DATABASE_URL): write sqlite:///PATH/portal.db or "
        "postgresql+psycopg://USER:PASSWORD@HOST/DATABASE\n",
    )


def test_p1_migrate_brings_the_database_to_head_and_can_run_again(
    tmp_path: Path, empty_database_url: str
) -> None:
    for _ in range(2):
        done = portal(tmp_path, "migrate", "--database", empty_database_url)
        assert done.returncode == 0, done.stderr
        assert done.stdout.endswith(f" is at revision {head_revision()}\n")


def test_p1_embedded_database_is_private(tmp_path: Path) -> None:
    """The default database lives under the profile's ~/.webagents/portal/: 0700 and 0600,
    whatever the umask."""
    added = portal(tmp_path, "adduser", "alice", stdin=PASSWORD, umask=0)
    assert added.returncode == 0, added.stderr
    home = tmp_path / "home" / ".webagents"
    folder = home / "portal"
    assert stat.S_IMODE(os.stat(home).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    files = sorted(os.listdir(folder))
    assert "portal.db" in files
    assert {name: stat.S_IMODE(os.stat(folder / name).st_mode) for name in files} == dict.fromkeys(
        files, 0o600
    )


def test_p1_profile_keeps_its_own_portal_database(tmp_path: Path) -> None:
    added = portal(tmp_path, "adduser", "alice", "--profile", "work", stdin=PASSWORD, umask=0)
    assert added.returncode == 0, added.stderr
    assert (tmp_path / "home" / ".webagents-work" / "portal" / "portal.db").is_file()
    assert not (tmp_path / "home" / ".webagents").exists()
    elsewhere = portal(tmp_path, "apikey", "alice")  # the default profile has no alice
    assert elsewhere.returncode == 2


def test_p1_two_portal_processes_share_sign_ins_and_the_sign_in_limit(
    tmp_path: Path, fresh_database_url: str
) -> None:
    """Stateless processes: a sign-in made at one is valid at the other, failures counted at
    one count at the other, and a token issued by one verifies at the other."""
    shared = ("--database", fresh_database_url, "--public-url", "https://portal.example/")
    first = Served(tmp_path, *shared)
    second = Served(tmp_path, *shared)
    try:
        with httpx.Client(base_url=first.url) as at_first:
            token = csrf_of(at_first.get("/signup").text)
            up = at_first.post(
                "/signup", data={"csrf_token": token, "username": "alice", "password": PASSWORD}
            )
            assert up.status_code == 303
            cookies = dict(at_first.cookies)
            at_first.cookies.delete("webagents_session")
            # A pre-session form token (signing up gave a new CSRF cookie), made here and
            # accepted at the second process too: the form secret is in the database.
            token = csrf_of(at_first.get("/signin").text)
            for _ in range(3):
                wrong = at_first.post(
                    "/signin",
                    data={"csrf_token": token, "username": "alice", "password": "guess"},
                )
                assert wrong.status_code == 401
        with httpx.Client(base_url=second.url, cookies=cookies) as at_second:
            home = at_second.get("/")
            assert (home.status_code, "<h1>Signed in as alice</h1>" in home.text) == (200, True)
            at_second.cookies.delete("webagents_session")
            statuses = [
                at_second.post(
                    "/signin",
                    data={
                        "csrf_token": token,
                        "username": "alice",
                        "password": "guess",
                    },
                ).status_code
                for _ in range(3)
            ]
            assert statuses == [401, 401, 429]  # 3 failures at the first + 2 here = the limit
        # An access token issued by one process verifies at the other (P2).
        key = portal(tmp_path, "apikey", "alice", "--database", fresh_database_url)
        with httpx.Client(base_url=first.url) as at_first:
            token = at_first.post(
                "/api/auth/cli/token",
                headers={"Authorization": f"Bearer {key.stdout.splitlines()[-1]}"},
                json={},
            ).json()["access_token"]
        assert jwt.decode(token, options={"verify_signature": False})["iss"] == (
            "https://portal.example"
        )
        me = httpx.get(f"{second.url}/api/users/me", headers={"Authorization": f"Bearer {token}"})
        assert (me.status_code, me.json()["user"]["username"]) == (200, "alice")
    finally:
        first.stop()
        second.stop()


def test_p2_rotate_keys_keeps_issued_tokens_valid_and_new_ones_carry_the_new_kid(
    tmp_path: Path, fresh_database_url: str, served: Served
) -> None:
    database = ("--database", fresh_database_url)
    assert portal(tmp_path, "adduser", "alice", *database, stdin=PASSWORD).returncode == 0
    key = portal(tmp_path, "apikey", "alice", *database).stdout.splitlines()[-1]

    def token() -> str:
        answer = httpx.post(
            f"{served.url}/api/auth/cli/token", headers={"Authorization": f"Bearer {key}"}, json={}
        )
        assert answer.status_code == 200, answer.text
        return str(answer.json()["access_token"])

    def me(bearer: str) -> int:
        headers = {"Authorization": f"Bearer {bearer}"}
        return httpx.get(f"{served.url}/api/users/me", headers=headers).status_code

    before = token()
    rotated = portal(tmp_path, "rotate-keys", "--activate-in", "0", *database)
    assert rotated.returncode == 0, rotated.stderr
    found = re.fullmatch(
        r"webagents portal: new signing key ([A-Za-z0-9_-]{43}), published now, signing from "
        r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00\n",
        rotated.stdout,
    )
    assert found, rotated.stdout
    new_kid = found.group(1)
    after = token()
    old_kid = jwt.get_unverified_header(before)["kid"]
    assert jwt.get_unverified_header(after)["kid"] == new_kid != old_kid
    published = httpx.get(f"{served.url}/.well-known/jwks.json").json()["keys"]
    assert sorted(k["kid"] for k in published) == sorted([old_kid, new_kid])
    assert (me(before), me(after)) == (200, 200)
