"""Issue 21, tokens (P2): a token's liveness is asked by its `jti` and its `sub` together (a
token whose jti is live but whose sub names another user is refused), and the tokens' issuer
is the configured public address, never a request's Host header: `portal serve` without
--public-url fixes it at start (the address it listens on) and says so."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import httpx
import jwt
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from webagents.portal.accounts import service as accounts
from webagents.portal.settings import PortalSettings
from webagents.portal.tokens import keys as signing
from webagents.portal.tokens import service as tokens
from webagents.portal.tokens.repository import SigningKeys

from .account_helpers import new_user_key
from .conftest import make_account, make_client
from .processes import Served


def _exchange(client: TestClient, key: str, **headers: str) -> str:
    answer = client.post(
        "/api/auth/cli/token", headers={"Authorization": f"Bearer {key}", **headers}, json={}
    )
    assert answer.status_code == 200, answer.text
    return str(answer.json()["access_token"])


def test_p2_a_token_whose_live_jti_names_another_subject_is_refused(
    client: TestClient, db: Session
) -> None:
    alice = make_account(db, "alice")
    bob = make_account(db, "bob")
    token = _exchange(client, accounts.create_key(db, alice, "cli").key)
    claims = jwt.decode(token, options={"verify_signature": False})
    key = SigningKeys(db).all()[0]
    # Signed with the portal's own key, so only the jti/sub binding can refuse it.
    forged = jwt.encode(
        {**claims, "sub": str(bob.user_id), "username": "bob"},
        signing.private_key(key),
        algorithm=key.algorithm,
        headers={"kid": key.kid},
    )
    refused = client.get("/api/users/me", headers={"Authorization": f"Bearer {forged}"})
    assert (refused.status_code, refused.json()["error"]["code"]) == (401, "token_revoked")
    mine = client.get("/api/users/me", headers={"Authorization": f"Bearer {token}"})
    assert (mine.status_code, mine.json()["user"]["username"]) == (200, "alice")


def test_p2_the_host_header_does_not_choose_the_tokens_issuer(
    settings: PortalSettings, migrated_engine: Engine, db: Session
) -> None:
    alice = make_account(db, "alice")
    key = accounts.create_key(db, alice, "cli").key
    for public_url, issuer in (
        ("https://portal.example", "https://portal.example"),
        (None, "http://127.0.0.1:8700"),  # an app made in code without one: LOCAL_ISSUER
    ):
        chosen = replace(settings, public_url=public_url)
        with make_client(chosen, migrated_engine, db) as client:
            token = _exchange(client, key, host="evil.example")
            assert jwt.decode(token, options={"verify_signature": False})["iss"] == issuer
            mine = client.get(
                "/api/users/me", headers={"Authorization": f"Bearer {token}", "host": "x.example"}
            )
            assert mine.status_code == 200
    assert tokens.LOCAL_ISSUER == "http://127.0.0.1:8700"


@pytest.mark.e2e  # runs the installed webagents command
def test_p2_portal_serve_without_public_url_fixes_the_issuer_at_start_and_says_so(
    tmp_path: Path, fresh_database_url: str, served: Served
) -> None:
    assert re.search(
        rf"  tokens' issuer: {re.escape(served.url)} \(no --public-url: clients must use this "
        r"address; give --public-url when they reach the portal by another\)\n",
        served.output,
    )
    key = new_user_key(fresh_database_url, "alice")
    answer = httpx.post(
        f"{served.url}/api/auth/cli/token",
        headers={"Authorization": f"Bearer {key}", "Host": "evil.example"},
        json={},
    )
    claims = jwt.decode(answer.json()["access_token"], options={"verify_signature": False})
    assert claims["iss"] == served.url
