"""Issue 21's sign-up: the administrator's choice (`open`, `invite`, `closed`), a limit of
accounts per address, and a password policy whose refusals say what is wanted; over HTTP
against the app, on SQLite and PostgreSQL."""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from webagents.portal.accounts.sign_up import new_invite
from webagents.portal.db.tables import Invite, SignUp, User
from webagents.portal.settings import PortalSettings
from webagents.portal.tokens.credentials import digest
from webagents.portal.web import SESSION_COOKIE

from .conftest import PASSWORD, form_token, make_client

Browsers = Callable[..., TestClient]
RULE = (
    "choose a password of at least 10 characters with at least 5 different ones, not a "
    "common password, not a pattern, and not containing your username"
)


@pytest.fixture
def portal_of(settings: PortalSettings, migrated_engine: Engine, db: Session) -> Iterator[Browsers]:
    """Browsers on a portal with other settings: `portal_of(sign_up=..., address=...)`."""
    opened: list[TestClient] = []

    def browser(address: str = "192.0.2.1", **changed: object) -> TestClient:
        changed_settings = replace(settings, **changed)  # type: ignore[arg-type]
        client = make_client(changed_settings, migrated_engine, db, address)
        opened.append(client.__enter__())
        return client

    yield browser
    for client in opened:
        client.__exit__(None, None, None)


def _sign_up(
    client: TestClient, username: str, password: str = PASSWORD, **more: str
) -> httpx.Response:
    return client.post(
        "/signup",
        data={
            "csrf_token": form_token(client, "/signup"),
            "username": username,
            "password": password,
            **more,
        },
    )


def _error(answer: httpx.Response) -> str:
    text = answer.text
    start = text.index('<p class="error" role="alert">') + len('<p class="error" role="alert">')
    return html.unescape(text[start : text.index("</p>", start)])


def _users(db: Session) -> list[str]:
    return sorted(db.scalars(select(User.username)))


def test_p1_sign_up_closed_shows_no_form_and_refuses_with_adduser(
    portal_of: Browsers, db: Session
) -> None:
    closed: TestClient = portal_of(sign_up="closed")
    page = closed.get("/signup")
    assert page.status_code == 200
    assert (
        '<p id="closed">this portal does not take sign-ups: ask its administrator for an '
        "account (they add one with webagents portal adduser).</p>" in page.text
    )
    assert 'name="password"' not in page.text
    answer = closed.post(
        "/signup", data={"csrf_token": form_token(closed), "username": "eve", "password": PASSWORD}
    )
    assert (answer.status_code, _error(answer)) == (
        403,
        "this portal does not take sign-ups: ask its administrator for an account (they add "
        "one with webagents portal adduser)",
    )
    assert (_users(db), SESSION_COOKIE in closed.cookies) == ([], False)


def test_p1_sign_up_by_invitation_takes_one_live_code_for_one_account(
    portal_of: Browsers, db: Session
) -> None:
    invited: TestClient = portal_of(sign_up="invite")
    code, _ = new_invite(db, timedelta(days=7))
    old, _ = new_invite(db, timedelta(days=7))
    db.execute(
        Invite.__table__.update()
        .where(Invite.code_hash == digest(old))
        .values(expires_at=datetime.now(UTC) - timedelta(minutes=1))
    )
    assert (
        'name="invite" type="text" value="' + code + '"'
        in invited.get(f"/signup?invite={code}").text
    )
    needed = (
        "this portal takes sign-ups by invitation: enter the code its administrator gave you "
        "(they make one with webagents portal invite)"
    )
    bad = (
        "this invitation code is unknown, used or expired: ask the portal's administrator for "
        "a new one (webagents portal invite)"
    )
    refusals = [
        (_sign_up(invited, "carol"), 403, needed),
        (_sign_up(invited, "carol", invite="inv_nothing"), 403, bad),
        (_sign_up(invited, "carol", invite=old), 403, bad),  # expired
    ]
    assert [(a.status_code, _error(a)) for a, _, _ in refusals] == [(s, m) for _, s, m in refusals]
    assert _users(db) == []

    made = _sign_up(invited, "carol", invite=f"  {code} ")
    assert (made.status_code, made.headers["location"]) == (303, "/")
    used = db.scalars(select(Invite).where(Invite.code_hash == digest(code))).one()
    carol = db.scalars(select(User).where(User.username == "carol")).one()
    assert (used.used_by, used.used_at is not None) == (carol.id, True)

    again = portal_of(sign_up="invite", address="192.0.2.2")
    twice = _sign_up(again, "dave", invite=code)
    assert (twice.status_code, _error(twice)) == (403, bad)
    assert _users(db) == ["carol"]


def test_p1_an_invitation_refused_for_a_taken_name_stays_unused(
    portal_of: Browsers, db: Session
) -> None:
    invited: TestClient = portal_of(sign_up="invite")
    code, _ = new_invite(db, timedelta(days=1))
    open_portal: TestClient = portal_of(address="192.0.2.9")
    assert _sign_up(open_portal, "carol").status_code == 303
    taken = _sign_up(invited, "carol", invite=code)
    assert (taken.status_code, _error(taken)) == (
        409,
        "the username 'carol' is taken: choose another",
    )
    assert db.scalars(select(Invite.used_at).where(Invite.code_hash == digest(code))).one() is None
    assert _sign_up(invited, "carola", invite=code).status_code == 303


def test_p1_sign_ups_are_limited_per_address(portal_of: Browsers, db: Session) -> None:
    busy: TestClient = portal_of(address="198.51.100.7")
    made = []
    for n in range(5):
        made.append(_sign_up(busy, f"user{n}").status_code)
        busy.cookies.clear()  # signed out: the next one is a stranger at the same address
    assert made == [303] * 5
    sixth = _sign_up(busy, "user5")
    assert (sixth.status_code, _error(sixth)) == (
        429,
        "5 accounts were made from your address in the last 1 hour: try again later, or ask "
        "the portal's administrator for an account",
    )
    elsewhere: TestClient = portal_of(address="198.51.100.8")
    assert _sign_up(elsewhere, "user5").status_code == 303
    assert _users(db) == [f"user{n}" for n in range(6)]
    assert sorted(db.scalars(select(SignUp.address))) == ["198.51.100.7"] * 5 + ["198.51.100.8"]


@pytest.mark.parametrize(
    ("password", "why"),
    [
        ("aaaaaaaaaa", "this password repeats a few characters or a short pattern"),
        ("abcabcabcabc", "this password repeats a few characters or a short pattern"),
        ("password123", "this is one of the most common passwords, tried first by anyone guessing"),
        (
            "Welcome2024!",
            "this is one of the most common passwords, tried first by anyone guessing",
        ),
        ("qwertyuiop", "this is one of the most common passwords, tried first by anyone guessing"),
        ("abcdefghijk", "this password is a run along the alphabet, the digits or the keyboard"),
        ("zyxwvutsrqp", "this password is a run along the alphabet, the digits or the keyboard"),
        ("Carol-the-great", "this password contains the username"),
        ("tiny", "this password has 4 characters"),
    ],
)
def test_p1_sign_up_refuses_weak_passwords_saying_what_is_wanted(
    portal_of: Browsers, db: Session, password: str, why: str
) -> None:
    browser: TestClient = portal_of()
    answer = _sign_up(browser, "carol", password)
    assert (answer.status_code, _error(answer)) == (400, f"{why}: {RULE}")
    assert _users(db) == []


def test_p1_sign_up_takes_a_passphrase_of_ones_own(portal_of: Browsers, db: Session) -> None:
    browser: TestClient = portal_of()
    assert _sign_up(browser, "carol", "my dog eats socks").status_code == 303
    assert _users(db) == ["carol"]


def _sign_up_links(page: str) -> list[str]:
    """Every link to the sign-up page, as `text` (the nav's and the page's own)."""
    return re.findall(r'<a href="/signup">([^<]*)</a>', page)


@pytest.mark.parametrize(
    ("mode", "links", "paragraph"),
    [
        (
            "open",
            ["Sign up", "Sign up"],
            '<p id="sign-up">No account yet? <a href="/signup">Sign up</a>.</p>',
        ),
        (
            "invite",
            ["Sign up by invitation", "Sign up by invitation"],
            '<p id="sign-up">No account yet? <a href="/signup">Sign up by invitation</a>: this '
            "portal takes new accounts with an invitation code from its administrator.</p>",
        ),
        ("closed", [], None),
    ],
)
def test_p1_sign_in_page_links_sign_up_only_when_open_or_by_invitation(
    portal_of: Browsers, mode: str, links: list[str], paragraph: str | None
) -> None:
    page = portal_of(sign_up=mode).get("/signin")
    assert page.status_code == 200
    assert _sign_up_links(page.text) == links
    found = re.findall(r'<p id="sign-up">.*?</p>', page.text, re.DOTALL)
    assert found == ([paragraph] if paragraph else [])
    assert ("No account yet?" in page.text) == (mode != "closed")
