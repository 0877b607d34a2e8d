"""Form tokens bound to the browser's session and a server secret (issue 11, security
review 3 finding 5): a (cookie, token) pair fetched anonymously, or by another account, is
refused with the victim's session cookie; a token made without the portal's secret is
refused; over https the pre-session cookie is a `__Host-` cookie."""

from __future__ import annotations

import hashlib
import hmac

from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from webagents.portal.db.tables import ApiKey
from webagents.portal.web import CSRF_COOKIE, SESSION_COOKIE

from .conftest import form_token, make_account, sign_in

REFUSED = (
    "this form expired or was not sent from the portal&#39;s own page: "
    "reload the page and send it again"
)


def _keys(db: Session) -> list[str]:
    return sorted(key.name for key in db.scalars(select(ApiKey)))


def test_p1_csrf_an_anonymous_pair_is_refused_with_the_victims_session(
    client: TestClient, other_client: TestClient, db: Session
) -> None:
    """The reviewer's attack: (cookie C, token T) fetched anonymously, sent with the
    victim's session cookie, to /keys, /device and /cli/auth."""
    make_account(db)
    anonymous_token = form_token(other_client, "/signin")
    anonymous_cookie = other_client.cookies[CSRF_COOKIE]
    sign_in(client)
    victim_session = client.cookies[SESSION_COOKIE]
    attacker = TestClient(client.app, follow_redirects=False)
    attacker.cookies.set(SESSION_COOKIE, victim_session)
    attacker.cookies.set(CSRF_COOKIE, anonymous_cookie)
    forms = [
        ("/keys", {"name": "sneaky"}),
        ("/device", {"user_code": "ABCD-EFGH", "decision": "approve"}),
        ("/cli/auth", {"port": "8123", "state": "s" * 32, "decision": "approve"}),
    ]
    answers = [
        attacker.post(path, data={**data, "csrf_token": anonymous_token}) for path, data in forms
    ]
    assert [a.status_code for a in answers] == [403, 403, 403]
    assert all(REFUSED in a.text for a in answers)
    assert _keys(db) == []
    # The same browser's own token for its session works.
    made = attacker.post(
        "/keys", data={"name": "mine", "csrf_token": form_token(attacker, "/keys")}
    )
    assert (made.status_code, _keys(db)) == (200, ["mine"])


def test_p1_csrf_another_accounts_session_token_is_refused(
    client: TestClient, other_client: TestClient, db: Session
) -> None:
    make_account(db, "alice")
    make_account(db, "bob")
    sign_in(client, "alice")
    sign_in(other_client, "bob")
    bobs_token = form_token(other_client, "/keys")
    answer = client.post("/keys", data={"name": "sneaky", "csrf_token": bobs_token})
    assert answer.status_code == 403 and REFUSED in answer.text
    # Bob's pre-session cookie in Alice's browser does not help either.
    bobs_cookie = other_client.cookies[CSRF_COOKIE]
    client.cookies.delete(CSRF_COOKIE)
    client.cookies.set(CSRF_COOKIE, bobs_cookie)
    assert client.cookies[CSRF_COOKIE] == bobs_cookie
    answer = client.post("/keys", data={"name": "sneaky", "csrf_token": bobs_token})
    assert answer.status_code == 403 and REFUSED in answer.text
    assert _keys(db) == []


def test_p1_csrf_a_token_made_without_the_portals_secret_is_refused(
    client: TestClient, db: Session
) -> None:
    """The old token, HMAC(cookie, constant), and HMAC of the session with a guessed key."""
    make_account(db)
    sign_in(client)
    cookie = client.cookies[CSRF_COOKIE]
    session = hashlib.sha256(client.cookies[SESSION_COOKIE].encode()).hexdigest()
    forged = [
        hmac.new(cookie.encode(), b"webagents-portal-form", hashlib.sha256).hexdigest(),
        hmac.new(b"guess", f"session:{session}".encode(), hashlib.sha256).hexdigest(),
    ]
    for token in forged:
        answer = client.post("/keys", data={"name": "sneaky", "csrf_token": token})
        assert answer.status_code == 403 and REFUSED in answer.text
    assert _keys(db) == []


def test_p1_csrf_a_token_from_before_sign_in_is_refused_after(
    client: TestClient, db: Session
) -> None:
    make_account(db)
    before = form_token(client, "/signin")
    sign_in(client)
    answer = client.post("/keys", data={"name": "late", "csrf_token": before})
    assert answer.status_code == 403 and REFUSED in answer.text
    assert _keys(db) == []


def test_p1_csrf_cookie_is_a_host_cookie_over_https(client: TestClient, db: Session) -> None:
    make_account(db)
    https = TestClient(client.app, base_url="https://testserver", follow_redirects=False)
    page = https.get("/signin")
    cookie = page.headers["set-cookie"]
    assert cookie.startswith("__Host-webagents_csrf="), cookie
    assert "Secure" in cookie and "Path=/" in cookie and "Domain" not in cookie
    assert CSRF_COOKIE not in https.cookies
    sign_in(https)  # its forms work with that cookie
    assert https.get("/").status_code == 200
