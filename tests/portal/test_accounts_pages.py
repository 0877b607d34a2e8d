"""Accounts on the portal's pages (P1): sign up, sign in, sign out, through real HTTP
requests against the app, with the refusals: wrong password, CSRF, the sign-in limit."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from webagents.portal.db.tables import BrowserSession, SignInAttempt, User
from webagents.portal.tokens.credentials import digest
from webagents.portal.web import CSRF_COOKIE, SESSION_COOKIE

from .conftest import PASSWORD, csrf_of, form_token, make_account, sign_in


def _cookie_headers(answer: object) -> dict[str, str]:
    """Set-Cookie headers by cookie name."""
    headers = answer.headers.get_list("set-cookie")  # type: ignore[attr-defined]
    return {header.split("=", 1)[0]: header for header in headers}


def test_p1_sign_up_signs_in_with_an_httponly_samesite_cookie_kept_hashed(
    client: TestClient, db: Session
) -> None:
    token = form_token(client, "/signup")
    answer = client.post(
        "/signup", data={"csrf_token": token, "username": "Alice", "password": PASSWORD}
    )
    assert (answer.status_code, answer.headers["location"]) == (303, "/")
    cookies = _cookie_headers(answer)
    session_cookie = cookies[SESSION_COOKIE]
    assert "HttpOnly" in session_cookie and "SameSite=lax" in session_cookie
    assert "Path=/" in session_cookie and "Max-Age=1209600" in session_cookie
    assert "HttpOnly" in cookies[CSRF_COOKIE] and "SameSite=strict" in cookies[CSRF_COOKIE]

    raw = client.cookies[SESSION_COOKIE]
    user = db.scalars(select(User)).one()
    assert user.username == "alice"
    assert user.password_hash.startswith("$argon2id$") and PASSWORD not in user.password_hash
    stored = db.scalars(select(BrowserSession)).one()
    assert (stored.user_id, stored.token_hash) == (user.id, digest(raw))

    home = client.get("/")
    assert home.status_code == 200
    assert "<h1>Signed in as alice</h1>" in home.text


def test_p1_sign_in_then_sign_out_ends_the_session(client: TestClient, db: Session) -> None:
    make_account(db)
    sign_in(client, "ALICE ", PASSWORD)  # usernames are compared in lower case
    assert client.get("/").status_code == 200
    raw = client.cookies[SESSION_COOKIE]

    out = client.post("/signout", data={"csrf_token": form_token(client, "/")})
    assert (out.status_code, out.headers["location"]) == (303, "/signin")
    assert db.scalars(select(BrowserSession)).all() == []
    # The old cookie, presented again, signs no one in.
    client.cookies.set(SESSION_COOKIE, raw)
    again = client.get("/")
    assert (again.status_code, again.headers["location"]) == (303, "/signin?next=%2F")


def test_p1_sign_in_with_a_wrong_password_is_refused_and_counted(
    client: TestClient, db: Session
) -> None:
    make_account(db)
    for username, password in [("alice", "not the password"), ("nobody", PASSWORD)]:
        answer = client.post(
            "/signin",
            data={"csrf_token": form_token(client), "username": username, "password": password},
        )
        assert answer.status_code == 401
        assert '<p class="error" role="alert">wrong username or password</p>' in answer.text
        assert SESSION_COOKIE not in _cookie_headers(answer)
    assert SESSION_COOKIE not in client.cookies
    attempts = db.scalars(select(SignInAttempt).order_by(SignInAttempt.username)).all()
    assert [(a.username, a.address) for a in attempts] == [
        ("alice", "testclient"),
        ("nobody", "testclient"),
    ]
    assert db.scalars(select(BrowserSession)).all() == []


@pytest.mark.parametrize("token", ["", "0" * 64, "missing"])
def test_p1_every_form_refuses_a_missing_or_wrong_csrf_token(
    client: TestClient, db: Session, token: str
) -> None:
    scope = make_account(db)
    sign_in(client)
    make_key = client.post("/keys", data={"csrf_token": form_token(client, "/keys")})
    key_id = scope.user_id  # any id: the token is checked before the key is looked up
    forms = [
        ("/signin", {"username": "alice", "password": PASSWORD}),
        ("/signup", {"username": "bob", "password": PASSWORD}),
        ("/keys", {"name": "sneaky"}),
        (f"/keys/{key_id}/revoke", {}),
        ("/signout", {}),
    ]
    assert make_key.status_code == 200
    keys_before = client.get("/keys").text.count("<tr>")
    for path, data in forms:
        sent = dict(data) if token == "missing" else {**data, "csrf_token": token}
        answer = client.post(path, data=sent)
        assert answer.status_code == 403, (path, answer.text)
        assert (
            "this form expired or was not sent from the portal&#39;s own page: "
            "reload the page and send it again"
        ) in answer.text
    assert [u.username for u in db.scalars(select(User))] == ["alice"]
    assert client.get("/keys").text.count("<tr>") == keys_before
    assert client.get("/").status_code == 200  # still signed in: sign-out was refused too


def test_p1_csrf_token_of_another_browser_is_refused(
    client: TestClient, other_client: TestClient, db: Session
) -> None:
    make_account(db)
    theirs = form_token(other_client)
    form_token(client)  # this browser has a CSRF cookie of its own
    answer = client.post(
        "/signin", data={"csrf_token": theirs, "username": "alice", "password": PASSWORD}
    )
    assert answer.status_code == 403
    assert SESSION_COOKIE not in client.cookies


def test_p1_sign_in_attempts_over_the_account_limit_answer_429(
    client: TestClient, db: Session
) -> None:
    make_account(db)
    for _ in range(5):
        wrong = client.post(
            "/signin",
            data={"csrf_token": form_token(client), "username": "alice", "password": "guess"},
        )
        assert wrong.status_code == 401
    right = client.post(
        "/signin",
        data={"csrf_token": form_token(client), "username": "alice", "password": PASSWORD},
    )
    assert right.status_code == 429
    assert (
        "too many failed sign-ins for &#39;alice&#39; from your address: wait 15 minutes and "
        "try again" in right.text
    )
    assert SESSION_COOKIE not in client.cookies


def test_p1_sign_in_attempts_over_the_address_limit_answer_429(
    client: TestClient, db: Session
) -> None:
    make_account(db)
    for n in range(20):
        wrong = client.post(
            "/signin",
            data={"csrf_token": form_token(client), "username": f"user{n}", "password": "x"},
        )
        assert wrong.status_code == 401
    right = client.post(
        "/signin",
        data={"csrf_token": form_token(client), "username": "alice", "password": PASSWORD},
    )
    assert right.status_code == 429
    assert "too many failed sign-ins from your address" in right.text


def test_p1_sign_in_limit_counts_only_recent_failures_and_a_success_clears_them(
    client: TestClient, db: Session
) -> None:
    make_account(db)
    old = datetime.now(UTC) - timedelta(minutes=16)
    here = "testclient"  # the test client's address
    db.add_all(SignInAttempt(username="alice", address=here, at=old) for _ in range(5))
    db.add_all(SignInAttempt(username="alice", address=here) for _ in range(4))
    db.flush()
    sign_in(client)  # 4 recent failures: under the limit of 5
    assert db.scalars(select(SignInAttempt).where(SignInAttempt.username == "alice")).all() == []


def test_p1_sign_up_refusals_say_what_to_do(client: TestClient, db: Session) -> None:
    make_account(db)
    cases = [
        ("alice", PASSWORD, 409, "the username &#39;alice&#39; is taken: choose another"),
        (
            "a",
            PASSWORD,
            400,
            "choose a username of 3-32 characters of a-z 0-9 _ -, starting with a letter or "
            "digit (not &#39;a&#39;)",
        ),
        (
            "bob",
            "short",
            400,
            "this password has 5 characters: choose a password of at least 10 characters "
            "with at least 5 different ones, not a common password, not a pattern, and not "
            "containing your username",
        ),
    ]
    for username, password, status, message in cases:
        answer = client.post(
            "/signup",
            data={
                "csrf_token": form_token(client, "/signup"),
                "username": username,
                "password": password,
            },
        )
        assert answer.status_code == status
        assert f'<p class="error" role="alert">{message}</p>' in answer.text
    assert [u.username for u in db.scalars(select(User))] == ["alice"]


def test_p1_anonymous_gets_the_sign_in_page(client: TestClient) -> None:
    for path, target in [("/", "%2F"), ("/keys", "%2Fkeys")]:
        answer = client.get(path)
        assert (answer.status_code, answer.headers["location"]) == (
            303,
            f"/signin?next={target}",
        )
    page = client.get("/signin?next=/keys")
    assert '<input type="hidden" name="next" value="/keys">' in page.text
    assert client.post("/keys", data={"csrf_token": csrf_of(page.text)}).status_code == 303


def test_p1_sign_in_goes_back_to_a_portal_page_only(client: TestClient, db: Session) -> None:
    make_account(db)
    for given, expected in [("/keys", "/keys"), ("//evil.example", "/"), ("https://x.y/", "/")]:
        client.cookies.clear()
        answer = client.post(
            "/signin",
            data={
                "csrf_token": form_token(client),
                "username": "alice",
                "password": PASSWORD,
                "next": given,
            },
        )
        assert (answer.status_code, answer.headers["location"]) == (303, expected)


def test_p1_an_expired_browser_session_is_signed_out(client: TestClient, db: Session) -> None:
    make_account(db)
    sign_in(client)
    stored = db.scalars(select(BrowserSession)).one()
    stored.expires_at = datetime.now(UTC) - timedelta(seconds=1)
    db.flush()
    answer = client.get("/")
    assert (answer.status_code, answer.headers["location"]) == (303, "/signin?next=%2F")
