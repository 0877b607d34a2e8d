"""Issue 21: nobody can lock someone else out of their account. Failed sign-ins are counted
per account and address pair (and per address): five wrong passwords for alice from an
attacker's address refuse that address, while alice signs in from hers; over real HTTP
requests against the app, from two client addresses, on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from webagents.portal.db.tables import SignInAttempt
from webagents.portal.settings import PortalSettings
from webagents.portal.web import SESSION_COOKIE

from .conftest import PASSWORD, form_token, make_account, make_client

ATTACKER, OWNER = "198.51.100.66", "203.0.113.10"


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
