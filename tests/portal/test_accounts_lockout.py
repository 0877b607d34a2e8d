"""P1, the sign-in limit (issue 21: nobody can lock someone else out of their account). Failed
sign-ins are counted per account and address pair (and per address): five wrong passwords for
alice from an attacker's address refuse that address, while alice signs in from hers; over
real HTTP requests against the app, from two client addresses, on SQLite and PostgreSQL. The
limit holds for guesses sent at once to two portal processes, and X-Forwarded-For is believed
only from the proxies the operator names."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from webagents.portal.db.tables import SignInAttempt
from webagents.portal.settings import PortalSettings
from webagents.portal.web import SESSION_COOKIE

from .conftest import PASSWORD, csrf_of, form_token, make_account, make_client
from .processes import Served, portal

ATTACKER, OWNER = "198.51.100.66", "203.0.113.10"
PROXY_CLIENT = "203.0.113.7"


@pytest.fixture
def attacker(
    settings: PortalSettings, migrated_engine: Engine, db: Session
) -> Iterator[TestClient]:
    with make_client(settings, migrated_engine, db, ATTACKER) as browser:
        yield browser


@pytest.fixture
def owner(settings: PortalSettings, migrated_engine: Engine, db: Session) -> Iterator[TestClient]:
    with make_client(settings, migrated_engine, db, OWNER) as browser:
        yield browser


def _sign_in(browser: TestClient, password: str) -> int:
    answer = browser.post(
        "/signin",
        data={"csrf_token": form_token(browser), "username": "alice", "password": password},
    )
    return answer.status_code


def test_p1_accounts_limit_refuses_the_attackers_address_not_the_owner_at_another(
    attacker: TestClient, owner: TestClient, db: Session
) -> None:
    make_account(db)
    guesses = [_sign_in(attacker, f"guess number {n}") for n in range(6)]
    assert guesses == [401] * 5 + [429]
    refused = attacker.post(
        "/signin",
        data={"csrf_token": form_token(attacker), "username": "alice", "password": PASSWORD},
    )
    assert refused.status_code == 429  # the right password from the attacker's address too
    assert (
        "too many failed sign-ins for &#39;alice&#39; from your address: wait 15 minutes and "
        "try again" in refused.text
    )
    assert SESSION_COOKIE not in attacker.cookies

    assert _sign_in(owner, PASSWORD) == 303  # the owner, from their own address
    assert SESSION_COOKIE in owner.cookies
    # The owner's success clears the owner's address alone: the attacker stays refused.
    assert _sign_in(attacker, PASSWORD) == 429
    kept = db.scalars(select(SignInAttempt.address).where(SignInAttempt.username == "alice"))
    assert list(kept) == [ATTACKER] * 5


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


@pytest.mark.e2e  # runs the installed webagents command
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


@pytest.mark.e2e  # runs the installed webagents command
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


@pytest.mark.e2e  # runs the installed webagents command
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
