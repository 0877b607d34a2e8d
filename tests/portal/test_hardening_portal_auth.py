"""Hardening of the portal's sign-ins and tokens (issue 11, review findings 2, 3, 4, 7): the
sign-in limit holds under concurrency, tokens die with the API key they came from, agent
tokens are short-lived, and X-Forwarded-For is believed only from proxies the operator names.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import httpx
import jwt
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from webagents.portal.accounts import service as accounts

from .conftest import PASSWORD, csrf_of, make_account
from .processes import Served, portal

PROXY_CLIENT = "203.0.113.7"


def _wrong_sign_ins(url: str, forwarded_for: list[str]) -> list[int]:
    """One wrong sign-in per entry, each for a different (unknown) username, so that only the
    per-address limit (20) can answer 429; the statuses."""
    statuses = []
    with httpx.Client(base_url=url) as http:
        token = csrf_of(http.get("/signin").text)
        for number, address in enumerate(forwarded_for):
            answer = http.post(
                "/signin",
                data={"csrf_token": token, "username": f"user{number}", "password": "guess"},
                headers={"X-Forwarded-For": address},
            )
            statuses.append(answer.status_code)
    return statuses


def test_p1_the_sign_in_limit_believes_no_forwarded_for_by_default(
    tmp_path: Path, fresh_database_url: str
) -> None:
    """A local client naming a new address in each X-Forwarded-For is still counted as
    itself: the 21st failure from it is refused."""
    served = Served(tmp_path, "--database", fresh_database_url)
    try:
        statuses = _wrong_sign_ins(served.url, [f"198.51.100.{n}" for n in range(22)])
    finally:
        served.stop()
    assert statuses == [401] * 20 + [429] * 2


def test_p1_the_sign_in_limit_counts_the_forwarded_client_of_a_named_proxy(
    tmp_path: Path, fresh_database_url: str
) -> None:
    """Behind a named proxy, the client address is the forwarded one: 20 failures from one
    client lock that client out, not another behind the same proxy."""
    served = Served(
        tmp_path, "--database", fresh_database_url, "--forwarded-allow-ips", "127.0.0.1"
    )
    try:
        statuses = _wrong_sign_ins(served.url, [PROXY_CLIENT] * 21 + ["198.51.100.9"])
    finally:
        served.stop()
    assert statuses == [401] * 20 + [429, 401]


REVOKED = {
    "message": "this sign-in was ended (webagents logout, or its API key was revoked): "
    "run webagents login",
    "type": "authentication_error",
    "param": None,
    "code": "token_revoked",
}


def _exchange(client: TestClient, key: str) -> str:
    answer = client.post("/api/auth/cli/token", headers={"Authorization": f"Bearer {key}"}, json={})
    assert answer.status_code == 200, answer.text
    return str(answer.json()["access_token"])


def test_p2_revoking_an_api_key_revokes_the_tokens_given_for_it(
    client: TestClient, db: Session
) -> None:
    alice = make_account(db, "alice")
    revoked_key = accounts.create_key(db, alice, "laptop")
    kept_key = accounts.create_key(db, alice, "ci")
    doomed, kept = _exchange(client, revoked_key.key), _exchange(client, kept_key.key)
    client.post("/api/agents", headers={"Authorization": f"Bearer {kept}"}, json={"name": "helper"})

    def me(token: str) -> tuple[int, Any]:
        answer = client.get("/api/users/me", headers={"Authorization": f"Bearer {token}"})
        return answer.status_code, answer.json().get("error")

    assert (me(doomed)[0], me(kept)[0]) == (200, 200)
    accounts.revoke_key(db, alice, str(revoked_key.api_key.id))
    db.commit()  # as the keys page would: the refusals below roll back what is not committed
    assert me(doomed) == (401, REVOKED)
    minted = client.post(
        "/api/agents/token", headers={"Authorization": f"Bearer {doomed}"}, json={"agent": "x"}
    )
    assert (minted.status_code, minted.json()["error"]) == (401, REVOKED), minted.text
    assert me(kept) == (200, None)  # the other key's token lives on


def test_p2_agent_tokens_live_15_minutes_portal_tokens_24_hours(
    client: TestClient, db: Session
) -> None:
    alice = make_account(db, "alice")
    portal_token = _exchange(client, accounts.create_key(db, alice, "cli").key)
    bearer = {"Authorization": f"Bearer {portal_token}"}
    made = client.post("/api/agents", headers=bearer, json={"name": "helper"})
    assert made.status_code == 201, made.text
    answer = client.post("/api/agents/token", headers=bearer, json={"agent": "helper"})
    assert answer.status_code == 200, answer.text
    claims = jwt.decode(answer.json()["access_token"], options={"verify_signature": False})
    portal_claims = jwt.decode(portal_token, options={"verify_signature": False})
    assert (
        answer.json()["expires_in"],
        claims["exp"] - claims["iat"],
        portal_claims["exp"] - portal_claims["iat"],
    ) == (900, 900, 86400)


def test_p1_the_account_limit_holds_for_concurrent_guesses_at_two_portals(
    tmp_path: Path, fresh_database_url: str
) -> None:
    """16 wrong passwords for one account sent at once, half to each of two processes on one
    database: only the limit's number (5) of passwords are checked, the rest are 429 (a guess
    the database gate turns away with 503 is sent again after its Retry-After)."""
    database = ("--database", fresh_database_url)
    assert portal(tmp_path, "adduser", "victim", *database, stdin=PASSWORD).returncode == 0
    portals = [Served(tmp_path, *database), Served(tmp_path, *database)]
    guesses = 16
    together = threading.Barrier(guesses)
    statuses: list[int] = []

    def guess(url: str) -> None:
        with httpx.Client(base_url=url, timeout=60) as http:
            token = csrf_of(http.get("/signin").text)
            together.wait(timeout=60)
            for _ in range(60):
                answer = http.post(
                    "/signin", data={"csrf_token": token, "username": "victim", "password": "guess"}
                )
                if answer.status_code != 503:
                    break
                # The database gate is full (a burst of sign-ins on one SQLite file): the
                # guess is refused unread and may come again when the answer says.
                time.sleep(int(answer.headers["Retry-After"]))
            statuses.append(answer.status_code)

    try:
        threads = [
            threading.Thread(target=guess, args=(portals[n % 2].url,)) for n in range(guesses)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
    finally:
        for served in portals:
            served.stop()
    assert sorted(statuses) == [401] * 5 + [429] * 11
