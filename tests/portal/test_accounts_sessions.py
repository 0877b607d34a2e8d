"""Issue 21's sessions page: every browser session and command-line sign-in of the account
(from /cli/auth, the device grant, an API key exchanged), when and from where each began and
was last used; ending one (a command line's token is refused at its next request, 401 saying
to run webagents login), "sign out everywhere", and the password change, which ends the
others. Another account's session answers 404, a form without its CSRF token 403; over HTTP
against the app, on SQLite and PostgreSQL."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from datetime import datetime
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import jwt
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from webagents.portal.accounts import service as accounts
from webagents.portal.db.tables import BrowserSession, IssuedToken
from webagents.portal.settings import PortalSettings
from webagents.portal.web import SESSION_COOKIE

from .conftest import PASSWORD, form_token, make_account, make_client, sign_in

STATE = "Zx8_state-0123456789"
ENDED = {
    "message": "this sign-in was ended (webagents logout, or its API key was revoked): "
    "run webagents login",
    "type": "authentication_error",
    "param": None,
    "code": "token_revoked",
}
NEW_PASSWORD = "a quieter horse, stapled"


@pytest.fixture
def laptop(settings: PortalSettings, migrated_engine: Engine, db: Session) -> Iterator[TestClient]:
    with make_client(settings, migrated_engine, db, "203.0.113.5") as browser:
        yield browser


@pytest.fixture
def phone(settings: PortalSettings, migrated_engine: Engine, db: Session) -> Iterator[TestClient]:
    with make_client(settings, migrated_engine, db, "198.51.100.23") as browser:
        yield browser


def _cli_token(browser: TestClient) -> str:
    """`webagents login` approved on /cli/auth in this browser: the token it was sent."""
    path = f"/cli/auth?port=54321&state={STATE}"
    answer = browser.post(
        "/cli/auth",
        data={
            "csrf_token": form_token(browser, path),
            "port": "54321",
            "state": STATE,
            "decision": "approve",
        },
    )
    assert answer.status_code == 303, answer.text
    return parse_qs(urlsplit(answer.headers["location"]).query)["token"][0]


def _device_token(browser: TestClient) -> str:
    """`webagents login --device`, approved in this browser."""
    started = browser.post("/api/auth/device/code").json()
    approved = browser.post(
        "/device",
        data={
            "csrf_token": form_token(browser, "/device"),
            "user_code": started["user_code"],
            "decision": "approve",
        },
    )
    assert approved.status_code == 200, approved.text
    polled = browser.post(
        "/api/auth/device/token",
        data={
            "grant_type": "urn:ietf:params:oauth:grant-type:device_code",
            "device_code": started["device_code"],
        },
    )
    assert polled.status_code == 200, polled.text
    return str(polled.json()["access_token"])


def _me(browser: TestClient, token: str) -> tuple[int, Any]:
    answer = browser.get("/api/users/me", headers={"Authorization": f"Bearer {token}"})
    body = answer.json()
    return answer.status_code, body.get(
        "error", body["user"]["username"] if "user" in body else None
    )


_ROW = re.compile(
    r"<tr>\s*<td>(?P<what>[^<]*)</td>\s*<td>(?P<since>[^<]*)</td>\s*<td>(?P<where>[^<]*)</td>"
    r"\s*<td>(?P<used>[^<]*)</td>\s*<td>\s*<form method=\"post\" action=\"(?P<end>[^\"]*)\""
)


def _rows(browser: TestClient) -> list[dict[str, str]]:
    page = browser.get("/sessions")
    assert page.status_code == 200, page.text
    return [
        {key: html.unescape(value) for key, value in row.groupdict().items()}
        for row in _ROW.finditer(page.text)
    ]


def _jti(token: str) -> str:
    return str(jwt.decode(token, options={"verify_signature": False})["jti"])


def _shown(moment: datetime | None) -> str:
    """A time as the sessions page shows it."""
    return moment.strftime("%Y-%m-%d %H:%M") if moment else "not yet"


def _end(browser: TestClient, action: str) -> httpx.Response:
    return browser.post(action, data={"csrf_token": form_token(browser, "/sessions")})


def test_p1_the_sessions_page_lists_browsers_and_command_lines_with_where_and_when(
    laptop: TestClient, phone: TestClient, db: Session
) -> None:
    alice = make_account(db)
    sign_in(laptop)
    sign_in(phone)
    cli = _cli_token(laptop)
    device = _device_token(phone)
    key = accounts.create_key(db, alice, "ci").key
    exchanged = laptop.post(
        "/api/auth/cli/token", headers={"Authorization": f"Bearer {key}"}, json={}
    ).json()["access_token"]
    assert _me(laptop, cli) == (200, "alice")  # used once: its "last used" is set

    rows = _rows(laptop)
    browsers = db.scalars(select(BrowserSession).order_by(BrowserSession.created_at.desc()))
    tokens = {
        t.kind: t for t in db.scalars(select(IssuedToken).where(IssuedToken.kind.is_not(None)))
    }
    expected_browsers = [
        {
            "what": "browser (this browser)" if b.address == "203.0.113.5" else "browser",
            "since": _shown(b.created_at),
            "where": b.address,
            "used": _shown(b.last_used_at),
            "end": f"/sessions/browser/{b.id}/end",
        }
        for b in browsers
    ]
    expected_cli = [
        {
            "what": what,
            "since": _shown(tokens[kind].issued_at),
            "where": where,
            "used": _shown(tokens[kind].last_used_at),
            "end": f"/sessions/cli/{tokens[kind].jti}/end",
        }
        for kind, what, where in sorted(
            [
                ("cli", "webagents login (browser)", "203.0.113.5"),
                ("device", "webagents login --device", "198.51.100.23"),
                ("key", "webagents login --token (API key)", "203.0.113.5"),
            ],
            key=lambda row: (tokens[row[0]].issued_at, tokens[row[0]].jti),
            reverse=True,
        )
    ]
    assert rows == expected_browsers + expected_cli
    assert tokens["cli"].last_used_at is not None and tokens["device"].last_used_at is None
    assert {t.kind for t in tokens.values()} == {"cli", "device", "key"}
    assert (_me(laptop, device), _me(laptop, exchanged)) == ((200, "alice"), (200, "alice"))


def test_p1_ending_a_command_lines_sign_in_refuses_its_token_at_once(
    laptop: TestClient, db: Session
) -> None:
    make_account(db)
    sign_in(laptop)
    ended, kept = _cli_token(laptop), _cli_token(laptop)
    target = f"/sessions/cli/{_jti(ended)}/end"
    assert target in [row["end"] for row in _rows(laptop)]
    answer = _end(laptop, target)
    assert (answer.status_code, answer.headers["location"]) == (303, "/sessions")
    assert _me(laptop, ended) == (401, ENDED)
    assert _me(laptop, kept) == (200, "alice")
    assert [row["what"] for row in _rows(laptop)] == [
        "browser (this browser)",
        "webagents login (browser)",
    ]


def test_p1_another_accounts_session_is_404_and_a_form_without_csrf_403(
    laptop: TestClient, phone: TestClient, db: Session
) -> None:
    make_account(db)
    make_account(db, "bob")
    sign_in(laptop)
    alices = _cli_token(laptop)
    alices_browser = db.scalars(select(BrowserSession.id)).one()
    sign_in(phone, "bob")
    for action in (
        f"/sessions/cli/{_jti(alices)}/end",
        f"/sessions/browser/{alices_browser}/end",
        "/sessions/browser/not-an-id/end",
        "/sessions/elsewhere/x/end",
    ):
        answer = _end(phone, action)
        assert answer.status_code == 404, action
        assert "you have no such session: see yours on the sessions page" in answer.text
    forged = laptop.post(f"/sessions/cli/{_jti(alices)}/end", data={"csrf_token": "0" * 64})
    everywhere = laptop.post("/sessions/end-all", data={})
    changed = laptop.post("/password", data={"current": PASSWORD, "new": NEW_PASSWORD})
    assert [forged.status_code, everywhere.status_code, changed.status_code] == [403, 403, 403]
    assert _me(laptop, alices) == (200, "alice")
    assert laptop.get("/").status_code == 200


def test_p1_sessions_and_password_pages_need_a_signed_in_browser(client: TestClient) -> None:
    for path in ("/sessions", "/password"):
        answer = client.get(path)
        assert (answer.status_code, answer.headers["location"]) == (
            303,
            f"/signin?next=%2F{path[1:]}",
        )
    posted = client.post("/sessions/end-all", data={"csrf_token": form_token(client)})
    assert posted.status_code == 303 and posted.headers["location"].startswith("/signin?next=")


def test_p1_sign_out_everywhere_ends_every_browser_and_command_line(
    laptop: TestClient, phone: TestClient, db: Session
) -> None:
    make_account(db)
    sign_in(laptop)
    sign_in(phone)
    token = _cli_token(phone)
    answer = laptop.post("/sessions/end-all", data={"csrf_token": form_token(laptop, "/sessions")})
    assert (answer.status_code, answer.headers["location"]) == (303, "/signin")
    assert SESSION_COOKIE not in laptop.cookies
    assert phone.get("/").headers["location"] == "/signin?next=%2F"
    assert _me(phone, token) == (401, ENDED)
    assert db.scalars(select(BrowserSession)).all() == []


def _change(browser: TestClient, current: str, new: str) -> httpx.Response:
    return browser.post(
        "/password",
        data={"csrf_token": form_token(browser, "/password"), "current": current, "new": new},
    )


def _error(answer: httpx.Response) -> str:
    found = re.search(r'<p class="error" role="alert">([^<]*)</p>', answer.text)
    return html.unescape(found.group(1)) if found else ""


def test_p1_changing_the_password_needs_the_old_one_and_ends_the_other_sessions(
    laptop: TestClient, phone: TestClient, db: Session
) -> None:
    make_account(db)
    sign_in(laptop)
    sign_in(phone)
    token = _cli_token(phone)
    wrong = _change(laptop, "not my password", NEW_PASSWORD)
    weak = _change(laptop, PASSWORD, "alicealice123")
    assert [(wrong.status_code, _error(wrong)), (weak.status_code, _error(weak))] == [
        (401, "the current password is wrong: type the one you sign in with now"),
        (
            400,
            "this password contains the username: choose a password of at least 10 "
            "characters with at least 5 different ones, not a common password, not a "
            "pattern, and not containing your username",
        ),
    ]
    assert _me(phone, token) == (200, "alice")  # nothing ended by a refused change

    changed = _change(laptop, PASSWORD, NEW_PASSWORD)
    assert changed.status_code == 200 and 'id="changed"' in changed.text
    assert laptop.get("/").status_code == 200  # this browser stays signed in
    assert phone.get("/").headers["location"] == "/signin?next=%2F"
    assert _me(phone, token) == (401, ENDED)
    phone.cookies.clear()
    old = phone.post(
        "/signin",
        data={"csrf_token": form_token(phone), "username": "alice", "password": PASSWORD},
    )
    assert old.status_code == 401
    sign_in(phone, "alice", NEW_PASSWORD)


def test_p1_wrong_current_passwords_count_as_failed_sign_ins(
    laptop: TestClient, db: Session
) -> None:
    """A browser left signed in cannot be used to guess the password faster than the
    sign-in page allows."""
    make_account(db)
    sign_in(laptop)
    statuses = [_change(laptop, f"guess {n}", NEW_PASSWORD).status_code for n in range(6)]
    assert statuses == [401] * 5 + [429]
